//! [`TxConn`]: the drop guard of a connection that may be inside a
//! transaction.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{self, Backend, Conn, Connections, End, Wire, exchange};
use crate::engine::{Engine, Tracker};
use crate::error::Error;

/// A pooled connection that may be inside a transaction.
///
/// Dropped with `open` set (a cancelled `atomic` future, a dropped
/// [`Transaction`](crate::Transaction)), it never goes back to the pool as it
/// is: a spawned task sends `ROLLBACK` and returns the connection once the
/// server confirms no transaction is open; a broken connection, a failed
/// `ROLLBACK` or the absence of a tokio runtime closes it instead (the server
/// rolls back a closed session).
pub(crate) struct TxConn<B: Backend> {
    pub(crate) conn: Option<Conn<B>>,
    /// A `BEGIN` may have been sent without its `COMMIT` / `ROLLBACK` being
    /// answered.
    pub(crate) open: bool,
    /// How long one answer may take (the pool's statement deadline for this
    /// connection's session).
    pub(crate) limit: Option<Duration>,
    /// The pool's work, so `close()` waits for a spawned `ROLLBACK`.
    tracker: Arc<Tracker>,
}

impl<B: Backend> TxConn<B> {
    pub(crate) fn new(conn: Conn<B>, engine: &Engine<B>) -> TxConn<B> {
        TxConn {
            limit: <B::Connections as Connections>::answer_limit(&conn),
            conn: Some(conn),
            open: false,
            tracker: engine.tracker.clone(),
        }
    }

    /// The connection.
    pub(crate) fn conn(conn: &mut Option<Conn<B>>) -> Result<&mut Conn<B>, Error> {
        conn.as_mut()
            .ok_or_else(|| Error::internal("connection already released"))
    }

    /// Takes the connection out of the pool for good.
    pub(crate) fn discard(&mut self) {
        if let Some(conn) = self.conn.take() {
            backend::discard(conn);
        }
    }

    /// Ends the open transaction with `end`. A connection found broken
    /// first was rolled back by the server when its session ended.
    pub(crate) async fn end(&mut self, end: End) -> Result<(), Error> {
        let conn = Self::conn(&mut self.conn)?;
        if B::is_broken(conn) {
            return Err(Error::new(
                crate::error::Kind::ConnectionClosed,
                format!(
                    "connection lost before {}; the transaction was rolled back",
                    end.sql()
                ),
            ));
        }
        let (reply, over) = exchange!(B::Connections, self.limit, conn, |c| B::end(c, end))?;
        if over {
            self.open = false;
        }
        reply
    }
}

impl<B: Backend> Drop for TxConn<B> {
    fn drop(&mut self) {
        if !self.open {
            // No transaction can be open: back to the pool as it is.
            return;
        }
        let Some(conn) = self.conn.take() else {
            return;
        };
        if B::is_broken(&conn) || (conn.is_busy() && !B::RESUMES_AFTER_CUT) {
            // Dead, or cut mid-statement on a driver that cannot go on:
            // closing the session rolls back.
            backend::discard(conn);
            return;
        }
        // Cut mid-statement on a driver that reads the pending answers
        // first: the ROLLBACK below is answered after them, and then the
        // connection is clean (or, unanswered by the deadline, closed).
        let (work, limit) = (self.tracker.more(), self.limit);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _work = work;
                    let mut guard = Discard::<B>(Some(conn));
                    let clean = match guard.0.as_mut() {
                        Some(c) => matches!(
                            exchange!(B::Connections, limit, c, |c| B::end(c, End::Rollback)),
                            Ok((Ok(()), true))
                        ),
                        None => false,
                    };
                    if clean {
                        // Back to the pool.
                        drop(guard.0.take());
                    }
                });
            }
            Err(_) => backend::discard(conn),
        }
    }
}

/// Discards the connection unless it was taken back out (also when the
/// spawned `ROLLBACK` task is dropped by a runtime shutting down).
struct Discard<B: Backend>(Option<Conn<B>>);

impl<B: Backend> Drop for Discard<B> {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            backend::discard(conn);
        }
    }
}
