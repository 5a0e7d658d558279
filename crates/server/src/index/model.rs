//! The writer's compact copy of a pod. A [`PodInfo`] as the watch hands it
//! over spends most of its bytes on labels and annotations (a JobSet pod
//! has about fourteen `String` pairs, ≈ 1.4 KB), nearly all of them the
//! same across the pods of a Job. The writer keeps every label (a Service
//! created later may select on any of them), but each distinct key=value
//! pair once, shared by the pods that carry it.

use std::net::IpAddr;
use std::sync::Arc;

use super::types::{ContainerPort, Phase, PodInfo};
use super::writer::{HashSet, SmallSet};

/// One label or annotation, shared by every pod that carries it.
pub(crate) type Pair = Arc<(Box<str>, Box<str>)>;

/// The distinct label and annotation pairs of the pods in the model.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    pairs: HashSet<Pair>,
}

impl Interner {
    fn pair(&mut self, (k, v): (String, String)) -> Pair {
        let p = (k.into_boxed_str(), v.into_boxed_str());
        if let Some(shared) = self.pairs.get(&p) {
            return shared.clone();
        }
        let shared = Arc::new(p);
        self.pairs.insert(shared.clone());
        shared
    }

    fn pairs(&mut self, v: Vec<(String, String)>) -> Box<[Pair]> {
        v.into_iter().map(|p| self.pair(p)).collect()
    }

    /// Give back the pairs of a pod leaving the model; a pair nobody else
    /// holds leaves the interner. (A pod may hold a pair twice, as label and
    /// as annotation: the first copy sees a count of 3, the last one 2.)
    fn release(&mut self, pairs: impl IntoIterator<Item = Pair>) {
        for p in pairs {
            if Arc::strong_count(&p) == 2 {
                self.pairs.remove(&*p);
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }
}

/// What the writer keeps of a pod: [`PodInfo`] without the uid (no name
/// depends on it), with boxed slices instead of vectors, shared pairs, and
/// the namespace, subdomain and hostname shared with the writer's indexes.
#[derive(Clone, Debug)]
pub(crate) struct Pod {
    pub ns: Arc<str>,
    pub name: Arc<str>,
    pub hostname: Option<Arc<str>>,
    pub subdomain: Option<Arc<str>>,
    pub ips: Box<[IpAddr]>,
    pub created: i64,
    pub phase: Phase,
    pub ready: bool,
    pub deleting: bool,
    pub host_network: bool,
    pub labels: Box<[Pair]>,
    pub annotations: Box<[Pair]>,
    pub ports: Box<[ContainerPort]>,
    /// The headless Services (of its namespace) that select the pod.
    pub services: SmallSet<Box<str>>,
}

impl Pod {
    /// The pod of `p`, with its namespace, name, hostname and subdomain as
    /// the writer shares them.
    pub(crate) fn new(
        p: PodInfo,
        ns: Arc<str>,
        name: Arc<str>,
        hostname: Option<Arc<str>>,
        subdomain: Option<Arc<str>>,
        interner: &mut Interner,
    ) -> Self {
        Self {
            ns,
            name,
            hostname,
            subdomain,
            ips: p.ips.into_boxed_slice(),
            created: p.created,
            phase: p.phase,
            ready: p.ready,
            deleting: p.deleting,
            host_network: p.host_network,
            labels: interner.pairs(p.labels),
            annotations: interner.pairs(p.annotations),
            ports: p.ports.into_boxed_slice(),
            services: SmallSet::default(),
        }
    }

    /// Give the pod's pairs back to the interner (the pod is leaving).
    pub(crate) fn release(self, interner: &mut Interner) {
        interner.release(
            Vec::from(self.labels)
                .into_iter()
                .chain(Vec::from(self.annotations)),
        );
    }

    /// Does `p` say the same as this pod, for everything the index reads?
    pub(crate) fn same_as(&self, p: &PodInfo) -> bool {
        let pairs = |mine: &[Pair], theirs: &[(String, String)]| {
            mine.len() == theirs.len()
                && mine
                    .iter()
                    .zip(theirs)
                    .all(|(m, (k, v))| *m.0 == **k && *m.1 == **v)
        };
        *self.ns == *p.key.namespace
            && *self.name == *p.key.name
            && self.hostname.as_deref() == p.hostname.as_deref()
            && self.subdomain.as_deref() == p.subdomain.as_deref()
            && *self.ips == *p.ips
            && self.created == p.created
            && self.phase == p.phase
            && self.ready == p.ready
            && self.deleting == p.deleting
            && self.host_network == p.host_network
            && pairs(&self.labels, &p.labels)
            && pairs(&self.annotations, &p.annotations)
            && *self.ports == *p.ports
    }

    /// The duplicate rule's order: of pods that claim one name, Ready
    /// before not Ready, then Running, then the older creation, then name
    /// (then namespace: pods of several namespaces share an IP's PTR, and
    /// the order never depends on the order of ids).
    pub(crate) fn duplicate_order(&self, other: &Pod) -> std::cmp::Ordering {
        other
            .ready
            .cmp(&self.ready)
            .then_with(|| (other.phase == Phase::Running).cmp(&(self.phase == Phase::Running)))
            .then_with(|| self.created.cmp(&other.created))
            .then_with(|| self.name.cmp(&other.name))
            .then_with(|| self.ns.cmp(&other.ns))
    }

    /// The value of label `key`, if the pod has it.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        find(&self.labels, key)
    }

    pub(crate) fn annotation(&self, key: &str) -> Option<&str> {
        find(&self.annotations, key)
    }

    pub(crate) fn has_label(&self, key: &str, value: &str) -> bool {
        self.labels.iter().any(|p| *p.0 == *key && *p.1 == *value)
    }
}

fn find<'a>(pairs: &'a [Pair], key: &str) -> Option<&'a str> {
    pairs.iter().find(|p| *p.0 == *key).map(|p| &*p.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::testing::{PodExt, pod};

    #[test]
    fn pairs_are_shared_and_released_with_the_last_pod() {
        let mut i = Interner::default();
        let mut a = pod("ml", "a", "10.0.0.1").label("app", "x").label("k", "v");
        a.annotations = vec![("k".into(), "v".into())];
        let b = pod("ml", "b", "10.0.0.2").label("app", "x");
        let new = |p: PodInfo, i: &mut Interner| {
            let (ns, name) = (p.key.namespace.as_str().into(), p.key.name.as_str().into());
            Pod::new(p, ns, name, None, None, i)
        };
        let (pa, pb) = (new(a.clone(), &mut i), new(b, &mut i));
        assert_eq!(i.len(), 2);
        assert!(Arc::ptr_eq(&pa.labels[0], &pb.labels[0]));
        assert!(pa.same_as(&a));
        assert_eq!(pa.label("k"), Some("v"));
        assert_eq!(pa.annotation("k"), Some("v"));
        assert!(pa.has_label("app", "x") && !pa.has_label("app", "y"));
        pa.release(&mut i);
        assert_eq!(i.len(), 1, "app=x is still held by b");
        pb.release(&mut i);
        assert_eq!(i.len(), 0);
    }
}
