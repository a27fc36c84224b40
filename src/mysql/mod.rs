//! MySQL / MariaDB: a coalescing pool on deadpool + mysql_async.
//!
//! ```no_run
//! # async fn demo() -> Result<(), batchpool::Error> {
//! use batchpool::BatchConfig;
//! use batchpool::mysql::Pool;
//!
//! let pool = Pool::builder("mysql://app@127.0.0.1:3306/app")
//!     .max_size(8)
//!     .batching(BatchConfig::default())
//!     .build()?;
//! let out = pool
//!     .execute("INSERT INTO users (name, email) VALUES (?, ?)", ("ann", "ann@example.com"))
//!     .await?;
//! assert_eq!(out.rows_affected(), 1);
//! let id = out.last_insert_id(); // this caller's own id, when provable
//! # let _ = id; Ok(()) }
//! ```
//!
//! [`Pool`] is [`crate::Pool`]`<`[`MySql`]`>`; parameters are mysql_async's
//! own ([`mysql_async::Params`]: tuples such as `("ann", 7)`,
//! `vec![Value::from(1)]`, `()` for none; named parameters (`params!`) work
//! for statements that are not coalesced), rows are [`mysql_async::Row`].
//!
//! # Types: the driver, re-exported
//!
//! mysql_async is re-exported as [`batchpool::mysql::mysql_async`](mysql_async),
//! so `Row`, `Params`, `Value`, `params!` and `prelude::FromRow` can be
//! named without a dependency of your own, always at the version batchpool
//! uses.
//!
//! `uuid::Uuid` and `serde_json::Value` (through `mysql_async::Deserialized`
//! / `Serialized`) convert without any feature. Dates and times of the
//! chrono or time crates need mysql_async's `chrono` or `time` feature:
//! turn them on through batchpool's `with-chrono-0_4` or `with-time-0_3`.
//! For the others (`rust_decimal`, `bigdecimal`), add `mysql_async = {
//! version = "0.37", default-features = false, features = ["rust_decimal"]
//! }` to your own `Cargo.toml`: cargo builds one mysql_async with every
//! feature its dependents ask for (keep `default-features = false`, or the
//! default TLS and compression features come with it).
//!
//! # What is coalesced
//!
//! A single-row `INSERT [IGNORE] ... VALUES (...)`, `REPLACE ... VALUES
//! (...)` (also `VALUE`), optionally with `ON DUPLICATE KEY UPDATE` or
//! MariaDB's `RETURNING`, into a **transactional** table (InnoDB): a failed
//! multi-row statement must leave nothing behind so its rows can be re-run
//! to find the offending one, which MyISAM / Aria / MEMORY do not
//! guarantee. Statements into other tables, views, temporary tables or
//! tables batchpool cannot find in `information_schema` run on their own.
//!
//! The multi-row statement is a prepared statement, one per row count of a
//! bounded set (about 20 per statement text, see the engine's allowed
//! sizes), cached per connection by mysql_async: the pool raises
//! mysql_async's default cache of 32 statements to 256
//! ([`PoolBuilder::statement_cache`](crate::PoolBuilder::statement_cache)) so a few shapes plus your own
//! statements do not evict each other. Mind the server's
//! `max_prepared_stmt_count` (default 16382) across all connections.
//!
//! A flush is bounded by 65535 placeholders and by the server's
//! `@@max_allowed_packet` (read once, from the first connection): rows are
//! measured as the binary protocol encodes their values plus their share of
//! the statement text, and a statement keeps `min(packet / 4, 8 KiB)` for
//! its fixed text and headers. One row that alone exceeds that fails with
//! [`Error::is_too_large`](crate::Error::is_too_large) for its caller only.
//!
//! MySQL runs one statement at a time per connection (no pipelining), so
//! concurrency comes from the pool's connections.
//!
//! **The bulk path.** On MariaDB a flush of a plain `INSERT` whose values
//! are all bare `?` goes out as one bulk command (`COM_STMT_BULK_EXECUTE`:
//! the one-row statement, its rows' values as an array), which MariaDB runs
//! as one statement, all or nothing; see
//! [`PoolBuilder::bulk_threshold`](crate::PoolBuilder::bulk_threshold) for
//! exactly when (never where per-row ids are computed, never for rows that
//! bind different kinds of value to one placeholder, never on a server
//! that does not run the command, never on a Galera node). Outcomes are the
//! multi-row INSERT's.
//!
//! # Galera
//!
//! On a MariaDB Galera cluster node (`@@wsrep_on` ON, read once per pool) a
//! write commits only once the cluster has certified its write set against
//! the other nodes' concurrent writes. A plain statement that loses
//! certification fails (in autocommit the server first retries it
//! `wsrep_retry_autocommit` times: the error is then what the retry met,
//! such as 1062 for a key the winner took, or 1213), and nothing of it
//! committed. A bulk command is different: MariaDB can answer it with an OK
//! for all its rows when certification threw its write set away and none
//! of them exists on any node. The pool acknowledges a row only through a
//! path the server vouches for, so it never sends bulk commands to a
//! Galera node: coalesced rows go out as multi-row INSERTs, and a
//! statement that loses certification is a failure that may belong to
//! one row, isolated like a duplicate key (its rows re-run in smaller
//! statements, so only the callers whose own rows conflict get an error, the
//! error their single-row INSERT gets).
//!
//! Every coalesced caller of a plain `INSERT` into a table with an
//! auto-increment column gets its row's id (see Ids below). With
//! `wsrep_auto_increment_control` ON (the default) the node sets every
//! session's `auto_increment_increment` and `auto_increment_offset` from
//! the cluster's membership before each command, so a node joining or
//! leaving changes the stride of an open connection between two statements
//! (3 to 2 when a node of three leaves), and no reply says which stride a
//! statement used: the ids are read back from a `RETURNING` of the column
//! that the pool appends to the multi-row statement, whatever the stride.
//! With it OFF (each node given its own `auto_increment_offset` and a
//! common increment by the operator), a session's increment is its own,
//! and the ids of a statement that does not name the column are computed
//! from it as on one server. The setting is read when each connection
//! opens: switch it on only with the pool's connections closed
//! ([`Pool::close`](crate::Pool::close) and a new pool), since a connection
//! opened while it was off would go on computing ids with the stride it
//! read.
//!
//! # Several hosts (failover)
//!
//! mysql_async connects to one server. batchpool takes a list of hosts,
//! written in the URL as PostgreSQL's multi-host strings are
//! (`mysql://app@db1:3306,db2:3306,db3/app`: every host shares the user,
//! password, database and parameters; a host without a port gets 3306;
//! IPv6 in brackets, `[fd00::1]:3306`), or given to
//! [`PoolBuilder::hosts`](crate::PoolBuilder::hosts), which replaces the
//! URL's host. A [`PoolConfig`](crate::PoolConfig) `url` takes the same
//! form. It is meant for servers that each take writes, such as the nodes
//! of a Galera cluster, or a primary and the replicas one of which an
//! operator or an HA manager promotes when it fails (a replica is
//! `read_only` until then).
//!
//! **Opening a connection.** The pool tries the host its last new
//! connection opened on, then the others in list order, going round once;
//! each attempt (connecting, the session's setup and the pool's reading of
//! its settings) is bounded by
//! [`create_timeout`](crate::PoolBuilder::create_timeout), so opening one
//! connection takes at most the list's length times that. A host is passed
//! over when it cannot be reached or its session cannot be set up, and,
//! on a Galera node (`wsrep_on`), when it is not ready for writes:
//! `wsrep_ready` not ON or `wsrep_cluster_status` not `Primary` (a joining
//! node, a node cut off from the majority) — such a node is never used,
//! with one host as with several — or `wsrep_local_state` not 4 (Synced:
//! a donor, a node desynced for a backup), which takes writes but lags:
//! it is used only when no host of the list is synced. A server with
//! `read_only` ON (a replica; MySQL's `super_read_only` sets it too) is
//! never used from a list of several hosts, as libpq's
//! `target_session_attrs=read-write` does: not even by a user allowed to
//! write there, whose writes would land on a server that is not the
//! primary. A single host is used whatever it is (read from a replica with
//! a pool of its own). The readiness is
//! read in the query that reads the session's settings, so it costs no
//! round trip of its own, also after a session reset. When no host gives a
//! connection, the error ([`Error::is_connect`](crate::Error::is_connect))
//! names each host's failure. The pool stays on the host it moved to: it
//! does not move back when an earlier host returns
//! ([`Pool::retire_all`](crate::Pool::retire_all) makes every connection
//! open anew, from that host).
//!
//! **A node that dies.** A statement on the wire when its server dies (or
//! sent on a connection to it before the pool found it dead) gives each of
//! its callers an error for which
//! [`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown) is true:
//! the statement may have committed (on Galera its write set may have been
//! certified and be applied by the other nodes) or not; read the row back
//! by its key to know. Never an Ok for a row that is not stored, never a
//! definite error for one that is. A row told Ok on a Galera node was
//! certified by the cluster first, so it is on every node that stays in
//! the cluster. The dead node's connections are discarded as each fails,
//! and new connections go to the next host. Other nodes' writes wait until
//! the cluster has evicted the dead node (`evs.suspect_timeout`, 5 s by
//! default): that, not the pool, sets how long writes stop. With the
//! timeout at 1 s, writes came back 1.2 s and 2.2 s (two runs, a shared
//! 2-core machine) after a node of a local 3-node cluster was killed
//! (`tests/it/galera_failover.rs`).
//!
//! **A node that stops being ready** under open connections (it loses
//! quorum, or an operator desyncs it): a connection that lay idle in the
//! pool for 5 s or more has the node's readiness read before its next use
//! (in place of the ping such a connection gets on a plain server), and is
//! closed when the node no longer takes writes. A connection in use (or
//! idle for less) learns it from its next statement, which the node
//! answers with 1047 "WSREP has not yet prepared node for application
//! use", and the connection is closed, never used again. The node gives
//! the same answer to a statement it refused without running it and to
//! one whose commit was under way when it left the primary component,
//! which the rest of the cluster may have committed (rows so refused by a
//! node cut off under load were on every node once it rejoined,
//! `tests/it/galera_failover.rs`): the callers of a statement sent there
//! get [`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown);
//! read the row back by its key to know. So do the callers of a statement
//! answered 1180 (an error during COMMIT), which such a node gives when it
//! leaves with the statement's commit under way. New connections go to a node that
//! is ready.
//!
//! **A server that becomes read-only** (a primary demoted to a replica, or
//! fenced with `read_only` during a switchover) refuses its connections'
//! writes with 1290 (1836 on MySQL's `super_read_only`): nothing ran, and
//! the callers get that error, as the plain driver's would. A connection
//! that saw it has `@@GLOBAL.read_only` read before its next use, and is
//! closed when it is ON; new connections go to a host that takes writes,
//! so with a host list writes move to the promoted server. This is also
//! how a single host named by a DNS name that an HA manager moves (a
//! managed database's cluster endpoint) reaches the new primary. In a list
//! of several hosts, a connection that lay idle in the pool for 5 s or more
//! also has `@@GLOBAL.read_only` read before its next use (in place of the
//! ping), and is closed when it is ON: this is what moves the connections
//! of a user with the privilege to bypass `read_only` (SUPER, or MariaDB's
//! `READ_ONLY ADMIN`), whose writes the server never refuses. Such a user's
//! connection in steady use stays on a demoted server until it lies idle
//! for 5 s, is retired ([`max_lifetime`](crate::PoolBuilder::max_lifetime),
//! [`Pool::retire_all`](crate::Pool::retire_all)) or is ended by the HA
//! manager (most end the demoted server's sessions): give the pool a user
//! without that privilege.
//!
//! # Per-row outcomes
//!
//! A plain INSERT's rows get 1 each. `INSERT IGNORE`, `REPLACE` and
//! `ON DUPLICATE KEY UPDATE`, for which MySQL counts 0, 1 or 2 per row but
//! reports only a total, are exact only when the statement's total admits a
//! single split over its `n` rows ([`Outcome::is_exact`](crate::Outcome::is_exact)),
//! or always with [`coalesce_upserts(false)`](crate::PoolBuilder::coalesce_upserts):
//!
//! | statement | per-row counts | exact when the total is |
//! |---|---|---|
//! | `INSERT IGNORE` | 0 skipped, 1 inserted | 0 or `n` |
//! | `REPLACE` | 1 inserted, 2+ replaced | `n` |
//! | `ON DUPLICATE KEY UPDATE` | 1 inserted, 2 updated, 0 unchanged | 0 or `2n` (also `n` with `client_found_rows`) |
//!
//! Otherwise `is_exact()` is `false` and `rows_affected()` is 1, which then
//! only means "the statement holding this row committed"; `returned()` is
//! `None` for such an `INSERT IGNORE ... RETURNING`.
//!
//! **Ids.** [`Outcome::last_insert_id`](crate::Outcome::last_insert_id) of a
//! statement that ran on its own is what the server sent (the first id it
//! generated, like `LAST_INSERT_ID()`). For a coalesced row it is what the
//! row's single-row INSERT would report: the value that statement stored in
//! the auto-increment column, generated or given (none for 0 kept by
//! `NO_AUTO_VALUE_ON_ZERO`, for a table without such a column and for a
//! statement with a `RETURNING` of its own), or `None` where the pool
//! cannot know it. It is known two ways.
//!
//! *Computed*: `first id + i × @@auto_increment_increment` (`i` = the row's
//! position in the statement), where the ids are provably consecutive: a
//! plain `INSERT` (not IGNORE, REPLACE or ON DUPLICATE KEY UPDATE) into an
//! InnoDB table, whose column list does not name the auto-increment column
//! and which has no INSERT trigger (the table facts are read from
//! `information_schema` when a statement text is first seen,
//! `@@auto_increment_increment` when the connection opens), on a session
//! whose increment the server does not change under it. Such a statement
//! is what InnoDB calls a "simple insert" (the number of rows is known when
//! it starts): in every `innodb_autoinc_lock_mode` (0, 1 and the
//! interleaved 2) InnoDB reserves all its values at once, one increment
//! apart; only statements whose row count is not known in advance
//! (`INSERT ... SELECT`, `LOAD DATA`) get values interleaved with other
//! statements' in mode 2.
//!
//! *Read back*, on a Galera node (see [Galera](#galera)): the pool appends
//! `RETURNING <auto-increment column>` to the multi-row statement (MariaDB
//! 10.5 and later; the server is asked by preparing it when the text is
//! learned) and gives each row the value returned at its position, as
//! MariaDB returns those rows in VALUES order; a caller never sees that
//! row. This also covers a statement that names the column (ids given,
//! NULL, 0) or has no column list. A row sent alone is the caller's own
//! statement, and gets the id the server reported. The `RETURNING` needs
//! the SELECT privilege on the column; a statement the server refuses for
//! it (the privilege revoked, the column renamed after the text was
//! learned) runs again at once without it, its callers told Ok without
//! ids, and that text appends none until its table changes.
//!
//! `None`: `INSERT IGNORE`, `REPLACE` and `ON DUPLICATE KEY UPDATE`
//! coalesced by opt-in; on a single server, a statement that names the
//! auto-increment column or has no column list (its rows may go out as a
//! bulk command, which reports one total); on a Galera node, such a
//! statement if it also calls `LAST_INSERT_ID()` (a row given an id
//! reports that call's argument), and, on a server without `INSERT ...
//! RETURNING` (MariaDB before 10.5, MySQL-based clusters), rows coalesced
//! into statements of two or more while the increment is the cluster's (and
//! every row of a statement naming the column); an auto-increment column
//! that is not an integer; and, as a guard, every row of a statement whose
//! returned rows do not bear out their order (not one per row, or an id a
//! row gave returned at another position). Use `RETURNING id` on MariaDB,
//! or read the row back by a key. `RETURNING` rows go to their callers in
//! VALUES order.
//!
//! # Round trips
//!
//! mysql_async sends one command and reads its reply before the next (no
//! pipelining), and a prepared statement (`COM_STMT_EXECUTE`) cannot carry a
//! `START TRANSACTION` or a `COMMIT` with it. So with every statement already
//! prepared on the connection (the first use of a text adds one
//! `COM_STMT_PREPARE` round trip; parameterless statements use the text
//! protocol and need none):
//!
//! | call | round trips | sent |
//! |---|---|---|
//! | `atomic([s])` | 1 | `s` in autocommit |
//! | `atomic([s1..sn])`, n ≥ 2 | n + 2 | `START TRANSACTION`, each `si`, `COMMIT` |
//! | `atomic([s1..sn])`, `sk` fails | k + 2 | …, `sk`, `ROLLBACK` |
//! | `begin()` + `commit()`/`rollback()`/drop | 0 | nothing, no connection taken |
//! | `begin()` + `execute(s)` + `commit()` | 3 | `START TRANSACTION`, `s`, `COMMIT` |
//! | `begin()` + `execute_and_commit(s)` | 1 | `s` in autocommit |
//!
//! Sending `START TRANSACTION; s1; s2; COMMIT` as one multi-statement text
//! would be one round trip, but only with the values spliced into the text,
//! which batchpool never does. Transaction control, and inside a group of two
//! or more or a transaction also statements MySQL commits implicitly (DDL,
//! `LOCK TABLES`...), are refused.
//!
//! # Errors
//!
//! A server error that can belong to one row (duplicate key 1062, NULL
//! 1048, no default 1364, bad value 1366 / 1292, too long 1406, out of
//! range 1264, foreign key 1451 / 1452, check constraint 3819 / 4025,
//! SIGNAL 1644, any SQLSTATE 22xxx / 23xxx), and a deadlock or Galera
//! conflict (1213), fails only its own caller; the other rows are re-run in
//! smaller statements, but never once the session's statement time limit
//! has passed since a row was first sent. A statement ended for a limit
//! (`max_statement_time` 1969, lock wait timeout 1205, `KILL QUERY` 1317)
//! fails every row of it with that error, never re-run: each row already
//! ran for the whole time its own statement was allowed. Other server errors
//! fail every row of the statement. A connection lost after the statement was
//! sent gives [`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown); before, [`Error::is_closed`](crate::Error::is_closed).
//! [`Error::code`](crate::Error::code) is the SQLSTATE, [`Error::as_mysql_error`](crate::Error::as_mysql_error) the server's
//! error (`code` 1062...).

