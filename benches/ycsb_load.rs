//! YCSB load phase through every write path, side by side, then the run
//! phase's workloads through batchpool and the plain pool — the project's
//! main bench:
//!
//! ```text
//! cargo bench --bench ycsb_load                          # 100,000 rows, all modes, workload A
//! cargo bench --bench ycsb_load -- --records 20000 --json /tmp/ycsb.json --plot /tmp/ycsb.svg
//! cargo bench --bench ycsb_load -- --workload a,b,c,f --operations 200000
//! cargo bench --bench ycsb_load -- --sweeps-only --workload a,f       # the run phase alone
//! cargo bench --bench ycsb_load -- --workload none                   # the load alone
//! cargo bench --bench ycsb_load -- --tasks 1 --modes coalesce,coalesce-peer
//! cargo bench --bench ycsb_load -- --sweep --modes nobatch,copy
//! cargo bench --bench ycsb_load -- --db mariadb --sweeps-only --sweep \
//!     --sweep-modes batchrewrite,rewrite-peer,batch,load-data --records 20000
//! cargo bench --bench ycsb_load -- --bulk-threshold off --modes batchrewrite,rewrite-peer
//! cargo bench --bench ycsb_load -- --tasks-sweep 1,8,64,256,1024 --sweeps-only --plot /tmp/ycsb.svg
//! cargo bench --bench ycsb_load -- --modes batchrewrite,rewrite-peer --repeat 3
//! cargo bench --bench ycsb_load -- --db mariadb                     # MariaDB's seven modes
//! cargo bench --bench ycsb_load -- --db postgresql,mariadb --mysql-url mysql://root@127.0.0.1/test
//! cargo bench --bench ycsb_load -- --statements unnamed             # no named statements
//! cargo bench --bench ycsb_load -- --tls                            # throwaway servers with TLS
//! cargo bench --bench ycsb_load -- --pg-url 'postgresql://app@db.example.com/app?sslmode=verify-full'
//! cargo bench --bench ycsb_load -- --pg-url postgresql://postgres@127.0.0.1:6432/postgres \
//!     --statements unnamed                                          # through PgBouncer
//! cargo bench --bench ycsb_load -- --db mariadb --cluster galera --tasks-sweep 64,1024
//! cargo bench --bench ycsb_load -- --db mariadb --cluster galera \
//!     --mysql-url mysql://root@node1/test,mysql://root@node2/test,mysql://root@node3/test
//! cargo bench --bench ycsb_load -- --db postgresql --cluster pg-sync --repeat 3
//! ```
//!
//! Without `--pg-url` / `--mysql-url` it starts a throwaway PostgreSQL
//! cluster / MariaDB server (the tests' harness, `tests/common`) and removes
//! it afterwards; with `--cluster galera` a throwaway 3-node Galera cluster
//! (`common::galera_cluster`, removed when the bench exits), with
//! `--cluster pg-sync` a throwaway primary and synchronous standby
//! (`common::PgServer::standby_of`). See `--help`.
//!
//! Run by `cargo test --benches` (no `--bench` flag, no arguments), it only
//! checks that it works: every mode of both databases on 500 rows, every
//! workload on 500 operations, a sweep of every sweep mode at 10 and 100
//! rows, a tasks sweep of 1 and 4 tasks, and PostgreSQL's again with
//! unnamed statements.

// A bench uses only part of the test harness.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/common/mod.rs"]
mod common;
mod ycsb;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use batchpool::postgres::Statements;
use clap::Parser;

use ycsb::cli::{Args, Db};
use ycsb::{
    Cluster, Database, Mode, Report, ServerSetup, mysql::MysqlTarget, pg::PgTarget, report,
};

