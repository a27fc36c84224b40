//! Runs the `ycsb_load` bench's code path (benches/ycsb) for every mode and
//! every run-phase workload on a few hundred rows and operations against a
//! real PostgreSQL (and `rewrite-peer`, the sweep, the tasks sweep and the
//! run phase on a real MariaDB), so the bench cannot silently rot: counts,
//! the report, JSON and SVG. No timing assertions.

use crate::common;
#[path = "../../benches/ycsb/mod.rs"]
mod ycsb;

use batchpool::postgres::Statements;
use clap::Parser;
use ycsb::cli::Args;
use ycsb::modes::Session;
use ycsb::mysql::MysqlTarget;
use ycsb::ops::{OpKind, Operations, Workload};
use ycsb::pg::PgTarget;
use ycsb::workload::{self, Dataset};
use ycsb::{Database, Mode, Options, ServerSetup, report};

async fn connect(config: &tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect to the scratch database");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

async fn database_exists(url: &str, name: &str) -> bool {
    let config: tokio_postgres::Config = url.parse().expect("pg_url parses");
    let client = connect(&config).await;
    client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await
        .expect("query pg_database")
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_loads_verifies_and_reports() {
    let url = common::pg_url();
    let target = PgTarget::create(&url).await.expect("scratch database");
    let config = target.config().clone();
    let dbname = config.get_dbname().expect("scratch db name").to_string();
    let setup = ServerSetup {
        throwaway: false,
        fast: common::fast_server(),
        address: target.address(),
        topology: None,
    };
    let db = target;
    let records = 300;
    let opts = Options {
        records,
        batch_size: 64,
        tasks: 8,
        pool_size: 3,
        repeat: 2,
        modes: Mode::ALL.to_vec(),
        sweep: Some(vec![1, 10, 1000]),
        sweep_modes: vec![
            Mode::Batchrewrite,
            Mode::RewritePeer,
            Mode::Batch,
            Mode::Copy,
        ],
        tasks_sweep: Some(vec![1, 4]),
        sweep_min_records: 50,
        sweep_rows_per_task: 20,
        workloads: Workload::ALL.to_vec(),
        operations: 200,
        progress: false,
        ..Options::default()
    };
    let report = ycsb::run(&db, &opts, setup).await.expect("bench run");

    // The table holds exactly the last load, the tasks sweep's last point:
    // the first 80 YCSB keys, each once.
    let client = connect(&config).await;
    let keys: Vec<String> = client
        .query("SELECT ycsb_key FROM usertable ORDER BY ycsb_key", &[])
        .await
        .expect("read keys")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut expected: Vec<String> = (0..80).map(workload::key).collect();
    expected.sort();
    assert_eq!(keys, expected);
    let row = client
        .query_one(
            "SELECT length(field0), length(field9) FROM usertable WHERE ycsb_key = $1",
            &[&workload::key(0)],
        )
        .await
        .expect("first row");
    assert_eq!(
        (row.get::<_, i32>(0), row.get::<_, i32>(1)),
        (workload::FIELD_LEN as i32, workload::FIELD_LEN as i32)
    );

    // One result per mode, in --modes order, each run twice.
    let modes: Vec<Mode> = report.results.iter().map(|r| r.mode).collect();
    assert_eq!(modes, Mode::ALL.to_vec());
    for r in &report.results {
        assert_eq!(r.runs.len(), 2, "{}", r.mode);
        assert!(r.rows_per_sec > 0.0 && r.elapsed_secs > 0.0, "{}", r.mode);
        assert_eq!(r.latency.is_some(), r.mode.has_latency(), "{}", r.mode);
        if let Some(l) = &r.latency {
            assert_eq!(l.count, records as u64, "{}", r.mode);
            assert!(l.p50_us <= l.p99_us && l.p99_us <= l.max_us, "{}", r.mode);
        }
        let batchpool_mode = matches!(r.mode, Mode::Batchrewrite | Mode::Coalesce);
        assert_eq!(r.batching.is_some(), batchpool_mode, "{}", r.mode);
        if let Some(b) = &r.batching {
            assert_eq!(b.rows, records as u64, "{}", r.mode);
            assert!(b.batches >= 1 && b.statements >= b.batches, "{}", r.mode);
        }
    }
    let by_mode = |m: Mode| report.results.iter().find(|r| r.mode == m).unwrap();
    assert_eq!(by_mode(Mode::Nobatch).ratio_to_nobatch, Some(1.0));
    assert_eq!(by_mode(Mode::Copy).ratio_to_copy, Some(1.0));
    // ×rewrite-peer: batchrewrite and rewrite-peer only.
    assert_eq!(by_mode(Mode::RewritePeer).ratio_to_rewrite_peer, Some(1.0));
    let rw = by_mode(Mode::Batchrewrite).ratio_to_rewrite_peer;
    assert!(rw.is_some_and(|r| r > 0.0), "{rw:?}");
    for m in [Mode::Nobatch, Mode::Coalesce, Mode::Copy] {
        assert_eq!(by_mode(m).ratio_to_rewrite_peer, None, "{m}");
    }
    // 300 rows in groups of 64: 5 explicit batches.
    assert_eq!(
        by_mode(Mode::Batchrewrite)
            .batching
            .as_ref()
            .unwrap()
            .batches,
        5
    );

    // The sweep: every mode at each size; batchrewrite at size 1 is one
    // statement per row.
    let sweep_modes = [
        Mode::Batchrewrite,
        Mode::RewritePeer,
        Mode::Batch,
        Mode::Copy,
    ];
    check_sweep(&report, &[1, 10, 1000], &sweep_modes, 2);
    let br = |size: usize| {
        let p = report
            .sweep
            .iter()
            .find(|p| p.mode == Mode::Batchrewrite && p.batch_size == size);
        p.and_then(|p| p.batching.clone())
            .expect("batchrewrite counters")
    };
    assert_eq!(br(1).statements, records as u64);
    assert_eq!((br(1000).batches, br(1000).rows), (1, records as u64));

    // The tasks sweep: per point max(50, 20 × tasks) rows, both modes.
    check_tasks_sweep(&report, &[(1, 50), (4, 80)], 2);

    // The run phase: every workload, both pools, twice each.
    check_run_phase(&report, &Workload::ALL, 2);

    // Text, JSON and SVG.
    let text = report::render_text(&report);
    for needle in [
        "database",
        "postgresql",
        "nobatch",
        "batchrewrite",
        "rewrite-peer",
        "×rewrite-peer",
        "coalesce-peer",
        "copy",
        "tasks sweep",
        "--tasks-sweep 1,4",
        "p99 µs",
        "rows/batch",
        "sweep",
        "machine:",
        "server:",
        "settings:",
        "--records 300",
        "--sweep-modes batchrewrite,rewrite-peer,batch,copy",
        "one binary COPY FROM STDIN per group",
        "×br",
        "batchpool bulk path: the library default (PoolBuilder::copy_threshold",
        "--workload a,b,c,f --operations 200",
        "coalesce-peer = deadpool-postgres",
    ] {
        assert!(text.contains(needle), "report lacks {needle:?}:\n{text}");
    }
    assert!(text.contains(&report.server.version), "{text}");

    let dir = tempfile::tempdir().expect("temp dir");
    let json = dir.path().join("ycsb.json");
    report::write_json(&report, &json).expect("write json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("read json")).expect("valid json");
    assert_eq!(v["options"]["records"], records);
    assert_eq!(v["results"].as_array().map(Vec::len), Some(7));
    assert_eq!(v["results"][3]["mode"], "rewrite-peer");
    assert_eq!(v["results"][3]["ratio_to_rewrite_peer"], 1.0);
    assert_eq!(v["results"][5]["mode"], "coalesce-peer");
    assert!(v["results"][4]["latency"]["p99_us"].as_u64().is_some());
    assert_eq!(v["sweep"].as_array().map(Vec::len), Some(12));
    assert_eq!(v["sweep"][0]["mode"], "batchrewrite");
    assert_eq!(v["sweep"][0]["ratio_to_batchrewrite"], 1.0);
    assert_eq!(v["sweep"][3]["mode"], "copy");
    assert_eq!(v["sweep"][3]["batch_size"], 1);
    assert_eq!(v["sweep"][11]["batch_size"], 1000);
    assert_eq!(v["sweep"][11]["runs"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["tasks_sweep"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["tasks_sweep"][1]["tasks"], 4);
    assert_eq!(v["tasks_sweep"][1]["records"], 80);
    assert!(v["tasks_sweep"][1]["peer"]["p99_us"].as_u64().is_some());
    assert!(v["tasks_sweep"][0]["coalesce"]["batching"]["rows"].as_u64() == Some(50));
    assert!(v["machine"]["cores"].as_u64().unwrap_or(0) >= 1);

    let svg = dir.path().join("ycsb.svg");
    report::plot_modes(&report, &svg).expect("plot modes");
    let body = std::fs::read_to_string(&svg).expect("read svg");
    assert!(
        body.starts_with("<svg") && body.contains("coalesce-peer"),
        "{body}"
    );
    let sweep_svg = dir.path().join("ycsb-sweep.svg");
    report::plot_sweep(&report, &sweep_svg).expect("plot sweep");
    check_sweep_svg(&sweep_svg, &sweep_modes);
    let tasks_svg = dir.path().join("ycsb-tasks.svg");
    report::plot_tasks(&report, &tasks_svg).expect("plot tasks sweep");
    check_tasks_svg(&tasks_svg);
    check_run_files(&report, dir.path());

    drop(client);
    db.cleanup().await;
    assert!(
        !database_exists(&url, &dbname).await,
        "{dbname} not dropped"
    );
}

/// The tasks sweep of `report`: one point per `(tasks, records)` of
/// `expected`, each mode run `repeat` times on exactly that many rows, every
/// row's latency measured.
fn check_tasks_sweep(report: &report::Report, expected: &[(usize, usize)], repeat: usize) {
    let got: Vec<(usize, usize)> = report
        .tasks_sweep
        .iter()
        .map(|p| (p.tasks, p.records))
        .collect();
    assert_eq!(got, expected);
    for p in &report.tasks_sweep {
        for side in [&p.coalesce, &p.peer] {
            assert_eq!(side.runs.len(), repeat, "{} tasks", p.tasks);
            for run in &side.runs {
                let l = run.latency.as_ref().expect("latency measured");
                assert_eq!(l.count, p.records as u64, "{} tasks", p.tasks);
            }
            assert!(side.rows_per_sec > 0.0 && side.p50_us <= side.p99_us);
        }
        let b = p.coalesce.batching.as_ref().expect("batchpool counters");
        assert_eq!(b.rows, p.records as u64);
        assert!(p.peer.batching.is_none());
        assert!(p.ratio > 0.0 && p.p99_ratio > 0.0);
    }
    // One task: nothing to coalesce, one row per statement.
    let one = &report.tasks_sweep[0].coalesce.batching.as_ref().unwrap();
    assert_eq!(one.rows_per_statement, 1.0);
    let text = report::render_text(report);
    assert!(text.contains("tasks sweep: coalesce"), "{text}");
    assert!(text.contains("rows/stmt"), "{text}");
}

/// The run phase of `report`: one entry per workload of `workloads`, in
/// order, each pool run `repeat` times on exactly `--operations`
/// operations; every operation's latency measured under its kind;
/// batchpool's statements its counters' (at most one per read and update),
/// the plain pool's one per read and update; the text shows it all.
fn check_run_phase(report: &report::Report, workloads: &[Workload], repeat: usize) {
    let got: Vec<Workload> = report.run_phase.iter().map(|w| w.workload).collect();
    assert_eq!(got, workloads);
    let ops = report.options.operations;
    for w in &report.run_phase {
        let name = w.workload.name();
        assert_eq!(w.operations, ops, "{name}");
        assert_eq!(w.reads + w.updates + w.read_modify_writes, ops, "{name}");
        assert_eq!(w.records, report.options.records, "{name}");
        assert!(
            (1..=w.records.min(ops)).contains(&w.distinct_records),
            "{name}: {} records",
            w.distinct_records
        );
        assert!(w.hottest_share > 0.0 && w.hottest_share <= 1.0, "{name}");
        assert!(w.ratio > 0.0, "{name}");
        let plain = (w.reads + w.updates + 2 * w.read_modify_writes) as u64;
        for (side, batchpool) in [(&w.coalesce, true), (&w.peer, false)] {
            assert_eq!(side.runs.len(), repeat, "{name}");
            for run in &side.runs {
                assert!(run.ops_per_sec > 0.0 && run.elapsed_secs > 0.0, "{name}");
                for (kind, n) in [
                    (OpKind::Read, w.reads),
                    (OpKind::Update, w.updates),
                    (OpKind::ReadModifyWrite, w.read_modify_writes),
                ] {
                    match run.latency(kind) {
                        None => assert_eq!(n, 0, "{name} {kind:?}"),
                        Some(l) => {
                            assert_eq!(l.count, n as u64, "{name} {kind:?}");
                            assert!(l.p50_us <= l.p99_us && l.p99_us <= l.max_us);
                        }
                    }
                }
                assert_eq!(run.batching.is_some(), batchpool, "{name}");
                match &run.batching {
                    Some(b) => {
                        assert_eq!(run.statements, b.statements + b.passthrough, "{name}");
                        assert!(
                            (1..=plain).contains(&run.statements),
                            "{name}: {} statements for {plain} reads and updates",
                            run.statements
                        );
                        assert_eq!(b.rows_failed, 0, "{name}");
                    }
                    None => assert_eq!(run.statements, plain, "{name}"),
                }
                assert_eq!(
                    run.statements_per_op,
                    run.statements as f64 / ops as f64,
                    "{name}"
                );
            }
        }
    }
    let text = report::render_text(report);
    assert!(text.contains("YCSB run: "), "{text}");
    assert!(
        text.contains("stmts/op") && text.contains("rmw p99"),
        "{text}"
    );
    for w in workloads {
        let mix = format!("  {:<14}{}", w.name(), w.mix());
        assert!(text.contains(&mix), "report lacks {mix:?}:\n{text}");
    }
    if repeat > 1 {
        assert!(text.contains("all runs (ops/s, in run order):"), "{text}");
    }
}

/// The run phase in the JSON and SVG written to `dir`.
fn check_run_files(report: &report::Report, dir: &std::path::Path) {
    let json = dir.join("run.json");
    report::write_json(report, &json).expect("write json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("read json")).expect("valid json");
    let run = v["run_phase"].as_array().expect("run_phase");
    assert_eq!(run.len(), report.run_phase.len());
    assert_eq!(v["options"]["operations"], report.options.operations);
    for (w, j) in report.run_phase.iter().zip(run) {
        assert_eq!(j["workload"], w.workload.name());
        assert_eq!(j["mix"], w.workload.mix());
        assert_eq!(j["reads"], w.reads);
        for side in ["coalesce", "peer"] {
            let s = &j[side];
            assert!(s["ops_per_sec"].as_f64().is_some_and(|x| x > 0.0), "{side}");
            assert!(s["statements_per_op"].as_f64().is_some(), "{side}");
            assert_eq!(
                s["runs"].as_array().map(Vec::len),
                Some(report.options.repeat)
            );
            for (kind, n) in [
                ("read", w.reads),
                ("update", w.updates),
                ("read_modify_write", w.read_modify_writes),
            ] {
                assert_eq!(s[kind]["count"].as_u64().unwrap_or(0), n as u64, "{kind}");
            }
        }
        assert!(j["coalesce"]["batching"]["passthrough"].as_u64().is_some());
        assert!(j["peer"]["batching"].is_null());
    }
    let svg = dir.join("run.svg");
    report::plot_run(report, &svg).expect("plot run phase");
    let body = std::fs::read_to_string(&svg).expect("read run svg");
    assert!(body.starts_with("<svg") && body.contains("ops/s"), "{body}");
    for w in &report.run_phase {
        let upper = w.workload.name().to_uppercase();
        for pool in ["coalesce", "peer"] {
            let label = format!("{upper}: {pool}");
            assert!(body.contains(&label), "run svg lacks {label:?}");
        }
    }
}

/// The sweep of `report`: a point per size of `sizes` and mode of `modes`
/// (sizes outer, modes inner), each run `repeat` times; ratios to
/// batchrewrite at the same size; the text table has a line per size.
fn check_sweep(report: &report::Report, sizes: &[usize], modes: &[Mode], repeat: usize) {
    let got: Vec<(usize, Mode)> = report
        .sweep
        .iter()
        .map(|p| (p.batch_size, p.mode))
        .collect();
    let expected: Vec<(usize, Mode)> = sizes
        .iter()
        .flat_map(|&s| modes.iter().map(move |&m| (s, m)))
        .collect();
    assert_eq!(got, expected);
    for p in &report.sweep {
        let at = format!("{}@{}", p.mode, p.batch_size);
        assert_eq!(p.runs.len(), repeat, "{at}");
        assert!(p.rows_per_sec > 0.0, "{at}");
        assert_eq!(p.batching.is_some(), p.mode == Mode::Batchrewrite, "{at}");
        let br = report
            .sweep
            .iter()
            .find(|q| q.mode == Mode::Batchrewrite && q.batch_size == p.batch_size)
            .map(|q| q.rows_per_sec);
        assert_eq!(
            p.ratio_to_batchrewrite,
            br.map(|b| p.rows_per_sec / b),
            "{at}"
        );
        if let Some(b) = &p.batching {
            assert_eq!(b.rows, report.options.records as u64, "{at}");
        }
    }
    let text = report::render_text(report);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("size"))
        .take(1 + sizes.len())
        .collect();
    assert_eq!(table.len(), 1 + sizes.len(), "{text}");
    for m in modes {
        assert!(table[0].contains(m.name()), "{m} not in {:?}", table[0]);
    }
    if modes.contains(&Mode::Batchrewrite) {
        assert!(table[0].contains("statements") && table[0].contains("bulk"));
    }
    if repeat > 1 {
        assert!(
            text.contains(&format!("{}@{}", modes[0], sizes[0])),
            "{text}"
        );
    }
}

/// The sweep SVG: a line per mode, sizes on the axis.
fn check_sweep_svg(path: &std::path::Path, modes: &[Mode]) {
    let body = std::fs::read_to_string(path).expect("read sweep svg");
    assert!(body.starts_with("<svg"), "{body}");
    for needle in ["rows per group", "rows/s"] {
        assert!(body.contains(needle), "sweep svg lacks {needle:?}");
    }
    for m in modes {
        assert!(body.contains(m.name()), "sweep svg lacks {m}");
    }
}

/// The tasks-sweep SVG has both panels and both modes.
fn check_tasks_svg(path: &std::path::Path) {
    let body = std::fs::read_to_string(path).expect("read tasks svg");
    assert!(body.starts_with("<svg"), "{body}");
    for needle in ["rows/s", "p99", "coalesce-peer", "concurrent tasks"] {
        assert!(body.contains(needle), "tasks svg lacks {needle:?}");
    }
}

/// `rewrite-peer` sends each group as one statement: a 5-row group is one
/// INSERT that reports 5 rows; a group beyond PostgreSQL's 65,535 bind
/// parameters (6,000 rows × 11) is split, named and unnamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_peer_is_one_statement_per_group_within_the_limits() {
    let url = common::pg_url();
    let mut db = PgTarget::create(&url).await.expect("scratch database");
    db.prepare().await.expect("create usertable");
    let data = std::sync::Arc::new(Dataset::generate(6000, 100, 3).expect("rows"));
    let mut session = db.session().await.expect("session");
    assert_eq!(session.max_rows(1100), 65535 / 11);
    let n = session.insert_rows(&data.rows[..5]).await.expect("5 rows");
    assert_eq!(n, 5, "one statement, five rows");
    session.close().await;
    ycsb::verify_count(&db, 5, "rewrite-peer")
        .await
        .expect("5 rows");

    let cfg = ycsb::LoadConfig {
        batch_size: 10_000,
        tasks: 1,
        pool_size: 1,
        max_in_flight: None,
        max_rows: None,
        max_delay_us: None,
        pipeline: true,
        bulk_group: None,
    };
    for mode in [None, Some(Statements::Unnamed)] {
        db.set_statements(mode).expect("statement mode");
        db.reset().await.expect("truncate");
        let progress = ycsb::Progress::start(false, "rewrite-peer", 6000);
        db.load(Mode::RewritePeer, &data, cfg, &progress)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {}", ycsb::error_chain(&*e)));
        assert_eq!(progress.count(), 6000);
        ycsb::verify_count(&db, 6000, "rewrite-peer")
            .await
            .expect("6000 rows");
    }
    db.cleanup().await;
}

/// `--bulk-threshold` reaches batchpool's pool on `db`: `off` sends
/// multi-row INSERTs only, a threshold of 2 sends every group of a plain
/// shape (4 groups of 25 rows) by the bulk path.
async fn check_bulk_threshold<D: Database>(db: &mut D) {
    db.prepare().await.expect("create usertable");
    let data = std::sync::Arc::new(Dataset::generate(100, 100, 5).expect("rows"));
    let cfg = ycsb::LoadConfig {
        batch_size: 25,
        tasks: 1,
        pool_size: 1,
        max_in_flight: None,
        max_rows: None,
        max_delay_us: None,
        pipeline: true,
        bulk_group: None,
    };
    for (threshold, bulk) in [(None, 0), (Some(2), 4)] {
        db.set_bulk_threshold(Some(threshold));
        db.reset().await.expect("truncate");
        let progress = ycsb::Progress::start(false, "batchrewrite", 100);
        let loaded = db
            .load(Mode::Batchrewrite, &data, cfg, &progress)
            .await
            .unwrap_or_else(|e| panic!("{threshold:?}: {}", ycsb::error_chain(&*e)));
        let b = loaded.batching.expect("batchpool counters");
        assert_eq!(
            (b.statements, b.bulk_statements),
            (4, bulk),
            "{} {threshold:?}",
            D::NAME
        );
        ycsb::verify_count(db, 100, "batchrewrite")
            .await
            .expect("100 rows");
    }
}

/// PostgreSQL: `--bulk-threshold` is `PoolBuilder::copy_threshold`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_threshold_reaches_batchpool() {
    let url = common::pg_url();
    let mut db = PgTarget::create(&url).await.expect("scratch database");
    check_bulk_threshold(&mut db).await;
    db.cleanup().await;
}

/// MariaDB: `--bulk-threshold` is `PoolBuilder::bulk_threshold`
/// (COM_STMT_BULK_EXECUTE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_bulk_threshold_reaches_batchpool() {
    let url = common::mysql_url();
    let mut db = MysqlTarget::create(&url).await.expect("scratch database");
    check_bulk_threshold(&mut db).await;
    db.cleanup().await;
}

/// The bulk mode in the sweep (`bulk_group`): one COPY per group, each its
/// own transaction (the rows of a group share their `xmin`), named and
/// unnamed; without a group, one COPY of every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_groups_are_one_statement_each() {
    let url = common::pg_url();
    let mut db = PgTarget::create(&url).await.expect("scratch database");
    db.prepare().await.expect("create usertable");
    let client = connect(db.config()).await;
    let data = std::sync::Arc::new(Dataset::generate(100, 100, 11).expect("rows"));
    for (statements, group, transactions) in [
        (None, None, 1),
        (None, Some(25), 4),
        (None, Some(30), 4),
        (Some(Statements::Unnamed), Some(25), 4),
        (None, Some(1000), 1),
    ] {
        db.set_statements(statements).expect("statement mode");
        let cfg = ycsb::LoadConfig {
            batch_size: 7,
            tasks: 1,
            pool_size: 1,
            max_in_flight: None,
            max_rows: None,
            max_delay_us: None,
            pipeline: true,
            bulk_group: group,
        };
        db.reset().await.expect("truncate");
        let progress = ycsb::Progress::start(false, "copy", 100);
        db.load(Mode::Copy, &data, cfg, &progress)
            .await
            .unwrap_or_else(|e| panic!("{group:?}: {}", ycsb::error_chain(&*e)));
        assert_eq!(progress.count(), 100, "{group:?}");
        ycsb::verify_count(&db, 100, "copy")
            .await
            .expect("100 rows");
        let xids: i64 = client
            .query_one("SELECT count(DISTINCT xmin::text) FROM usertable", &[])
            .await
            .expect("count transactions")
            .get(0);
        assert_eq!(xids, transactions, "{statements:?} {group:?}");
    }
    drop(client);
    db.cleanup().await;
}

/// `SHOW GLOBAL STATUS` counter `name` on the server of `db`.
async fn mysql_status(db: &MysqlTarget, name: &str) -> u64 {
    use mysql_async::prelude::Queryable;
    let mut conn = mysql_async::Conn::new(db.opts().clone())
        .await
        .expect("connect");
    let row: Option<(String, u64)> = conn
        .query_first(format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .await
        .expect("SHOW GLOBAL STATUS");
    let _ = conn.disconnect().await;
    row.expect("status counter").1
}

/// MariaDB: `rewrite-peer` next to `batchrewrite`, the sweep of every
/// MariaDB sweep mode (`load-data` one statement per group: the server's
/// LOAD DATA count goes up by one per group), and a tiny tasks sweep,
/// repeated twice.
/// `--fail-rate`: the failing rows fail in both concurrent modes, the rest
/// is written, and batchpool's counters show the failing rows and the
/// statements added to isolate them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_fail_rate() {
    let url = common::mysql_url();
    let db = MysqlTarget::create(&url).await.expect("scratch database");
    let setup = ServerSetup {
        throwaway: false,
        fast: common::fast_server(),
        address: db.address(),
        topology: None,
    };
    let opts = Options {
        records: 3000,
        tasks: 16,
        pool_size: 3,
        modes: vec![Mode::Coalesce, Mode::CoalescePeer],
        fail_rate: Some(5.0),
        // The keys of the failing rows are loaded: the run phase reads and
        // updates them as any other.
        operations: 300,
        progress: false,
        ..Options::default()
    };
    let report = ycsb::run(&db, &opts, setup).await.expect("bench run");
    let coalesce = report
        .results
        .iter()
        .find(|r| r.mode == Mode::Coalesce)
        .expect("coalesce ran");
    let b = coalesce.batching.as_ref().expect("batchpool counters");
    // About 5 % of the 2,000 rows after the first 1,000.
    assert!(
        (40..=180).contains(&b.rows_failed),
        "{} failing rows",
        b.rows_failed
    );
    assert!(report.results.iter().any(|r| r.mode == Mode::CoalescePeer));
    check_run_phase(&report, &[Workload::A], 1);
}

/// With no load mode (`--sweeps-only`), the run phase loads the table
/// itself (the bulk path, untimed) and runs every workload asked for.
/// (PostgreSQL: a LOAD DATA here would count in the server-wide counter
/// `mariadb_rewrite_peer_and_tasks_sweep` checks.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_phase_alone_loads_the_table() {
    let url = common::pg_url();
    let db = PgTarget::create(&url).await.expect("scratch database");
    let setup = ServerSetup {
        throwaway: false,
        fast: common::fast_server(),
        address: db.address(),
        topology: None,
    };
    let opts = Options {
        records: 250,
        tasks: 8,
        pool_size: 3,
        modes: Vec::new(),
        workloads: vec![Workload::C, Workload::B],
        operations: 300,
        progress: false,
        ..Options::default()
    };
    let report = ycsb::run(&db, &opts, setup).await.expect("bench run");
    assert!(report.results.is_empty() && report.sweep.is_empty());
    check_run_phase(&report, &[Workload::C, Workload::B], 1);
    ycsb::verify_count(&db, 250, "run phase")
        .await
        .expect("250 rows");
    let text = report::render_text(&report);
    for needle in [
        "--sweeps-only --workload c,b --operations 300",
        "into usertable, untimed, by binary COPY (no load mode: the table of the run phase)",
    ] {
        assert!(text.contains(needle), "report lacks {needle:?}:\n{text}");
    }
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_rewrite_peer_and_tasks_sweep() {
    let url = common::mysql_url();
    let db = MysqlTarget::create(&url).await.expect("scratch database");
    let setup = ServerSetup {
        throwaway: false,
        fast: common::fast_server(),
        address: db.address(),
        topology: None,
    };
    let opts = Options {
        records: 300,
        batch_size: 64,
        tasks: 8,
        pool_size: 3,
        repeat: 2,
        modes: vec![Mode::Batchrewrite, Mode::RewritePeer],
        sweep: Some(vec![10, 100]),
        sweep_modes: vec![
            Mode::Batchrewrite,
            Mode::RewritePeer,
            Mode::Batch,
            Mode::LoadData,
        ],
        tasks_sweep: Some(vec![1, 4]),
        sweep_min_records: 50,
        sweep_rows_per_task: 20,
        workloads: vec![Workload::A, Workload::F],
        operations: 200,
        progress: false,
        ..Options::default()
    };
    let loads = mysql_status(&db, "Com_load").await;
    let report = ycsb::run(&db, &opts, setup).await.expect("bench run");
    // 300 rows in groups of 10, then of 100, twice: 2 × (30 + 3) LOAD DATA
    // (exactly, unless another client shares the server: MYSQL_URL).
    let loaded = mysql_status(&db, "Com_load").await - loads;
    if std::env::var_os("MYSQL_URL").is_none() {
        assert_eq!(loaded, 66);
    } else {
        assert!(loaded >= 66, "{loaded} LOAD DATA");
    }
    check_sweep(&report, &[10, 100], &opts.sweep_modes, 2);
    // The default bulk threshold: batchrewrite's groups go out as bulk
    // commands.
    for p in report.sweep.iter().filter(|p| p.mode == Mode::Batchrewrite) {
        let b = p.batching.as_ref().expect("counters");
        assert_eq!(
            b.bulk_statements,
            300 / p.batch_size as u64,
            "{}",
            p.batch_size
        );
    }
    let modes: Vec<Mode> = report.results.iter().map(|r| r.mode).collect();
    assert_eq!(modes, vec![Mode::Batchrewrite, Mode::RewritePeer]);
    assert_eq!(report.results[1].ratio_to_rewrite_peer, Some(1.0));
    assert!(report.results[0].ratio_to_rewrite_peer.is_some());
    check_tasks_sweep(&report, &[(1, 50), (4, 80)], 2);
    check_run_phase(&report, &[Workload::A, Workload::F], 2);
    let text = report::render_text(&report);
    for needle in [
        "coalesce-peer = mysql_async::Pool",
        "mariadb",
        "×rewrite-peer",
        "one LOAD DATA LOCAL INFILE per group",
        "exec_batch of the group",
        "batchpool bulk path: the library default (PoolBuilder::bulk_threshold",
    ] {
        assert!(text.contains(needle), "report lacks {needle:?}:\n{text}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let svg = dir.path().join("tasks.svg");
    report::plot_tasks(&report, &svg).expect("plot tasks sweep");
    check_tasks_svg(&svg);
    let svg = dir.path().join("sweep.svg");
    report::plot_sweep(&report, &svg).expect("plot sweep");
    check_sweep_svg(&svg, &opts.sweep_modes);
    check_run_files(&report, dir.path());

    // A 5-row group is one statement reporting 5 rows.
    db.reset().await.expect("truncate");
    let data = Dataset::generate(5, 100, 9).expect("rows");
    let mut session = db.session().await.expect("session");
    assert!(
        session.max_rows(1100) >= 1000,
        "16 MiB packets hold 1000 rows"
    );
    assert_eq!(session.insert_rows(&data.rows).await.expect("5 rows"), 5);
    session.close().await;
    ycsb::verify_count(&db, 5, "rewrite-peer")
        .await
        .expect("5 rows");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_count_fails_the_run() {
    let url = common::pg_url();
    let db = PgTarget::create(&url).await.expect("scratch database");
    db.prepare().await.expect("create usertable");
    let data = std::sync::Arc::new(Dataset::generate(20, 100, 1).expect("rows"));
    let cfg = ycsb::LoadConfig {
        batch_size: 8,
        tasks: 2,
        pool_size: 2,
        max_in_flight: None,
        max_rows: None,
        max_delay_us: None,
        pipeline: true,
        bulk_group: None,
    };
    let progress = ycsb::Progress::start(false, "copy", 20);
    db.load(Mode::Copy, &data, cfg, &progress)
        .await
        .expect("copy");
    assert_eq!(progress.count(), 20);
    ycsb::verify_count(&db, 20, "copy").await.expect("20 rows");
    let err = ycsb::verify_count(&db, 21, "copy")
        .await
        .expect_err("21 expected, 20 there");
    assert!(err.to_string().contains("count(*) = 20"), "{err}");
    // Loading the same keys again without TRUNCATE is a primary-key error,
    // reported as the mode's failure (not a panic).
    let err = db
        .load(Mode::Coalesce, &data, cfg, &progress)
        .await
        .expect_err("duplicate keys");
    let msg = ycsb::error_chain(&*err);
    assert!(msg.contains("duplicate key"), "{msg}");

    // The run phase over 40 records of which 20 are loaded: a read of a
    // key that is not there finds no row, an update of it changes none;
    // either fails the run, through both pools.
    let more = std::sync::Arc::new(Dataset::generate(40, 100, 1).expect("rows"));
    assert_eq!(
        more.rows[..20].iter().map(|r| &r.key).collect::<Vec<_>>(),
        data.rows.iter().map(|r| &r.key).collect::<Vec<_>>()
    );
    for workload in [Workload::C, Workload::A] {
        let ops = std::sync::Arc::new(Operations::generate(workload, 200, 40, 3));
        assert!(ops.ops.iter().any(|o| o.record >= 20), "{workload}");
        for mode in [Mode::Coalesce, Mode::CoalescePeer] {
            let progress = ycsb::Progress::start(false, "run", 200);
            let values = ops.values(100, 4);
            let err = db
                .operate(mode, &more, &ops, values, cfg, &progress)
                .await
                .expect_err("a record is not there");
            let msg = ycsb::error_chain(&*err);
            assert!(
                msg.contains("returned 0 rows, expected 1")
                    || msg.contains("reported 0 rows, expected 1"),
                "{workload} {mode}: {msg}"
            );
        }
    }
    // Only the pools run workloads.
    let ops = std::sync::Arc::new(Operations::generate(Workload::C, 10, 20, 3));
    let progress = ycsb::Progress::start(false, "run", 10);
    let err = db
        .operate(Mode::Copy, &data, &ops, ops.values(100, 4), cfg, &progress)
        .await
        .expect_err("copy runs no workload");
    assert!(
        err.to_string().contains("coalesce and coalesce-peer"),
        "{err}"
    );
    ycsb::verify_count(&db, 20, "run phase")
        .await
        .expect("20 rows");
    db.cleanup().await;
}

#[test]
fn keys_follow_ycsb_hashed_order() {
    // The first key of every YCSB load with the default hashed insert order.
    assert_eq!(workload::key(0), "user6284781860667377211");
    // FNV-1a over the 8 little-endian bytes, then Java's Math.abs, written
    // as the byte-wise textbook definition.
    for i in 0..2000u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in i.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let abs = (h as i64).wrapping_abs();
        assert_eq!(workload::key(i), format!("user{abs}"));
    }
    let data = Dataset::generate(1000, 100, 7).expect("rows");
    assert_eq!(data.len(), 1000);
    for r in &data.rows {
        assert!(
            r.fields
                .iter()
                .all(|f| f.len() == 100 && f.bytes().all(|b| (b' '..=b'~').contains(&b)))
        );
    }
    // Seeded: the same bytes every run, different bytes per seed.
    let again = Dataset::generate(3, 100, 7).expect("rows");
    assert_eq!(again.rows[2].fields, data.rows[2].fields);
    let other = Dataset::generate(3, 100, 8).expect("rows");
    assert_ne!(other.rows[2].fields, data.rows[2].fields);
}

/// `ζ(n, θ)` against the plain sum, and at YCSB's 10¹⁰ items against the
/// constant YCSB's `ScrambledZipfianGenerator` carries (`ZETAN`, summed
/// term by term); the zipfian's shares against `1/((i+1)^θ·ζ)`; the
/// scrambled choice in range, seeded, with its most popular key's share
/// the same at any key count.
#[test]
fn zipfian_choice_follows_ycsb() {
    use ycsb::zipf::{SCRAMBLED_ITEMS, ScrambledZipfian, ZIPFIAN_CONSTANT, Zipfian, seeded, zeta};
    for n in [1u64, 2, 999, 1000, 1001, 5000, 200_000] {
        let exact: f64 = (1..=n).rev().map(|i| (i as f64).powf(-0.99)).sum();
        assert!((zeta(n, 0.99) - exact).abs() < 1e-11 * exact, "ζ({n})");
    }
    assert!((zeta(SCRAMBLED_ITEMS, ZIPFIAN_CONSTANT) - 26.46902820178302).abs() < 1e-9);

    // 200,000 draws over 1,000 items against the method's own shares:
    // items 0 and 1 exactly zipfian (1/ζ, 1/(2^θ·ζ)); from item 2 on the
    // method's continuous approximation, item k ≥ 2 with probability
    // (((k+1)/n)^(1-θ) - (k/n)^(1-θ)) / η, where
    // η = (1 - (2/n)^(1-θ)) / (1 - ζ(2)/ζ(n)). Each of the items checked
    // gets at least 1,400 draws: 5 % is several standard deviations.
    let (n, theta) = (1000u64, 0.99);
    let z = Zipfian::new(n, theta);
    let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta(2, theta) / z.zetan());
    let share = |k: u64| match k {
        0 => 1.0 / z.zetan(),
        1 => 0.5f64.powf(theta) / z.zetan(),
        _ => {
            let at = |x: u64| (x as f64 / n as f64).powf(1.0 - theta);
            (at(k + 1) - at(k)) / eta
        }
    };
    let total: f64 = (0..n).map(share).sum();
    assert!((total - 1.0).abs() < 1e-9, "the shares add up to {total}");
    let mut rng = seeded(1);
    let mut counts = vec![0u64; n as usize];
    let draws = 200_000;
    for _ in 0..draws {
        counts[z.next(&mut rng) as usize] += 1;
    }
    for (k, &got) in counts.iter().enumerate().take(8) {
        let want = share(k as u64) * draws as f64;
        assert!(
            (got as f64 - want).abs() < 0.05 * want,
            "item {k}: {got} draws, expected about {want:.0}"
        );
    }
    let tail: u64 = counts[500..].iter().sum();
    let want = (500..n).map(share).sum::<f64>() * draws as f64;
    assert!(
        (tail as f64 - want).abs() < 0.05 * want,
        "tail {tail}, about {want:.0}"
    );

    // Scrambled: in range, the same keys for the same seed; the most
    // popular key's share about 1/ζ(10¹⁰) (3.8 %) at 1,000 and 1,000,000
    // keys alike, and that key not the first.
    for keys in [1_000u64, 1_000_000] {
        let s = ScrambledZipfian::new(keys);
        let mut rng = seeded(7);
        let drawn: Vec<u64> = (0..100_000).map(|_| s.next(&mut rng)).collect();
        assert!(drawn.iter().all(|&k| k < keys));
        let mut again = seeded(7);
        assert!(drawn.iter().take(1000).all(|&k| k == s.next(&mut again)));
        let mut by_key = std::collections::HashMap::new();
        for &k in &drawn {
            *by_key.entry(k).or_insert(0u64) += 1;
        }
        let (&top, &n) = by_key.iter().max_by_key(|(_, n)| **n).unwrap();
        let share = n as f64 / drawn.len() as f64;
        assert!((0.034..0.042).contains(&share), "{keys} keys: top {share}");
        assert_eq!(top, s.scramble(0), "{keys} keys");
        assert_ne!(top, 0);
    }
    let one = ScrambledZipfian::new(1);
    assert_eq!(one.next(&mut seeded(1)), 0);
}

/// Each workload's mix, keys among the loaded records, fields of the
/// table, the same list for the same seed; each run's values its own.
#[test]
fn workloads_draw_ycsb_mixes() {
    let records = 5000;
    for (w, read, update, rmw) in [
        (Workload::A, 0.5, 0.5, 0.0),
        (Workload::B, 0.95, 0.05, 0.0),
        (Workload::C, 1.0, 0.0, 0.0),
        (Workload::F, 0.5, 0.0, 0.5),
    ] {
        let ops = Operations::generate(w, 20_000, records, 11);
        assert_eq!(ops.len(), 20_000);
        for (kind, want) in [
            (OpKind::Read, read),
            (OpKind::Update, update),
            (OpKind::ReadModifyWrite, rmw),
        ] {
            let got = ops.count(kind) as f64 / 20_000.0;
            assert!((got - want).abs() < 0.015, "{w} {kind:?}: {got}");
        }
        assert!(ops.ops.iter().all(|o| o.record < records));
        let fields: std::collections::HashSet<usize> = ops
            .ops
            .iter()
            .filter(|o| o.kind.writes())
            .map(|o| o.field)
            .collect();
        if update + rmw > 0.0 {
            assert_eq!(
                fields.len(),
                workload::FIELD_COUNT,
                "{w}: every field written"
            );
        }
        assert_eq!(
            ops.plain_statements(),
            (ops.count(OpKind::Read) + ops.count(OpKind::Update)) as u64
                + 2 * ops.count(OpKind::ReadModifyWrite) as u64
        );
        // Zipfian: far fewer distinct records than operations, the most
        // popular about 3.8 % of them.
        assert!(ops.distinct_records() < records, "{w}");
        assert!((0.03..0.047).contains(&ops.hottest_share()), "{w}");
        let again = Operations::generate(w, 20_000, records, 11);
        assert!(
            ops.ops
                .iter()
                .zip(&again.ops)
                .all(|(a, b)| { (a.kind, a.record, a.field) == (b.kind, b.record, b.field) })
        );
        let values = ops.values(100, 1);
        assert_eq!(values.len(), ops.len());
        for (o, v) in ops.ops.iter().zip(&values) {
            assert_eq!(v.len(), if o.kind.writes() { 100 } else { 0 });
        }
        let other = ops.values(100, 2);
        assert!(
            values
                .iter()
                .zip(&other)
                .all(|(a, b)| a.is_empty() || a != b),
            "{w}: a run's values are its own"
        );
    }
    // Each workload draws its own list from the same seed.
    let a = Operations::generate(Workload::A, 100, records, 11);
    let f = Operations::generate(Workload::F, 100, records, 11);
    assert!(a.ops.iter().zip(&f.ops).any(|(x, y)| x.record != y.record));
    assert_eq!(Workload::A.mix(), "50% read / 50% update");
    assert_eq!(Workload::F.mix(), "50% read / 50% read-modify-write");
    assert_eq!(Workload::C.mix(), "100% read");
}

#[test]
fn command_line_and_options() {
    // `cargo bench` passes --bench to harness = false benches.
    let a = Args::try_parse_from(["ycsb_load", "--bench"]).expect("defaults");
    let o = a.options();
    assert_eq!(
        (o.records, o.batch_size, o.tasks, o.pool_size, o.repeat),
        (100_000, 1000, 64, 8, 1)
    );
    assert_eq!(o.modes, Mode::ALL.to_vec());
    assert!(o.sweep.is_none() && a.pg_url.is_none());
    // The run phase: workload A, 100,000 operations.
    assert_eq!(
        (o.workloads.clone(), o.operations),
        (vec![Workload::A], 100_000)
    );
    assert_eq!(a.run_plot_path(), None);

    // --workload: a list, in order, each once; or none.
    let workloads = |arg: &str| {
        Args::try_parse_from(["ycsb_load", "--workload", arg]).map(|a| a.options().workloads)
    };
    assert_eq!(
        workloads("f,A, c,a").expect("parse"),
        vec![Workload::F, Workload::A, Workload::C]
    );
    assert_eq!(workloads("none").expect("parse"), Vec::new());
    for bad in ["d", "a,none", "", "a,,b"] {
        assert!(workloads(bad).is_err(), "{bad:?}");
    }
    let a = Args::try_parse_from([
        "ycsb_load",
        "--workload",
        "b",
        "--operations",
        "5000",
        "--plot",
        "/tmp/x/ycsb.svg",
    ])
    .expect("parse");
    assert_eq!(a.options().operations, 5000);
    assert_eq!(
        a.run_plot_path(),
        Some(std::path::PathBuf::from("/tmp/x/ycsb-run.svg"))
    );
    let a = Args::try_parse_from([
        "ycsb_load",
        "--workload",
        "none",
        "--plot",
        "/tmp/x/ycsb.svg",
    ])
    .expect("parse");
    assert_eq!(a.run_plot_path(), None, "no run phase, no chart");
    // The run phase alone, or nothing at all.
    let a = Args::try_parse_from(["ycsb_load", "--sweeps-only"]).expect("parse");
    a.options().validate().expect("the run phase alone runs");
    let a =
        Args::try_parse_from(["ycsb_load", "--sweeps-only", "--workload", "none"]).expect("parse");
    let err = a.options().validate().expect_err("nothing to run");
    assert!(err.to_string().contains("--workload none"), "{err}");
    let a = Args::try_parse_from(["ycsb_load", "--operations", "0"]).expect("parse");
    let err = a.options().validate().expect_err("no operations");
    assert!(err.to_string().contains("--operations"), "{err}");

    let a = Args::try_parse_from([
        "ycsb_load",
        "--tasks",
        "1",
        "--modes",
        "coalesce,coalesce-peer",
        "--repeat",
        "3",
        "--sweep",
        "--plot",
        "/tmp/x/ycsb.svg",
    ])
    .expect("parse");
    let o = a.options();
    assert_eq!(o.modes, vec![Mode::Coalesce, Mode::CoalescePeer]);
    assert_eq!(o.order(1), vec![Mode::CoalescePeer, Mode::Coalesce]);
    assert_eq!(o.order(2), o.modes);
    assert_eq!(o.sweep, Some(vec![1, 10, 100, 1000, 10000]));
    assert_eq!(
        a.sweep_plot_path(),
        Some(std::path::PathBuf::from("/tmp/x/ycsb-sweep.svg"))
    );
    assert!(Args::try_parse_from(["ycsb_load", "--modes", "bogus"]).is_err());
    assert!(o.tasks_sweep.is_none() && a.tasks_plot_path().is_none());

    // --tasks-sweep alone: the default task counts; the chart beside --plot.
    let a = Args::try_parse_from([
        "ycsb_load",
        "--tasks-sweep",
        "--sweeps-only",
        "--plot",
        "/tmp/x/ycsb.svg",
        "--records",
        "50000",
    ])
    .expect("parse");
    let o = a.options();
    assert_eq!(o.tasks_sweep, Some(vec![1, 8, 64, 256, 1024]));
    assert!(o.modes.is_empty() && a.modes_for(&Mode::ALL).is_empty());
    o.validate().expect("a sweep alone runs");
    assert_eq!(
        a.tasks_plot_path(),
        Some(std::path::PathBuf::from("/tmp/x/ycsb-tasks.svg"))
    );
    // Rows per point: max(20,000, 100 × tasks), at most --records.
    let rows: Vec<usize> = [1, 8, 64, 256, 1024]
        .iter()
        .map(|&t| o.sweep_records(t))
        .collect();
    assert_eq!(rows, vec![20_000, 20_000, 20_000, 25_600, 50_000]);
    let a = Args::try_parse_from([
        "ycsb_load",
        "--tasks-sweep",
        "2,16",
        "--modes",
        "rewrite-peer",
    ])
    .expect("parse");
    assert_eq!(a.options().tasks_sweep, Some(vec![2, 16]));
    assert_eq!(a.options().modes, vec![Mode::RewritePeer]);
    let bad = Options {
        tasks_sweep: Some(vec![0]),
        ..Options::default()
    };
    assert!(bad.validate().is_err());
    let nothing = Options {
        modes: Vec::new(),
        workloads: Vec::new(),
        ..Options::default()
    };
    assert!(nothing.validate().is_err());
    // --fail-rate: a percentage, and the concurrent modes only.
    let a = Args::try_parse_from(["ycsb_load", "--fail-rate", "5", "--modes", "coalesce"])
        .expect("parse");
    assert_eq!(a.options().fail_rate, Some(5.0));
    assert!(a.options().validate().is_ok());
    let a = Args::try_parse_from(["ycsb_load", "--fail-rate", "5"]).expect("parse");
    assert!(
        a.options().validate().is_err(),
        "every mode with --fail-rate"
    );
    let a = Args::try_parse_from(["ycsb_load", "--fail-rate", "100", "--modes", "coalesce"])
        .expect("parse");
    assert!(a.options().validate().is_err());

    let a = Args::try_parse_from(["ycsb_load", "--bulk-threshold", "off"]).expect("parse");
    assert_eq!(a.options().bulk_threshold, Some(None));
    let a = Args::try_parse_from(["ycsb_load", "--bulk-threshold", "500"]).expect("parse");
    assert_eq!(a.options().bulk_threshold, Some(Some(500)));
    // The old name still works.
    let a = Args::try_parse_from(["ycsb_load", "--copy-threshold", "OFF"]).expect("parse");
    assert_eq!(a.options().bulk_threshold, Some(None));
    let a = Args::try_parse_from(["ycsb_load", "--copy-threshold", "64"]).expect("parse");
    assert_eq!(a.options().bulk_threshold, Some(Some(64)));
    assert_eq!(
        Args::try_parse_from(["ycsb_load"])
            .unwrap()
            .options()
            .bulk_threshold,
        None
    );
    assert!(Args::try_parse_from(["ycsb_load", "--bulk-threshold", "never"]).is_err());
    assert!(Args::try_parse_from(["ycsb_load", "--copy-threshold", "never"]).is_err());

    // --sweep-modes: batchrewrite alone by default; each database runs the
    // listed modes it has, each once.
    let a = Args::try_parse_from(["ycsb_load", "--sweep"]).expect("parse");
    assert_eq!(a.options().sweep_modes, vec![Mode::Batchrewrite]);
    let a = Args::try_parse_from([
        "ycsb_load",
        "--sweep",
        "--sweep-modes",
        "load-data,batchrewrite,copy,rewrite-peer,batch,copy",
    ])
    .expect("parse");
    let pg = a.sweep_modes_for(&<PgTarget as Database>::MODES);
    assert_eq!(
        pg,
        vec![
            Mode::Batchrewrite,
            Mode::Copy,
            Mode::RewritePeer,
            Mode::Batch
        ]
    );
    let my = a.sweep_modes_for(&<MysqlTarget as Database>::MODES);
    assert_eq!(
        my,
        vec![
            Mode::LoadData,
            Mode::Batchrewrite,
            Mode::RewritePeer,
            Mode::Batch
        ]
    );
    let o = Options {
        sweep_modes: pg,
        ..a.options()
    };
    o.validate().expect("every mode sweeps");
    assert!(Args::try_parse_from(["ycsb_load", "--sweep-modes", "bogus"]).is_err());
    for m in ["nobatch", "coalesce", "coalesce-peer"] {
        let a = Args::try_parse_from(["ycsb_load", "--sweep", "--sweep-modes", m]).expect("parse");
        let err = a.options().validate().expect_err(m);
        assert!(err.to_string().contains("--sweep-modes"), "{err}");
    }

    let bad = Options {
        tasks: 0,
        ..Options::default()
    };
    let err = bad.validate().expect_err("tasks 0");
    assert!(err.to_string().contains("--tasks"), "{err}");
}

#[test]
fn cluster_flags() {
    use ycsb::Cluster;
    let parse = |args: &[&str]| {
        let mut all = vec!["ycsb_load"];
        all.extend_from_slice(args);
        Args::try_parse_from(all).expect("parse")
    };
    // Repeated or comma separated: every node's URL, in order.
    let a = parse(&[
        "--db",
        "mariadb",
        "--cluster",
        "galera",
        "--mysql-url",
        "mysql://root@n1/test,mysql://root@n2/test",
        "--mysql-url",
        "mysql://root@n3/test",
    ]);
    assert_eq!(a.cluster, Some(Cluster::Galera));
    assert_eq!(a.mysql_url.len(), 3);
    assert_eq!(a.mysql_url[2], "mysql://root@n3/test");
    assert_eq!(a.check_cluster(), Ok(()));
    assert_eq!(
        parse(&["--db", "postgresql", "--cluster", "pg-sync"]).check_cluster(),
        Ok(())
    );
    assert!(parse(&[]).mysql_url.is_empty());
    // A cluster is its own database's only.
    for (args, needle) in [
        (&["--cluster", "galera"][..], "--db mariadb"),
        (
            &["--db", "mariadb", "--cluster", "pg-sync"][..],
            "--db postgresql",
        ),
        (
            &["--db", "postgresql,mariadb", "--cluster", "galera"][..],
            "and no other",
        ),
        (
            &["--db", "mariadb", "--cluster", "galera", "--tls"][..],
            "no TLS",
        ),
    ] {
        let e = parse(args).check_cluster().expect_err("refused");
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    assert!(Args::try_parse_from(["ycsb_load", "--cluster", "raft"]).is_err());
}

/// The writers of a cluster spread over its nodes: two URLs of one server
/// stand for two nodes (both show the scratch database and every row at
/// once). `coalesce` and `coalesce-peer` get a pool per URL, the counters
/// of both pools add up, and every node's count is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_spread_over_every_url() {
    use ycsb::Cluster;
    let url = common::mysql_url();
    let db = MysqlTarget::create_on(&[url.clone(), url])
        .await
        .expect("scratch database on two nodes");
    let topology = db
        .topology(None)
        .await
        .expect("topology")
        .expect("two nodes");
    assert!(
        topology.contains("2 node(s)")
            && topology.contains("tasks split evenly")
            && topology.contains("the run phase's tasks on the first node"),
        "{topology}"
    );
    // Not one Galera cluster, and not PostgreSQL.
    let e = db
        .topology(Some(Cluster::Galera))
        .await
        .expect_err("no Galera");
    assert!(
        e.to_string().contains("not one ready Galera cluster"),
        "{e}"
    );
    assert!(db.topology(Some(Cluster::PgSync)).await.is_err());
    let setup = ServerSetup {
        throwaway: false,
        fast: common::fast_server(),
        address: db.address(),
        topology: Some(topology),
    };
    let records = 240;
    let opts = Options {
        records,
        batch_size: 50,
        tasks: 6,
        pool_size: 2,
        modes: vec![Mode::Coalesce, Mode::CoalescePeer, Mode::Batchrewrite],
        operations: 200,
        progress: false,
        ..Options::default()
    };
    let report = ycsb::run(&db, &opts, setup).await.expect("bench run");
    for r in &report.results {
        if let Some(l) = &r.latency {
            assert_eq!(l.count, records as u64, "{}", r.mode);
        }
        if let Some(b) = &r.batching {
            assert_eq!(b.rows, records as u64, "{}", r.mode);
        }
    }
    check_run_phase(&report, &[Workload::A], 1);
    let text = report::render_text(&report);
    assert!(
        text.contains("cluster:  not Galera (wsrep off), 2 node(s)"),
        "{text}"
    );

    // Task i writes through node i % 2: each pool gets its tasks' rows.
    db.reset().await.expect("truncate");
    let pool = db
        .batch_pool(1, batchpool::BatchConfig::default())
        .expect("pools");
    use ycsb::modes::RowWriter;
    pool.open(1).await.expect("open");
    let data = Dataset::generate(5, 100, 3).expect("rows");
    for (i, r) in data.rows.iter().enumerate() {
        assert_eq!(pool.for_task(i).insert(r).await.expect("insert"), 1);
    }
    let b = pool.batching().expect("counters");
    assert_eq!(b.rows, 5);
    pool.release().await;
    ycsb::verify_count(&db, 5, "spread").await.expect("5 rows");
    db.cleanup().await;
}

/// `--cluster pg-sync`: a throwaway primary with a synchronous standby;
/// the topology waits for it to stream, every PostgreSQL mode loads on the
/// primary, and the standby has the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sync_pair_runs_every_mode() {
    use ycsb::Cluster;
    let (primary, standby) = tokio::task::spawn_blocking(common::PgServer::start_sync_pair)
        .await
        .expect("start the pair");
    let db = PgTarget::create(&primary.url())
        .await
        .expect("scratch database");
    assert_eq!(db.topology(None).await.expect("no cluster"), None);
    assert!(db.topology(Some(Cluster::Galera)).await.is_err());
    let topology = db
        .topology(Some(Cluster::PgSync))
        .await
        .expect("a synchronous standby")
        .expect("described");
    assert!(topology.contains("(sync)"), "{topology}");
    let setup = ServerSetup {
        throwaway: true,
        fast: false,
        address: db.address(),
        topology: Some(topology),
    };
    let records = 200;
    let opts = Options {
        records,
        batch_size: 50,
        tasks: 8,
        pool_size: 2,
        operations: 200,
        progress: false,
        ..Options::default()
    };
    let report = ycsb::run(&db, &opts, setup).await.expect("bench run");
    let modes: Vec<Mode> = report.results.iter().map(|r| r.mode).collect();
    assert_eq!(modes, PgTarget::MODES.to_vec());
    check_run_phase(&report, &[Workload::A], 1);
    let text = report::render_text(&report);
    assert!(text.contains("synchronous_standby_names=*"), "{text}");
    assert!(text.contains("cluster:  PostgreSQL primary with synchronous standby"));

    // The last load reached the standby (it applies shortly after the
    // flush the commit waited for).
    let dbname = db.config().get_dbname().expect("db name").to_string();
    let mut config: tokio_postgres::Config = standby.url().parse().expect("standby url");
    config.dbname(&dbname);
    let client = connect(&config).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let n: i64 = client
            .query_one("SELECT count(*) FROM usertable", &[])
            .await
            .expect("count on the standby")
            .get(0);
        if n == records as i64 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "standby has {n} rows");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(client);
    db.cleanup().await;
    drop((standby, primary));
}
