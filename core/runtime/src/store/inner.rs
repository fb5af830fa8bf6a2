//! The store's series by slot, their index by key, and an ingest's two paths (by
//! position, by key).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use rocewatch_metrics::counter::{counter_move, overflow_of, Move};
use rocewatch_plugin_api::{AttrSet, Attributes, MetricDescriptor, MetricKind, Name, Sample};

use super::series::{Publication, Reading, Series};
use crate::selfmetrics::SelfMetrics;

/// What one plugin emitted last time: the slot of each of its samples, in emission
/// order. A plugin that emits the same series in the same order again (every collector,
/// nearly every time) is stored by position: no series key is built or looked up.
#[derive(Debug)]
pub(super) struct Emitted {
    pub(super) plugin: Arc<str>,
    pub(super) slots: Vec<u32>,
}

#[derive(Debug, Default)]
pub(super) struct Inner {
    pub(super) generation: u64,
    /// Every series, by slot (`None`: free, see `free`). A slot stays with its series
    /// for as long as the series lives.
    pub(super) slots: Vec<Option<Series>>,
    pub(super) free: Vec<u32>,
    /// The slots sorted by series key (name, then attributes, ordered as the pairs of the
    /// sorted map): the keyed lookup of a series seen for the first time or out of order
    /// (a binary search), and the order readers see. 4 bytes a series, where a map of keys
    /// was about 60.
    pub(super) index: Vec<u32>,
    /// By plugin name.
    pub(super) emitted: HashMap<String, Emitted>,
    pub(super) descriptors: BTreeMap<String, MetricDescriptor>,
    /// The monotonic clock's origin for [`Series::read_at`]: the first ingest's.
    pub(super) origin: Option<Instant>,
}

impl Inner {
    /// Every series, sorted by key.
    pub(super) fn sorted(&self) -> impl Iterator<Item = &Series> + '_ {
        self.index.iter().map(|&i| self.slot(i))
    }

    pub(super) fn slot(&self, i: u32) -> &Series {
        self.slots[i as usize]
            .as_ref()
            .expect("indexed slot holds a series")
    }

    /// Where the series of `name` and `attributes` is in `index` (`Err`: where it would
    /// go).
    pub(super) fn find(&self, name: &str, attributes: &AttrSet) -> Result<usize, usize> {
        self.index
            .binary_search_by(|&i| key_cmp(&self.slot(i).sample, name, attributes))
    }

    /// `mono` as nanoseconds from the origin (set by the first ingest).
    pub(super) fn mono_nanos(&mut self, mono: Instant) -> i64 {
        let origin = *self.origin.get_or_insert(mono);
        match mono.checked_duration_since(origin) {
            Some(d) => d.as_nanos().min(i64::MAX as u128) as i64,
            None => -(origin.duration_since(mono).as_nanos().min(i64::MAX as u128) as i64),
        }
    }

    /// An ingest's keyed path, for `samples` from the first that differs from the
    /// plugin's last order on: each series looked up by key and updated, or added; their
    /// slots appended to `order`. New series go into the index once, at the end.
    pub(super) fn by_key(
        &mut self,
        samples: &[Sample],
        owner: &Arc<str>,
        generation: u64,
        metrics: &SelfMetrics,
        at: At,
        order: &mut Vec<u32>,
    ) {
        // The series added by this ingest, by key, for a sample that names one again.
        let mut added: HashMap<(Name, Attributes), u32> = HashMap::new();
        // The label set last rendered, for the next sample with the same attributes `Arc`.
        let mut rendered: Option<(Attributes, Arc<str>)> = None;
        for (n, s) in samples.iter().enumerate() {
            let known = match self.find(&s.name, &s.attributes) {
                Ok(pos) => Some(self.index[pos]),
                Err(_) if added.is_empty() => None,
                Err(_) => added
                    .get(&(s.name.clone(), Arc::clone(&s.attributes)))
                    .copied(),
            };
            let slot = match known {
                Some(slot) => {
                    let p = self.slots[slot as usize]
                        .as_mut()
                        .expect("indexed slot holds a series");
                    update(p, s, owner, generation, metrics, at);
                    slot
                }
                None => {
                    // Kept when the set is shared with the next sample (a collector's
                    // port), else rendered per read (the QoS view: a set per series).
                    let shared = samples
                        .get(n + 1)
                        .is_some_and(|next| Arc::ptr_eq(&next.attributes, &s.attributes));
                    let labels = match &rendered {
                        Some((a, l)) if Arc::ptr_eq(a, &s.attributes) => Some(Arc::clone(l)),
                        _ if shared => {
                            let l: Arc<str> =
                                rocewatch_metrics::naming::prometheus_labels(&s.attributes).into();
                            rendered = Some((Arc::clone(&s.attributes), Arc::clone(&l)));
                            Some(l)
                        }
                        _ => None,
                    };
                    let slot = self.add(Series {
                        sample: Reading::from(s),
                        plugin: Arc::clone(owner),
                        start: at.now,
                        time: at.now,
                        read_at: at.mono,
                        increase: 0.0,
                        has_increase: false,
                        interval: 0.0,
                        saturated: false,
                        generation,
                        labels,
                        published: Publication::default(),
                    });
                    added.insert((s.name.clone(), Arc::clone(&s.attributes)), slot);
                    slot
                }
            };
            order.push(slot);
        }
        if !added.is_empty() {
            let mut new: Vec<u32> = added.into_values().collect();
            let slots = &self.slots;
            let cmp = |a: u32, b: u32| {
                let (x, y) = (&slots[a as usize], &slots[b as usize]);
                let (x, y) = (x.as_ref().expect("added"), y.as_ref().expect("indexed"));
                key_cmp(&x.sample, &y.sample.name, &y.sample.attributes)
            };
            new.sort_unstable_by(|&a, &b| cmp(a, b));
            let old = &self.index;
            let mut merged = Vec::with_capacity(old.len() + new.len());
            let (mut i, mut j) = (0, 0);
            while i < old.len() && j < new.len() {
                if cmp(old[i], new[j]).is_lt() {
                    merged.push(old[i]);
                    i += 1;
                } else {
                    merged.push(new[j]);
                    j += 1;
                }
            }
            merged.extend_from_slice(&old[i..]);
            merged.extend_from_slice(&new[j..]);
            self.index = merged;
        }
    }

    /// Put a new series in a free slot, or a new one.
    pub(super) fn add(&mut self, series: Series) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(series);
                slot
            }
            None => {
                self.slots.push(Some(series));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 series")
            }
        }
    }

    /// Drop the series of `gone` (slots `owner` emitted last time and not in this ingest,
    /// `generation`) unless another plugin has taken one over since.
    pub(super) fn drop_gone(
        &mut self,
        gone: Vec<u32>,
        owner: &Arc<str>,
        generation: u64,
        metrics: &SelfMetrics,
    ) {
        let mut dropped = false;
        for slot in gone {
            let stale = self.slots[slot as usize]
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(&p.plugin, owner) && p.generation != generation);
            if stale {
                let p = self.slots[slot as usize].take().expect("checked above");
                if p.saturated {
                    metrics.counter_saturated(&p.sample.name, false);
                }
                self.free.push(slot);
                dropped = true;
            }
        }
        if dropped {
            let slots = &self.slots;
            self.index.retain(|&i| slots[i as usize].is_some());
        }
    }
}