//!
//! # Session settings
//!
//! The pool's statements run with the session's own settings: the user's
//! (`ALTER USER app WITH MAX_STATEMENT_TIME 5`) and the server's, then
//! those the options give ([`Opts::init`](mysql_async::Opts::init),
//! [`after_connect`](mysql_async::Opts::after_connect),
//! [`setup`](mysql_async::Opts::setup)), then your `post_create` hooks. The
//! pool sets nothing over them unless you ask
//! ([`PoolBuilder::statement_timeout`](crate::PoolBuilder::statement_timeout),
//! MariaDB `max_statement_time`, and then not on [`Pool::get`]
//! connections). A connection back from [`Pool::get`] is reset with
//! `COM_RESET_CONNECTION`, which mysql_async follows with the `setup`
//! statements only; the pool then runs `after_connect`, `init` and `setup`
//! again, as a new connection does, and the hooks, so an `init`
//! `SET time_zone` holds for every statement the pool runs later. The
//! session's `@@max_statement_time` bounds the pool's wait for each answer
//! (plus 1 s); it is read again after each reset. A session without one
//! (MySQL, or MariaDB's default 0) gets no deadline from the pool: a lost
//! network is then noticed by TCP keepalive only, at the OS's probe
//! interval and count (mysql_async sets only the idle time), so give such
//! sessions a limit.
//!
//! # TLS
//!
//! With the `rustls` feature (on by default), MySQL's `ssl-mode` in the URL
//! (`mysql://app@db/app?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem`, any
//! case) or [`PoolBuilder::ssl_mode`](crate::PoolBuilder::ssl_mode):
//!
//! | [`SslMode`] | TLS | the server's certificate |
//! |---|---|---|
//! | `DISABLED` (default: no TLS parameter) | never | — |
//! | `PREFERRED` | if the server offers it (else a plain connection) | not checked |
//! | `REQUIRED` | always, or no connection | not checked |
//! | `VERIFY_CA` | always | chain to a trusted root (mysql_async 0.37.1 checks the name too) |
//! | `VERIFY_IDENTITY` | always | chain, and names the host |
//!
//! Trusted roots: `ssl-ca=` (a PEM file; then only it), else Mozilla's.
//! `ssl-cert=` / `ssl-key=` give a client certificate. mysql_async's own
//! parameters keep working (`require_ssl=true`, `verify_ca=false`,
//! `verify_identity=false`, `built_in_roots=false`); `ssl-ca` also applies
//! to them. Your own [`mysql_async::SslOpts`] go to
//! [`PoolBuilder::ssl_opts`](crate::PoolBuilder::ssl_opts) (e.g. a TLS
//! server name with `with_danger_tls_hostname_override`). Over a Unix
//! socket (`socket=`) TLS is not used, and with TLS on the pool does not
//! let mysql_async move a TCP connection onto the server's socket
//! (`prefer_socket`), unless the URL names `prefer_socket`. A refused
//! handshake is an error for which [`Error::is_connect`](crate::Error::is_connect)
//! is true, with the reason in its text.
mod api;
mod batch;
mod driver;
mod errors;
mod family;
mod hosts;
mod keyed;
mod manager;
mod own;
mod row;
mod table;
mod tls;
mod update;