fn main() -> ExitCode {
    let mut args = Args::parse();
    if !args.bench && std::env::args_os().len() == 1 {
        // `cargo test --benches`: a quick check, not a measurement.
        eprintln!(
            "ycsb_load: test mode (no --bench flag): every mode on 500 rows, every workload on 500 operations"
        );
        args.records = 500;
        args.operations = 500;
        args.workload = ycsb::cli::Workloads(ycsb::ops::Workload::ALL.to_vec());
        args.batch_size = 100;
        args.no_progress = true;
        args.tasks_sweep = Some(vec![1, 4]);
        args.sweep = true;
        args.sweep_sizes = vec![10, 100];
        args.sweep_modes = [
            Mode::Batchrewrite,
            Mode::RewritePeer,
            Mode::Batch,
            Mode::Copy,
            Mode::LoadData,
        ]
        .to_vec();
        args.sweep_min_records = 100;
        args.db = vec![Db::Postgresql, Db::Mariadb];
        ycsb::statements::self_check();
        let unnamed = Args {
            db: vec![Db::Postgresql],
            statements: Some(Statements::Unnamed),
            ..args.clone()
        };
        if let Err(code) = report_failure(run(&unnamed)) {
            return code;
        }
    }
    match report_failure(run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// Prints a failed run's error chain.
fn report_failure(result: ycsb::Result<()>) -> Result<(), ExitCode> {
    result.map_err(|e| {
        eprintln!("ycsb_load: FAILED: {}", ycsb::error_chain(&*e));
        ExitCode::FAILURE
    })
}

fn run(args: &Args) -> ycsb::Result<()> {
    args.check_cluster().map_err(ycsb::fail)?;
    // Several databases: one table each, and file names get `-<db>`.
    let several = args.db.len() > 1;
    for &db in &args.db {
        let report = match db {
            Db::Postgresql => {
                let given: Vec<String> = args.pg_url.iter().cloned().collect();
                run_db::<PgTarget, _>(args, given, throwaway_pg)?
            }
            Db::Mariadb => {
                run_db::<MysqlTarget, _>(args, args.mysql_url.clone(), throwaway_mariadb)?
            }
        };
        let path_for = |p: &Path| {
            if several {
                with_suffix(p, &db.to_string())
            } else {
                p.to_path_buf()
            }
        };
        print!("{}", report::render_text(&report));
        if let Some(path) = &args.json {
            let path = path_for(path);
            report::write_json(&report, &path)?;
            eprintln!("ycsb_load: wrote {}", path.display());
        }
        if let Some(path) = &args.plot {
            if !report.results.is_empty() {
                let path = path_for(path);
                report::plot_modes(&report, &path)?;
                eprintln!("ycsb_load: wrote {}", path.display());
            }
        }
        if let Some(path) = args
            .run_plot_path()
            .filter(|_| !report.run_phase.is_empty())
        {
            let path = path_for(&path);
            report::plot_run(&report, &path)?;
            eprintln!("ycsb_load: wrote {}", path.display());
        }
        if let Some(path) = args.sweep_plot_path().filter(|_| !report.sweep.is_empty()) {
            let path = path_for(&path);
            report::plot_sweep(&report, &path)?;
            eprintln!("ycsb_load: wrote {}", path.display());
        }
        if let Some(path) = args.tasks_plot_path() {
            let path = path_for(&path);
            report::plot_tasks(&report, &path)?;
            eprintln!("ycsb_load: wrote {}", path.display());
        }
    }
    Ok(())
}

/// `dir/name.ext` → `dir/name-suffix.ext`.
fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let stem = p
        .file_stem()
        .map_or_else(|| "ycsb".to_string(), |s| s.to_string_lossy().into_owned());
    let name = match p.extension() {
        Some(ext) => format!("{stem}-{suffix}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{suffix}"),
    };
    p.with_file_name(name)
}

/// A throwaway PostgreSQL cluster (stopped and removed when dropped), its
/// URL; with `--tls`, TLS on and the URL asking for it. With `--cluster
/// pg-sync`, a primary whose commits wait for its synchronous streaming
/// standby (`synchronous_standby_names='*'`, `synchronous_commit=on`), and
/// that standby (a base backup of it); the URL is the primary's.
fn throwaway_pg(args: &Args) -> (Vec<common::PgServer>, Vec<String>) {
    if args.cluster == Some(Cluster::PgSync) {
        eprintln!("ycsb_load: starting a throwaway PostgreSQL primary and synchronous standby...");
        let (primary, standby) = common::PgServer::start_sync_pair();
        let url = primary.url();
        // The standby first: its drop stops it before the primary's.
        return (vec![standby, primary], vec![url]);
    }
    eprintln!("ycsb_load: starting a throwaway PostgreSQL cluster...");
    if args.tls {
        let server = common::PgServer::start_tls(&[]);
        let url = format!("{}?sslmode=require", server.url());
        return (vec![server], vec![url]);
    }
    let server = common::PgServer::start(&[]);
    let url = server.url();
    (vec![server], vec![url])
}

/// A throwaway MariaDB server (stopped and removed when dropped), its URL;
/// with `--tls`, TLS on and the URL asking for it (mysql_async's own
/// parameters: the peers use the same URL). With `--cluster galera`, the
/// harness' 3-node Galera cluster (removed when the process exits) and
/// every node's URL.
fn throwaway_mariadb(args: &Args) -> (Option<common::MysqlServer>, Vec<String>) {
    let tcp = |url: String| {
        if args.mysql_tcp {
            format!("{url}?prefer_socket=false")
        } else {
            url
        }
    };
    if args.cluster == Some(Cluster::Galera) {
        eprintln!("ycsb_load: starting a throwaway 3-node MariaDB Galera cluster...");
        let cluster = common::galera_cluster();
        return (None, cluster.urls().into_iter().map(tcp).collect());
    }
    eprintln!("ycsb_load: starting a throwaway MariaDB server...");
    if args.tls {
        let server = common::MysqlServer::start_tls(&[]);
        let url = format!(
            "{}?require_ssl=true&verify_ca=false&verify_identity=false&prefer_socket=false",
            server.url()
        );
        return (Some(server), vec![url]);
    }
    let server = common::MysqlServer::start(&[]);
    let url = tcp(server.url());
    (Some(server), vec![url])
}

/// Runs the modes of database `D`: on the `given` URLs (one server, or the
/// nodes of a cluster), or on a throwaway server from `throwaway`, which is
/// started (blocking) before the runtime and dropped (stopped, its
/// directory removed) after it.
fn run_db<D: Database, S>(
    args: &Args,
    given: Vec<String>,
    throwaway: fn(&Args) -> (S, Vec<String>),
) -> ycsb::Result<Report> {
    let mut opts = args.options();
    opts.modes = args.modes_for(&D::MODES);
    opts.sweep_modes = args.sweep_modes_for(&D::MODES);
    if opts.sweep.is_some() && opts.sweep_modes.is_empty() {
        eprintln!(
            "ycsb_load: {} has none of --sweep-modes: no sweep there",
            D::NAME
        );
        opts.sweep = None;
    }
    opts.validate()?;
    let (server, urls) = if given.is_empty() {
        let (server, urls) = throwaway(args);
        (Some(server), urls)
    } else {
        (None, given)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let mut db = D::create_on(&urls).await?;
        db.set_bulk_threshold(opts.bulk_threshold);
        if let Err(e) = db.set_statements(args.statements) {
            db.cleanup().await;
            return Err(e);
        }
        let topology = match db.topology(args.cluster).await {
            Ok(t) => t,
            Err(e) => {
                db.cleanup().await;
                return Err(e);
            }
        };
        let setup = ServerSetup {
            throwaway: server.is_some(),
            fast: server.is_some() && common::fast_server(),
            address: db.address(),
            topology,
        };
        let report = ycsb::run(&db, &opts, setup).await;
        db.cleanup().await;
        report
    });
    drop(runtime);
    drop(server);
    result
}
