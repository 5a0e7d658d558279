//! What a node instance may read from the relay, by node: the Node
//! authorizer's rule for kubelets (a kubelet reads what its own pods
//! need), applied to the pods' names.
//!
//! A node instance's token, when the API server bound it to a pod
//! (a projected ServiceAccount token), names that pod's node in its extra
//! information (KEP-4193). Such a client may read:
//!
//! - the Pods on its node, cluster-wide (`fieldSelector=spec.nodeName=N`);
//! - in a namespace where a pod of its node is, or was within the
//!   linger: its Services, Jobs and EndpointSlices, and its Pods;
//! - but when every pod of its node there names a gang by the same label
//!   ([`GANG_KEYS`](crate::labels::GANG_KEYS)), only those gangs' Pods (`labelSelector=key in (…)`):
//!   the pods a node instance holds then (`node`).
//!
//! Gangs and namespaces stay readable for the linger after their last pod
//! left the node, as a node instance keeps them (a gang restart deletes
//! and recreates every pod). [`NodeScopes`] counts, per node, the pods by
//! namespace and gang as the relay's Pod cache changes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use podns_kapi::selector::LabelSelector;

use crate::labels::gang_of;

use super::labels::Labels;

/// Where a pod is, as [`NodeScopes`] counts it: its node (`spec.nodeName`,
/// empty when not scheduled), its namespace and all its labels.
#[derive(Clone, Copy)]
pub struct Pod<'a> {
    pub node: &'a str,
    pub ns: &'a str,
    pub labels: &'a Labels,
}

/// How long a node may still read a namespace or gang after its last pod
/// there left, unless `--scope-linger` says otherwise (a node instance
/// keeps them as long by default).
pub const LINGER: Duration = Duration::from_secs(5 * 60);

type Gang = Option<(&'static str, String)>;

/// One namespace of one node: its pods by gang (`None`: pods without
/// one), and since when a gang has had none.
#[derive(Debug, Default)]
struct Here {
    pods: HashMap<Gang, u32>,
    left: HashMap<Gang, Instant>,
}

impl Here {
    /// The gangs held now: with a pod, or left less than `linger` ago.
    fn held(&self, linger: Duration, now: Instant) -> impl Iterator<Item = &Gang> {
        self.pods.keys().chain(
            self.left
                .iter()
                .filter(move |(_, at)| now.duration_since(**at) < linger)
                .map(|(g, _)| g),
        )
    }
}

/// Why a request is outside its node's scope.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutOfScope {
    #[error("a node instance reads only its node's pods (fieldSelector=spec.nodeName={0})")]
    NotItsNode(String),
    #[error("a node instance reads only the namespaces of its node's pods")]
    ClusterWide,
    #[error("no pod of node {node} is in namespace {namespace}")]
    Namespace { node: String, namespace: String },
    #[error(
        "node {node} holds only the gangs of its pods in namespace {namespace} ({key} in ({allowed}))"
    )]
    Gangs {
        node: String,
        namespace: String,
        key: &'static str,
        allowed: String,
    },
}

/// Pods by node, namespace and gang.
#[derive(Debug)]
pub struct NodeScopes {
    nodes: Mutex<Nodes>,
    linger: Duration,
}

#[derive(Debug)]
struct Nodes {
    by_node: HashMap<String, HashMap<String, Here>>,
    /// When every namespace was last swept of what left a linger ago.
    swept: Instant,
}

impl Nodes {
    /// Forget the gangs that left longer than `linger` ago everywhere,
    /// and the namespaces and nodes left with nothing.
    fn sweep(&mut self, linger: Duration, now: Instant) {
        self.swept = now;
        self.by_node.retain(|_, spaces| {
            spaces.retain(|_, here| {
                here.left.retain(|_, at| now.duration_since(*at) < linger);
                !(here.pods.is_empty() && here.left.is_empty())
            });
            !spaces.is_empty()
        });
    }
}

