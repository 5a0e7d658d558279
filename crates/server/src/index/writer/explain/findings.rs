//! What `podns explain` reports, as data: the question sent to the
//! writer, and its findings (the reason, a sentence, the objects). The
//! writer works them out in the files beside this one; the admin side
//! serves them.

use std::net::IpAddr;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

/// A question for the writer: what does the model hold for this key?
#[derive(Debug)]
pub struct ExplainRequest {
    /// A table key: a forward name relative to its zone
    /// (`web-0.web.ml.svc`, `""` for the apex), or an absolute reverse name
    /// (`7.0.244.10.in-addr.arpa`); lower case, no trailing dot.
    pub key: String,
    pub reply: oneshot::Sender<Findings>,
}

/// The writer's side of the explain channel.
pub type ExplainReceiver = mpsc::Receiver<ExplainRequest>;

/// Why a name answers what it does: the rule that applied for a name with
/// records, the nearest cause for one without. The JSON spelling
/// (`snake_case`) is a stable, machine-readable code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    // ---- rules that produced records ----
    /// `<host>.<sub>.<ns>.svc`: a pod's spec.hostname and spec.subdomain.
    Hostname,
    /// A hostname name shared by several published pods; one was chosen.
    HostnameShared,
    /// `<svc>.<ns>.svc` of a headless Service: its published pods.
    HeadlessService,
    /// `<a-b-c-d>.<svc>.<ns>.svc`: a published pod of a headless Service.
    HeadlessMember,
    /// `<svc>.<ns>.svc` of a Service with ClusterIPs.
    ClusterIp,
    /// `<svc>.<ns>.svc` of an ExternalName Service: a CNAME.
    ExternalName,
    /// `_<port>._<proto>.<svc>.<ns>.svc`: a named port's SRV records.
    ServicePort,
    /// `<a-b-c-d>.<ns>.pod`: a pod in the namespace has the IP.
    PodIp,
    /// A reverse name of a pod IP.
    PtrPod,
    /// A reverse name of a ClusterIP.
    PtrService,
    /// A headless Service without a selector, its hostname, dashed and
    /// reverse names: from its user-managed EndpointSlices.
    EndpointSlice,
    /// `<i>.<job>.<ns>.rank`: the rank view.
    Rank,
    /// `leader.<job>.<ns>.rank`.
    RankLeader,
    /// `<job>.<ns>.rank` TXT.
    RankSummary,
    /// The zone apex, `ns.dns` or `dns-version`: the server's own names.
    Server,
    // ---- why a name has no records ----
    /// The index is not synced yet: every name in the zones is SERVFAIL.
    NotSynced,
    /// The name is in no served zone (REFUSED).
    OutsideZones,
    /// A reverse name in no reverse zone podns owns (none of the ranges
    /// learned from Nodes and ServiceCIDRs, or given with `--reverse-cidr`)
    /// that is not a PTR question for an address the index holds (REFUSED).
    ReverseRefused,
    /// The name's namespace is outside `--namespace`.
    NamespaceNotWatched,
    /// No pod of that name is visible, and `--label-selector` hides some pods.
    PodOutsideLabelSelector,
    /// No pod with that hostname and subdomain.
    NoPod,
    /// The pod has no IP yet.
    PodNoIp,
    /// The pod has a deletionTimestamp.
    PodTerminating,
    /// The pod is Succeeded or Failed.
    PodTerminal,
    /// `--publish ready` and the pod is not Ready.
    PodNotReady,
    /// `hostNetwork` pods get no PTR and no `pod` name.
    PodHostNetwork,
    /// `--hostnames service` and no headless Service is named like the subdomain.
    HostnameNeedsService,
    /// No Service of that name.
    NoService,
    /// A headless Service that selects no published pod.
    ServiceNoPublishedPods,
    /// No pod (in that namespace, or at all) has that IP.
    NoPodWithIp,
    /// No Job or JobSet rank of that name.
    NoRank,
    /// The name exists (other types answer) but has no records of this type.
    NoRecordOfType,
    /// A name with names below it and no records of its own (RFC 8020).
    EmptyNonTerminal,
    /// Nothing in the model makes this name.
    NoSuchName,
}

impl Reason {
    /// The code, as JSON spells it.
    pub fn code(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// Does the reason say why records exist (a rule), rather than why none do?
    pub fn is_rule(self) -> bool {
        use Reason::*;
        matches!(
            self,
            Hostname
                | HostnameShared
                | HeadlessService
                | HeadlessMember
                | ClusterIp
                | ExternalName
                | ServicePort
                | PodIp
                | PtrPod
                | PtrService
                | EndpointSlice
                | Rank
                | RankLeader
                | RankSummary
                | Server
        )
    }
}

/// One object a name's answer came from, or that the explanation is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Object {
    /// `pod`, `service` or `job`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// What the object is to this name (`answers`, `not chosen`, `member`, ...).
    pub role: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpAddr>,
    /// Pods: `Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminating: Option<bool>,
    /// Pods: published for this name; when not, why (a [`Reason`] code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_published_because: Option<Reason>,
    /// Services: `headless`, `ClusterIP` or `ExternalName`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_type: Option<&'static str>,
}

/// What the writer found for a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Findings {
    pub reason: Reason,
    /// One human sentence, ending without a period.
    pub detail: String,
    /// For a shared hostname: what decided between the pods (`ready`,
    /// `running`, `older`, `name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen_by: Option<&'static str>,
    pub objects: Vec<Object>,
    /// Members not listed in `objects` (a headless set lists at most
    /// [`MAX_LISTED`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub more_objects: usize,
    /// The namespace the name is about, if any (for the scope checks).
    #[serde(skip)]
    pub namespace: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How many members of a Service an explanation lists.
pub const MAX_LISTED: usize = 20;

impl Findings {
    pub(crate) fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
            chosen_by: None,
            objects: vec![],
            more_objects: 0,
            namespace: None,
        }
    }

    pub(super) fn ns(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_string());
        self
    }

    pub(super) fn with(mut self, objects: Vec<Object>) -> Self {
        self.objects = objects;
        self
    }
}