use std::sync::{Arc, OnceLock};

#[cfg(feature = "bench")]
pub(crate) use self::batch::{MyShape, encode};
#[cfg(feature = "bench")]
pub(crate) use self::batch::{bulk_fits, bulk_params, rewrite_params};
use self::manager::ServerInfo;
pub use self::manager::{ConnWrapper, Manager};
pub(crate) use self::row::MyRow;
pub use self::tls::SslMode;
/// The driver crate, at the version batchpool uses (see
/// [Types](self#types-the-driver-re-exported)).
pub use mysql_async;

/// The MySQL / MariaDB backend: a [`Pool`] is a `batchpool::Pool<MySql>`.
///
/// Holds the pool's connections and what it learned about the server; built
/// by [`PoolBuilder::build`](crate::PoolBuilder::build).
pub struct MySql {
    pool: deadpool::managed::Pool<Manager>,
    server: Arc<OnceLock<ServerInfo>>,
    /// Coalesce INSERT IGNORE / REPLACE / ON DUPLICATE KEY UPDATE.
    coalesce_upserts: bool,
    /// Connections use CLIENT_FOUND_ROWS (ODKU counts unchanged rows as 1).
    found_rows: bool,
    /// [`PoolBuilder::bulk_threshold`]: fewest rows sent as one bulk command.
    bulk_threshold: Option<usize>,
    /// Whether the server runs `COM_STMT_BULK_EXECUTE` (asked once, see
    /// `batch::bulk_probe`).
    bulk_server: tokio::sync::OnceCell<bool>,
    /// The URL's `max_allowed_packet`, which mysql_async splits bulk
    /// commands by when it is set.
    driver_packet: Option<usize>,
    /// Families of keyed update texts.
    families: family::MyFamilies,
}

