//! A series' attributes as a compact set: sorted `(key, value)` pairs of shared strings.
//!
//! A map per series is the bulk of a large host's memory when its series carry distinct
//! attribute sets (the QoS view at 2000 ports: 26 000 series of five attributes each).
//! A `BTreeMap<String, String>` of five pairs costs a 544-byte node and ten strings, about
//! 900 bytes; an [`AttrSet`] costs one slice of five pairs of pointers (160 bytes), its
//! strings shared through a process-wide table with every other set that names the same
//! key or value (device names, ports, setting names repeat across thousands of series).
//!
//! Order, equality and hashing are those of the sorted pairs, by value: an `AttrSet` and the
//! `BTreeMap` it was built from compare alike, and serialize alike (a JSON object, keys in
//! order), so the C ABI's JSON is unchanged.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::mem;
use std::sync::{Arc, Mutex};

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Sorted `(key, value)` pairs, keys unique. Built from a map, an iterator of pairs or by
/// [`AttrSet::insert`]; a key given twice keeps its last value (as a map's `insert`).
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttrSet {
    pairs: Box<[(Arc<str>, Arc<str>)]>,
}

impl AttrSet {
    /// The empty set.
    pub fn new() -> AttrSet {
        AttrSet::default()
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.pairs.binary_search_by(|(k, _)| k.as_ref().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| self.pairs[i].1.as_ref())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// The pairs, in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.pairs.iter())
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.pairs.iter().map(|(k, _)| k.as_ref())
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.pairs.iter().map(|(_, v)| v.as_ref())
    }

    /// Set `key` to `value`; the value it had, if any. Rebuilds the slice: for building a
    /// set once, not for a loop over a large one (collect an iterator instead).
    pub fn insert(&mut self, key: impl AsRef<str>, value: impl AsRef<str>) -> Option<String> {
        let value = intern(value.as_ref());
        match self.find(key.as_ref()) {
            Ok(i) => Some(std::mem::replace(&mut self.pairs[i].1, value).to_string()),
            Err(i) => {
                let mut v = std::mem::take(&mut self.pairs).into_vec();
                v.insert(i, (intern(key.as_ref()), value));
                self.pairs = v.into_boxed_slice();
                None
            }
        }
    }

    /// Remove `key`; the value it had, if any.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.find(key).ok()?;
        let mut v = std::mem::take(&mut self.pairs).into_vec();
        let (_, old) = v.remove(i);
        self.pairs = v.into_boxed_slice();
        Some(old.to_string())
    }

    pub fn clear(&mut self) {
        self.pairs = Box::default();
    }

    /// The pairs as an owned map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// From pairs in any order; a repeated key keeps its last value.
    fn from_pairs(mut v: Vec<(Arc<str>, Arc<str>)>) -> AttrSet {
        // Stable: among equal keys the last given stays last, and is the one kept.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Arc<str>, Arc<str>)> = Vec::with_capacity(v.len());
        for p in v {
            match out.last_mut() {
                Some(last) if last.0 == p.0 => *last = p,
                _ => out.push(p),
            }
        }
        AttrSet {
            pairs: out.into_boxed_slice(),
        }
    }
}

/// The pairs of an [`AttrSet`], in key order.
#[derive(Clone, Debug)]
pub struct Iter<'a>(std::slice::Iter<'a, (Arc<str>, Arc<str>)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a AttrSet {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for AttrSet {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> AttrSet {
        AttrSet::from_pairs(
            iter.into_iter()
                .map(|(k, v)| (intern(k.as_ref()), intern(v.as_ref())))
                .collect(),
        )
    }
}

impl From<BTreeMap<String, String>> for AttrSet {
    fn from(m: BTreeMap<String, String>) -> AttrSet {
        m.iter().collect()
    }
}

impl From<&BTreeMap<String, String>> for AttrSet {
    fn from(m: &BTreeMap<String, String>) -> AttrSet {
        m.iter().collect()
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> From<[(K, V); N]> for AttrSet {
    fn from(pairs: [(K, V); N]) -> AttrSet {
        pairs.into_iter().collect()
    }
}

/// The value of a key that must be there (as a map's index: panics without it).
impl std::ops::Index<&str> for AttrSet {
    type Output = str;
    fn index(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("no attribute {key:?} in {self:?}"))
    }
}

impl fmt::Debug for AttrSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for AttrSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for AttrSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AttrSet, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = AttrSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of string attributes")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AttrSet, A::Error> {
                let mut v = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some((Interned(k), Interned(val))) = map.next_entry()? {
                    v.push((k, val));
                }
                Ok(AttrSet::from_pairs(v))
            }
        }
        d.deserialize_map(Pairs)
    }
}

