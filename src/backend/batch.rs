//! The batching role of a backend: what the flush engine drives without
//! knowing which database it talks to. Rows of a batchable shape: encode,
//! build and run one multi-row statement, map its result back to rows.

use std::future::Future;

use super::{Conn, Connections};
use crate::classify::{Dialect, Form};
use crate::error::Error;
use crate::explain::NotCoalesced;

/// Why one multi-row statement failed.
#[derive(Debug)]
pub(crate) enum ChunkError<O> {
    /// The server rejected the statement, and nothing of it committed: the
    /// error may belong to one row (a constraint, a bad value, a trigger's
    /// exception), so the engine re-runs smaller groups to find the rows
    /// whose own statement fails. Every database error is this unless it is
    /// provably about the statement as a whole.
    Row(Error),
    /// Like [`Row`](ChunkError::Row), and the error names the row it is
    /// about (its index in the statement's rows), by the server's own words
    /// or by matching the error's text against the rows' values. Only a
    /// lead: the engine runs that row on its own and the others again
    /// without it (see the engine's `isolate` module), so a wrong index
    /// costs a statement, never an outcome.
    RowAt(usize, Error),
    /// The error is provably the named row's own (its index in the
    /// statement's rows): that row's single-row statement, run alone at the
    /// instant the statement ran, would have failed with it too, whatever
    /// the other rows are (a unique violation of a key that no other row of
    /// the statement could have written: the row in conflict was in the
    /// table already). The row gets the error without a statement of its
    /// own, and the others go again without it. A backend says this only
    /// where it can prove it; the engine treats it as
    /// [`RowAt`](ChunkError::RowAt) wherever the rows keep one caller's
    /// order.
    #[cfg_attr(
        not(feature = "postgres"),
        allow(dead_code, reason = "only PostgreSQL proves a row's own failure")
    )]
    RowFailed(usize, Error),
    /// The failure is the same for every row (connection lost, outcome
    /// unknown, a statement-level error such as a syntax error or a
    /// cancelled statement): every row of the statement gets it.
    Statement(Error),
    /// The server refused a prepared statement that no longer fits its table
    /// (the table changed under it); nothing ran. The backend has dropped its
    /// cached statements for the shape: the engine re-learns the route and
    /// re-runs the rows once.
    Stale(Error),
    /// Sent in a pipelined pair inside one transaction (see
    /// [`Backend::execute_pair`]) whose other statement failed: nothing of
    /// it committed (rolled back, or never run). The engine runs its rows
    /// again.
    #[cfg_attr(
        not(feature = "postgres"),
        allow(dead_code, reason = "only PostgreSQL pipelines statements")
    )]
    NotRun,
    /// The backend ran the rows one statement each (the connection's session
    /// would make a multi-row statement differ from single-row ones): each
    /// row's own result, in order.
    #[cfg_attr(
        not(any(feature = "mysql", test)),
        allow(dead_code, reason = "only the MySQL backend runs rows one by one")
    )]
    Each(Vec<Result<O, Error>>),
}

/// Result of one multi-row statement: one output per row, in row order.
pub(crate) type ChunkResult<O> = Result<Vec<O>, ChunkError<O>>;

/// The outcome of the one row of a statement run for one row.
#[cfg_attr(
    not(feature = "mysql"),
    allow(dead_code, reason = "only the MySQL backend runs rows one by one")
)]
pub(crate) fn one_outcome<O>(result: ChunkResult<O>) -> Result<O, Error> {
    match result {
        Ok(mut out) => out.pop().ok_or_else(|| Error::internal("no outcome")),
        Err(
            ChunkError::Row(e)
            | ChunkError::RowAt(_, e)
            | ChunkError::RowFailed(_, e)
            | ChunkError::Statement(e)
            | ChunkError::Stale(e),
        ) => Err(e),
        Err(ChunkError::Each(mut out)) => out
            .pop()
            .unwrap_or_else(|| Err(Error::internal("no outcome"))),
        Err(ChunkError::NotRun) => Err(Error::internal("a statement was not run")),
    }
}

