//! What the pool tells a tracing subscriber: each caller's span is linked
//! (follows-from) from the flush span that carried its row, flush spans
//! carry rows, statement kind and outcome, and an INSERT that looks
//! batchable but that the server makes run on its own is warned about once
//! per text, with `explain()`'s reason. Runs as `pg::name` and
//! `mysql::name`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::common::backend::{TestBackend, both, vals, wait_for};
use batchpool::BatchConfig;
use tracing::Instrument as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

// One thread: the capturing subscriber is this thread's default, and the
// pool's tasks (flushers, connection tasks) run on it too.
both! {
    (flavor = "current_thread") => [
        callers_are_linked_from_the_flush_that_carried_their_rows,
        a_declined_insert_is_warned_about_once_per_text,
    ],
}

/// A span from creation to close.
#[derive(Debug, Default, Clone)]
struct SpanSeen {
    name: &'static str,
    fields: BTreeMap<&'static str, String>,
    follows: Vec<u64>,
}

#[derive(Debug, Default)]
struct Seen {
    open: HashMap<u64, SpanSeen>,
    closed: Vec<SpanSeen>,
    /// The fields of every WARN event.
    warnings: Vec<BTreeMap<&'static str, String>>,
}

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

/// Records spans, their follows-from links and warnings.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

impl Capture {
    /// The closed flush spans.
    fn flushes(&self) -> Vec<SpanSeen> {
        let seen = self.0.lock().unwrap();
        let flushes = seen.closed.iter().filter(|s| s.name == "batchpool.flush");
        flushes.cloned().collect()
    }

    fn warnings(&self) -> Vec<BTreeMap<&'static str, String>> {
        self.0.lock().unwrap().warnings.clone()
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut span = SpanSeen {
            name: attrs.metadata().name(),
            ..SpanSeen::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        self.0.lock().unwrap().open.insert(id.into_u64(), span);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(span) = self.0.lock().unwrap().open.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_follows_from(&self, id: &Id, follows: &Id, _: Context<'_, S>) {
        if let Some(span) = self.0.lock().unwrap().open.get_mut(&id.into_u64()) {
            span.follows.push(follows.into_u64());
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().warnings.push(fields);
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(span) = seen.open.remove(&id.into_u64()) {
            seen.closed.push(span);
        }
    }
}

fn capture() -> (Capture, tracing::subscriber::DefaultGuard) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    (capture, crate::capture::set_default(subscriber))
}

/// Callers queue behind a held connection, each in a span of its own; the
/// one flush that takes their rows follows from every caller's span, and
/// records the rows, the statement kind and the one row that failed.
async fn callers_are_linked_from_the_flush_that_carried_their_rows<B: TestBackend>() {
    const CALLERS: usize = 12;
    let (capture, _guard) = capture();
    let url = B::fresh_db().await;
    let pool = B::pool(&url, BatchConfig::default(), 1);
    let mut admin = B::admin(&url).await;
    B::admin_run(&mut admin, "CREATE TABLE tl (k INT PRIMARY KEY)").await;
    let sql = B::sql("INSERT INTO tl (k) VALUES (?)");
    // Learned first (on the one connection), with no caller span.
    B::execute(&pool, &sql, &vals![0]).await.unwrap();

    let held = B::hold(&pool).await;
    let mut spans = Vec::new();
    let mut callers = Vec::new();
    // Row 0 is there already: its caller alone fails (duplicate key).
    for k in 0..CALLERS as i32 {
        let span = tracing::info_span!("caller", k);
        let (pool, sql) = (pool.clone(), sql.clone());
        let call = async move { B::execute(&pool, &sql, &vals![k]).await.map(|_| ()) };
        callers.push(tokio::spawn(call.instrument(span.clone())));
        spans.push(span);
    }
    wait_for("every row to queue", || {
        B::stats(&pool).queued == CALLERS as u64
    })
    .await;
    drop(held);
    for (k, caller) in callers.into_iter().enumerate() {
        let result = caller.await.unwrap();
        assert_eq!(result.is_err(), k == 0, "row {k}: {result:?}");
    }
    let bulk = B::stats(&pool).bulk_statements;
    B::close(&pool).await;

    let ids: Vec<u64> = spans.iter().map(|s| s.id().unwrap().into_u64()).collect();
    let flushes = capture.flushes();
    let carried: Vec<&SpanSeen> = flushes.iter().filter(|f| !f.follows.is_empty()).collect();
    assert_eq!(
        carried.len(),
        1,
        "one flush took every queued row: {flushes:?}"
    );
    let flush = carried[0];
    let mut follows = flush.follows.clone();
    follows.sort_unstable();
    let mut ids = ids;
    ids.sort_unstable();
    assert_eq!(follows, ids, "linked from every caller");
    assert_eq!(flush.fields["rows"], CALLERS.to_string());
    // MariaDB sends rows by its bulk command where it can (a failed row may
    // then be re-run alone as a one-row statement).
    let kinds = if bulk == 0 {
        &["multi-row"][..]
    } else {
        &[B::pick("copy", "bulk"), "mixed"][..]
    };
    assert!(kinds.contains(&flush.fields["kind"].as_str()), "{flush:?}");
    assert_eq!(flush.fields["outcome"], "rows failed");
    assert_eq!(flush.fields["failed"], "1");
    // The first row went alone, from no caller span.
    let idle: Vec<&SpanSeen> = flushes
        .iter()
        .filter(|f| f.fields["reason"] == "idle")
        .collect();
    assert_eq!(idle.len(), 1, "{flushes:?}");
    assert_eq!(idle[0].fields["outcome"], "ok");
}

/// Texts on a table the server makes each row run alone for (a trigger on
/// PostgreSQL, a non-transactional table on MariaDB): one warning per text,
/// however often it is explained or executed, with the reason `explain()`
/// gives; none for a text that is coalesced.
async fn a_declined_insert_is_warned_about_once_per_text<B: TestBackend>() {
    let (capture, _guard) = capture();
    let url = B::fresh_db().await;
    let pool = B::pool(&url, BatchConfig::default(), 2);
    let mut admin = B::admin(&url).await;
    let setup = B::pick(
        "CREATE TABLE audited (k INT, v INT); CREATE TABLE plain (k INT); \
         CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$; \
         CREATE TRIGGER audit BEFORE INSERT ON audited FOR EACH ROW EXECUTE FUNCTION noop()",
        "CREATE TABLE audited (k INT, v INT) ENGINE=MyISAM; CREATE TABLE plain (k INT)",
    );
    B::admin_run(&mut admin, setup).await;
    let texts = [
        B::sql("INSERT INTO audited (k) VALUES (?)"),
        B::sql("INSERT INTO audited (k, v) VALUES (?, 1)"),
    ];
    let plain = B::sql("INSERT INTO plain (k) VALUES (?)");
    for k in 0..3 {
        for sql in texts.iter().chain([&plain]) {
            B::execute(&pool, sql, &vals![k]).await.unwrap();
        }
    }
    let mut reasons = Vec::new();
    for sql in &texts {
        let explain = B::explain(&pool, sql).await.unwrap();
        reasons.push(explain.reason().expect("declined").to_string());
    }
    assert!(B::explain(&pool, &plain).await.unwrap().is_coalesced());
    B::close(&pool).await;

    let warned: Vec<(String, String)> = capture
        .warnings()
        .into_iter()
        .filter_map(|w| Some((w.get("sql")?.clone(), w.get("reason")?.clone())))
        .collect();
    let want: Vec<(String, String)> = texts.iter().cloned().zip(reasons).collect();
    assert_eq!(warned, want);
}
