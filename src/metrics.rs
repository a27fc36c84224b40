//! The pool's counters exported through the [`metrics`] facade
//! (cargo feature `metrics`), for Prometheus or any other recorder.
//!
//! Install a recorder (for example `metrics-exporter-prometheus`) **before
//! building the pool**: each pool registers its metrics once, when it is
//! built, and keeps the handles, so a row costs no lookup, only the
//! recorder's own updates (about 55 ns per row more than without the
//! feature, with `metrics-exporter-prometheus`: the engine bench's
//! `counting` group). A pool built before any recorder was installed
//! exports nothing. Without the feature nothing of this is compiled.
//!
//! Every metric carries two labels: `pool`, the pool's name
//! ([`PoolBuilder::name`](crate::PoolBuilder::name), default `"default"`),
//! and `backend`, `"postgres"` or `"mysql"`. Each counter follows one field
//! of [`Stats`](crate::Stats) and equals it once the pool is idle (a row is
//! counted in `batchpool_rows_total` when its flush ends, in `Stats::rows`
//! when its flush starts).
//!
//! | metric | type | [`Stats`](crate::Stats) field |
//! | --- | --- | --- |
//! | `batchpool_rows_total` | counter | `rows`: coalesced rows sent |
//! | `batchpool_flushes_total{reason}` | counter | `flush_natural`, `flush_full`, `flush_timer`, `flush_close` (`reason` = `natural`, `full`, `timer`, `close`); their sum is `batches` |
//! | `batchpool_statements_total` | counter | `statements`: multi-row statements sent |
//! | `batchpool_bulk_statements_total` | counter | `bulk_statements`: of those, sent by the bulk path (PostgreSQL `COPY`, the MariaDB bulk command `COM_STMT_BULK_EXECUTE`) |
//! | `batchpool_pipelined_statements_total` | counter | `pipelined_statements` |
//! | `batchpool_split_statements_total` | counter | `split_statements`: re-runs that isolate failing rows |
//! | `batchpool_passthrough_statements_total` | counter | `passthrough`: statements run as they are |
//! | `batchpool_rows_failed_total` | counter | `rows_failed`: rows whose outcome was an error |
//! | `batchpool_rows_unsent_total` | counter | `rows_unsent`: of those, failed without being sent |
//! | `batchpool_rows_cancelled_total` | counter | `rows_cancelled`: dropped unsent, their caller gone |
//! | `batchpool_learns_total` | counter | `learns` |
//! | `batchpool_learn_checks_total` | counter | `learn_checks` |
//! | `batchpool_queued_rows` | gauge | `queued`: rows queued now |
//! | `batchpool_flushes_in_flight` | gauge | `in_flight`: flushes running now |
//! | `batchpool_flush_limit` | gauge | `flush_limit`: flushes allowed to run at once now |
//! | `batchpool_queue_wait_seconds` | histogram | one value per queued row: its time in the queue (sum: `queue_wait_total`) |
//! | `batchpool_statement_rows` | histogram | one value per statement counted in `statements`: its rows |
//! | `batchpool_statement_duration_seconds` | histogram | one value per round trip: a statement, or a pipelined pair timed together (count: `statements - pipelined_statements`) |
//!
//! The failure counters overlap (`rows_unsent` is part of `rows_failed`;
//! cancelled rows are neither sent nor failed), so they are separate
//! metrics rather than values of one label. A row sent by the idle fast
//! path never queues and has no queue wait.
//!
//! The histograms are plain `metrics` histograms: the recorder decides how
//! they are kept (`metrics-exporter-prometheus` renders summaries unless
//! buckets are configured for them).
//!
//! For a maximum queue wait per scrape interval rather than since the pool
//! was built, see [`Pool::take_queue_wait_max`](crate::Pool::take_queue_wait_max).

use std::time::Instant;

use ::metrics::{Counter, Gauge, Histogram, Label, Unit};

/// The metric handles of one pool.
pub(crate) struct Exported {
    pub(crate) rows: Counter,
    pub(crate) flush_natural: Counter,
    pub(crate) flush_full: Counter,
    pub(crate) flush_timer: Counter,
    pub(crate) flush_close: Counter,
    pub(crate) statements: Counter,
    pub(crate) bulk_statements: Counter,
    pub(crate) pipelined_statements: Counter,
    pub(crate) split_statements: Counter,
    pub(crate) passthrough: Counter,
    pub(crate) rows_failed: Counter,
    pub(crate) rows_unsent: Counter,
    pub(crate) rows_cancelled: Counter,
    pub(crate) learns: Counter,
    pub(crate) learn_checks: Counter,
    pub(crate) queued: Gauge,
    pub(crate) in_flight: Gauge,
    pub(crate) flush_limit: Gauge,
    pub(crate) queue_wait: Histogram,
    pub(crate) statement_rows: Histogram,
    pub(crate) statement_duration: Histogram,
}

