//! A node instance's scope: which namespaces its index holds, whole or in
//! part, and which Services it forwards although their namespace is held.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Table;

impl Table {
    /// Make this the index of a node instance: nothing in scope yet.
    pub fn set_node_scope(&self) {
        self.scope.store(Some(Arc::new(HashSet::new())));
        self.node_scoped.store(true, Ordering::Release);
    }

    /// Whether this is a node instance's index.
    pub fn is_node_scoped(&self) -> bool {
        self.node_scoped.load(Ordering::Relaxed)
    }

    /// Whether the names of namespace `ns` are answered from this index
    /// (always, except on a node instance, for the namespaces it holds).
    pub fn in_scope(&self, ns: &str) -> bool {
        self.scope.load().as_ref().is_none_or(|s| s.contains(ns))
    }

    /// The namespaces in a node instance's scope.
    pub fn scope(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .scope
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
    pub(crate) fn set_in_scope(&self, ns: &str, on: bool) -> usize {
        let Some(now) = self.scope.load_full() else {
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
        self.scope.store(Some(Arc::new(next)));
        n
    }
}
