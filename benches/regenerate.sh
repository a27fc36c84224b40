#!/usr/bin/env bash
# Regenerates the figures of benches/BENCHMARKS.md on the machine at hand.
#
#   benches/regenerate.sh                    # every case, one after the other
#   benches/regenerate.sh main pg64 galera   # only these cases
#   benches/regenerate.sh --list             # the cases and their commands
#   benches/regenerate.sh --out DIR main     # results to DIR (default: target/bench-results)
#   BENCH_QUICK=1 benches/regenerate.sh main # a smoke run: small sizes, one run each
#   benches/regenerate.sh --summary          # the summary of the results already in the dir
#
# Each case runs the bench commands of one section of BENCHMARKS.md (the
# section's `<!-- case: NAME -->` marks its table) against throwaway servers
# the benches start and remove themselves (PG_URL, MYSQL_URL and
# PGBOUNCER_URL are unset for the benches, so nothing runs against a server
# of yours). Every command's output goes to DIR: NAME.txt (stdout: the
# bench's tables), NAME.log (stderr: cargo and the bench's progress),
# NAME.cmd (the command) and, for ycsb_load, NAME.json (NAME-postgresql.json
# and NAME-mariadb.json for both databases). machine.txt records the machine;
# summary.md (also printed at the end) the headline figures of each case
# that ran, read from those files (python3; skipped without it).
#
# The commands in BENCHMARKS.md are these without the output flags the
# script adds (`--no-progress --json FILE`). A failing command is reported
# and the other cases still run; the exit status is then 1.
#
# `pgbouncer` needs PgBouncer (`pgbouncer` on PATH or /usr/sbin) and the
# PostgreSQL server binaries (`initdb`, `pg_ctl`): it starts a throwaway
# server and a PgBouncer in transaction mode in front of it, or uses
# BENCH_PG_URL (direct) and BENCH_PGBOUNCER_URL (the same server through a
# PgBouncer with a `* = host=... port=...` database entry) when both are set.
# `galera` needs MariaDB's Galera (`galera-4`, rsync), `pgsync` pg_basebackup.
#
# The whole set takes about 60-75 minutes on a 2-core machine (most of it
# `run`, `tasks`, `sizes`, `galera` and the engine's criterion groups),
# plus the first build of each bench.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/target/bench-results}
QUICK=${BENCH_QUICK:-0}
DRY=0
FAILED=()

# Every case, in the order of BENCHMARKS.md, with its question.
CASES=(main pg64 pg1024 tasks failrate mariadb-batch pg-bulk sizes galera pgsync
    pgbouncer onecaller http run run1 tls engine memory storm learn)
declare -A ABOUT=(
    [main]="YCSB load, every write path, PostgreSQL and MariaDB"
    [pg64]="PostgreSQL coalesce vs coalesce-peer, 64 tasks, pool 8"
    [pg1024]="PostgreSQL coalesce at 1,024 tasks vs one binary COPY stream, CPU per row"
    [tasks]="coalesce vs coalesce-peer by callers (1 to 1,024 tasks), both databases"
    [failrate]="failing rows: --fail-rate 1 and 5 vs none, statements added per failing row"
    [mariadb-batch]="MariaDB batchrewrite vs exec_batch and LOAD DATA, bulk command on and off"
    [pg-bulk]="PostgreSQL batchrewrite vs hand-written VALUES and one COPY stream, COPY on and off"
    [sizes]="rows/s by statement size, both databases"
    [galera]="3-node MariaDB Galera: coalesce vs coalesce-peer, rows per statement"
    [pgsync]="PostgreSQL with a synchronous standby: coalesce vs coalesce-peer"
    [pgbouncer]="PostgreSQL through PgBouncer (transaction mode) vs direct"
    [onecaller]="one caller: p50 of coalesce vs coalesce-peer"
    [http]="HTTP: axum + batchpool vs axum + deadpool-postgres, 256 clients"
    [run]="YCSB run phase, workloads A, B, C, F, 64 tasks, both databases"
    [run1]="YCSB run phase, one task: p50 per operation, both databases"
    [tls]="TLS vs plain TCP, both databases"
    [engine]="CPU per row of each write path (criterion, no server but one group)"
    [memory]="heap bytes per pending caller"
    [storm]="insert_storm: explicit vs elided vs coalesced transactions, 25 threads"
    [learn]="server cost of re-learning statement texts (catalog queries, prepares per second)"
)

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