impl Exported {
    /// Registers the metrics of pool `pool` of backend `backend` with the
    /// recorder installed now.
    pub(crate) fn new(pool: &str, backend: &'static str) -> Exported {
        describe();
        let labels = vec![
            Label::new("pool", pool.to_owned()),
            Label::new("backend", backend),
        ];
        let counter = |name: &'static str| ::metrics::counter!(name, labels.clone());
        let flushes = |reason: &'static str| {
            let mut labels = labels.clone();
            labels.push(Label::new("reason", reason));
            ::metrics::counter!("batchpool_flushes_total", labels)
        };
        Exported {
            rows: counter("batchpool_rows_total"),
            flush_natural: flushes("natural"),
            flush_full: flushes("full"),
            flush_timer: flushes("timer"),
            flush_close: flushes("close"),
            statements: counter("batchpool_statements_total"),
            bulk_statements: counter("batchpool_bulk_statements_total"),
            pipelined_statements: counter("batchpool_pipelined_statements_total"),
            split_statements: counter("batchpool_split_statements_total"),
            passthrough: counter("batchpool_passthrough_statements_total"),
            rows_failed: counter("batchpool_rows_failed_total"),
            rows_unsent: counter("batchpool_rows_unsent_total"),
            rows_cancelled: counter("batchpool_rows_cancelled_total"),
            learns: counter("batchpool_learns_total"),
            learn_checks: counter("batchpool_learn_checks_total"),
            queued: ::metrics::gauge!("batchpool_queued_rows", labels.clone()),
            in_flight: ::metrics::gauge!("batchpool_flushes_in_flight", labels.clone()),
            flush_limit: ::metrics::gauge!("batchpool_flush_limit", labels.clone()),
            queue_wait: ::metrics::histogram!("batchpool_queue_wait_seconds", labels.clone()),
            statement_rows: ::metrics::histogram!("batchpool_statement_rows", labels.clone()),
            statement_duration: ::metrics::histogram!(
                "batchpool_statement_duration_seconds",
                labels
            ),
        }
    }
}

/// Help texts and units, for exporters that show them (Prometheus `# HELP`).
fn describe() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "batchpool_rows_total",
        Unit::Count,
        "Coalesced rows sent to the server"
    );
    describe_counter!(
        "batchpool_flushes_total",
        Unit::Count,
        "Flushes (groups of queued rows taken onto one connection), by what started them"
    );
    describe_counter!(
        "batchpool_statements_total",
        Unit::Count,
        "Multi-row statements sent for coalesced rows"
    );
    describe_counter!(
        "batchpool_bulk_statements_total",
        Unit::Count,
        "Statements sent by the backend's bulk path (PostgreSQL COPY, MariaDB COM_STMT_BULK_EXECUTE)"
    );
    describe_counter!(
        "batchpool_pipelined_statements_total",
        Unit::Count,
        "Statements sent while another was on the wire on the same connection"
    );
    describe_counter!(
        "batchpool_split_statements_total",
        Unit::Count,
        "Extra statements run to isolate failing rows"
    );
    describe_counter!(
        "batchpool_passthrough_statements_total",
        Unit::Count,
        "Statements executed as they are (not coalesced)"
    );
    describe_counter!(
        "batchpool_rows_failed_total",
        Unit::Count,
        "Coalesced rows whose outcome was an error, sent or not"
    );
    describe_counter!(
        "batchpool_rows_unsent_total",
        Unit::Count,
        "Coalesced rows that failed without being sent"
    );
    describe_counter!(
        "batchpool_rows_cancelled_total",
        Unit::Count,
        "Queued rows dropped unsent because their caller had gone"
    );
    describe_counter!(
        "batchpool_learns_total",
        Unit::Count,
        "Batchable statement texts learned from the server"
    );
    describe_counter!(
        "batchpool_learn_checks_total",
        Unit::Count,
        "Catalog checks whether a learned table changed"
    );
    describe_gauge!("batchpool_queued_rows", Unit::Count, "Rows queued now");
    describe_gauge!(
        "batchpool_flushes_in_flight",
        Unit::Count,
        "Flushes running now"
    );
    describe_gauge!(
        "batchpool_flush_limit",
        Unit::Count,
        "Flushes allowed to run at once now (fixed, or adapting to the server)"
    );
    describe_histogram!(
        "batchpool_queue_wait_seconds",
        Unit::Seconds,
        "Time each queued row waited before its flush took it"
    );
    describe_histogram!(
        "batchpool_statement_rows",
        Unit::Count,
        "Rows carried by each coalesced statement"
    );
    describe_histogram!(
        "batchpool_statement_duration_seconds",
        Unit::Seconds,
        "Round trip of each coalesced statement (a pipelined pair timed together)"
    );
}

/// When a round trip started.
pub(crate) struct Started(pub(crate) Instant);