/// A JSON string read straight into the table: borrowed or unescaped into a scratch
/// buffer by the deserializer, never into a `String` of its own first.
struct Interned(Arc<str>);

impl<'de> Deserialize<'de> for Interned {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Interned, D::Error> {
        struct Str;
        impl Visitor<'_> for Str {
            type Value = Interned;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Interned, E> {
                Ok(Interned(intern(s)))
            }
        }
        d.deserialize_str(Str)
    }
}

/// Equal sets as one `Arc`, for an emitter that builds its series' attributes anew on
/// every read (the QoS view): [`SetCache::share`] gives back the `Arc` it gave for an equal
/// set the read before, so the series' sets are not built twice over and the store matches
/// them by pointer. Bounded: [`SetCache::sweep`] after each read forgets what that read did
/// not share.
#[derive(Debug, Default)]
pub struct SetCache {
    now: HashSet<crate::Attributes>,
    before: HashSet<crate::Attributes>,
}

impl SetCache {
    /// The shared `Arc` of `set`.
    pub fn share(&mut self, set: AttrSet) -> crate::Attributes {
        if let Some(a) = self.now.get(&set) {
            return Arc::clone(a);
        }
        let a = self.before.take(&set).unwrap_or_else(|| Arc::new(set));
        self.now.insert(Arc::clone(&a));
        a
    }

    /// End of a read: the sets it did not share are forgotten.
    pub fn sweep(&mut self) {
        self.before = mem::take(&mut self.now);
    }