# Sizes: the figure as documented, or a small one with BENCH_QUICK=1.
rows() { if [[ $QUICK == 1 ]]; then echo $(($1 / 20 > 1000 ? $1 / 20 : 1000)); else echo "$1"; fi; }
repeat() { if [[ $QUICK == 1 ]]; then echo 1; else echo 3; fi; }

# A command as one shell-readable line.
show() {
    local out=() a plain='^[A-Za-z0-9_./:=,@%+$-]+$'
    for a in "$@"; do
        if [[ $a =~ $plain ]]; then out+=("$a"); else out+=("'${a//\'/\'\\\'\'}'"); fi
    done
    echo "${out[*]}"
}

# run NAME COMMAND...: runs COMMAND in the repository, stdout to NAME.txt,
# stderr to NAME.log; a failure is recorded, not fatal.
run() {
    local name=$1
    shift
    if [[ $DRY == 1 ]]; then
        echo "    $(show "$@")"
        return 0
    fi
    show "$@" >"$OUT/$name.cmd"
    echo "== $name: $(show "$@")" >&2
    local start=$SECONDS rc=0
    (cd "$ROOT" && env -u PG_URL -u MYSQL_URL -u PGBOUNCER_URL "$@") >"$OUT/$name.txt" 2>"$OUT/$name.log" || rc=$?
    if [[ $rc == 0 ]]; then
        echo "   done in $((SECONDS - start)) s" >&2
    else
        echo "   FAILED (exit $rc) after $((SECONDS - start)) s: see $OUT/$name.log" >&2
        FAILED+=("$name")
    fi
}

# ycsb NAME ARGS...: the main bench with ARGS, its JSON report beside the text.
ycsb() {
    local name=$1
    shift
    run "$name" cargo bench --bench ycsb_load -- "$@" --no-progress --json "$OUT/$name.json"
}

case_main() {
    ycsb main --db postgresql,mariadb --records "$(rows 20000)" --repeat "$(repeat)" \
        --workload none --plot "$OUT/main.svg"
}

case_pg64() {
    ycsb pg64 --records "$(rows 40000)" --modes coalesce,coalesce-peer --repeat "$(repeat)" --workload none
}

case_pg1024() {
    ycsb pg1024 --records "$(rows 100000)" --tasks 1024 --modes coalesce,copy --repeat "$(repeat)" \
        --cpu --workload none
}

case_tasks() {
    local points=1,8,64,256,1024
    [[ $QUICK == 1 ]] && points=1,64
    ycsb tasks --db postgresql,mariadb --tasks-sweep "$points" --sweeps-only --repeat "$(repeat)" \
        --records "$(rows 100000)" --workload none
}

case_failrate() {
    local rate
    for rate in 0 1 5; do
        local flag=()
        [[ $rate != 0 ]] && flag=(--fail-rate "$rate")
        ycsb "failrate-$rate" --db postgresql,mariadb --records "$(rows 40000)" \
            --modes coalesce,coalesce-peer --repeat "$(repeat)" --workload none "${flag[@]}"
    done
}

case_mariadb_batch() {
    local modes=batchrewrite,rewrite-peer,batch,load-data
    ycsb mariadb-batch --db mariadb --records "$(rows 20000)" --modes "$modes" --repeat "$(repeat)" --workload none
    ycsb mariadb-batch-off --db mariadb --records "$(rows 20000)" --modes "$modes" --repeat "$(repeat)" \
        --workload none --bulk-threshold off
}

