//! Whether a SQL text is coalesced, and why not ([`Pool::explain`]).
//!
//! [`Pool::explain`]: crate::Pool::explain

use std::fmt;

/// Why a statement runs on its own instead of being coalesced with other
/// callers' rows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotCoalesced {
    /// Coalescing is turned off ([`BatchConfig::enabled`](crate::BatchConfig::enabled)).
    Disabled,
    /// Not an `INSERT` (or MySQL `REPLACE`), nor a keyed read, update or
    /// delete.
    NotAnInsert,
    /// Transaction control (`BEGIN`, `COMMIT`, `SAVEPOINT`,
    /// `SET autocommit`...): refused by the pool's `execute`, which may run
    /// each call on another connection. The keyword found.
    TransactionControl(&'static str),
    /// An `INSERT` of a form the multi-row rewrite does not cover; names the
    /// part (several rows, `INSERT ... SELECT`, a placeholder outside the
    /// VALUES tuple, ...).
    InsertForm(&'static str),
    /// A `SELECT`, `UPDATE` or `DELETE` of a form the keyed rewrite does
    /// not cover (it coalesces `SELECT <columns> FROM t WHERE k = $1 [AND
    /// ...]`, `UPDATE t SET c = <expression> WHERE k = $1 [AND ...]` and
    /// `DELETE FROM t WHERE k = $1 [AND ...]`, on PostgreSQL); names the
    /// part.
    KeyedForm(&'static str),
    /// Coalescing of this kind of statement is turned off
    /// ([`BatchConfig::reads`](crate::BatchConfig::reads),
    /// [`updates`](crate::BatchConfig::updates),
    /// [`deletes`](crate::BatchConfig::deletes)): the kind.
    KindDisabled(&'static str),
    /// The text could not be tokenized (unterminated string or comment...).
    Unreadable,
    /// The backend declined after looking at the server or the table: the
    /// reason (a non-transactional MySQL table, an `ON CONFLICT` whose
    /// skipped rows cannot be told apart, ...).
    Declined(String),
    /// The server could not be asked about the statement's table this time:
    /// the pool's own reading failed (its connection was lost, or the
    /// answer did not come within the statement time limit). The caller's
    /// statement was not part of it, so it runs on its own; the next call
    /// of the text asks again. The error.
    NotLearned(String),
}

impl fmt::Display for NotCoalesced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotCoalesced::Disabled => f.write_str("coalescing is disabled for this pool"),
            NotCoalesced::NotAnInsert => {
                f.write_str("not an INSERT, nor a keyed read, update or delete")
            }
            NotCoalesced::KeyedForm(what) => {
                write!(f, "read, update or delete form not coalesced: {what}")
            }
            NotCoalesced::KindDisabled(kind) => {
                write!(f, "coalescing of {kind} is turned off for this pool")
            }
            NotCoalesced::TransactionControl(k) => write!(
                f,
                "{k} is transaction control, refused by Pool::execute (use Pool::begin, \
                 Pool::atomic or Pool::get)"
            ),
            NotCoalesced::InsertForm(what) => write!(f, "INSERT form not coalesced: {what}"),
            NotCoalesced::Unreadable => f.write_str("the text could not be tokenized"),
            NotCoalesced::Declined(why) => f.write_str(why),
            NotCoalesced::NotLearned(e) => write!(
                f,
                "the server could not be asked about the table this time ({e}); asked again \
                 on the next call"
            ),
        }
    }
}

/// What [`Pool::explain`](crate::Pool::explain) found out about a SQL text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explain {
    reason: Option<NotCoalesced>,
}

impl Explain {
    pub(crate) fn coalesced() -> Explain {
        Explain { reason: None }
    }

    pub(crate) fn not(reason: NotCoalesced) -> Explain {
        Explain {
            reason: Some(reason),
        }
    }

    /// Rows of this text are coalesced into multi-row statements.
    pub fn is_coalesced(&self) -> bool {
        self.reason.is_none()
    }

    /// Why the text runs on its own; `None` when it is coalesced.
    pub fn reason(&self) -> Option<&NotCoalesced> {
        self.reason.as_ref()
    }
}

impl fmt::Display for Explain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            None => f.write_str("coalesced into multi-row statements"),
            Some(reason) => write!(f, "runs on its own: {reason}"),
        }
    }
}
