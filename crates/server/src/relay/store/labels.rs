//! Which pod labels the relay serves: those a node instance reads, and no
//! more. A training pod carries a dozen labels (two controller uids, app
//! and chart labels) and nearly all of them are bytes on every one of its
//! events to every node that holds its namespace; a node reads only the
//! labels its Services select on and the rank view's.
//!
//! So a pod is served with the labels the rank view reads
//! ([`RANK_LABELS`]), those the Services of training operators select on
//! ([`OPERATOR_SELECTORS`], so that a gang whose Service is created after
//! its pods costs nothing), and the keys any Service of its namespace has
//! selected on since the relay started. A Service that brings a new key
//! widens its namespace's set: the relay serves that namespace's pods anew
//! and ends the watches that hold them as served before with 410 (the
//! cache's `rekey`), because a change of served labels has no
//! resourceVersion of its own and a client resuming from one would miss
//! it. The set never narrows while the relay runs: narrowing would serve
//! the same versions two ways for nothing.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use crate::labels::{OPERATOR_SELECTORS, RANK_LABELS};

/// The label keys served, by namespace.
#[derive(Debug, Default)]
pub struct ServedLabels {
    /// Keys Services have selected on, beyond the fixed ones, and the
    /// generation of their last widening.
    selected: RwLock<HashMap<String, Selected>>,
    /// How many times a set widened.
    generation: AtomicU64,
}

#[derive(Debug, Default)]
struct Selected {
    keys: HashSet<String>,
    generation: u64,
}

/// The served keys, held while pods are encoded and stored, so a widening
/// waits for them (and then serves them anew).
pub struct Served<'a> {
    guard: RwLockReadGuard<'a, HashMap<String, Selected>>,
    generation: u64,
}

impl Served<'_> {
    pub fn serves(&self, ns: &str, key: &str) -> bool {
        fixed(key) || self.guard.get(ns).is_some_and(|s| s.keys.contains(key))
    }

    /// Changes with every widening.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether `ns` widened after `generation`.
    pub fn widened_since(&self, ns: &str, generation: u64) -> bool {
        self.guard
            .get(ns)
            .is_some_and(|s| s.generation > generation)
    }
}

fn fixed(key: &str) -> bool {
    RANK_LABELS.contains(&key) || OPERATOR_SELECTORS.contains(&key)
}

impl ServedLabels {
    /// The keys served, until the guard is dropped.
    pub fn read(&self) -> Served<'_> {
        let guard = self.selected.read().unwrap_or_else(|p| p.into_inner());
        Served {
            guard,
            generation: self.generation.load(Ordering::Acquire),
        }
    }

    /// A Service of `ns` selects on `keys`: if any is new, add them and
    /// call `widened` (with the new set in force) before any pod is served
    /// with it.
    pub fn select<'k>(
        &self,
        ns: &str,
        keys: impl IntoIterator<Item = &'k str>,
        widened: impl FnOnce(&dyn Fn(&str) -> bool),
    ) {
        let new: Vec<&str> = {
            let r = self.read();
            keys.into_iter().filter(|k| !r.serves(ns, k)).collect()
        };
        if new.is_empty() {
            return;
        }
        let mut w = self.selected.write().unwrap_or_else(|p| p.into_inner());
        let sel = w.entry(ns.to_owned()).or_default();
        let mut grew = false;
        for k in new {
            grew |= sel.keys.insert(k.to_owned());
        }
        if grew {
            sel.generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
            tracing::info!(namespace = %ns, keys = ?sel.keys, "relay serves more pod labels in this namespace");
            let set = &sel.keys;
            widened(&|k: &str| fixed(k) || set.contains(k));
        }
    }
}

/// An object's labels, all of them (selectors match on every label, served
/// or not), in little memory: pairs sorted by key, each string shared with
/// every other object that carries it. A million pods hold a few thousand
/// distinct label strings, not sixteen million.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Labels(Arc<[(Arc<str>, Arc<str>)]>);

impl Labels {
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut strings = STRINGS.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(Arc<str>, Arc<str>)> = pairs
            .into_iter()
            .map(|(k, val)| (strings.get(k), strings.get(val)))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Self(v.into())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The label strings in use, shared.
static STRINGS: Mutex<Strings> = Mutex::new(Strings {
    set: None,
    swept: 0,
});

struct Strings {
    set: Option<HashSet<Arc<str>>>,
    /// The set's size after the last sweep.
    swept: usize,
}

impl Strings {
    fn get(&mut self, s: &str) -> Arc<str> {
        let set = self.set.get_or_insert_with(HashSet::new);
        if let Some(a) = set.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        set.insert(a.clone());
        // Forget the strings nobody holds any more, each time the set has
        // doubled: amortized O(1) a string.
        if set.len() > 2 * self.swept.max(1024) {
            set.retain(|a| Arc::strong_count(a) > 1);
            self.swept = set.len();
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_and_operator_keys_always_others_once_selected() {
        let s = ServedLabels::default();
        assert!(
            s.read()
                .serves("ml", "batch.kubernetes.io/job-completion-index")
        );
        assert!(s.read().serves("ml", "jobset.sigs.k8s.io/jobset-name"));
        assert!(s.read().serves("ml", "training.kubeflow.org/replica-type"));
        assert!(!s.read().serves("ml", "app"));
        assert!(!s.read().serves("ml", "controller-uid"));
        let mut calls = 0;
        s.select("ml", ["job-name"], |_| calls += 1);
        assert_eq!(calls, 0, "a rank key is served already");
        s.select("ml", ["app", "job-name"], |now| {
            calls += 1;
            assert!(now("app"));
        });
        assert_eq!(calls, 1);
        assert!(s.read().serves("ml", "app"));
        assert!(!s.read().serves("other", "app"), "per namespace");
        s.select("ml", ["app"], |_| calls += 1);
        assert_eq!(calls, 1, "once");
        let r = s.read();
        assert!(r.widened_since("ml", 0));
        assert!(!r.widened_since("ml", r.generation()));
        assert!(!r.widened_since("other", 0));
    }

    #[test]
    fn labels_are_looked_up_by_key_and_share_their_strings() {
        let a = Labels::new([("job-name", "train"), ("app", "x")]);
        let b = Labels::new([("app", "x")]);
        assert_eq!(a.get("app"), Some("x"));
        assert_eq!(a.get("job-name"), Some("train"));
        assert_eq!(a.get("nope"), None);
        assert_eq!(a.iter().next(), Some(("app", "x")), "sorted by key");
        assert!(Arc::ptr_eq(&a.0[0].1, &b.0[0].1));
    }
}
