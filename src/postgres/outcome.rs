//! What one caller's statement did.

use tokio_postgres::Row;

/// The outcome of one caller's statement: its own affected-row count and,
/// for `RETURNING`, its own returned row.
#[derive(Debug)]
pub struct Outcome {
    rows_affected: u64,
    exact: bool,
    returned: Option<Row>,
}

impl Outcome {
    pub(crate) fn new(rows_affected: u64, exact: bool, returned: Option<Row>) -> Outcome {
        Outcome {
            rows_affected,
            exact,
            returned,
        }
    }

    /// Rows this caller's statement inserted, updated or deleted.
    ///
    /// For a coalesced INSERT this is the row's own count (1 when written; 0
    /// when `ON CONFLICT DO NOTHING` skipped it). See
    /// [`is_exact`](Outcome::is_exact) for the single case where it is an
    /// upper bound.
    pub fn rows_affected(&self) -> u64 {
        self.rows_affected
    }

    /// `false` only when a coalesced statement wrote fewer rows than it
    /// carried for a reason batchpool cannot attribute to rows (a `BEFORE
    /// INSERT` trigger returning NULL, a rule). Then
    /// [`rows_affected`](Outcome::rows_affected) is the upper bound 1 and
    /// [`returned`](Outcome::returned) is `None`.
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// The row this caller's `RETURNING` clause produced (for a pass-through
    /// statement returning several rows, the first; use `query` for all).
    pub fn returned(&self) -> Option<&Row> {
        self.returned.as_ref()
    }

    /// Takes the returned row.
    pub fn into_returned(self) -> Option<Row> {
        self.returned
    }
}