case_pg_bulk() {
    local modes=batchrewrite,rewrite-peer,copy
    ycsb pg-bulk --records "$(rows 100000)" --modes "$modes" --repeat "$(repeat)" --workload none
    ycsb pg-bulk-off --records "$(rows 100000)" --modes "$modes" --repeat "$(repeat)" --workload none \
        --bulk-threshold off
}

case_sizes() {
    local sizes=1,10,100,1000,10000
    [[ $QUICK == 1 ]] && sizes=10,1000
    local common=(--records "$(rows 20000)" --sweeps-only --sweep --sweep-sizes "$sizes" --repeat "$(repeat)" --workload none)
    ycsb sizes-mariadb --db mariadb "${common[@]}" --sweep-modes batchrewrite,rewrite-peer,batch,load-data
    ycsb sizes-mariadb-off --db mariadb "${common[@]}" --sweep-modes batchrewrite --bulk-threshold off
    ycsb sizes-postgresql "${common[@]}" --sweep-modes batchrewrite,rewrite-peer,copy
    ycsb sizes-postgresql-off "${common[@]}" --sweep-modes batchrewrite --bulk-threshold off
}

case_galera() {
    ycsb galera --db mariadb --cluster galera --records "$(rows 10000)" --repeat "$(repeat)" \
        --tasks-sweep 64,1024 --workload none
}

case_pgsync() {
    ycsb pgsync --db postgresql --cluster pg-sync --records "$(rows 10000)" --repeat "$(repeat)" \
        --tasks-sweep 64,1024 --workload none
}

