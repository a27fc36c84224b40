//! What a database backend supplies to the generic pool: the leaf interface
//! under [`Pool`](crate::Pool), [`Transaction`](crate::Transaction),
//! [`PoolBuilder`](crate::PoolBuilder) and the flush engine.
//!
//! Three roles, each in a file of its own, all implemented by
//! [`Postgres`](crate::postgres::Postgres) and [`MySql`](crate::mysql::MySql)
//! only:
//!
//! * [`batch::Backend`] (the batching role): rows of a batchable shape
//!   (encode, build and run one multi-row statement, map its result back to
//!   rows), what the flush engine drives.
//! * [`Driver`] (the connection-level role): everything else that differs
//!   between the servers: opening connections, preparing and running one
//!   statement, running a group of statements with `BEGIN`/`COMMIT`
//!   (pipelined on PostgreSQL, one command at a time on MySQL), ending a
//!   transaction, and telling a dead connection from a live one.
//! * [`Connections`] (the pool role): where connections come from, the
//!   [`Lease`] of one, a server's connection cap, and the one
//!   [`exchange!`](exchange) with the server under the statement deadline;
//!   how long a connection lives is in [`lifecycle`].
//!
//! The public [`Backend`] trait only names them: it is sealed by its private
//! supertrait, so the pool's internals stay private.

pub(crate) mod batch;
mod connections;
mod driver;
pub(crate) mod lifecycle;

pub(crate) use self::connections::{
    CapRefused, Capped, ConnectionCap, Connections, Lease, Wire, WireState, answer, exchange,
};
pub(crate) use self::driver::{Driver, End, Group, GroupReplies, Ran, Stmt};
pub(crate) use self::lifecycle::Lifecycle;

/// A pooled connection of backend `B`, returned to the pool when dropped.
pub(crate) type Conn<B> = <<B as batch::Backend>::Connections as Connections>::Conn;

/// A database backend of the pool: [`Postgres`](crate::postgres::Postgres)
/// or [`MySql`](crate::mysql::MySql).
///
/// Sealed: its working parts are private to batchpool, and it cannot be
/// implemented outside it. Name it to write code generic over both pools
/// (`fn report<B: Backend>(pool: &Pool<B>)`).
#[allow(
    private_bounds,
    reason = "sealed: the backend interface is private to the crate"
)]
pub trait Backend: Driver {}

/// Takes a connection out of the pool for good: it is closed when dropped
/// (the server then rolls back whatever it had open).
pub(crate) fn discard<M: deadpool::managed::Manager>(conn: deadpool::managed::Object<M>) {
    drop(deadpool::managed::Object::take(conn));
}

/// Whether a SQLSTATE belongs to a class of transient failures, after which
/// the same statement may succeed when sent again: 08 connection exception,
/// 40 transaction rollback (deadlock, serialization failure), 53
/// insufficient resources, 57 operator intervention (admin shutdown,
/// terminated session). Both servers report these standard classes.
pub(crate) fn transient_sqlstate(code: &str) -> bool {
    code.len() == 5 && matches!(code.get(..2), Some("08" | "40" | "53" | "57"))
}
