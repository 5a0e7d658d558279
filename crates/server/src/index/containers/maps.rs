//! Hash maps and sets as the index keys them, and removing from a set
//! held in a map.

use std::collections::{BTreeMap, BTreeSet};

use super::small_set::SmallSet;

/// The index's hash maps: foldhash, several times faster than SipHash on
/// its short keys, and seeded at random per map (the keys are names that
/// anyone who can create a pod chooses).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// Remove `v` from the set at `k`, dropping the set when it empties.
pub(crate) fn remove_from<K, V, S, M>(map: &mut M, k: &K, v: &V)
where
    M: MapLike<K, S>,
    S: SetLike<V>,
{
    if let Some(set) = map.get_mut_(k) {
        set.remove_(v);
        if set.is_empty_() {
            map.remove_(k);
        }
    }
}

pub(crate) trait MapLike<K, V> {
    fn get_mut_(&mut self, k: &K) -> Option<&mut V>;
    fn remove_(&mut self, k: &K);
}

impl<K: std::hash::Hash + Eq, V> MapLike<K, V> for HashMap<K, V> {
    fn get_mut_(&mut self, k: &K) -> Option<&mut V> {
        self.get_mut(k)
    }
    fn remove_(&mut self, k: &K) {
        self.remove(k);
    }
}

impl<K: Ord, V> MapLike<K, V> for BTreeMap<K, V> {
    fn get_mut_(&mut self, k: &K) -> Option<&mut V> {
        self.get_mut(k)
    }
    fn remove_(&mut self, k: &K) {
        self.remove(k);
    }
}

pub(crate) trait SetLike<V> {
    fn remove_(&mut self, v: &V);
    fn is_empty_(&self) -> bool;
}

impl<V: Ord> SetLike<V> for BTreeSet<V> {
    fn remove_(&mut self, v: &V) {
        self.remove(v);
    }
    fn is_empty_(&self) -> bool {
        self.is_empty()
    }
}

impl<V: Ord> SetLike<V> for SmallSet<V> {
    fn remove_(&mut self, v: &V) {
        self.remove(v);
    }
    fn is_empty_(&self) -> bool {
        self.is_empty()
    }
}
