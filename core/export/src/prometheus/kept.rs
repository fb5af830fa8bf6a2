//! The text of families that did not change between scrapes, kept (issue 53): the QoS
//! view (`rdma_qos_setting`, 36 series a port) is read every 60 s but was rendered on
//! every scrape, 5 times a second at the scrape path's pace.
//!
//! A family is known by its series' highest ingest count ([`Series::generation`]: the
//! store's ingests only count up, and reading a series sets it) and how many series it
//! has: a read, a new series or a gone one changes one or the other. Its text is kept once
//! it has stayed so for [`KEEP_AFTER_SCRAPES`] scrapes and [`KEEP_AFTER`] (longer than the
//! default collection interval: a family read every collection is never kept, however
//! often it is scraped), only up to [`KEEP_MAX`] bytes a family (at 2000 ports the QoS view is
//! 12 MB of text, which a scrape a second renders for less than keeping it would cost in
//! memory) and [`KEEP_TOTAL`] bytes in all, for every store and format of the process
//! (the families beyond it are rendered each time). What is kept of a store hangs on it
//! ([`Store::attached`]) and is freed with it when a reload replaces it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rocewatch_runtime::store::{Series, Store};

/// A family's text is kept only up to this size.
const KEEP_MAX: usize = 256 * 1024;
/// And all the kept text of the process up to this size.
const KEEP_TOTAL: usize = 1024 * 1024;
/// A family is kept once unchanged for this long (the default collection interval is
/// 10 s; the QoS view is read every 60 s)...
const KEEP_AFTER: Duration = Duration::from_secs(15);
/// ...and at this many scrapes.
const KEEP_AFTER_SCRAPES: u32 = 3;

/// The bytes of kept text (and reserved for text being kept) in the process.
static KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of [`KEEP_TOTAL`] held, given back when dropped.
struct Charge(usize);

impl Charge {
    /// `n` bytes, if the total has room for them.
    fn take(n: usize) -> Option<Charge> {
        KEPT_BYTES
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(n).filter(|t| *t <= KEEP_TOTAL)
            })
            .ok()
            .map(|_| Charge(n))
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        KEPT_BYTES.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// What a family was at the last scrape, and its text once kept.
struct Entry {
    stamp: (u64, usize),
    /// The first scrape that found it so, and how many have.
    since: Instant,
    seen: u32,
    /// The size of its text, once rendered.
    len: Option<usize>,
    text: Option<String>,
    /// What `text` (or the text being rendered to keep) holds of [`KEEP_TOTAL`].
    charge: Option<Charge>,
    /// The scrape that last rendered it (families gone since are forgotten).
    scrape: u64,
}

/// The families of one store in one format.
pub(super) struct Families {
    by_name: HashMap<String, Entry>,
    scrape: u64,
    now: Instant,
}

impl Default for Families {
    fn default() -> Self {
        Families {
            by_name: HashMap::new(),
            scrape: 0,
            now: now(),
        }
    }
}

/// What to do with a family at this scrape.
pub(super) enum Plan<'a> {
    /// Write this text: the family is as it was.
    Kept(&'a str),
    /// Render it, then tell [`Families::rendered`] its size.
    Render,
    /// Render it (this many bytes) and give the text to [`Families::keep`].
    RenderAndKeep(usize),
}