/// A series' key against a name and attributes: the name, then the attributes by value
/// (ordered as the pairs of the sorted map).
fn key_cmp(r: &Reading, name: &str, attributes: &AttrSet) -> std::cmp::Ordering {
    r.name
        .as_ref()
        .cmp(name)
        .then_with(|| (*r.attributes).cmp(attributes))
}

/// Whether a stored series and a new sample are the same series: the same name and
/// attributes. Built-in collectors hand out the same `&'static` name and the same `Arc`
/// of attributes every time, so this is usually two pointer comparisons.
pub(super) fn same_series(stored: &Reading, s: &Sample) -> bool {
    same_str(&stored.name, &s.name)
        && (Arc::ptr_eq(&stored.attributes, &s.attributes) || stored.attributes == s.attributes)
}

pub(super) fn same_str(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// One ingest's clocks: wall (Unix nanoseconds) and monotonic (from the store's origin).
#[derive(Clone, Copy)]
pub(super) struct At {
    pub(super) now: u64,
    pub(super) mono: i64,
}

/// Record a new reading `s` of the series `p` by `plugin` at ingest `generation`.
pub(super) fn update(
    p: &mut Series,
    s: &Sample,
    plugin: &Arc<str>,
    generation: u64,
    metrics: &SelfMetrics,
    at: At,
) {
    let dt = (at.mono.saturating_sub(p.read_at)).max(0) as f64 / 1e9;
    let mut increase = None;
    // Whether a point of this run was published: its start then stays (a reset below
    // starts a new run, not published yet).
    let published = *p.published.time.get_mut();
    let run_published = published != 0 && published >= p.start;
    if s.kind == MetricKind::Counter {
        let (old, new) = (p.sample.value.as_f64(), s.value.as_f64());
        let expected = p.rate().map(|r| r * dt);
        let moved = counter_move(old, new, || overflow_of(&s.source), expected);
        let saturated = moved == Move::Saturated;
        match moved {
            Move::Increase(d) => {
                increase = Some(d);
                let sum = p.published.unpublished.get_mut();
                *sum = (f64::from_bits(*sum) + d).to_bits();
            }
            Move::Saturated => {}
            Move::Reset => {
                metrics.counter_reset(&s.name);
                tracing::debug!(series = %s.series_key(), old, new, "counter reset");
                p.start = at.now;
            }
        }
        if saturated != p.saturated {
            p.saturated = saturated;
            metrics.counter_saturated(&s.name, saturated);
            if saturated {
                // Said once per series, when it comes to rest there (not per collection).
                tracing::warn!(
                    series = %s.series_key(),
                    value = new,
                    source = %s.source,
                    "counter saturated: it stops at its maximum, so its rate is unknown until it is cleared (perfquery -R)"
                );
            }
        }
    }
    if !run_published {
        p.start = at.now;
    }
    p.sample.value = s.value;
    p.has_increase = increase.is_some();
    p.increase = increase.unwrap_or(0.0);
    p.interval = dt as f32;
    p.time = at.now;
    p.read_at = at.mono;
    p.generation = generation;
    if !Arc::ptr_eq(&p.plugin, plugin) {
        p.plugin = Arc::clone(plugin);
    }
}
