//! What one caller's statement did.

/// The outcome of one caller's statement: its own affected-row count, its own
/// `RETURNING` row and (MySQL) its own generated id.
///
/// `R` is the backend's row type: [`postgres::Outcome`](crate::postgres::Outcome)
/// and [`mysql::Outcome`](crate::mysql::Outcome) name the two.
#[derive(Debug)]
pub struct Outcome<R> {
    rows_affected: u64,
    exact: bool,
    last_insert_id: Option<u64>,
    returned: Option<R>,
    /// A coalesced read's rows after the first.
    more: Vec<R>,
}

impl<R> Outcome<R> {
    pub(crate) fn new(
        rows_affected: u64,
        exact: bool,
        last_insert_id: Option<u64>,
        returned: Option<R>,
    ) -> Outcome<R> {
        Outcome {
            rows_affected,
            exact,
            last_insert_id,
            returned,
            more: Vec::new(),
        }
    }

    /// A read's outcome: its rows (the count is how many).
    pub(crate) fn read(rows: Vec<R>) -> Outcome<R> {
        let mut rows = rows.into_iter();
        let returned = rows.next();
        let more: Vec<R> = rows.collect();
        Outcome {
            rows_affected: u64::from(returned.is_some()) + more.len() as u64,
            exact: true,
            last_insert_id: None,
            returned,
            more,
        }
    }

    /// Every row the statement returned.
    pub(crate) fn into_rows(self) -> Vec<R> {
        self.returned.into_iter().chain(self.more).collect()
    }

    /// Rows this caller's statement inserted, updated or deleted, as the
    /// server counts them.
    ///
    /// For a coalesced `INSERT` this is the row's own count: 1 when written,
    /// 0 when `ON CONFLICT DO NOTHING` skipped it (PostgreSQL); MySQL counts
    /// 0, 1 or 2 per row for `INSERT IGNORE`, `REPLACE` and
    /// `ON DUPLICATE KEY UPDATE`. See [`is_exact`](Outcome::is_exact) for the
    /// cases where it is only an upper bound.
    pub fn rows_affected(&self) -> u64 {
        self.rows_affected
    }

    /// Whether [`rows_affected`](Outcome::rows_affected) is this row's own
    /// count.
    ///
    /// Always `true` for statements that ran on their own, and for every
    /// statement coalesced by default: batchpool coalesces only where the
    /// per-row outcome can be known. `false` for MySQL `INSERT IGNORE`,
    /// `REPLACE` and `ON DUPLICATE KEY UPDATE` coalesced by opt-in
    /// ([`PoolBuilder::coalesce_upserts`](crate::PoolBuilder::coalesce_upserts))
    /// when the statement's total could not be split over its rows (see the
    /// [table](crate::mysql#per-row-outcomes)), and as a guard if a coalesced
    /// statement ever wrote another number of rows than it carried. Then
    /// `rows_affected()` is the upper bound 1 and
    /// [`returned`](Outcome::returned) is `None`.
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// The row this caller's `RETURNING` clause produced (for a statement
    /// that ran on its own and returned several rows, the first: use `query`
    /// for all).
    pub fn returned(&self) -> Option<&R> {
        self.returned.as_ref()
    }

    /// Takes the returned row.
    pub fn into_returned(self) -> Option<R> {
        self.returned
    }

    /// The auto-increment id the server reported for this caller's row, when
    /// it is known to be this row's own. Always `None` on PostgreSQL (use
    /// `RETURNING id`); on MySQL see [`mysql::Outcome`](crate::mysql::Outcome).
    pub fn last_insert_id(&self) -> Option<u64> {
        self.last_insert_id
    }
}