impl NodeScopes {
    pub fn new(linger: Duration) -> Self {
        Self {
            nodes: Mutex::new(Nodes {
                by_node: HashMap::new(),
                swept: Instant::now(),
            }),
            linger,
        }
    }

    /// A pod moved from `before` (where its previous version was, if any)
    /// to `after` (none when deleted).
    pub fn moved(&self, before: Option<Pod<'_>>, after: Option<Pod<'_>>) {
        let place = |p: Pod<'_>| {
            (!p.node.is_empty()).then(|| {
                (
                    p.node.to_owned(),
                    p.ns.to_owned(),
                    gang_of(|k| p.labels.get(k)),
                )
            })
        };
        let (from, to) = (before.and_then(place), after.and_then(place));
        if from == to {
            return;
        }
        let now = Instant::now();
        let mut g = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(g.swept) >= self.linger {
            g.sweep(self.linger, now);
        }
        let nodes = &mut g.by_node;
        if let Some((node, ns, gang)) = from
            && let Some(spaces) = nodes.get_mut(&node)
            && let Some(here) = spaces.get_mut(&ns)
        {
            if let Some(n) = here.pods.get_mut(&gang) {
                *n -= 1;
                if *n == 0 {
                    here.pods.remove(&gang);
                    here.left.insert(gang, now);
                }
            }
            // Forget what left longer than the linger ago.
            let linger = self.linger;
            here.left.retain(|_, at| now.duration_since(*at) < linger);
            if here.pods.is_empty() && here.left.is_empty() {
                spaces.remove(&ns);
                if spaces.is_empty() {
                    nodes.remove(&node);
                }
            }
        }
        if let Some((node, ns, gang)) = to {
            let here = nodes.entry(node).or_default().entry(ns).or_default();
            here.left.remove(&gang);
            *here.pods.entry(gang).or_default() += 1;
        }
    }

    /// Whether `node`'s instance may read namespace `ns` (`None`: every
    /// namespace), Pods (`pods`) with this label selector and this pinned
    /// `spec.nodeName`, or another kind.
    pub fn allows(
        &self,
        node: &str,
        ns: Option<&str>,
        pods: Option<(&LabelSelector, Option<&str>)>,
    ) -> Result<(), OutOfScope> {
        let Some(ns) = ns else {
            // Cluster-wide: only its own node's pods.
            return match pods {
                Some((_, Some(pinned))) if pinned == node => Ok(()),
                Some(_) => Err(OutOfScope::NotItsNode(node.to_owned())),
                None => Err(OutOfScope::ClusterWide),
            };
        };
        if let Some((_, Some(pinned))) = pods
            && pinned == node
        {
            return Ok(()); // its own pods, in any namespace
        }
        let now = Instant::now();
        let g = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let held: Vec<&Gang> = g
            .by_node
            .get(node)
            .and_then(|spaces| spaces.get(ns))
            .map(|here| here.held(self.linger, now).collect())
            .unwrap_or_default();
        if held.is_empty() {
            return Err(OutOfScope::Namespace {
                node: node.to_owned(),
                namespace: ns.to_owned(),
            });
        }
        let Some((selector, _)) = pods else {
            return Ok(()); // Services, Jobs, EndpointSlices: the namespace's
        };
        // A pod without a gang, or gangs named by different labels: the
        // node instance holds the whole namespace.
        let Some(Some((key, _))) = held.first() else {
            return Ok(());
        };
        if held
            .iter()
            .any(|g| g.as_ref().is_none_or(|(k, _)| k != key))
        {
            return Ok(());
        }
        let allowed = |v: &str| held.iter().any(|g| g.as_ref().is_some_and(|(_, x)| x == v));
        match selector.pinned_values(key) {
            Some(values) if values.iter().all(|v| allowed(v)) => Ok(()),
            _ => {
                let mut names: Vec<&str> = held
                    .iter()
                    .filter_map(|g| g.as_ref().map(|(_, v)| v.as_str()))
                    .collect();
                names.sort_unstable();
                names.dedup();
                Err(OutOfScope::Gangs {
                    node: node.to_owned(),
                    namespace: ns.to_owned(),
                    key,
                    allowed: names.join(","),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod's place; names do not count.
    fn pod(ns: &str, _name: &str, node: &str, labels: &[(&str, &str)]) -> (String, String, Labels) {
        (node.into(), ns.into(), Labels::new(labels.iter().copied()))
    }

    fn at(p: &(String, String, Labels)) -> Option<Pod<'_>> {
        Some(Pod {
            node: &p.0,
            ns: &p.1,
            labels: &p.2,
        })
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap()
    }

    const JS: &str = "jobset.sigs.k8s.io/jobset-name";

    #[test]
    fn a_node_reads_its_pods_and_the_gangs_and_namespaces_they_are_in() {
        let s = NodeScopes::new(Duration::from_secs(60));
        let a0 = pod("ml", "a-0", "n1", &[(JS, "a"), ("x", "y")]);
        let b0 = pod("ml", "b-0", "n2", &[(JS, "b")]);
        let w = pod("web", "w", "n1", &[("app", "w")]);
        s.moved(None, at(&a0));
        s.moved(None, at(&b0));
        s.moved(None, at(&w));
        let any = sel("");
        // Its node's pods cluster-wide; another node's, or all, never.
        assert_eq!(s.allows("n1", None, Some((&any, Some("n1")))), Ok(()));
        assert!(s.allows("n1", None, Some((&any, Some("n2")))).is_err());
        assert!(s.allows("n1", None, Some((&any, None))).is_err());
        assert_eq!(s.allows("n1", None, None), Err(OutOfScope::ClusterWide));
        // A gang namespace: its gang's pods and the namespace's Services.
        assert_eq!(
            s.allows(
                "n1",
                Some("ml"),
                Some((&sel(&format!("{JS} in (a)")), None))
            ),
            Ok(())
        );
        assert!(matches!(
            s.allows(
                "n1",
                Some("ml"),
                Some((&sel(&format!("{JS} in (a,b)")), None))
            ),
            Err(OutOfScope::Gangs { .. })
        ));
        assert!(
            s.allows("n1", Some("ml"), Some((&any, None))).is_err(),
            "the whole namespace"
        );
        assert_eq!(s.allows("n1", Some("ml"), None), Ok(()));
        // A namespace with a pod without a gang: all of it.
        assert_eq!(s.allows("n1", Some("web"), Some((&any, None))), Ok(()));
        // A namespace without a pod of its node: nothing.
        assert!(matches!(
            s.allows("n2", Some("web"), None),
            Err(OutOfScope::Namespace { .. })
        ));
        assert!(s.allows("n3", Some("ml"), None).is_err());
    }

    #[test]
    fn a_gang_that_left_stays_readable_for_the_linger_only() {
        let s = NodeScopes::new(Duration::from_millis(50));
        let a0 = pod("ml", "a-0", "n1", &[(JS, "a")]);
        let b0 = pod("ml", "b-0", "n1", &[(JS, "b")]);
        s.moved(None, at(&a0));
        s.moved(None, at(&b0));
        s.moved(at(&a0), None);
        let a = sel(&format!("{JS}=a"));
        assert_eq!(
            s.allows("n1", Some("ml"), Some((&a, None))),
            Ok(()),
            "lingering"
        );
        // A pod moving to another node leaves this one.
        let moved = pod("ml", "b-0", "n2", &[(JS, "b")]);
        s.moved(at(&b0), at(&moved));
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.allows("n1", Some("ml"), None).is_ok() {
            assert!(Instant::now() < deadline, "the linger never ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(s.allows("n1", Some("ml"), Some((&a, None))).is_err());
        assert_eq!(s.allows("n2", Some("ml"), None), Ok(()));
    }
}
