//! Test-server harness shared by batchpool's integration tests (the test
//! binary `tests/it`: `#[path = "../common/mod.rs"] mod common;`) and
//! benches (`#[path = "../tests/common/mod.rs"] mod common;`).
//!
//! Tests and benches run against REAL servers:
//! - `PG_URL` / `MYSQL_URL` set (non-empty): that server is used as is, e.g.
//!   `PG_URL=postgresql://postgres@127.0.0.1:5432/postgres`,
//!   `MYSQL_URL=mysql://root@127.0.0.1:3306/test`; likewise `PGBOUNCER_URL`
//!   for a PgBouncer (transaction mode) in front of the PostgreSQL server.
//! - unset: each test process (the one test binary runs every suite in one)
//!   starts its own throwaway PostgreSQL cluster
//!   (`initdb` + `pg_ctl`) and/or `mariadbd`, once, on the first call to
//!   [`pg_url`] / [`mysql_url`], in a temp dir, listening on 127.0.0.1 and a
//!   free port only, with the unix socket inside that temp dir.
//!   Missing server binaries are a test failure that says what to install.
//!   `PG_BIN_DIR` names the directory of the PostgreSQL programs (`initdb`,
//!   `pg_ctl`, `postgres`) to start throwaway clusters from instead of the
//!   installed ones, e.g. `PG_BIN_DIR="$(bash .ci/postgres 12)"` for a
//!   PostgreSQL 12 build from the npm registry; lacking one of them, it is a
//!   test failure that names what is missing.
//! - The PostgreSQL tests that also run behind PgBouncer (`pgbouncer::name`)
//!   start a throwaway PgBouncer in transaction mode in front of that server,
//!   once per process, on the first call to [`bouncer_url`] (binary
//!   `pgbouncer`, Debian package `pgbouncer`; missing, a failing test); those
//!   run as `pgbouncer_statement::name` one in statement mode
//!   ([`bouncer_statement_url`]), and those run as `pgpool::name` /
//!   `pgpool_raw::name` a throwaway pgpool-II in `streaming_replication`
//!   mode with load balancing, or in `raw` mode ([`pgpool_url`]; binary
//!   `pgpool`, Debian package `pgpool2`; `PGPOOL_URL` / `PGPOOL_RAW_URL`
//!   for running ones).
//!
//! - The Galera tests use [`galera_cluster`]: a throwaway 3-node MariaDB
//!   Galera cluster on loopback (always started; Debian packages `galera-4`,
//!   `rsync`), once per process; a test that kills a node or changes a
//!   global setting starts its own ([`GaleraCluster::start`]).
//!
//! - The TLS tests use [`pg_tls_server`] / [`mysql_tls_server`]: throwaway
//!   servers with TLS on (always started, whatever `PG_URL` / `MYSQL_URL`
//!   say), presenting a certificate for 127.0.0.1 and localhost from a
//!   throwaway CA made with rcgen (`certs.rs`), once per process.
//!
//! Throwaway servers keep durable settings unless `BATCHPOOL_FAST_SERVER=1`.
//! When running as root they run as the system users `postgres` / `mysql`.
//!
//! Cleanup: owned [`PgServer`] / [`MysqlServer`] stop and delete themselves on
//! Drop. Every throwaway server also has a detached `sh` watchdog that polls
//! the test process every 0.5 s and, once it is gone (normal end, panic,
//! `std::process::exit`, SIGKILL), stops the server and `rm -rf`s its dir;
//! this is what removes the shared servers, which live in statics.
//!
//! Depends only on std, tokio, tokio-postgres and mysql_async (each half only
//! with its cargo feature, `postgres` / `mysql`), and, in [`backend`], on
//! batchpool.

pub mod backend;
#[cfg(feature = "postgres")]
mod bouncer;
mod certs;
#[cfg(feature = "mysql")]
mod galera;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod pg;
#[cfg(feature = "postgres")]
mod pgpool;
pub use certs::TestCerts;
pub mod proxy;
pub mod tx;
mod util;

#[cfg(feature = "postgres")]
pub use bouncer::{
    POOL_SIZE as BOUNCER_POOL_SIZE, PgBouncer, PoolMode, bouncer_admin_url, bouncer_fresh_db,
    bouncer_statement_admin_url, bouncer_statement_fresh_db, bouncer_statement_url_for,
    bouncer_url_for, direct_url_for, strip_param, with_statements,
};
#[cfg(feature = "mysql")]
pub use galera::{GaleraCluster, galera_cluster};
#[cfg(feature = "mysql")]
pub use mysql::{
    MysqlServer, mysql_exec, mysql_fresh_db, mysql_tls_fresh_db, mysql_tls_server, mysql_url,
    mysql_version,
};
#[cfg(feature = "postgres")]
pub use pg::{
    BIN_DIR_VAR as PG_BIN_DIR_VAR, PgServer, pg_bin_dir, pg_fresh_db, pg_tls_fresh_db,
    pg_tls_server, pg_url, pg_version,
};
#[cfg(feature = "postgres")]
pub use pgpool::{Pgpool, PgpoolMode, pgpool_fresh_db, pgpool_url, pgpool_url_for};

/// Whether throwaway servers run with durability traded for speed
/// (`BATCHPOOL_FAST_SERVER=1`); benches should print this with their results.
pub fn fast_server() -> bool {
    util::fast_mode()
}
