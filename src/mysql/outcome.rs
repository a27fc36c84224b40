//! What one caller's statement did.

use mysql_async::Row;

/// The outcome of one caller's statement: its own affected-row count, its
/// own auto-increment id when that is known, and (MariaDB `RETURNING`) its
/// own returned row.
#[derive(Debug)]
pub struct Outcome {
    rows_affected: u64,
    exact: bool,
    last_insert_id: Option<u64>,
    returned: Option<Row>,
}

impl Outcome {
    pub(crate) fn new(
        rows_affected: u64,
        exact: bool,
        last_insert_id: Option<u64>,
        returned: Option<Row>,
    ) -> Outcome {
        Outcome {
            rows_affected,
            exact,
            last_insert_id,
            returned,
        }
    }

    /// Rows this caller's statement affected, as MySQL counts them.
    ///
    /// For a coalesced plain `INSERT` this is 1. For `INSERT IGNORE`,
    /// `REPLACE` and `ON DUPLICATE KEY UPDATE`, MySQL counts 0, 1 or 2 (or
    /// more) per row and reports only the statement's total; see
    /// [`is_exact`](Outcome::is_exact) for when that total can be split.
    pub fn rows_affected(&self) -> u64 {
        self.rows_affected
    }

    /// Whether [`rows_affected`](Outcome::rows_affected) is this row's own
    /// count.
    ///
    /// Always `true` for statements that ran on their own and for plain
    /// coalesced `INSERT`s. A coalesced `INSERT IGNORE`, `REPLACE` or
    /// `ON DUPLICATE KEY UPDATE` is exact only when the statement's total
    /// admits a single split over its `n` rows:
    ///
    /// | statement | per-row counts | exact when the total is |
    /// |---|---|---|
    /// | `INSERT IGNORE` | 0 skipped, 1 inserted | 0 or `n` |
    /// | `REPLACE` | 1 inserted, 2+ replaced | `n` |
    /// | `ON DUPLICATE KEY UPDATE` | 1 inserted, 2 updated, 0 unchanged | 0 or `2n` (also `n` with `client_found_rows`) |
    ///
    /// Otherwise this is `false` and `rows_affected()` is 1, which then
    /// only means "the statement holding this row committed": the row may
    /// have been skipped (IGNORE), may have replaced rows (REPLACE), or been
    /// updated or left unchanged (ODKU). For exact counts of these
    /// statements build the pool with
    /// [`coalesce_upserts(false)`](super::PoolBuilder::coalesce_upserts).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// The auto-increment id generated for this caller's row.
    ///
    /// A statement that ran on its own reports what the server sent (the
    /// first id it generated, like `LAST_INSERT_ID()`). For a coalesced
    /// row, `first id + i × @@auto_increment_increment` (`i` = its position
    /// in the statement), but only where the ids are provably consecutive:
    /// a plain `INSERT` (not IGNORE, REPLACE or ON DUPLICATE KEY UPDATE)
    /// into an InnoDB table with `@@innodb_autoinc_lock_mode` 0 or 1, whose
    /// column list does not name the auto-increment column and which has no
    /// INSERT trigger (the table facts are read from `information_schema`
    /// when a statement text is first seen, `@@auto_increment_increment`
    /// when the connection opens). Everything else gets `None`: use
    /// `RETURNING id` on MariaDB, or read the row back by a key. With
    /// `RETURNING`, MariaDB does not report the id outside the returned
    /// rows, so this is `None` then too.
    pub fn last_insert_id(&self) -> Option<u64> {
        self.last_insert_id
    }

    /// The row this caller's `RETURNING` clause produced (MariaDB; for a
    /// statement returning several rows, the first: use `query` for all).
    ///
    /// For a coalesced `INSERT IGNORE ... RETURNING` whose count is not
    /// exact, the returned rows cannot be matched to callers and this is
    /// `None`.
    pub fn returned(&self) -> Option<&Row> {
        self.returned.as_ref()
    }

    /// Takes the returned row.
    pub fn into_returned(self) -> Option<Row> {
        self.returned
    }
}