impl std::fmt::Debug for MySql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySql")
            .field("status", &self.pool.status())
            .field("coalesce_upserts", &self.coalesce_upserts)
            .field("bulk_threshold", &self.bulk_threshold)
            .finish_non_exhaustive()
    }
}

impl crate::backend::Backend for MySql {}

/// MySQL-only builder options. By default upserts are not coalesced: their
/// per-row counts may not be exact.
#[derive(Debug, Clone, Default)]
pub(crate) struct MyOptions {
    coalesce_upserts: bool,
    /// [`PoolBuilder::bulk_threshold`]; `None`: the default.
    bulk_threshold: Option<Option<usize>>,
    /// [`PoolBuilder::post_create`] and [`PoolBuilder::pre_recycle`].
    hooks: crate::pool::hooks::Hooks<mysql_async::Conn>,
    /// [`PoolBuilder::ssl_mode`] and [`PoolBuilder::ssl_opts`].
    tls: self::tls::TlsConfig,
    /// [`PoolBuilder::hosts`]: replaces the URL's hosts.
    hosts: Option<Result<Vec<self::hosts::Host>, crate::Error>>,
}

impl MyOptions {
    /// A `post_create` hook running `sql` over the text protocol (several
    /// statements separated by `;` are fine).
    fn add_on_connect(&mut self, sql: String) {
        use mysql_async::prelude::Queryable;
        let sql: std::sync::Arc<str> = sql.into();
        self.hooks.add_post_create(move |conn| {
            let sql = std::sync::Arc::clone(&sql);
            Box::pin(async move {
                conn.query_drop(&*sql).await?;
                Ok(())
            })
        });
    }
}

/// A coalescing MySQL / MariaDB connection pool (see [`crate::Pool`]).
pub type Pool = crate::pool::Pool<MySql>;

/// Builds a [`Pool`].
pub type PoolBuilder = crate::pool::PoolBuilder<MySql>;

/// A MySQL / MariaDB transaction with a lazy `START TRANSACTION` (see
/// [`crate::Transaction`]).
pub type Transaction = crate::pool::Transaction<MySql>;

/// What one caller's statement did (see [`crate::Outcome`] and
/// [Per-row outcomes](self#per-row-outcomes)).
pub type Outcome = crate::outcome::Outcome<mysql_async::Row>;

/// A pooled connection, from [`Pool::get`]: derefs to
/// [`mysql_async::Conn`] and goes back to the pool when dropped (after a
/// `COM_RESET_CONNECTION`).
pub type PooledConn = deadpool::managed::Object<Manager>;

/// A pooled connection (the same as [`PooledConn`]).
pub(crate) type Client = PooledConn;

/// Connection pool status (sizes), from deadpool.
pub type Status = deadpool::Status;

pub use crate::error::AtomicError;
