//! Criterion micro-benchmarks of the CPU the engine spends per statement and
//! per row, `cargo bench --features bench --bench engine`:
//!
//! * `classify_cached`: the cached classification every `execute` does,
//!   measured through `Pool::explain` on a text already seen (goal: ≤ 100 ns
//!   per statement). The only group that needs a server (a real pool:
//!   `PG_URL` or a throwaway cluster, the tests' harness).
//! * `batch/encode_bind_1000_rows`: encoding 1000 YCSB rows in the callers'
//!   tasks and building the bind list of their statement (goal: ≤ 1 µs per
//!   row); `batch/render_1000_rows`: rendering the 1000-row statement text
//!   (done once per connection and row count, then cached).
//! * The per-row cost of each write path, split into the caller's task and
//!   the flusher's (1000 YCSB rows per iteration: the time / 1000 is the
//!   cost per row), no server:
//!   - `pg_rewrite/caller_encode_1000_rows`: each row's parameters encoded
//!     in the binary format (both PostgreSQL paths: COPY's callers encode
//!     the same way); `pg_rewrite/flusher_bind_list_1000_rows`: the bind
//!     list of the 1000-row statement; `.../flusher_bind_message_1000_rows`:
//!     that list and the Bind message the driver then builds from it in the
//!     same task (postgres-protocol's `bind`, as tokio-postgres calls it);
//!   - `pg_copy/flusher_copy_data_1000_rows`: the binary COPY data built
//!     from the encoded rows (`PgCopy::data`; the driver sends it as is);
//!   - `mysql_rewrite/caller_encode_1000_rows`: each row checked and sized
//!     (`mysql/batch.rs` `encode`), the row's `Params` given;
//!     `.../caller_values_encode_1000_rows`: the caller's `Vec<Value>` made
//!     from the row's strings too; `.../flusher_params_1000_rows`: the
//!     multi-row statement's parameters collected (values cloned);
//!     `.../flusher_execute_packet_1000_rows`: those and the
//!     COM_STMT_EXECUTE packet mysql_async then serializes from them
//!     (mysql_common's builder, as mysql_async calls it);
//!   - MariaDB's bulk path (COM_STMT_BULK_EXECUTE; the caller's side is
//!     `mysql_rewrite/caller_encode_1000_rows`, the same `encode`):
//!     `mysql_bulk/flusher_bulk_fits_1000_rows`: the check the engine makes
//!     before each bulk statement (every value's kind compared, the
//!     command's size added up, against a 16 MiB packet);
//!     `.../flusher_bulk_params_1000_rows`: the command's parameter sets
//!     collected (one `Params` per row, values cloned);
//!     `.../flusher_bulk_packet_1000_rows`: those and the
//!     COM_STMT_BULK_EXECUTE packet mysql_async then builds and serializes
//!     from them (mysql_common's `ComStmtBulkExecuteRequestBuilder`, as
//!     mysql_async's `exec_batch` calls it).
//!
//! * `counting/stats_1000_rows`: the pool's counting (`Stats`) of 1000 rows
//!   that queue and leave in one flush of two statements;
//!   `counting/stats_and_metrics_1000_rows` (built with the `metrics`
//!   feature): the same with a Prometheus recorder installed, what that
//!   feature adds per row.
//!
//! The per-row hooks come from the crate's `bench` feature
//! (`batchpool::bench`, not a stable API).

// A bench uses only part of the test harness.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;

use batchpool::bench;
use batchpool::postgres::Pool;
use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use futures_util::FutureExt;
use tokio_postgres::types::{IsNull, ToSql, Type};

const YCSB_INSERT: &str = "INSERT INTO usertable (YCSB_KEY, FIELD0, FIELD1, FIELD2, FIELD3, \
     FIELD4, FIELD5, FIELD6, FIELD7, FIELD8, FIELD9) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

const YCSB_INSERT_MYSQL: &str = "INSERT INTO usertable (YCSB_KEY, FIELD0, FIELD1, FIELD2, FIELD3, \
     FIELD4, FIELD5, FIELD6, FIELD7, FIELD8, FIELD9) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Rows per iteration of the per-row groups (one full statement).
