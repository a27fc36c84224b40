//! YCSB load phase through every write path, side by side — the project's
//! main bench:
//!
//! ```text
//! cargo bench --bench ycsb_load                          # 100,000 rows, all modes
//! cargo bench --bench ycsb_load -- --records 20000 --json /tmp/ycsb.json --plot /tmp/ycsb.svg
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
//! ```
//!
//! Without `--pg-url` / `--mysql-url` it starts a throwaway PostgreSQL
//! cluster / MariaDB server (the tests' harness, `tests/common`) and removes
//! it afterwards. See `--help`.
//!
//! Run by `cargo test --benches` (no `--bench` flag, no arguments), it only
//! checks that it works: every mode of both databases on 500 rows, a sweep
//! of every sweep mode at 10 and 100 rows, a tasks sweep of 1 and 4 tasks,
//! and PostgreSQL's again with unnamed statements.

#[path = "../tests/common/mod.rs"]
mod common;
mod ycsb;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use batchpool::postgres::Statements;
use clap::Parser;

use ycsb::cli::{Args, Db};
use ycsb::{Database, Mode, Report, ServerSetup, mysql::MysqlTarget, pg::PgTarget, report};

fn main() -> ExitCode {
    let mut args = Args::parse();
    if !args.bench && std::env::args_os().len() == 1 {
        // `cargo test --benches`: a quick check, not a measurement.
        eprintln!("ycsb_load: test mode (no --bench flag): every mode on 500 rows");
        args.records = 500;
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
    // Several databases: one table each, and file names get `-<db>`.
    let several = args.db.len() > 1;
    for &db in &args.db {
        let report = match db {
            Db::Postgresql => run_db::<PgTarget, _>(args, args.pg_url.as_deref(), throwaway_pg)?,
            Db::Mariadb => {
                run_db::<MysqlTarget, _>(args, args.mysql_url.as_deref(), throwaway_mariadb)?
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
/// URL; with `--tls`, TLS on and the URL asking for it.
fn throwaway_pg(args: &Args) -> (common::PgServer, String) {
    eprintln!("ycsb_load: starting a throwaway PostgreSQL cluster...");
    if args.tls {
        let server = common::PgServer::start_tls(&[]);
        let url = format!("{}?sslmode=require", server.url());
        return (server, url);
    }
    let server = common::PgServer::start(&[]);
    let url = server.url();
    (server, url)
}

/// A throwaway MariaDB server (stopped and removed when dropped), its URL;
/// with `--tls`, TLS on and the URL asking for it (mysql_async's own
/// parameters: the peers use the same URL).
fn throwaway_mariadb(args: &Args) -> (common::MysqlServer, String) {
    eprintln!("ycsb_load: starting a throwaway MariaDB server...");
    if args.tls {
        let server = common::MysqlServer::start_tls(&[]);
        let url = format!(
            "{}?require_ssl=true&verify_ca=false&verify_identity=false&prefer_socket=false",
            server.url()
        );
        return (server, url);
    }
    let server = common::MysqlServer::start(&[]);
    let url = if args.mysql_tcp {
        format!("{}?prefer_socket=false", server.url())
    } else {
        server.url()
    };
    (server, url)
}

/// Runs the modes of database `D`: on `given_url`, or on a throwaway server
/// from `throwaway`, which is started (blocking) before the runtime and
/// dropped (stopped, its directory removed) after it.
fn run_db<D: Database, S>(
    args: &Args,
    given_url: Option<&str>,
    throwaway: fn(&Args) -> (S, String),
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
    let (server, url) = match given_url {
        Some(url) => (None, url.to_string()),
        None => {
            let (server, url) = throwaway(args);
            (Some(server), url)
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let mut db = D::create(&url).await?;
        db.set_bulk_threshold(opts.bulk_threshold);
        if let Err(e) = db.set_statements(args.statements) {
            db.cleanup().await;
            return Err(e);
        }
        let setup = ServerSetup {
            throwaway: server.is_some(),
            fast: server.is_some() && common::fast_server(),
            address: db.address(),
        };
        let report = ycsb::run(&db, &opts, setup).await;
        db.cleanup().await;
        report
    });
    drop(runtime);
    drop(server);
    result
}