# A throwaway PostgreSQL server and a PgBouncer in transaction mode in front
# of it, in a temp dir removed on exit; sets DIRECT_URL and BOUNCER_URL.
BOUNCER_DIR=
stop_bouncer() {
    [[ -n $BOUNCER_DIR && -d $BOUNCER_DIR ]] || return 0
    if [[ -f $BOUNCER_DIR/pgbouncer.pid ]]; then
        kill "$(cat "$BOUNCER_DIR/pgbouncer.pid")" 2>/dev/null || true
    fi
    as_postgres pg_ctl -D "$BOUNCER_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$BOUNCER_DIR"
    BOUNCER_DIR=
}
as_postgres() {
    if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
free_port() { echo $((20000 + RANDOM % 30000)); }
start_bouncer() {
    local bouncer pgbin
    bouncer=$(command -v pgbouncer || true)
    [[ -z $bouncer && -x /usr/sbin/pgbouncer ]] && bouncer=/usr/sbin/pgbouncer
    pgbin=$(command -v initdb || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | tail -1 || true)
    if [[ -z $bouncer || -z $pgbin ]]; then
        echo "   pgbouncer: needs pgbouncer and initdb (apt-get install pgbouncer postgresql), or" \
            "BENCH_PG_URL and BENCH_PGBOUNCER_URL" >&2
        return 1
    fi
    pgbin=$(dirname "$pgbin")
    BOUNCER_DIR=$(mktemp -d /tmp/bp-bench-pgbouncer.XXXXXX)
    trap stop_bouncer EXIT
    [[ $(id -u) == 0 ]] && chown postgres "$BOUNCER_DIR"
    local port bport
    port=$(free_port)
    bport=$((port + 1))
    as_postgres "$pgbin/initdb" -D "$BOUNCER_DIR/data" -U postgres -A trust >"$BOUNCER_DIR/initdb.log" 2>&1
    as_postgres "$pgbin/pg_ctl" -D "$BOUNCER_DIR/data" -l "$BOUNCER_DIR/postgres.log" -w \
        -o "-p $port -k $BOUNCER_DIR -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=200" \
        start >/dev/null
    as_postgres tee "$BOUNCER_DIR/users.txt" >/dev/null <<<'"postgres" ""'
    as_postgres tee "$BOUNCER_DIR/pgbouncer.ini" >/dev/null <<EOF
[databases]
* = host=127.0.0.1 port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $BOUNCER_DIR/users.txt
pool_mode = transaction
server_reset_query =
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
logfile = $BOUNCER_DIR/pgbouncer.log
pidfile = $BOUNCER_DIR/pgbouncer.pid
EOF
    as_postgres "$bouncer" -d "$BOUNCER_DIR/pgbouncer.ini"
    sleep 1
    DIRECT_URL="postgresql://postgres@127.0.0.1:$port/postgres?sslmode=disable"
    BOUNCER_URL="postgresql://postgres@127.0.0.1:$bport/postgres"
}

case_pgbouncer() {
    DIRECT_URL=${BENCH_PG_URL:-}
    BOUNCER_URL=${BENCH_PGBOUNCER_URL:-}
    if [[ -z $DIRECT_URL || -z $BOUNCER_URL ]]; then
        if [[ $DRY == 1 ]]; then
            echo "    # a throwaway server and PgBouncer (pool_mode = transaction, default_pool_size = 20) in front of it"
            DIRECT_URL='$DIRECT_URL'
            BOUNCER_URL='$BOUNCER_URL'
        elif ! start_bouncer; then
            echo "   pgbouncer: SKIPPED" >&2
            FAILED+=(pgbouncer)
            return 0
        fi
    fi
    local args=(--records "$(rows 20000)" --repeat "$(repeat)" --modes batchrewrite,coalesce,coalesce-peer --workload none)
    ycsb pgbouncer-through --pg-url "$BOUNCER_URL" "${args[@]}"
    ycsb pgbouncer-direct --pg-url "$DIRECT_URL" "${args[@]}"
    [[ $DRY == 1 ]] || stop_bouncer
}

case_onecaller() {
    ycsb onecaller --db postgresql,mariadb --tasks 1 --records "$(rows 5000)" --repeat "$(repeat)" \
        --modes coalesce,coalesce-peer --workload none
}

case_http() {
    local size=()
    [[ $QUICK == 1 ]] && size=(--requests 2000 --warmup 200)
    run http cargo bench --bench http_load -- --clients 256 "${size[@]}"
}

case_run() {
    local size=()
    [[ $QUICK == 1 ]] && size=(--records 2000 --operations 2000)
    ycsb run --db postgresql,mariadb --sweeps-only --workload a,b,c,f --repeat "$(repeat)" "${size[@]}"
}

case_run1() {
    local size=(--operations 5000)
    [[ $QUICK == 1 ]] && size=(--records 2000 --operations 500)
    ycsb run1 --db postgresql,mariadb --sweeps-only --workload a,c,f --tasks 1 "${size[@]}" --repeat "$(repeat)"
}

case_tls() {
    local args=(--records "$(rows 20000)" --repeat "$(repeat)" --db postgresql,mariadb
        --modes batchrewrite,coalesce,coalesce-peer,copy,load-data --workload none)
    ycsb tls-plain "${args[@]}" --mysql-tcp
    ycsb tls "${args[@]}" --tls
}

case_engine() {
    local quick=()
    [[ $QUICK == 1 ]] && quick=(--warm-up-time 0.2 --measurement-time 0.5)
    run engine cargo bench --features bench --bench engine -- "${quick[@]}"
    run engine-metrics cargo bench --features bench,metrics --bench engine -- counting "${quick[@]}"
}

case_memory() {
    local size=()
    [[ $QUICK == 1 ]] && size=(--callers 1000)
    run memory cargo bench --bench pending_memory -- "${size[@]}"
}

case_storm() {
    local size=(--count 400 --rounds 3)
    [[ $QUICK == 1 ]] && size=(--count 40 --rounds 1)
    run storm cargo bench --bench insert_storm -- "${size[@]}" --json "$OUT/storm.json"
}

case_learn() {
    local secs=60
    [[ $QUICK == 1 ]] && secs=5
    run learn cargo bench --profile dev --bench learn_cost -- --seconds "$secs"
}

# The machine the figures come from.
record_machine() {
    {
        echo "date:     $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
        echo "cores:    $(nproc)"
        echo "cpu:      $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
        echo "memory:   $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
        echo "os:       $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}")"
        echo "kernel:   $(uname -sr)"
        echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the start"
        echo "commit:   $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo ?)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
        echo "rustc:    $(rustc --version 2>/dev/null || echo ?)"
        echo "postgres: $( (command -v postgres >/dev/null && postgres --version) || ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null | tail -1 || echo ?)"
        echo "mariadb:  $( (command -v mariadbd >/dev/null && mariadbd --version) || (test -x /usr/sbin/mariadbd && /usr/sbin/mariadbd --version) || echo ?)"
        echo "quick:    $QUICK (BENCH_QUICK)"
        echo "cases:    $*"
    } >"$OUT/machine.txt"
}

