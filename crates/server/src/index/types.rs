//! What the index is fed: the few facts of a Pod or Service that DNS needs,
//! already validated by `k8s::convert`.

use std::net::IpAddr;

/// Namespace and name: the identity of an object within its kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    pub namespace: String,
    pub name: String,
}

impl ObjKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Phase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    pub fn parse(s: &str) -> Self {
        match s {
            "Running" => Phase::Running,
            "Succeeded" => Phase::Succeeded,
            "Failed" => Phase::Failed,
            "Pending" => Phase::Pending,
            _ => Phase::Unknown,
        }
    }
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Proto {
    #[default]
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    /// `TCP`, `UDP`, `SCTP` as Kubernetes spells them; anything else is rejected.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "TCP" => Some(Proto::Tcp),
            "UDP" => Some(Proto::Udp),
            "SCTP" => Some(Proto::Sctp),
            _ => None,
        }
    }
    /// The SRV label, without the underscore.
    pub fn label(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        }
    }
}

/// A container port: kept so a headless Service's named `targetPort` can be
/// resolved to the number the pod really listens on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub port: u16,
    pub protocol: Proto,
}

/// The DNS-relevant part of a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    pub key: ObjKey,
    pub uid: String,
    /// `spec.hostname` (a valid DNS label) if set.
    pub hostname: Option<String>,
    /// `spec.subdomain` (a valid DNS label) if set.
    pub subdomain: Option<String>,
    pub host_network: bool,
    /// `status.podIPs` (falling back to `status.podIP`), in order, no duplicates.
    pub ips: Vec<IpAddr>,
    pub phase: Phase,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.creationTimestamp` in seconds since the epoch (0 if unset).
    pub created: i64,
    pub labels: Vec<(String, String)>,
    /// Annotations the index uses (e.g. the Job completion index); others are dropped.
    pub annotations: Vec<(String, String)>,
    pub ports: Vec<ContainerPort>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetPort {
    /// Unset: the Service port itself.
    Same,
    Number(u16),
    Name(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub name: Option<String>,
    pub port: u16,
    pub protocol: Proto,
    pub target: TargetPort,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    /// A Service with one or more ClusterIPs (ClusterIP, NodePort, LoadBalancer).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`.
    Headless,
    /// `type: ExternalName`; the target as written, without a trailing dot.
    ExternalName(String),
}

/// The DNS-relevant part of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    pub key: ObjKey,
    pub uid: String,
    pub kind: ServiceKind,
    /// `None`: no selector (endpoints are managed by hand; podns publishes none).
    pub selector: Option<Vec<(String, String)>>,
    pub publish_not_ready: bool,
    pub ports: Vec<ServicePort>,
}

/// The rank-view part of a batch/v1 Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub key: ObjKey,
    pub uid: String,
    /// `spec.completions`: the number of ranks of an Indexed Job.
    pub completions: Option<u32>,
    pub parallelism: Option<u32>,
    pub labels: Vec<(String, String)>,
}

/// One port of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePort {
    /// A valid DNS label, else `None` (the port then has no SRV name of
    /// its own).
    pub name: Option<String>,
    pub port: u16,
    pub protocol: Proto,
}

/// One endpoint of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceEndpoint {
    /// `addresses`, parsed, in order, without duplicates.
    pub ips: Vec<IpAddr>,
    /// `hostname` (a valid DNS label) if set.
    pub hostname: Option<String>,
    /// `conditions.ready`; unset counts as ready, as the API says.
    pub ready: bool,
    /// `conditions.terminating` is true.
    pub terminating: bool,
}

/// The DNS-relevant part of a discovery.k8s.io/v1 EndpointSlice: podns
/// reads only slices the EndpointSlice controller does not manage, and
/// answers from them only for headless Services without a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceInfo {
    pub key: ObjKey,
    /// The Service it belongs to, in the slice's namespace: the
    /// `kubernetes.io/service-name` label.
    pub service: String,
    pub ports: Vec<SlicePort>,
    /// Empty for an `FQDN` slice: its addresses are names, not IPs.
    pub endpoints: Vec<SliceEndpoint>,
}

/// The address ranges of one cluster-scoped object that say where the
/// cluster's reverse zones are: a Node's `spec.podCIDRs`, a ServiceCIDR's
/// `spec.cidrs`. The key's namespace is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangesInfo {
    pub key: ObjKey,
    pub cidrs: Vec<ipnet::IpNet>,
}

/// One change from a watch, as the writer applies it.
#[derive(Clone, Debug)]
pub enum Change<T> {
    /// Added or modified.
    Apply(T),
    /// Deleted.
    Delete(ObjKey),
    /// A complete list (initial or relist) of one watch: everything of that
    /// watch's scope (one namespace, or all when `namespace` is `None`) not in
    /// `items` is gone. The writer applies the difference, it never empties
    /// the index first.
    Reset {
        namespace: Option<String>,
        items: Vec<T>,
    },
    /// The end of a complete list whose objects were each sent as an
    /// `Apply` while the list was still read (a watch's first list): as for
    /// `Reset`, everything of the scope not among `keys` is gone, but the
    /// listed objects are in place already. No second copy of a million
    /// objects waits for the end of the list.
    Listed {
        namespace: Option<String>,
        keys: Vec<ObjKey>,
    },
}

impl<T> Change<T> {
    /// A complete list of every namespace ([`Change::Reset`] of the whole
    /// cluster).
    pub fn all(items: Vec<T>) -> Self {
        Change::Reset {
            namespace: None,
            items,
        }
    }
}

/// What the watchers send to the index writer.
#[derive(Clone, Debug)]
pub enum Update {
    Pod(Change<PodInfo>),
    Service(Change<ServiceInfo>),
    Job(Change<JobInfo>),
    Slice(Change<SliceInfo>),
    /// Nodes' pod ranges (only without `--reverse-cidr`).
    NodeRanges(Change<RangesInfo>),
    /// ServiceCIDRs' ranges (only without `--reverse-cidr`).
    ServiceRanges(Change<RangesInfo>),
    /// A namespace left a node instance's scope: its watches have stopped,
    /// and its objects go.
    Unscope(String),
    /// A watch of one namespace (`resource`: "pods", "services", "jobs")
    /// lists again after a 410: until that list is in, a node instance
    /// forwards the namespace's names rather than answer from what may be
    /// stale (the relay serves more labels, say).
    Relisting {
        resource: &'static str,
        namespace: String,
    },
    /// A node instance holds `namespace` only in part (`Some`): the pods
    /// of the gangs its own pods belong to, by their shared label
    /// ([`GangSelector`]), and every Service and Job; or whole again
    /// (`None`). Sent before the namespace's watches list anew.
    Partial {
        namespace: String,
        gangs: Option<GangSelector>,
    },
}

/// The gangs a node instance holds of a namespace: the pods whose label
/// `key` has one of `values`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangSelector {
    pub key: String,
    pub values: std::collections::BTreeSet<String>,
}

impl GangSelector {
    /// As a set-based label selector: `key in (a,b)`.
    pub fn to_label_selector(&self) -> String {
        let values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        format!("{} in ({})", self.key, values.join(","))
    }
}

/// An update and the moment its watch event arrived, so the writer can
/// measure propagation (arrival → answerable).
#[derive(Clone, Debug)]
pub struct Arrival {
    pub update: Update,
    pub at: std::time::Instant,
}