/// A database backend: pooled connections plus how to run one multi-row
/// statement for a batchable shape.
pub(crate) trait Backend: Send + Sync + Sized + 'static {
    /// One caller's row, already encoded in the caller's task.
    type Row: Send + Sync + 'static;
    /// One caller's outcome.
    type Output: Send + 'static;
    /// Backend data for one batchable statement shape (parameter types,
    /// statement cache id...).
    type Shape: Send + Sync + 'static;

    /// The SQL dialect used to classify statements.
    const DIALECT: Dialect;

    /// Most bind parameters one statement may carry (both wire protocols
    /// count them in 16 bits).
    fn max_params(&self) -> usize {
        65535
    }

    /// Bind parameters each row of `shape` adds to a multi-row statement,
    /// when not the count of its own text (a rewrite that binds a caller's
    /// parameters more than once).
    fn bound_params(_shape: &Self::Shape) -> Option<usize> {
        None
    }

    /// Most encoded parameter bytes one statement may carry (server packet
    /// limit); `usize::MAX` when the protocol has none.
    fn max_statement_bytes(&self) -> usize;

    /// The family a shape is in, if any: shapes of one family share one
    /// queue (the engine keeps the first family queue it made), a row
    /// encoded by its own text's shape telling the backend which text it is.
    fn family(_shape: &Self::Shape) -> Option<u64> {
        None
    }

    /// Whether a re-learned shape is the one already in use (so its queue and
    /// the connections' prepared statements are kept).
    fn same_shape(old: &Self::Shape, new: &Self::Shape) -> bool;

    /// Prepares backend data for a statement the classifier found batchable,
    /// asking the server on `conn`. `Ok(Err(reason))` declines batching (the
    /// statement then runs on its own, and `Pool::explain` reports the
    /// reason).
    fn prepare_shape<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        sql: &'a str,
        form: Form,
    ) -> impl Future<Output = Result<Result<Self::Shape, NotCoalesced>, Error>> + Send + 'a;

    /// A fingerprint of everything [`prepare_shape`](Backend::prepare_shape)
    /// reads about `shape`'s table and the functions its VALUES call (one
    /// cheap catalog query): while it stays the same, learning a text on that
    /// table again would give the same answer, so the engine checks this
    /// every `relearn_after` and learns a text again only when it changed.
    /// It depends on the table and the functions called only (texts on one
    /// table share it). `None`: the backend cannot tell (every check then
    /// learns the text again).
    fn fingerprint<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        form: &'a Form,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send + 'a {
        let _ = (conn, form);
        async { Ok(None) }
    }

    /// Where connections come from (the deadpool pool).
    type Connections: Connections;

    /// The backend's connections.
    fn connections(&self) -> &Self::Connections;

    /// Whether a statement of `rows` rows of `shape` may have any row
    /// count: where the backend's bulk path takes that many rows, it sends
    /// no statement text of its own per row count, so a flush need not be
    /// cut to the allowed sizes that keep prepared texts few. Rows that the
    /// bulk path then refuses ([`uses_bulk`](Backend::uses_bulk) false) are
    /// cut as usual.
    fn any_size(&self, _shape: &Self::Shape, _rows: usize) -> bool {
        false
    }

    /// Whether what is left of a failed statement once the row its error
    /// named is taken out may go again as one statement of that many rows
    /// (up to the shape's row cap), rather than cut to the allowed sizes:
    /// a backend that prepares a statement of that row count on the spot.
    /// One more statement text now and then, against a statement (and its
    /// commit) saved at every failing row.
    fn reruns_any_size(&self, _shape: &Self::Shape) -> bool {
        false
    }

    /// Whether statements of `shape` have one text for any number of rows
    /// (one array per parameter): any number up to the shape's row cap is
    /// one statement.
    fn one_text(&self, _shape: &Self::Shape) -> bool {
        false
    }

    /// Where `rows` of `shape` must be cut so that no two rows that may
    /// act on the same database row share a statement (keyed writes whose
    /// rewrite would apply only one of them): the lengths of consecutive
    /// runs, in order, covering `rows`. `None`: no cut is needed.
    fn runs(&self, _shape: &Self::Shape, _rows: &[Self::Row]) -> Option<Vec<usize>> {
        None
    }

    /// Whether [`execute`](Backend::execute) sends `rows` of `shape` by the
    /// backend's bulk path (counted in `Stats::bulk_statements`).
    fn uses_bulk(&self, _shape: &Self::Shape, _rows: &[Self::Row]) -> bool {
        false
    }

    /// Runs `rows` of `shape` as ONE autocommit multi-row statement on `conn`.
    fn execute<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        shape: &'a Self::Shape,
        rows: &'a [Self::Row],
    ) -> impl Future<Output = ChunkResult<Self::Output>> + Send + 'a;

    /// Whether [`execute_pair`](Backend::execute_pair) pipelines statements
    /// of `first` and `second` rows of `shape`: the second is on the wire
    /// while the first runs. `None` rows: of any size (whether the backend
    /// pipelines this shape at all).
    fn pipelines(
        &self,
        _shape: &Self::Shape,
        _first: Option<usize>,
        _second: Option<usize>,
    ) -> bool {
        false
    }

    /// Runs two statements of `shape` on `conn`, `first` sent before
    /// `second` (the server runs them in that order), pipelined where the
    /// backend can ([`pipelines`](Backend::pipelines)). With `atomic` both
    /// run in one transaction: if either fails, nothing of the pair commits
    /// and the other one is answered [`ChunkError::NotRun`], so the rows of
    /// a batch still take effect in their order (`execute_many`). Without,
    /// each is its own autocommit statement, as with two `execute` calls.
    fn execute_pair<'a>(
        &'a self,
        conn: &'a mut Conn<Self>,
        shape: &'a Self::Shape,
        first: &'a [Self::Row],
        second: &'a [Self::Row],
        atomic: bool,
    ) -> impl Future<Output = (ChunkResult<Self::Output>, ChunkResult<Self::Output>)> + Send + 'a
    {
        // Without pipelining: the first alone; the engine runs the second
        // after it.
        let _ = (second, atomic);
        async move {
            (
                self.execute(conn, shape, first).await,
                Err(ChunkError::NotRun),
            )
        }
    }
}
