//! batchpool's integration tests, one test binary (`cargo test --test it`):
//! one module per suite, each compiled only with the cargo features it
//! needs, and the shared test-server harness `tests/common` (also included
//! by the benches).
//!
//! A test's name starts with its suite's module (`coalesce::pg::…`,
//! `pg_failover::…`): `cargo test --test it -- coalesce::` runs one suite.
//! Every test of the binary runs in one process, so the harness's shared
//! servers (see `common`) serve every suite; tests that stop, kill or
//! reconfigure a server start one of their own.

// Every harness item serves some suite: with the default features, where
// every suite but two (`driver_types`, `metrics`, which need nothing of
// their own from it) is compiled, an unused one is an error. A narrower
// feature set leaves out the suites that need a backend or feature it
// lacks, and with them the only users of some items.
#[cfg_attr(
    not(all(
        feature = "postgres",
        feature = "mysql",
        feature = "rustls",
        feature = "serde",
        feature = "tower"
    )),
    allow(dead_code, unused_imports, unused_macros)
)]
#[path = "../common/mod.rs"]
mod common;

mod capture;
mod coalesce;
mod connection_cap;
mod connection_lifetime;
#[cfg(all(feature = "postgres", feature = "mysql", feature = "with-uuid-1"))]
mod driver_types;
mod failures;
mod faults;
#[cfg(feature = "mysql")]
mod galera;
#[cfg(feature = "mysql")]
mod galera_failover;
mod harness;
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod hooks;
#[cfg(feature = "postgres")]
mod http_service;
#[cfg(feature = "postgres")]
mod keyed_faults;
mod learning;
mod lifecycle;
mod limits;
#[cfg(all(feature = "postgres", feature = "metrics"))]
mod metrics;
#[cfg(feature = "mysql")]
mod mysql_bulk;
#[cfg(feature = "mysql")]
mod mysql_coalesce;
#[cfg(feature = "mysql")]
mod mysql_keyed;
#[cfg(feature = "mysql")]
mod mysql_read_only;
#[cfg(feature = "mysql")]
mod mysql_transactions;
mod oracle;
#[cfg(feature = "postgres")]
mod pg_catalog;
#[cfg(feature = "postgres")]
mod pg_client;
#[cfg(feature = "postgres")]
mod pg_coalesce;
#[cfg(feature = "postgres")]
mod pg_failover;
#[cfg(feature = "postgres")]
mod pg_keyed;
#[cfg(feature = "postgres")]
mod pg_transactions;
#[cfg(feature = "postgres")]
mod pgbouncer;
#[cfg(all(feature = "postgres", feature = "mysql", feature = "serde"))]
mod pool_config;
#[cfg(feature = "postgres")]
mod poolers;
#[cfg(all(feature = "postgres", feature = "mysql", feature = "rustls"))]
mod secrets;
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod session_settings;
#[cfg(all(feature = "postgres", feature = "mysql"))]
mod sockets;
#[cfg(all(feature = "postgres", feature = "mysql", feature = "rustls"))]
mod tls;
#[cfg(all(feature = "postgres", feature = "tower"))]
mod tower_service;
mod tracing_links;
mod transactions;
#[cfg(all(feature = "postgres", feature = "mysql", feature = "rustls"))]
mod ycsb_smoke;
