//! Runs the `ycsb_load` bench's code path (benches/ycsb) for every mode on a
//! few hundred rows against a real PostgreSQL (and `rewrite-peer`, the sweep
//! and the tasks sweep on a real MariaDB), so the bench cannot silently rot:
//! counts, the report, JSON and SVG. No timing assertions.

use crate::common;
#[path = "../../benches/ycsb/mod.rs"]
mod ycsb;

use batchpool::postgres::Statements;
use clap::Parser;
use ycsb::cli::Args;
use ycsb::modes::Session;
use ycsb::mysql::MysqlTarget;
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
    let text = report::render_text(&report);
    for needle in [
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
        topology.contains("2 node(s)") && topology.contains("tasks split evenly"),
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
        progress: false,
        ..Options::default()
    };
    let report = ycsb::run(&db, &opts, setup).await.expect("bench run");
    let modes: Vec<Mode> = report.results.iter().map(|r| r.mode).collect();
    assert_eq!(modes, PgTarget::MODES.to_vec());
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
