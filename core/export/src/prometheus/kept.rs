//! The text of families that did not change between scrapes, kept (issue 53): the QoS
//! view (`rdma_qos_setting`, 36 series a port) is read every 60 s but was rendered on
//! every scrape, 5 times a second at the scrape path's pace.
//!
//! A family is known by its series' highest ingest count ([`Series::generation`]: the
//! store's ingests only count up, and reading a series sets it) and how many series it
//! has: a read, a new series or a gone one changes one or the other. Its text is kept from
//! the second scrape that finds it unchanged on (a family read every collection is never
//! kept), and only up to [`KEEP_MAX`] bytes: at 2000 ports the QoS view is 12 MB of text,
//! which a scrape a second renders for less than keeping it would cost in memory.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use rocewatch_runtime::store::{Series, Store};

/// A family's text is kept only up to this size.
pub(super) const KEEP_MAX: usize = 256 * 1024;

/// What a family was at the last scrape, and its text once it has been seen unchanged.
struct Entry {
    stamp: (u64, usize),
    text: Option<String>,
    /// The scrape that last rendered it (families gone since are forgotten).
    scrape: u64,
    /// Unchanged but over [`KEEP_MAX`]: rendered every time.
    too_big: bool,
}

#[derive(Default)]
pub(super) struct Families {
    by_name: HashMap<String, Entry>,
    scrape: u64,
}

/// What to do with a family at this scrape.
pub(super) enum Plan<'a> {
    /// Write this text: the family is as it was.
    Kept(&'a str),
    /// Render it (it changed since the last scrape).
    Render,
    /// Render it and give the text to [`Families::keep`] (it did not change since the
    /// last scrape).
    RenderAndKeep,
}

/// By store and format (its content type).
type Kept = HashMap<(u64, &'static str), Families>;

static KEPT: LazyLock<Mutex<Kept>> = LazyLock::new(Mutex::default);

/// Run `f` with the kept families of `store` in the format of `content_type` (one scrape
/// at a time per process holds them); those `f` did not look at are forgotten after it.
pub(super) fn with_kept<R>(
    store: &Store,
    content_type: &'static str,
    f: impl FnOnce(&mut Families) -> R,
) -> R {
    let mut all = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let fams = all.entry((store.id(), content_type)).or_default();
    fams.scrape += 1;
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
        let scrape = self.scrape;
        if !self.by_name.contains_key(name) {
            self.by_name.insert(
                name.to_string(),
                Entry {
                    stamp: (u64::MAX, 0),
                    text: None,
                    scrape,
                    too_big: false,
                },
            );
        }
        let e = self.by_name.get_mut(name).expect("inserted above");
        e.scrape = scrape;
        if e.stamp != stamp {
            e.stamp = stamp;
            e.text = None;
            e.too_big = false;
            return Plan::Render;
        }
        match &e.text {
            Some(text) => Plan::Kept(text),
            None if e.too_big => Plan::Render,
            None => Plan::RenderAndKeep,
        }
    }

    /// Keep the text of `name`, rendered after [`Plan::RenderAndKeep`] (`None`: it was
    /// over [`KEEP_MAX`], render it every time until it changes).
    pub(super) fn keep(&mut self, name: &str, text: Option<String>) {
        if let Some(e) = self.by_name.get_mut(name) {
            e.too_big = text.is_none();
            e.text = text;
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

    fn sample(name: &'static str, v: u64, attrs: &[(&str, &str)], kind: MetricKind) -> Sample {
        Sample {
            name: name.into(),
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
        let all = KEPT.lock().unwrap();
        all.get(&(store.id(), Format::Text.content_type()))
            .and_then(|f| f.by_name.get(name))
            .and_then(|e| e.text.clone())
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
            let gz = render_gzip(&store, &m, Format::Text).unwrap();
            assert_eq!(gunzip(&gz), fresh(one, 4));
        }
        assert!(kept_text(&store, "rdma.qos.setting").is_some());
        // Each format has its own.
        assert!(render(&store, &m, Format::OpenMetrics).ends_with("# EOF\n"));
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
            assert_eq!(render(&store, &m, Format::Text), first);
        }
        assert_eq!(kept_text(&store, "rdma.qos.setting"), None);
    }
}
