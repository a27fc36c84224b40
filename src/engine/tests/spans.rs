//! Tracing: flush spans follow from their callers' spans, at no cost when
//! no subscriber records them; a declined INSERT is warned about once.

use super::*;
use crate::engine::queue::MAX_LINKS;

/// A span as the test subscriber saw it, from creation to close.
#[derive(Debug, Default, Clone)]
struct SpanSeen {
    name: &'static str,
    /// Fields given at creation or recorded later, as text.
    fields: BTreeMap<&'static str, String>,
    /// The spans it follows from, in order.
    follows: Vec<u64>,
}

/// What the test subscriber saw.
#[derive(Debug, Default)]
struct Seen {
    open: std::collections::HashMap<u64, SpanSeen>,
    closed: Vec<SpanSeen>,
    /// The fields of every WARN event.
    warnings: Vec<BTreeMap<&'static str, String>>,
}

impl Seen {
    fn flushes(&self) -> Vec<SpanSeen> {
        let open = self.open.values();
        let all = self.closed.iter().chain(open);
        all.filter(|s| s.name == "batchpool.flush")
            .cloned()
            .collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<&'static str, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

/// A layer that records spans, their follows-from links and warnings.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Seen>>);

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut span = SpanSeen {
            name: attrs.metadata().name(),
            ..SpanSeen::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        self.0.lock().unwrap().open.insert(id.into_u64(), span);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = self.0.lock().unwrap().open.get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_follows_from(
        &self,
        id: &tracing::span::Id,
        follows: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = self.0.lock().unwrap().open.get_mut(&id.into_u64()) {
            span.follows.push(follows.into_u64());
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().warnings.push(fields);
        }
    }

    fn on_close(&self, id: tracing::span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut seen = self.0.lock().unwrap();
        if let Some(span) = seen.open.remove(&id.into_u64()) {
            seen.closed.push(span);
        }
    }
}

/// Records what this thread's spans and events do (every test runs on a
/// current-thread runtime, so the engine's tasks run here too) until the
/// guard is dropped.
fn capture() -> (Capture, tracing::subscriber::DefaultGuard) {
    use tracing_subscriber::layer::SubscriberExt as _;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    (capture, set_default(subscriber))
}

/// Sets `subscriber` as this thread's default, asked about every callsite
/// whatever the other test threads do. tracing caches per callsite, for the
/// whole process, whether any subscriber wants it; while only one dispatcher
/// is registered, a callsite first reached by a thread with no subscriber is
/// cached as wanted by nobody. A second dispatcher registered for the whole
/// process makes tracing ask every live dispatcher instead.
fn set_default<S>(subscriber: S) -> tracing::subscriber::DefaultGuard
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    guard
}

/// Each caller's span is linked (follows-from) from the flush span that
/// carried its row: the first `MAX_LINKS` callers of a queued flush, the
/// caller of the idle fast path, the caller of an explicit batch; flush
/// spans carry rows, statement kind and outcome.
#[tokio::test(start_paused = true)]
async fn flush_spans_follow_from_their_callers() {
    use tracing::Instrument as _;
    let (capture, _guard) = capture();
    let n = MAX_LINKS + 6;
    let h = H::new(1, config().queue_capacity(2 * n).max_rows(n)).await;

    // Every connection busy: the rows queue, then go out in one flush.
    let hold = h.mem().hold_all();
    let rows: Vec<i64> = (1..=n as i64)
        .map(|v| if v == 5 { -5 } else { v })
        .collect();
    let spans: Vec<tracing::Span> = rows
        .iter()
        .map(|v| tracing::info_span!("caller", v))
        .collect();
    let mut callers: Vec<Caller> = rows
        .iter()
        .zip(&spans)
        .map(|(&v, span)| -> Caller { (v, Box::pin(h.submit(v).instrument(span.clone()))) })
        .collect();
    for (v, f) in &mut callers {
        assert!(poll(f).is_pending(), "row {v} did not queue");
    }
    drop(hold);
    h.drain().await;
    for (v, mut f) in callers {
        match outcome(&mut f) {
            Ok(out) => assert_eq!(out, v),
            Err(_) => assert_eq!(v, -5, "only the negative row fails"),
        }
    }
    assert_eq!(h.mem().log()[0].len(), n, "one flush took every row");
    let ids: Vec<u64> = spans.iter().map(|s| s.id().unwrap().into_u64()).collect();
    let flushes = capture.0.lock().unwrap().flushes();
    assert_eq!(flushes.len(), 1, "{flushes:?}");
    let flush = &flushes[0];
    assert_eq!(
        flush.follows,
        ids[..MAX_LINKS],
        "the first callers, bounded"
    );
    assert_eq!(flush.fields["rows"], n.to_string());
    assert_eq!(flush.fields["kind"], "multi-row");
    assert_eq!(flush.fields["outcome"], "rows failed");
    assert_eq!(flush.fields["failed"], "1");

    // Nothing queued or on the wire: the idle fast path, in the caller's task.
    let idle = tracing::info_span!("caller", v = 1000);
    let task = tokio::spawn(h.submit(1000).instrument(idle.clone()));
    h.drain().await;
    assert_ok_own(1000, finished(task).await);
    // An explicit batch, from its caller's span.
    let many = tracing::info_span!("caller", v = 2000);
    let task = tokio::spawn(h.submit_many(&[2000, 2001]).instrument(many.clone()));
    h.drain().await;
    assert!(finished(task).await.unwrap().iter().all(Result::is_ok));

    let flushes = capture.0.lock().unwrap().flushes();
    assert_eq!(flushes.len(), 3, "{flushes:?}");
    let by_reason = |reason: &str| {
        flushes
            .iter()
            .find(|s| s.fields["reason"] == reason)
            .unwrap_or_else(|| panic!("no {reason} flush: {flushes:?}"))
            .clone()
    };
    let inline = by_reason("idle");
    assert_eq!(inline.follows, [idle.id().unwrap().into_u64()]);
    assert_eq!(
        (
            inline.fields["outcome"].as_str(),
            inline.fields["failed"].as_str()
        ),
        ("ok", "0")
    );
    let explicit = by_reason("explicit");
    assert_eq!(explicit.follows, [many.id().unwrap().into_u64()]);
    assert_eq!(explicit.fields["kind"], "multi-row");
    assert_eq!(explicit.fields["rows"], "2");
    h.assert_no_leaks().await;
}

/// With no subscriber recording flush spans, a queued row keeps nothing of
/// its caller's span: linking costs a level check.
#[tokio::test(start_paused = true)]
async fn caller_span_is_kept_only_when_flush_spans_are_recorded() {
    use tracing::Instrument as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    let info_only = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(Capture::default());
    for subscriber in [None, Some(info_only)] {
        let _guard = subscriber.map(set_default);
        let h = H::new(1, config()).await;
        let hold = h.mem().hold_all();
        let span = tracing::info_span!("caller");
        let mut f: BoxFut<_> = Box::pin(h.submit(1).instrument(span));
        assert!(poll(&mut f).is_pending());
        assert!(
            h.q.queued(|p| p.caller.is_none())
                .into_iter()
                .all(|none| none)
        );
        drop(hold);
        h.drain().await;
        assert_ok_own(1, outcome(&mut f));
    }
}

/// A text that looks batchable but that the backend declines is warned
/// about once, with `explain()`'s reason, however often it is learned
/// again; each such text has its own warning; texts coalesced or refused
/// from the text alone are not warned about.
#[tokio::test(start_paused = true)]
async fn declined_insert_is_warned_about_once_per_text() {
    let (capture, _guard) = capture();
    let h = H::new(2, config()).await;
    let explain = |sql: &str| -> String {
        let reason = h.e.routes.get(sql).unwrap().0.explain();
        reason.reason().unwrap().to_string()
    };
    for _ in 0..3 {
        let Route::Pass(_) = h.e.route(DECLINED[0], None).await.unwrap() else {
            panic!("declined");
        };
        settle().await;
        // Learned again by the next call (in the background).
        h.e.route_stale(DECLINED[0]);
    }
    let Route::Pass(_) = h.e.route(DECLINED[1], None).await.unwrap() else {
        panic!("declined");
    };
    let Route::Pass(_) = h.e.route("SELECT 1", None).await.unwrap() else {
        panic!("not an insert");
    };
    assert!(matches!(
        h.e.route(SQL, None).await.unwrap(),
        Route::Batch(_)
    ));
    settle().await;
    // The first text was asked about once and learned twice again.
    assert_eq!(h.mem().prepared.load(SeqCst), 1 + 3 + 1);
    let warnings = capture.0.lock().unwrap().warnings.clone();
    let texts: Vec<&str> = warnings.iter().map(|w| w["sql"].as_str()).collect();
    assert_eq!(texts, DECLINED, "{warnings:?}");
    for (w, sql) in warnings.iter().zip(DECLINED) {
        assert_eq!(w["reason"], explain(sql));
    }
}