const ROWS: usize = 1000;

fn ycsb_rows(n: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|i| {
            let mut row = vec![format!(
                "user{}",
                6_284_781_860_667_377_211u64.wrapping_mul(i as u64 + 1)
            )];
            row.extend((0..10).map(|f| format!("{:0>100}", i * 10 + f)));
            row
        })
        .collect()
}

/// The YCSB INSERT's parameter types, as the server infers them.
fn ycsb_types() -> Vec<Type> {
    let mut types = vec![Type::VARCHAR];
    types.extend(std::iter::repeat_n(Type::TEXT, 10));
    types
}

/// Per-statement costs on a real pool, and the combined encode + bind.
fn classify_and_batch(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let pool = rt.block_on(async {
        let url = common::pg_fresh_db().await;
        let pool = Pool::builder(&url).max_size(2).build().expect("pool");
        let mut ddl = String::from("CREATE TABLE usertable (YCSB_KEY VARCHAR(255) PRIMARY KEY");
        for f in 0..10 {
            ddl.push_str(&format!(", FIELD{f} TEXT"));
        }
        ddl.push(')');
        pool.execute(&ddl, &[]).await.expect("create table");
        // Classify and prepare the shape once, as the first caller would.
        let row = ycsb_rows(1).remove(0);
        let params: Vec<&(dyn ToSql + Sync)> = row.iter().map(|v| v as _).collect();
        pool.execute(YCSB_INSERT, &params)
            .await
            .expect("warm insert");
        pool
    });
    // A text seen before is answered from the route cache without waiting.
    // Once it is due for relearning (every `BatchConfig::relearn_after`,
    // 1 s) the call spawns that in the background, as every call does: in
    // the runtime's context, as in a service.
    let _runtime = rt.enter();
    let cached = |sql: &str| {
        pool.explain(sql)
            .now_or_never()
            .map(|e| e.map(|e| e.is_coalesced()))
    };
    assert_eq!(cached(YCSB_INSERT).map(Result::ok), Some(Some(true)));

    c.bench_function("classify_cached", |b| {
        b.iter(|| black_box(cached(black_box(YCSB_INSERT))))
    });

    let rows = ycsb_rows(ROWS);
    let params: Vec<Vec<&(dyn ToSql + Sync)>> = rows
        .iter()
        .map(|r| r.iter().map(|v| v as &(dyn ToSql + Sync)).collect())
        .collect();
    let refs: Vec<&[&(dyn ToSql + Sync)]> = params.iter().map(|p| p.as_slice()).collect();
    let types = ycsb_types();
    let mut group = c.benchmark_group("batch");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("encode_bind_1000_rows", |b| {
        b.iter(|| black_box(bench::pg_encode_and_bind(&types, black_box(&refs))))
    });
    group.bench_function("render_1000_rows", |b| {
        b.iter(|| black_box(bench::pg_render(black_box(YCSB_INSERT), ROWS)))
    });
    group.finish();
    rt.block_on(pool.close());
}

/// Builds the Bind message of `list` as tokio-postgres does
/// (`query::encode_bind_raw`): each value's format, then postgres-protocol's
/// `bind`, each value writing its bytes through `to_sql_checked`.
fn bind_message(list: &bench::PgBindList<'_>, types: &[Type], buf: &mut BytesMut) {
    let (formats, values): (Vec<i16>, Vec<_>) = list
        .values()
        .zip(types.iter().cycle())
        .map(|(v, ty)| (v.encode_format(ty) as i16, (v, ty)))
        .unzip();
    postgres_protocol::message::frontend::bind(
        "",
        "s0",
        formats,
        values,
        |(v, ty), buf| match v.to_sql_checked(ty, buf) {
            Ok(IsNull::No) => Ok(postgres_protocol::IsNull::No),
            Ok(IsNull::Yes) => Ok(postgres_protocol::IsNull::Yes),
            Err(e) => Err(e),
        },
        Some(1),
        buf,
    )
    .unwrap_or_else(|_| panic!("the Bind message of {} values", list.len()));
}