    /// How many sets it holds.
    pub fn len(&self) -> usize {
        self.now.len() + self.before.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The process-wide table of attribute strings. A string no set holds any more stays in it
/// until the next prune, which runs when a new string would make the table twice what the
/// last prune left (or 4096, the floor): the table holds at most twice the strings that
/// were in use at the last prune, or the floor.
struct Interner {
    strings: HashSet<Arc<str>>,
    prune_at: usize,
}

const PRUNE_FLOOR: usize = 4096;

static INTERNER: Mutex<Option<Interner>> = Mutex::new(None);

/// The shared copy of `s`.
pub fn intern(s: &str) -> Arc<str> {
    let mut guard = INTERNER.lock().unwrap_or_else(|p| p.into_inner());
    let t = guard.get_or_insert_with(|| Interner {
        strings: HashSet::new(),
        prune_at: PRUNE_FLOOR,
    });
    if let Some(a) = t.strings.get(s) {
        return Arc::clone(a);
    }
    if t.strings.len() >= t.prune_at {
        t.strings.retain(|a| Arc::strong_count(a) > 1);
        t.prune_at = (t.strings.len() * 2).max(PRUNE_FLOOR);
        // Room for the strings up to the next prune, no more (not `shrink_to_fit`: the
        // insert below would grow it again at once).
        t.strings.shrink_to(t.prune_at);
    }
    let a: Arc<str> = Arc::from(s);
    t.strings.insert(Arc::clone(&a));
    a
}

/// How many strings the table holds (for tests of its bound).
pub fn interned() -> usize {
    INTERNER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map_or(0, |t| t.strings.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_set_reads_orders_and_serializes_as_the_map_it_came_from() {
        let m = map(&[("rdma.port", "1"), ("rdma.device", "mlx5_0"), ("a", "")]);
        let s = AttrSet::from(&m);
        assert_eq!(s.len(), 3);
        assert_eq!(s.get("rdma.device"), Some("mlx5_0"));
        assert_eq!(s.get("rdma.netdev"), None);
        assert!(s.contains_key("a"));
        assert_eq!(
            s.keys().collect::<Vec<_>>(),
            ["a", "rdma.device", "rdma.port"]
        );
        assert_eq!(s.to_map(), m);
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            serde_json::to_string(&m).unwrap()
        );
        let back: AttrSet = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(format!("{s:?}"), format!("{m:?}"));
    }

    #[test]
    fn insert_and_remove_keep_the_pairs_sorted_and_unique() {
        let mut s = AttrSet::new();
        assert_eq!(s.insert("b", "2"), None);
        assert_eq!(s.insert("a", "1"), None);
        assert_eq!(s.insert("b", "3"), Some("2".to_string()));
        assert_eq!(s.iter().collect::<Vec<_>>(), [("a", "1"), ("b", "3")]);
        assert_eq!(s.remove("a"), Some("1".to_string()));
        assert_eq!(s.remove("a"), None);
        assert_eq!(s, AttrSet::from([("b", "3")]));
        s.clear();
        assert!(s.is_empty());
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_as_a_map_does() {
        let s: AttrSet = [("k", "first"), ("j", "x"), ("k", "last")]
            .into_iter()
            .collect();
        assert_eq!(s.iter().collect::<Vec<_>>(), [("j", "x"), ("k", "last")]);
        let json: AttrSet = serde_json::from_str(r#"{"k":"first","k":"last"}"#).unwrap();
        assert_eq!(json.get("k"), Some("last"));
        let err = serde_json::from_str::<AttrSet>(r#"{"k":1}"#).unwrap_err();
        assert!(err.to_string().contains("expected a string"), "{err}");
        let err = serde_json::from_str::<AttrSet>(r#"["k"]"#).unwrap_err();
        assert!(
            err.to_string().contains("an object of string attributes"),
            "{err}"
        );
    }

    #[test]
    fn escaped_strings_are_read_unescaped() {
        let s: AttrSet = serde_json::from_str(r#"{"k\u0041":"a\"b\\c\n"}"#).unwrap();
        assert_eq!(s.get("kA"), Some("a\"b\\c\n"));
        let back: AttrSet = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn sets_share_their_strings() {
        let a = AttrSet::from([("rdma.device", "mlx5_shared_test")]);
        let b: AttrSet = serde_json::from_str(r#"{"rdma.device":"mlx5_shared_test"}"#).unwrap();
        assert!(Arc::ptr_eq(&a.pairs[0].0, &b.pairs[0].0));
        assert!(Arc::ptr_eq(&a.pairs[0].1, &b.pairs[0].1));
    }

    #[test]
    fn a_cache_shares_equal_sets_and_forgets_what_a_read_did_not_share() {
        let mut c = SetCache::default();
        let a = c.share(AttrSet::from([("k", "1")]));
        let b = c.share(AttrSet::from([("k", "2")]));
        assert!(Arc::ptr_eq(&a, &c.share(AttrSet::from([("k", "1")]))));
        c.sweep();
        // The next read shares `a` again, not `b`.
        assert!(Arc::ptr_eq(&a, &c.share(AttrSet::from([("k", "1")]))));
        c.sweep();
        assert_eq!(c.len(), 1, "only what the last read shared");
        let b2 = c.share(AttrSet::from([("k", "2")]));
        assert!(!Arc::ptr_eq(&b, &b2), "b was forgotten");
        assert_eq!(b, b2);
    }

    #[test]
    fn the_string_table_drops_what_no_set_holds() {
        // Many distinct values, none kept: the table is pruned as it doubles, so it never
        // holds more than twice its floor plus what other tests keep alive.
        for i in 0..(PRUNE_FLOOR * 8) {
            let _ = AttrSet::from([("drop.test", format!("value-{i}"))]);
        }
        assert!(interned() <= 2 * PRUNE_FLOOR + 64, "{} strings", interned());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn a_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        proptest::collection::btree_map("[a-c.]{0,3}", "[x-z]{0,2}", 0..5)
    }

    proptest! {
        #[test]
        fn sets_compare_as_their_maps(a in a_map(), b in a_map()) {
            let (sa, sb) = (AttrSet::from(&a), AttrSet::from(&b));
            prop_assert_eq!(sa.cmp(&sb), a.cmp(&b));
            prop_assert_eq!(sa == sb, a == b);
            prop_assert_eq!(sa.to_map(), a);
        }

        #[test]
        fn any_json_reads_as_a_set_or_an_error_never_a_panic(s in "\\PC{0,40}") {
            let _ = serde_json::from_str::<AttrSet>(&s);
        }

        /// Objects as a plugin's JSON may hold them: repeated keys, escapes, values that
        /// are not strings. A set when every value is a string (the last of a repeated key
        /// kept, as a map keeps it), else an error saying a string was expected.
        #[test]
        fn objects_read_as_their_maps_or_name_the_value_that_is_not_a_string(
            entries in proptest::collection::vec(
                ("[a-c\"\\\\é]{0,3}", prop_oneof![
                    "[x-z\"\\\\\n]{0,3}".prop_map(serde_json::Value::from),
                    any::<i64>().prop_map(serde_json::Value::from),
                    Just(serde_json::Value::Null),
                    Just(serde_json::json!({"nested": "x"})),
                ]),
                0..6,
            )
        ) {
            let body: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), v))
                .collect();
            let json = format!("{{{}}}", body.join(","));
            let all_strings = entries.iter().all(|(_, v)| v.is_string());
            match serde_json::from_str::<AttrSet>(&json) {
                Ok(set) => {
                    prop_assert!(all_strings, "{json} read as {set:?}");
                    let want: BTreeMap<String, String> = entries
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect();
                    prop_assert_eq!(set.to_map(), want);
                }
                Err(e) => {
                    prop_assert!(!all_strings, "{json}: {e}");
                    prop_assert!(e.to_string().contains("expected a string"), "{json}: {e}");
                }
            }
        }
    }
}
