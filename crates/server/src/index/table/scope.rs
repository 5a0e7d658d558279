//! A node instance's scope: which namespaces its index holds, whole or in
//! part, and which Services it forwards although their namespace is held.
//! The table carries one ([`super::Table::scope`]) and never reads it:
//! `dns::resolve` asks it whether a question is answered here, the writer
//! keeps it as namespaces are listed, relist and leave.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwapOption;
use dashmap::{DashMap, DashSet};

/// What a node instance holds. On any other server it is never set, and
/// every namespace counts as held.
#[derive(Debug, Default)]
pub struct Scope {
    /// The namespaces held whole (listed from the relay); every other
    /// name is forwarded. `None`: not a node instance, the index holds
    /// everything it answers for.
    namespaces: ArcSwapOption<HashSet<Box<str>>>,
    /// Whether `namespaces` is set: what every query asks first, one
    /// plain load (an `ArcSwap` load is not free on the DNS path).
    node: AtomicBool,
    /// Headless Services without a selector, by namespace, when the relay
    /// does not serve EndpointSlices (one from before it did): their
    /// names are forwarded even in scope.
    unheld: DashMap<Box<str>, Vec<Box<str>>>,
    /// Namespaces held only in part (some gangs' pods).
    partial: DashSet<Box<str>>,
    /// The relay serves EndpointSlices, so they are held too.
    slices_held: AtomicBool,
    /// Namespaces out of scope only while a watch of theirs lists again:
    /// their names are forwarded, and answered from what the index still
    /// holds of them when no relay answers ([`Self::is_stale`]).
    stale: DashSet<Box<str>>,
}

impl Scope {
    /// Make this the scope of a node instance: nothing in it yet.
    pub fn set_node(&self) {
        self.namespaces.store(Some(Arc::new(HashSet::new())));
        self.node.store(true, Ordering::Release);
    }

    /// Whether this is a node instance's scope.
    pub fn is_node(&self) -> bool {
        self.node.load(Ordering::Relaxed)
    }

    /// Whether the names of namespace `ns` are answered from this index
    /// (always, except on a node instance, for the namespaces it holds).
    pub fn contains(&self, ns: &str) -> bool {
        self.namespaces
            .load()
            .as_ref()
            .is_none_or(|s| s.contains(ns))
    }

    /// The namespaces in a node instance's scope, sorted.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .namespaces
            .load()
            .as_ref()
            .map(|s| s.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// A node instance holds EndpointSlices (its relay serves them): set
    /// before the first namespace comes into scope.
    pub fn set_slices_held(&self, on: bool) {
        self.slices_held.store(on, Ordering::Release);
    }

    pub fn slices_held(&self) -> bool {
        self.slices_held.load(Ordering::Acquire)
    }

    /// Whether a node instance forwards the names of Service `svc` of `ns`
    /// although `ns` is in scope (a headless Service without a selector,
    /// from a relay that serves no EndpointSlices).
    pub fn is_unheld(&self, ns: &str, svc: &str) -> bool {
        self.unheld
            .get(ns)
            .is_some_and(|names| names.iter().any(|n| &**n == svc))
    }

    /// Whether a node instance holds only some gangs' pods of `ns`: then
    /// only a name found among them is answered here (a missing one may
    /// be another gang's), with the names of Services held whole.
    pub fn is_partial(&self, ns: &str) -> bool {
        self.partial.contains(ns)
    }

    /// Whether `ns` left a node instance's scope only to be listed again:
    /// what the index holds of it was whole until then, so a question the
    /// relays leave unanswered may be answered from it rather than get
    /// SERVFAIL (the stale answers of RFC 8767).
    pub fn is_stale(&self, ns: &str) -> bool {
        self.stale.contains(ns)
    }

    /// Mark or unmark `ns` as [`Self::is_stale`] (the writer).
    pub(crate) fn set_stale(&self, ns: &str, on: bool) {
        if on {
            self.stale.insert(ns.into());
        } else {
            self.stale.remove(ns);
        }
    }

    /// Mark or unmark `ns` as [`Self::is_partial`] (the writer).
    pub(crate) fn set_partial(&self, ns: &str, on: bool) {
        if on {
            self.partial.insert(ns.into());
        } else {
            self.partial.remove(ns);
        }
    }

    /// Mark or unmark a Service as [`Self::is_unheld`] (the writer).
    pub(crate) fn set_unheld(&self, ns: &str, svc: &str, on: bool) {
        if on {
            let mut names = self.unheld.entry(ns.into()).or_default();
            if !names.iter().any(|n| &**n == svc) {
                names.push(svc.into());
            }
        } else {
            let empty = self.unheld.get_mut(ns).is_some_and(|mut names| {
                names.retain(|n| &**n != svc);
                names.is_empty()
            });
            if empty {
                self.unheld.remove(ns);
            }
        }
    }

    /// Add or drop a namespace of a node instance's scope (the writer);
    /// the number of namespaces in scope after.
    pub(crate) fn set_contains(&self, ns: &str, on: bool) -> usize {
        let Some(now) = self.namespaces.load_full() else {
            return 0;
        };
        if now.contains(ns) == on {
            return now.len();
        }
        let mut next = (*now).clone();
        if on {
            next.insert(ns.into());
        } else {
            next.remove(ns);
        }
        let n = next.len();
        self.namespaces.store(Some(Arc::new(next)));
        n
    }
}