/// PostgreSQL, both paths: the caller's encoding, then the flusher's work
/// for a 1000-row multi-row INSERT and for a 1000-row COPY.
fn pg_paths(c: &mut Criterion) {
    let rows = ycsb_rows(ROWS);
    let params: Vec<Vec<&(dyn ToSql + Sync)>> = rows
        .iter()
        .map(|r| r.iter().map(|v| v as &(dyn ToSql + Sync)).collect())
        .collect();
    let refs: Vec<&[&(dyn ToSql + Sync)]> = params.iter().map(|p| p.as_slice()).collect();
    let types = ycsb_types();
    let encoded = bench::pg_encode(&types, &refs);
    assert_eq!(encoded.len(), ROWS);
    let copy = bench::pg_copy(YCSB_INSERT).expect("a plain shape has a COPY plan");

    let mut group = c.benchmark_group("pg_rewrite");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("caller_encode_1000_rows", |b| {
        b.iter(|| black_box(bench::pg_encode(&types, black_box(&refs))))
    });
    group.bench_function("flusher_bind_list_1000_rows", |b| {
        b.iter(|| black_box(black_box(&encoded).bind_list()).len())
    });
    let mut buf = BytesMut::new();
    group.bench_function("flusher_bind_message_1000_rows", |b| {
        b.iter(|| {
            buf.clear();
            let list = black_box(&encoded).bind_list();
            bind_message(&list, &types, &mut buf);
            black_box(buf.len())
        })
    });
    group.finish();

    let mut group = c.benchmark_group("pg_copy");
    group.throughput(Throughput::Elements(ROWS as u64));
    // The caller's side is pg_rewrite/caller_encode_1000_rows: COPY takes
    // the rows as their callers encoded them.
    group.bench_function("flusher_copy_data_1000_rows", |b| {
        b.iter(|| black_box(copy.data(black_box(&encoded))).len())
    });
    group.finish();
}