/// What hangs on a store: its families by format (its content type).
#[derive(Default)]
struct Kept(Mutex<HashMap<&'static str, Families>>);

#[cfg(not(test))]
fn now() -> Instant {
    Instant::now()
}

#[cfg(test)]
thread_local! {
    /// How far the tests moved this thread's clock on.
    static SKEW: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

#[cfg(test)]
fn now() -> Instant {
    Instant::now() + SKEW.with(std::cell::Cell::get)
}

/// Run `f` with the kept families of `store` in the format of `content_type` (one scrape
/// at a time per store holds them); those `f` did not look at are forgotten after it.
pub(super) fn with_kept<R>(
    store: &Store,
    content_type: &'static str,
    f: impl FnOnce(&mut Families) -> R,
) -> R {
    let kept = store.attached::<Kept>();
    let mut all = kept.0.lock().unwrap_or_else(|p| p.into_inner());
    let fams = all.entry(content_type).or_default();
    fams.scrape += 1;
    fams.now = now();
    let r = f(fams);
    let scrape = fams.scrape;
    fams.by_name.retain(|_, e| e.scrape == scrape);
    r
}

impl Families {
    /// What to do with the family `name` of `group` at this scrape.
    pub(super) fn plan(&mut self, name: &str, group: &[&Series]) -> Plan<'_> {
        let stamp = (
            group.iter().map(|s| s.generation()).max().unwrap_or(0),
            group.len(),
        );
        let (scrape, now) = (self.scrape, self.now);
        let fresh = || Entry {
            stamp,
            since: now,
            seen: 1,
            len: None,
            text: None,
            charge: None,
            scrape,
        };
        if !self.by_name.contains_key(name) {
            self.by_name.insert(name.to_string(), fresh());
            return Plan::Render;
        }
        let e = self.by_name.get_mut(name).expect("there");
        if e.stamp != stamp {
            *e = fresh();
            return Plan::Render;
        }
        e.scrape = scrape;
        e.seen = e.seen.saturating_add(1);
        if let Some(text) = &e.text {
            return Plan::Kept(text);
        }
        let ready = e.seen >= KEEP_AFTER_SCRAPES && now.duration_since(e.since) >= KEEP_AFTER;
        match e.len {
            Some(len) if ready && len <= KEEP_MAX => {
                e.charge = Charge::take(len);
                if e.charge.is_some() {
                    return Plan::RenderAndKeep(len);
                }
                Plan::Render
            }
            _ => Plan::Render,
        }
    }

    /// The size of the text of `name`, rendered after [`Plan::Render`].
    pub(super) fn rendered(&mut self, name: &str, len: usize) {
        if let Some(e) = self.by_name.get_mut(name) {
            e.len = Some(len);
        }
    }

    /// Keep the text of `name`, rendered after [`Plan::RenderAndKeep`].
    pub(super) fn keep(&mut self, name: &str, mut text: String) {
        if let Some(e) = self.by_name.get_mut(name) {
            if e.charge.as_ref().is_some_and(|c| c.0 == text.len()) {
                text.shrink_to_fit();
                e.text = Some(text);
            } else {
                e.charge = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{render, render_gzip, Format};
    use super::*;
    use rocewatch_plugin_api::{MetricDescriptor, MetricKind, Sample, Value};
    use rocewatch_runtime::selfmetrics::SelfMetrics;
    use std::io::Read;
    use std::sync::Arc;

    fn sample(name: &str, v: u64, attrs: &[(&str, &str)], kind: MetricKind) -> Sample {
        Sample {
            name: name.to_string().into(),
            unit: "1".into(),
            value: Value::U64(v),
            attributes: Arc::new(attrs.iter().copied().collect()),
            source: "x".into(),
            kind,
        }
    }

    fn declare(store: &Store) {
        let d = |name: &str, kind| MetricDescriptor {
            name: name.into(),
            unit: "1".into(),
            kind,
            description: "d".into(),
        };
        store.declare(&[
            d("rdma.qos.setting", MetricKind::Gauge),
            d("rdma.port.x", MetricKind::Counter),
        ]);
    }

    fn view(value: &str) -> Vec<Sample> {
        let g = MetricKind::Gauge;
        vec![
            sample("rdma.qos.setting", 1, &[("s", "pfc"), ("v", value)], g),
            sample("rdma.qos.setting", 1, &[("s", "trust"), ("v", "dscp")], g),
        ]
    }

    fn kept_text(store: &Store, name: &str) -> Option<String> {
        let kept = store.attached::<Kept>();
        let all = kept.0.lock().unwrap();
        all.get(Format::Text.content_type())
            .and_then(|f| f.by_name.get(name))
            .and_then(|e| e.text.clone())
    }

    /// Move this thread's clock on by `d`.
    fn pass(d: Duration) {
        SKEW.with(|s| s.set(s.get() + d));
    }

    fn gunzip(b: &[u8]) -> String {
        let mut s = String::new();
        flate2::read::GzDecoder::new(b)
            .read_to_string(&mut s)
            .unwrap();
        s
    }

    /// The QoS view between its reads is written from kept text, the counters read every
    /// collection are rendered each time, and every body is the one a store seen for the
    /// first time gives: after the view changes (a value, a setting gone) too.
    #[test]
    fn a_family_unchanged_since_the_last_scrape_is_written_from_kept_text() {
        let (store, m) = (Store::new(), SelfMetrics::default());
        declare(&store);
        store.ingest("qos", &view("0,0,0,1,0,0,0,0"), &m);
        let fresh = |qos: &[Sample], c: u64| {
            let (s, m) = (Store::new(), SelfMetrics::default());
            declare(&s);
            s.ingest("qos", qos, &m);
            s.ingest(
                "c",
                &[sample("rdma.port.x", c, &[("p", "1")], MetricKind::Counter)],
                &m,
            );
            render(&s, &m, Format::Text)
        };
        for c in 1..=4 {
            let port = [sample("rdma.port.x", c, &[("p", "1")], MetricKind::Counter)];
            store.ingest("c", &port, &m);
            pass(KEEP_AFTER / 2);
            assert_eq!(
                render(&store, &m, Format::Text),
                fresh(&view("0,0,0,1,0,0,0,0"), c)
            );
        }
        let kept = kept_text(&store, "rdma.qos.setting").expect("kept");
        assert!(
            kept.contains(r#"{s="pfc",v="0,0,0,1,0,0,0,0"} 1"#),
            "{kept}"
        );
        assert_eq!(kept_text(&store, "rdma.port.x"), None, "read every time");
        // The view read again, changed: rendered, not the kept text.
        store.ingest("qos", &view("0,0,0,1,1,0,0,0"), &m);
        let body = render(&store, &m, Format::Text);
        assert_eq!(body, fresh(&view("0,0,0,1,1,0,0,0"), 4));
        assert_eq!(kept_text(&store, "rdma.qos.setting"), None);
        // A setting gone (the count of the family's series changes).
        let one = &view("0,0,0,1,1,0,0,0")[..1];
        store.ingest("qos", one, &m);
        store.ingest("qos", one, &m);
        for _ in 0..3 {
            pass(KEEP_AFTER);
            let gz = render_gzip(&store, &m, Format::Text).unwrap();
            assert_eq!(gunzip(&gz), fresh(one, 4));
        }
        assert!(kept_text(&store, "rdma.qos.setting").is_some());
        // Each format has its own.
        assert!(render(&store, &m, Format::OpenMetrics).ends_with("# EOF\n"));
    }

    /// Counters read at every collection, scraped four times between two collections
    /// (an HA pair, a scrape faster than collection): never kept.
    #[test]
    fn a_family_read_every_collection_is_not_kept_however_often_scraped() {
        let (store, m) = (Store::new(), SelfMetrics::default());
        declare(&store);
        for c in 1..=3 {
            let port = [sample("rdma.port.x", c, &[("p", "1")], MetricKind::Counter)];
            store.ingest("c", &port, &m);
            for _ in 0..4 {
                let _ = render_gzip(&store, &m, Format::Text).unwrap();
            }
            assert_eq!(kept_text(&store, "rdma.port.x"), None, "collection {c}");
        }
    }

    /// Many families, each under `KEEP_MAX`, all unchanged for long: what is kept of
    /// them stays within `KEEP_TOTAL`, the rest rendered each time, every body the same.
    #[test]
    fn the_kept_text_is_bounded_in_total() {
        let (store, m) = (Store::new(), SelfMetrics::default());
        let names: Vec<String> = (0..12).map(|i| format!("rdma.port.c{i:02}")).collect();
        let d: Vec<MetricDescriptor> = names
            .iter()
            .map(|n| MetricDescriptor {
                name: n.clone(),
                unit: "1".into(),
                kind: MetricKind::Counter,
                description: "d".into(),
            })
            .collect();
        store.declare(&d);
        let ports: Vec<String> = (0..4000).map(|i| format!("mlx5_{i}")).collect();
        let mut samples = Vec::new();
        for n in &names {
            for p in &ports {
                samples.push(sample(n, 1, &[("rdma.device", p)], MetricKind::Counter));
            }
        }
        store.ingest("c", &samples, &m);
        let first = render(&store, &m, Format::Text);
        assert!(first.len() > 2 * KEEP_TOTAL, "{} bytes", first.len());
        for _ in 0..4 {
            pass(KEEP_AFTER);
            assert_eq!(render(&store, &m, Format::Text), first);
        }
        let kept: usize = names
            .iter()
            .filter_map(|n| kept_text(&store, n))
            .map(|t| t.len())
            .sum();
        assert!(kept > 0, "nothing kept");
        assert!(kept <= KEEP_TOTAL, "{kept} bytes kept");
    }

    /// What is kept of a store goes with it (a reload replaces the store), its share of
    /// `KEEP_TOTAL` given back.
    #[test]
    fn the_kept_text_goes_with_its_store() {
        let (store, m) = (Store::new(), SelfMetrics::default());
        declare(&store);
        store.ingest("qos", &view("0,0,0,1,0,0,0,0"), &m);
        for _ in 0..4 {
            pass(KEEP_AFTER);
            render(&store, &m, Format::Text);
        }
        assert!(kept_text(&store, "rdma.qos.setting").is_some());
        let kept = Arc::downgrade(&store.attached::<Kept>());
        drop(store);
        assert!(kept.upgrade().is_none(), "freed with the store");
    }

    /// A family over `KEEP_MAX` is rendered every time and nothing is kept.
    #[test]
    fn a_large_family_is_not_kept() {
        let (store, m) = (Store::new(), SelfMetrics::default());
        declare(&store);
        let long = "x".repeat(1024);
        let ports: Vec<String> = (0..300).map(|i| i.to_string()).collect();
        let big: Vec<Sample> = ports
            .iter()
            .map(|p| {
                sample(
                    "rdma.qos.setting",
                    1,
                    &[("p", p), ("v", &long)],
                    MetricKind::Gauge,
                )
            })
            .collect();
        store.ingest("qos", &big, &m);
        let first = render(&store, &m, Format::Text);
        for _ in 0..3 {
            pass(KEEP_AFTER);
            assert_eq!(render(&store, &m, Format::Text), first);
        }
        assert_eq!(kept_text(&store, "rdma.qos.setting"), None);
    }
}
