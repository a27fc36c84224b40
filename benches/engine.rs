//! Criterion micro-benchmarks of the per-statement and per-row costs the
//! engine adds on the caller's path:
//!
//! * `classify_cached`: the cached classification every `execute` does,
//!   measured through `Pool::explain` on a text already seen (goal: ≤ 100 ns
//!   per statement);
//! * `encode_bind_1000_rows`: encoding 1000 YCSB rows in the callers' tasks
//!   and building the bind list of their statement (goal: ≤ 1 µs per row);
//! * `render_1000_rows`: rendering the 1000-row statement text (done once
//!   per connection and row count, then cached).
//!
//! The cached path needs a real pool, so this bench uses the same server
//! harness as the tests (`PG_URL` or a throwaway cluster). The per-row hooks
//! come from the crate's `bench` feature:
//! `cargo bench --features bench --bench engine`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;

use batchpool::bench;
use batchpool::postgres::Pool;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::FutureExt;
use tokio_postgres::types::{ToSql, Type};

const YCSB_INSERT: &str = "INSERT INTO usertable (YCSB_KEY, FIELD0, FIELD1, FIELD2, FIELD3, \
     FIELD4, FIELD5, FIELD6, FIELD7, FIELD8, FIELD9) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

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

fn benches(c: &mut Criterion) {
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
    let cached = |sql: &str| {
        pool.explain(sql)
            .now_or_never()
            .map(|e| e.map(|e| e.is_coalesced()))
    };
    assert_eq!(cached(YCSB_INSERT).map(Result::ok), Some(Some(true)));

    c.bench_function("classify_cached", |b| {
        b.iter(|| black_box(cached(black_box(YCSB_INSERT))))
    });

    let rows = ycsb_rows(1000);
    let params: Vec<Vec<&(dyn ToSql + Sync)>> = rows
        .iter()
        .map(|r| r.iter().map(|v| v as &(dyn ToSql + Sync)).collect())
        .collect();
    let refs: Vec<&[&(dyn ToSql + Sync)]> = params.iter().map(|p| p.as_slice()).collect();
    let mut types = vec![Type::VARCHAR];
    types.extend(std::iter::repeat_n(Type::TEXT, 10));
    let mut group = c.benchmark_group("batch");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("encode_bind_1000_rows", |b| {
        b.iter(|| black_box(bench::pg_encode_and_bind(&types, black_box(&refs))))
    });
    group.bench_function("render_1000_rows", |b| {
        b.iter(|| black_box(bench::pg_render(black_box(YCSB_INSERT), 1000)))
    });
    group.finish();
    rt.block_on(pool.close());
}

criterion_group!(engine, benches);
criterion_main!(engine);