/// MariaDB's rewrite: the caller's check, then the flusher's parameters and
/// the driver's packet for a 1000-row multi-row INSERT.
fn mysql_rewrite(c: &mut Criterion) {
    use mysql_async::{Params, Value};
    use mysql_common::packets::ComStmtExecuteRequestBuilder;
    use mysql_common::proto::MySerialize;

    let rows = ycsb_rows(ROWS);
    let values =
        |r: &Vec<String>| -> Vec<Value> { r.iter().map(|s| Value::from(s.as_str())).collect() };
    let given: Vec<Params> = rows.iter().map(|r| Params::Positional(values(r))).collect();
    let shape = bench::mysql_shape(YCSB_INSERT_MYSQL).expect("a batchable shape");
    let encoded = bench::mysql_encode(&shape, given.clone());
    assert_eq!(encoded.len(), ROWS);

    let mut group = c.benchmark_group("mysql_rewrite");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("caller_encode_1000_rows", |b| {
        b.iter_batched(
            || given.clone(),
            |given| black_box(bench::mysql_encode(&shape, given)),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("caller_values_encode_1000_rows", |b| {
        b.iter(|| {
            let given = black_box(&rows)
                .iter()
                .map(|r| Params::Positional(values(r)))
                .collect();
            black_box(bench::mysql_encode(&shape, given))
        })
    });
    group.bench_function("flusher_params_1000_rows", |b| {
        b.iter(|| black_box(black_box(&encoded).params()).len())
    });
    let mut buf = Vec::new();
    group.bench_function("flusher_execute_packet_1000_rows", |b| {
        b.iter(|| {
            buf.clear();
            let params = black_box(&encoded).params();
            let (body, _) = ComStmtExecuteRequestBuilder::new(1).build(&params);
            body.serialize(&mut buf);
            black_box(buf.len())
        })
    });
    group.finish();
}

/// The packet limit of the bulk groups: MariaDB's default
/// `max_allowed_packet` (16 MiB), which 1000 YCSB rows fit.
const BULK_PACKET: usize = 16 << 20;

/// Builds and serializes the COM_STMT_BULK_EXECUTE commands of `params` into
/// `buf` as mysql_async's `exec_batch` does (`ExecBulkRoutine`: a builder for
/// the statement under the packet limit, its commands written one after the
/// other); returns how many commands it made.
fn bulk_packets(params: Vec<mysql_async::Params>, buf: &mut Vec<u8>) -> usize {
    use mysql_common::packets::ComStmtBulkExecuteRequestBuilder;
    use mysql_common::proto::MySerialize;

    let mut builder = ComStmtBulkExecuteRequestBuilder::new(1, BULK_PACKET).with_named_params(None);
    let mut commands = 0;
    for command in builder.build_params_iter(params) {
        command.expect("a bulk command of the rows").serialize(buf);
        commands += 1;
    }
    commands
}

/// MariaDB's bulk path: the flusher's check, the bulk command's parameter
/// sets, and the driver's COM_STMT_BULK_EXECUTE packet for the same 1000
/// rows as `mysql_rewrite` (the caller's side is the same `encode`).
fn mysql_bulk(c: &mut Criterion) {
    use mysql_async::{Params, Value};

    let rows = ycsb_rows(ROWS);
    let given: Vec<Params> = rows
        .iter()
        .map(|r| Params::Positional(r.iter().map(|s| Value::from(s.as_str())).collect()))
        .collect();
    let shape = bench::mysql_shape(YCSB_INSERT_MYSQL).expect("a batchable shape");
    let encoded = bench::mysql_encode(&shape, given);
    assert_eq!(encoded.len(), ROWS);
    assert!(
        encoded.bulk_fits(&shape, BULK_PACKET),
        "1000 YCSB rows fit one bulk command"
    );
    let mut buf = Vec::new();
    assert_eq!(
        bulk_packets(encoded.bulk_params(), &mut buf),
        1,
        "one COM_STMT_BULK_EXECUTE, as the engine sends it"
    );

    let mut group = c.benchmark_group("mysql_bulk");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("flusher_bulk_fits_1000_rows", |b| {
        b.iter(|| black_box(black_box(&encoded).bulk_fits(&shape, BULK_PACKET)))
    });
    group.bench_function("flusher_bulk_params_1000_rows", |b| {
        b.iter(|| black_box(black_box(&encoded).bulk_params()).len())
    });
    group.bench_function("flusher_bulk_packet_1000_rows", |b| {
        b.iter(|| {
            buf.clear();
            let params = black_box(&encoded).bulk_params();
            black_box(bulk_packets(params, &mut buf));
            black_box(buf.len())
        })
    });
    group.finish();
}

/// The pool's counting of a 1000-row flush (two 500-row statements): its
/// `Stats` counters alone, and with the `metrics` feature also a Prometheus
/// recorder's metrics (`cargo bench --features bench,metrics --bench engine
/// -- counting`), the cost that feature adds per row.
fn counting(c: &mut Criterion) {
    // Installed before the counters are made: they register their metrics
    // once, as a pool does when it is built.
    #[cfg(feature = "metrics")]
    let _handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this process");
    let counting = bench::FlushCounting::default();
    let mut group = c.benchmark_group("counting");
    group.throughput(Throughput::Elements(ROWS as u64));
    let name = if cfg!(feature = "metrics") {
        "stats_and_metrics_1000_rows"
    } else {
        "stats_1000_rows"
    };
    group.bench_function(name, |b| {
        b.iter(|| {
            counting.flush(
                black_box(ROWS),
                black_box(500),
                black_box(std::time::Duration::from_micros(250)),
            )
        })
    });
    group.finish();
    assert!(counting.rows() > 0);
}

criterion_group!(
    engine,
    classify_and_batch,
    pg_paths,
    mysql_rewrite,
    mysql_bulk,
    counting
);
criterion_main!(engine);