# The headline figures of each case that has results in $OUT, as markdown.
summarize() {
    if ! command -v python3 >/dev/null; then
        echo "(no python3: no summary; the raw results are in $OUT)" >&2
        return 0
    fi
    python3 - "$OUT" "$@" <<'PYTHON' || echo "(the summary failed; the raw results are in $OUT)" >&2
import json, os, re, sys

out, cases = sys.argv[1], sys.argv[2:]


def load(name):
    """[(db, report)] of NAME.json, or NAME-postgresql.json / NAME-mariadb.json."""
    found = []
    for suffix in ("", "-postgresql", "-mariadb"):
        path = os.path.join(out, f"{name}{suffix}.json")
        if os.path.exists(path):
            try:
                with open(path) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                continue
            db = suffix[1:] or r.get("server", {}).get("database", "?")
            found.append((db, r))
    return found


def text(name):
    try:
        with open(os.path.join(out, f"{name}.txt")) as f:
            return f.read()
    except OSError:
        return ""


def n(v):
    return "-" if v is None else f"{v:,.0f}"


def x(a, b):
    return "-" if not a or not b else f"{a / b:.2f}×"


def mode(r, m):
    return next((e for e in r.get("results", []) if e.get("mode") == m), None)


def rate(r, m):
    e = mode(r, m)
    return e and e.get("rows_per_sec")


def bulk(r):
    return rate(r, "copy") or rate(r, "load-data")


def per_stmt(e):
    b = e and e.get("batching")
    return "-" if not b else f"{b.get('rows_per_statement', 0):.1f}"


def p(e, q):
    lat = e and e.get("latency")
    return lat and lat.get(q)


MODES = ["nobatch", "batch", "batchrewrite", "rewrite-peer", "coalesce", "coalesce-peer"]


def s_main(name="main"):
    lines = ["| database | " + " | ".join(MODES) + " | copy / load-data | coalesce ÷ peer | batchrewrite ÷ rewrite-peer | batchrewrite ÷ bulk |",
             "|---|" + "---:|" * (len(MODES) + 4)]
    for db, r in load(name):
        lines.append(f"| {db} | " + " | ".join(n(rate(r, m)) for m in MODES)
                     + f" | {n(bulk(r))} | {x(rate(r, 'coalesce'), rate(r, 'coalesce-peer'))}"
                     + f" | {x(rate(r, 'batchrewrite'), rate(r, 'rewrite-peer'))} | {x(rate(r, 'batchrewrite'), bulk(r))} |")
    return lines


def pair(name, peer="coalesce-peer"):
    lines = [f"| database | coalesce | {peer} | ratio | coalesce p50 µs | p99 µs | {peer} p50 µs | p99 µs | rows/statement |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for db, r in load(name):
        c, q = mode(r, "coalesce"), mode(r, peer)
        lines.append(f"| {db} | {n(rate(r, 'coalesce'))} | {n(rate(r, peer))} | {x(rate(r, 'coalesce'), rate(r, peer))}"
                     f" | {n(p(c, 'p50_us'))} | {n(p(c, 'p99_us'))} | {n(p(q, 'p50_us'))} | {n(p(q, 'p99_us'))} | {per_stmt(c)} |")
    return lines


def s_pg1024():
    lines = pair("pg1024", "copy")
    cpu = [l.strip() for l in text("pg1024").splitlines() if "µs/row" in l]
    if cpu:
        lines += ["", "CPU per run (`--cpu`):", "", "```"] + cpu + ["```"]
    return lines


def tasks_points(r):
    return [f"| {t['tasks']:,} | {t['records']:,} | {n(t['coalesce']['rows_per_sec'])} | {n(t['peer']['rows_per_sec'])}"
            f" | {t['ratio']:.2f}× | {t['coalesce']['p99_us']:,} | {t['peer']['p99_us']:,} | {t['p99_ratio']:.2f}×"
            f" | {per_stmt(t['coalesce'])} |" for t in r.get("tasks_sweep", [])]


def s_tasks(name="tasks"):
    lines = []
    for db, r in load(name):
        lines += [f"{db}:", "", "| tasks | records | coalesce | peer | ratio | p99 µs | peer p99 µs | p99 ratio | rows/statement |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"] + tasks_points(r) + [""]
    return lines


def s_failrate():
    lines = ["| database | --fail-rate | coalesce | × of 0 % | p99 µs | coalesce-peer | failing rows | added statements per failing row |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    base = {db: rate(r, "coalesce") for db, r in load("failrate-0")}
    for pct in ("0", "1", "5"):
        for db, r in load(f"failrate-{pct}"):
            c = mode(r, "coalesce")
            b = (c or {}).get("batching") or {}
            failed = b.get("rows_failed", 0)
            added = f"{b.get('split_statements', 0) / failed:.2f}" if failed else "-"
            lines.append(f"| {db} | {pct} | {n(rate(r, 'coalesce'))} | {x(rate(r, 'coalesce'), base.get(db))}"
                         f" | {n(p(c, 'p99_us'))} | {n(rate(r, 'coalesce-peer'))} | {failed:,} | {added} |")
    return lines


def s_bulk(names, ref):
    lines = ["| run | batchrewrite | rewrite-peer | " + " | ".join(ref) + " | ÷ rewrite-peer | ÷ " + ref[0] + " |",
             "|---|---:|---:|" + "---:|" * len(ref) + "---:|---:|"]
    for name in names:
        for db, r in load(name):
            lines.append(f"| {name} | {n(rate(r, 'batchrewrite'))} | {n(rate(r, 'rewrite-peer'))} | "
                         + " | ".join(n(rate(r, m)) for m in ref)
                         + f" | {x(rate(r, 'batchrewrite'), rate(r, 'rewrite-peer'))} | {x(rate(r, 'batchrewrite'), rate(r, ref[0]))} |")
    return lines


def s_sizes():
    lines = []
    for name in ("sizes-mariadb", "sizes-mariadb-off", "sizes-postgresql", "sizes-postgresql-off"):
        for db, r in load(name):
            pts = r.get("sweep", [])
            modes = list(dict.fromkeys(s["mode"] for s in pts))
            sizes = list(dict.fromkeys(s["batch_size"] for s in pts))
            get = {(s["mode"], s["batch_size"]): s["rows_per_sec"] for s in pts}
            lines += [f"{name}:", "", "| size | " + " | ".join(modes) + " |", "|---:|" + "---:|" * len(modes)]
            lines += [f"| {z:,} | " + " | ".join(n(get.get((m, z))) for m in modes) + " |" for z in sizes] + [""]
    return lines


def s_cluster(name):
    lines = pair(name)
    for db, r in load(name):
        lines += ["", f"batchrewrite ÷ nobatch: {x(rate(r, 'batchrewrite'), rate(r, 'nobatch'))}", "",
                  "| tasks | records | coalesce | peer | ratio | p99 µs | peer p99 µs | p99 ratio | rows/statement |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"] + tasks_points(r)
    return lines


def s_pgbouncer():
    through, direct = dict(load("pgbouncer-through")), dict(load("pgbouncer-direct"))
    lines = ["| mode | through PgBouncer | direct | through ÷ direct |", "|---|---:|---:|---:|"]
    for t, d in zip(through.values(), direct.values()):
        for m in ("batchrewrite", "coalesce", "coalesce-peer"):
            lines.append(f"| {m} | {n(rate(t, m))} | {n(rate(d, m))} | {x(rate(t, m), rate(d, m))} |")
    return lines


def s_onecaller():
    lines = ["| database | coalesce p50 µs | peer p50 µs | p50 ratio | coalesce p99 µs | peer p99 µs |", "|---|---:|---:|---:|---:|---:|"]
    for db, r in load("onecaller"):
        c, q = mode(r, "coalesce"), mode(r, "coalesce-peer")
        lines.append(f"| {db} | {n(p(c, 'p50_us'))} | {n(p(q, 'p50_us'))} | {x(p(c, 'p50_us'), p(q, 'p50_us'))}"
                     f" | {n(p(c, 'p99_us'))} | {n(p(q, 'p99_us'))} |")
    return lines


def s_run():
    lines = ["| database | workload | coalesce ops/s | peer ops/s | ratio | statements/op |", "|---|---|---:|---:|---:|---:|"]
    for db, r in load("run"):
        for w in r.get("run_phase", []):
            lines.append(f"| {db} | {w['workload'].upper()} | {n(w['coalesce']['ops_per_sec'])} | {n(w['peer']['ops_per_sec'])}"
                         f" | {w['ratio']:.2f}× | {w['coalesce'].get('statements_per_op', 0):.2f} |")
    return lines


def s_run1():
    lines = ["| database | operation | coalesce p50 µs | peer p50 µs | ratio |", "|---|---|---:|---:|---:|"]
    for db, r in load("run1"):
        for w in r.get("run_phase", []):
            for kind in ("read", "update", "read_modify_write"):
                c, q = w["coalesce"].get(kind), w["peer"].get(kind)
                if c and q:
                    lines.append(f"| {db} | {kind.replace('_', '-')} ({w['workload'].upper()}) | {c['p50_us']:,} | {q['p50_us']:,}"
                                 f" | {x(c['p50_us'], q['p50_us'])} |")
    return lines


def s_tls():
    plain, tls = dict(load("tls-plain")), dict(load("tls"))
    lines = ["| database | mode | plain | TLS | TLS ÷ plain |", "|---|---|---:|---:|---:|"]
    for db in plain:
        for m in ("batchrewrite", "coalesce", "coalesce-peer", "copy", "load-data"):
            if rate(plain[db], m) and db in tls:
                lines.append(f"| {db} | {m} | {n(rate(plain[db], m))} | {n(rate(tls[db], m))} | {x(rate(tls[db], m), rate(plain[db], m))} |")
    return lines


def grep(name, pattern):
    return [l.rstrip() for l in text(name).splitlines() if re.search(pattern, l)]


def s_engine():
    lines, last = [], ""
    for name in ("engine", "engine-metrics"):
        for l in text(name).splitlines():
            m = re.match(r"^(\S.*?)\s*time:\s*\[(.*)\]", l) or re.match(r"^\s+time:\s*\[(.*)\]", l)
            if l and not l[0].isspace() and "time:" not in l:
                last = l.strip()
            if m:
                label = m.group(1).strip() if m.lastindex == 2 else last
                lines.append(f"{label}: [{m.group(m.lastindex)}]")
    return ["```"] + lines + ["```"] if lines else []


SUMMARY = {
    "main": s_main,
    "pg64": lambda: pair("pg64"),
    "pg1024": s_pg1024,
    "tasks": s_tasks,
    "failrate": s_failrate,
    "mariadb-batch": lambda: s_bulk(["mariadb-batch", "mariadb-batch-off"], ["batch", "load-data"]),
    "pg-bulk": lambda: s_bulk(["pg-bulk", "pg-bulk-off"], ["copy"]),
    "sizes": s_sizes,
    "galera": lambda: s_cluster("galera"),
    "pgsync": lambda: s_cluster("pgsync"),
    "pgbouncer": s_pgbouncer,
    "onecaller": s_onecaller,
    "http": lambda: grep("http", r"^\|") + [""] + grep("http", r"batchpool / deadpool"),
    "run": s_run,
    "run1": s_run1,
    "tls": s_tls,
    "engine": s_engine,
    "memory": lambda: grep("memory", r"^\|"),
    "storm": lambda: grep("storm", r"^Summary"),
    "learn": lambda: ["```"] + text("learn").rstrip().splitlines()[-25:] + ["```"],
}

print("# Benchmark results\n")
try:
    with open(os.path.join(out, "machine.txt")) as f:
        print("```\n" + f.read().rstrip() + "\n```\n")
except OSError:
    pass
for case in cases:
    try:
        lines = SUMMARY[case]()
    except Exception as e:  # a missing or partial result: say so, go on
        lines = [f"(no summary: {type(e).__name__}: {e})"]
    body = [l for l in lines if l.strip()]
    print(f"## {case}\n\n<!-- case: {case} -->")
    print("\n".join(lines) if len(body) > 2 or case in ("storm", "http", "engine", "learn") and body else "(no results)")
    print()
PYTHON
}

main() {
    local list=0 summary_only=0 selected=()
    while (($#)); do
        case $1 in
        -h | --help) usage; return 0 ;;
        -l | --list) list=1 ;;
        -o | --out) OUT=${2:?--out needs a directory}; shift ;;
        --out=*) OUT=${1#--out=} ;;
        --summary) summary_only=1 ;;
        -*) echo "unknown option $1 (--help)" >&2; return 2 ;;
        *) selected+=("$1") ;;
        esac
        shift
    done
    ((${#selected[@]})) || selected=("${CASES[@]}")
    local c
    for c in "${selected[@]}"; do
        if [[ -z ${ABOUT[$c]:-} ]]; then
            echo "unknown case '$c'; the cases: ${CASES[*]}" >&2
            return 2
        fi
    done
    if ((list)); then
        local out_dir=$OUT
        DRY=1 OUT='$OUT'
        for c in "${selected[@]}"; do
            echo "$c: ${ABOUT[$c]}"
            "case_${c//-/_}"
        done
        echo "(\$OUT: $out_dir; BENCH_QUICK=1 shrinks every size)"
        return 0
    fi
    mkdir -p "$OUT"
    OUT=$(cd "$OUT" && pwd)
    if ((summary_only)); then
        summarize "${selected[@]}"
        return 0
    fi
    record_machine "${selected[@]}"
    local start=$SECONDS
    for c in "${selected[@]}"; do
        echo "### $c: ${ABOUT[$c]}" >&2
        "case_${c//-/_}"
    done
    echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) at the end, after $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s" >>"$OUT/machine.txt"
    summarize "${selected[@]}" | tee "$OUT/summary.md"
    echo "results: $OUT (summary.md, machine.txt, one .txt/.log/.cmd per command, .json of ycsb_load)" >&2
    [[ -f $OUT/main-postgresql.svg ]] && echo "README chart: cp $OUT/main-postgresql.svg $ROOT/docs/ycsb.svg" >&2
    if ((${#FAILED[@]})); then
        echo "failed: ${FAILED[*]}" >&2
        return 1
    fi
}

main "$@"
