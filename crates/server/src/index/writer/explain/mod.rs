//! `podns explain`, the writer's side: what the model holds for one name,
//! which objects a name's answer comes from, the record rule that applied,
//! and for a name without records the nearest reason the model can see (a
//! pod without an IP, a terminating pod, the other pod of a shared
//! hostname, ...).
//!
//! It re-derives no rule. A name is read through the one grammar
//! ([`names::QName`]) the table's lookup and the answer rules read it
//! with; whether a name has names below it is asked of the table; the
//! duplicate order ([`Pod::duplicate_step`]) and the PTR choice
//! ([`Writer::ptr_choice`]) say why they chose, so explain reports their
//! reason instead of working it out again. The property test
//! `explain_agrees_with_dns` checks that a finding never contradicts the
//! served answer.
//!
//! It is a child module of the writer so it can read the writer's model
//! directly; it never changes it. Requests come over their own channel and
//! are served between batches ([`Writer::next_arrival`]); DNS readers never
//! wait for them. The admin side (`admin::explain`) adds what only it knows:
//! the real answer, the zones, and the watch scope.

use std::net::IpAddr;

use tokio::sync::mpsc;

use super::model::DuplicateStep;
use super::publish::PtrOwner;
use super::rank_view::{COMPLETION_INDEX, JOB_NAME, LEGACY_JOB_NAME, group};
use super::*;
use crate::index::names::{Label, QName, Tree};
use crate::index::table::Target;
use crate::index::{Lookup, names};

mod findings;

pub use findings::{ExplainReceiver, ExplainRequest, Findings, MAX_LISTED, Object, Reason};

impl Writer {
    /// Give the writer the receiving end of the explain channel; requests
    /// are then answered between batches.
    pub fn with_explain(mut self, rx: ExplainReceiver) -> Self {
        self.explain_rx = Some(rx);
        self
    }

    /// The next arrival, answering explain requests while waiting for it.
    /// When both are ready the pick is random, so a steady stream of events
    /// cannot starve explain requests, nor a flood of requests the events.
    pub(super) fn next_arrival(&mut self, rx: &mut mpsc::Receiver<Arrival>) -> Option<Arrival> {
        // A stack temporary moved once per wait: boxing the arrival would
        // allocate on every batch for nothing.
        #[allow(clippy::large_enum_variant)]
        enum Next {
            Arrival(Option<Arrival>),
            Explain(Option<ExplainRequest>),
        }
        loop {
            let Some(erx) = self.explain_rx.as_mut() else {
                return rx.blocking_recv();
            };
            // The writer runs on a blocking thread: wait on both channels
            // with a local executor, as `blocking_recv` does for one.
            let next = futures::executor::block_on(async {
                tokio::select! {
                    e = erx.recv() => Next::Explain(e),
                    a = rx.recv() => Next::Arrival(a),
                }
            });
            match next {
                Next::Arrival(a) => return a,
                Next::Explain(Some(req)) => {
                    let findings = self.explain(&req.key);
                    let _ = req.reply.send(findings);
                }
                Next::Explain(None) => self.explain_rx = None,
            }
        }
    }

    /// What the model holds for one table key.
    pub fn explain(&self, key: &str) -> Findings {
        match QName::parse(key) {
            QName::Apex | QName::Reserved("ns.dns" | "dns-version") => {
                Findings::new(Reason::Server, "a name of the server itself, always served")
            }
            QName::Reserved(_) => Findings::new(
                Reason::EmptyNonTerminal,
                "a name above ns.dns, with no records of its own",
            ),
            QName::ReverseApex(_) => Findings::new(
                Reason::Server,
                "the apex of a reverse zone: podns serves its SOA and NS",
            ),
            QName::Reverse(ip) => self.explain_reverse(key, ip),
            QName::Tree(Tree::Rank) | QName::Namespace(Tree::Rank, _) | QName::Gang { .. }
                if !self.policy.rank_view =>
            {
                Findings::new(Reason::NoSuchName, "the rank view is off (--no-rank-view)")
            }
            QName::Tree(tree) => self.explain_tree(key, tree),
            QName::Namespace(tree, ns) => self.explain_namespace(key, ns, tree),
            QName::Service { svc, ns } => self.explain_service(key, ns, svc),
            QName::Host { host, sub, ns } if host.as_str().starts_with('_') => {
                self.explain_proto(key, ns, sub, host.as_str())
            }
            QName::Host { host, sub, ns } => self.explain_host(ns, sub, host),
            QName::Port {
                port,
                proto,
                svc,
                ns,
            } => self.explain_srv(ns, svc, port, proto),
            QName::Pod { label, ns } => self.explain_pod_name(ns, label),
            QName::Gang { first, rest, whole } => self.explain_rank(first, rest, whole),
            QName::Other if key.ends_with(".svc") => Findings::new(
                Reason::NoSuchName,
                "svc names have at most four labels before svc (_<port>._<proto>.<service>.<namespace>)",
            ),
            QName::Other if key.ends_with(".pod") => Findings::new(
                Reason::NoSuchName,
                "pod names are <a-b-c-d>.<namespace>.pod",
            ),
            QName::Other => Findings::new(
                Reason::NoSuchName,
                "names in a zone end in svc, pod or rank (or are the server's own); this one does not",
            ),
        }
    }

    /// Whether names with records lie below `key`, which has none of its
    /// own: the table's count, the one DNS answers NODATA from.
    fn has_names_below(&self, key: &str) -> bool {
        self.table.lookup(key) == Lookup::Empty
    }

    // ---- objects -------------------------------------------------------

    fn pod_object(&self, pod: &Pod, role: impl Into<String>, why_not: Option<Reason>) -> Object {
        Object {
            kind: "pod",
            namespace: pod.ns().to_string(),
            name: pod.name().to_string(),
            role: role.into(),
            ips: pod.ips.to_vec(),
            phase: Some(format!("{:?}", pod.phase)),
            ready: Some(pod.ready()),
            terminating: Some(pod.deleting()),
            published: Some(why_not.is_none()),
            not_published_because: why_not,
            service_type: None,
        }
    }

    fn service_object(&self, svc: &ServiceInfo, role: impl Into<String>) -> Object {
        let (ips, service_type) = match &svc.kind {
            ServiceKind::ClusterIp(ips) => (ips.clone(), "ClusterIP"),
            ServiceKind::Headless => (vec![], "headless"),
            ServiceKind::ExternalName(_) => (vec![], "ExternalName"),
        };
        Object {
            kind: "service",
            namespace: svc.key.namespace.clone(),
            name: svc.key.name.clone(),
            role: role.into(),
            ips,
            phase: None,
            ready: None,
            terminating: None,
            published: None,
            not_published_because: None,
            service_type: Some(service_type),
        }
    }

    /// Why a pod is not published for a Service whose
    /// `publishNotReadyAddresses` is `pnr`; `None` when it is.
    fn not_published(&self, pod: &Pod, pnr: bool) -> Option<Reason> {
        if self.published(pod, pnr) {
            None
        } else if pod.phase.is_terminal() {
            Some(Reason::PodTerminal)
        } else if pod.deleting() {
            Some(Reason::PodTerminating)
        } else if pod.ips.is_empty() {
            Some(Reason::PodNoIp)
        } else {
            Some(Reason::PodNotReady)
        }
    }

    /// [`Self::not_published`] for a pod's hostname name.
    fn host_not_published(&self, pod: &Pod) -> Option<Reason> {
        if self.host_published(pod) {
            return None;
        }
        let sub = pod.subdomain().as_deref().unwrap_or_default();
        let svc = self.headless(pod.ns(), sub);
        if self.policy.hostnames == Hostnames::Service && svc.is_none() {
            return Some(Reason::HostnameNeedsService);
        }
        self.not_published(pod, svc.is_some_and(|s| s.publish_not_ready))
    }

    // ---- trees and namespaces ------------------------------------------

    fn explain_tree(&self, key: &str, tree: Tree) -> Findings {
        let t = tree.label();
        if self.has_names_below(key) {
            Findings::new(
                Reason::EmptyNonTerminal,
                format!("the {t} subtree: names below it, no records of its own"),
            )
        } else {
            Findings::new(
                Reason::NoSuchName,
                format!("nothing is published under the {t} subtree yet"),
            )
        }
    }

    fn explain_namespace(&self, key: &str, ns: &str, tree: Tree) -> Findings {
        let t = match tree {
            Tree::Svc => String::new(),
            other => format!("{} ", other.label()),
        };
        let known =
            self.ns_pods.contains_key(ns) || self.services.keys().any(|k| k.namespace == ns);
        let f = if self.has_names_below(key) {
            Findings::new(
                Reason::EmptyNonTerminal,
                format!("{t}namespace {ns}: names below it, no records of its own"),
            )
        } else if known {
            Findings::new(
                Reason::NoSuchName,
                format!("{t}namespace {ns}: its pods and Services publish no name here"),
            )
        } else {
            Findings::new(
                Reason::NoSuchName,
                format!("no pod or Service in namespace {ns} is known"),
            )
        };
        f.ns(ns)
    }

    // ---- <...>.svc -----------------------------------------------------

    /// `_<proto>.<svc>.<ns>.svc`: the node above a named port's SRV name.
    fn explain_proto(&self, key: &str, ns: &str, svc: &str, proto: &str) -> Findings {
        let f = if self.has_names_below(key) {
            Findings::new(
                Reason::EmptyNonTerminal,
                format!(
                    "{proto} is the protocol label of an SRV name: ask _<port>.{proto}.{svc}.{ns}.svc"
                ),
            )
        } else {
            Findings::new(
                Reason::NoSuchName,
                format!("no named port of Service {ns}/{svc} publishes an SRV name over {proto}"),
            )
        };
        f.ns(ns)
    }

    fn explain_service(&self, key: &str, ns: &str, name: &str) -> Findings {
        let sk = ObjKey::new(ns, name);
        let Some(svc) = self.services.get(&sk) else {
            if self.has_names_below(key) {
                return Findings::new(
                    Reason::EmptyNonTerminal,
                    format!(
                        "no Service {sk}; pods use {name} as their subdomain, so their hostname names are below it"
                    ),
                )
                .ns(ns);
            }
            return Findings::new(Reason::NoService, format!("no Service {sk}")).ns(ns);
        };
        match &svc.kind {
            ServiceKind::ExternalName(target) => Findings::new(
                Reason::ExternalName,
                format!("Service {sk} is an ExternalName: CNAME {target}"),
            )
            .ns(ns)
            .with(vec![self.service_object(svc, "answers")]),
            ServiceKind::ClusterIp(ips) => Findings::new(
                Reason::ClusterIp,
                format!(
                    "Service {sk} has ClusterIP {}",
                    ips.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .ns(ns)
            .with(vec![self.service_object(svc, "answers")]),
            ServiceKind::Headless => self.explain_headless(svc),
        }
    }

    /// A headless Service: its members, published or not, and why not.
    fn explain_headless(&self, svc: &ServiceInfo) -> Findings {
        let sk = &svc.key;
        if super::slices::from_slices(svc) {
            let slices = self.service_slices(sk).count();
            let published = self.published_endpoints(svc).count();
            let (reason, detail) = if published > 0 {
                (
                    Reason::EndpointSlice,
                    format!(
                        "headless Service {sk} has no selector: it answers with the {published} published endpoint(s) of its {slices} EndpointSlice(s)"
                    ),
                )
            } else {
                (
                    Reason::ServiceNoPublishedPods,
                    format!(
                        "headless Service {sk} has no selector and no published endpoint in {slices} EndpointSlice(s) (podns reads only slices the EndpointSlice controller does not manage)"
                    ),
                )
            };
            return Findings::new(reason, detail)
                .ns(&sk.namespace)
                .with(vec![self.service_object(svc, "headless Service")]);
        }
        let members: Vec<&Pod> = self
            .members
            .get(sk)
            .into_iter()
            .flatten()
            .map(|&id| self.pod(id))
            .collect();
        let published = members
            .iter()
            .filter(|p| self.published(p, svc.publish_not_ready))
            .count();
        let mut objects = vec![self.service_object(svc, "headless Service")];
        // Published members first, then the others, each in name order.
        let mut listed = members.clone();
        listed.sort_by_key(|p| (!self.published(p, svc.publish_not_ready), p.name()));
        for p in listed.iter().take(MAX_LISTED) {
            let why = self.not_published(p, svc.publish_not_ready);
            objects.push(self.pod_object(p, "selected", why));
        }
        let more = members.len().saturating_sub(MAX_LISTED);
        let mut f = if published > 0 {
            Findings::new(
                Reason::HeadlessService,
                format!(
                    "headless Service {sk} answers with its {published} published pod(s) of {} selected",
                    members.len()
                ),
            )
        } else if members.is_empty() {
            let selector = match &svc.selector {
                Some(sel) if !sel.is_empty() => sel
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
                _ => "(none: a Service without a selector publishes no pods)".into(),
            };
            Findings::new(
                Reason::ServiceNoPublishedPods,
                format!("headless Service {sk} selects no pod (selector {selector})"),
            )
        } else {
            let why = self
                .not_published(listed[0], svc.publish_not_ready)
                .map(|r| r.code())
                .unwrap_or_default();
            Findings::new(
                Reason::ServiceNoPublishedPods,
                format!(
                    "headless Service {sk} selects {} pod(s) but publishes none (first: {} is {why})",
                    members.len(),
                    listed[0].name()
                ),
            )
        };
        f.objects = objects;
        f.more_objects = more;
        f.ns(&sk.namespace)
    }

    /// `<host>.<sub>.<ns>.svc` made by a published endpoint of a headless
    /// Service without a selector: by its hostname or its dashed address.
    fn explain_endpoint(&self, svc: &ServiceInfo, label: Label<'_>) -> Option<Findings> {
        let sk = &svc.key;
        let host = label.as_str();
        let (slice, what) = self.published_endpoints(svc).find_map(|(s, e)| {
            if e.hostname.as_deref() == Some(host) {
                Some((s, format!("an endpoint with hostname {host}")))
            } else {
                let ip = label.ip().filter(|ip| e.ips.contains(ip))?;
                Some((s, format!("a published endpoint with address {ip}")))
            }
        })?;
        Some(
            Findings::new(
                Reason::EndpointSlice,
                format!(
                    "EndpointSlice {} of headless Service {sk} (no selector) has {what}",
                    slice.key
                ),
            )
            .ns(&sk.namespace)
            .with(vec![self.service_object(svc, "headless Service")]),
        )
    }

    /// `<host>.<sub>.<ns>.svc`: a hostname name, or a headless Service's
    /// dashed name of a member's IP.
    fn explain_host(&self, ns: &str, sub: &str, label: Label<'_>) -> Findings {
        let host = label.as_str();
        let pods: Vec<&Pod> = self
            .host_pods(ns, sub, host)
            .map(|id| self.pod(id))
            .collect();
        let has_published = pods.iter().any(|p| self.host_published(p));
        if !has_published
            && let Some(svc) = self.headless(ns, sub)
            && let Some(f) = self.explain_endpoint(svc, label)
        {
            return f;
        }
        if !has_published && let Some(svc) = self.headless(ns, sub) {
            if let Some(ip) = label.ip() {
                return self.explain_member(svc, ip);
            }
            if pods.is_empty()
                && let Some(ip) = label.loose_ip()
            {
                return not_canonical(host, ip).ns(ns);
            }
        }
        if pods.is_empty() {
            return Findings::new(
                Reason::NoPod,
                format!("no pod in namespace {ns} has hostname {host} and subdomain {sub}"),
            )
            .ns(ns);
        }
        let Some(winner) = self.host_winner(ns, sub, host) else {
            // Nobody is published: the nearest reason is the pod the
            // duplicate rule would have chosen.
            let mut sorted = pods.clone();
            sorted.sort_by(|a, b| a.duplicate_order(b));
            let first = sorted[0];
            let why = self.host_not_published(first).unwrap_or(Reason::NoSuchName);
            let detail = match why {
                Reason::PodNoIp => {
                    format!(
                        "pod {ns}/{} has hostname {host} but no IP yet",
                        first.name()
                    )
                }
                Reason::PodTerminating => format!(
                    "pod {ns}/{} has hostname {host} but is terminating (deletionTimestamp set)",
                    first.name()
                ),
                Reason::PodTerminal => format!(
                    "pod {ns}/{} has hostname {host} but is {:?}, a terminal phase",
                    first.name(),
                    first.phase
                ),
                Reason::PodNotReady => format!(
                    "pod {ns}/{} has hostname {host} but is not Ready, and --publish ready publishes Ready pods only (unless the Service {sub} sets publishNotReadyAddresses)",
                    first.name()
                ),
                Reason::HostnameNeedsService => format!(
                    "pod {ns}/{} has hostname {host}, but --hostnames service requires a headless Service {ns}/{sub}, and there is none",
                    first.name()
                ),
                _ => format!(
                    "pod {ns}/{} has hostname {host} but is not published",
                    first.name()
                ),
            };
            let objects = sorted
                .iter()
                .map(|p| self.pod_object(p, "has the hostname", self.host_not_published(p)))
                .collect();
            return Findings::new(why, detail).ns(ns).with(objects);
        };
        let mut objects = vec![self.pod_object(winner, "answers", None)];
        let mut others: Vec<&Pod> = pods
            .iter()
            .copied()
            .filter(|p| !std::ptr::eq(*p, winner))
            .collect();
        others.sort_by(|a, b| a.duplicate_order(b));
        let rivals: Vec<&Pod> = others
            .iter()
            .copied()
            .filter(|p| self.host_published(p))
            .collect();
        for p in &others {
            let why = self.host_not_published(p);
            let role = if why.is_none() && self.policy.duplicates == Duplicates::All {
                "answers too (--duplicate-hostnames all)"
            } else if why.is_none() {
                "not chosen"
            } else {
                "has the hostname"
            };
            objects.push(self.pod_object(p, role, why));
        }
        if rivals.is_empty() {
            return Findings::new(
                Reason::Hostname,
                format!(
                    "pod {ns}/{} has spec.hostname {host} and spec.subdomain {sub}",
                    winner.name()
                ),
            )
            .ns(ns)
            .with(objects);
        }
        if self.policy.duplicates == Duplicates::All {
            return Findings::new(
                Reason::HostnameShared,
                format!(
                    "{} published pods share hostname {host}; --duplicate-hostnames all answers with every one",
                    rivals.len() + 1
                ),
            )
            .ns(ns)
            .with(objects);
        }
        let rival = rivals[0];
        let (by, why) = chosen_by(winner, rival);
        let mut f = Findings::new(
            Reason::HostnameShared,
            format!(
                "{} published pods share hostname {host}: {ns}/{} answers, not {ns}/{}, because {why}",
                rivals.len() + 1,
                winner.name(),
                rival.name()
            ),
        )
        .ns(ns)
        .with(objects);
        f.chosen_by = Some(by);
        f
    }

    /// `<a-b-c-d>.<svc>.<ns>.svc` of a headless Service.
    fn explain_member(&self, svc: &ServiceInfo, ip: IpAddr) -> Findings {
        let sk = &svc.key;
        let mut holders: Vec<&Pod> = self
            .ip_holders(ip)
            .filter(|p| **p.ns() == *sk.namespace)
            .collect();
        holders.sort_by(|a, b| a.duplicate_order(b));
        let members: Vec<&Pod> = holders
            .iter()
            .copied()
            .filter(|p| p.services.contains(sk.name.as_str()))
            .collect();
        let svc_obj = self.service_object(svc, "headless Service");
        if let Some(p) = members.iter().find(|p| self.makes_member_name(p, svc)) {
            return Findings::new(
                Reason::HeadlessMember,
                format!(
                    "pod {}/{} has IP {ip} and is a published member of headless Service {sk}",
                    p.ns(),
                    p.name()
                ),
            )
            .ns(&sk.namespace)
            .with(vec![svc_obj, self.pod_object(p, "answers", None)]);
        }
        if let Some(p) = members.first() {
            let why = self.not_published(p, svc.publish_not_ready);
            let reason = why.unwrap_or(Reason::NoSuchName);
            return Findings::new(
                reason,
                format!(
                    "pod {}/{} has IP {ip} and is selected by {sk} but is not published ({})",
                    p.ns(),
                    p.name(),
                    reason.code()
                ),
            )
            .ns(&sk.namespace)
            .with(vec![svc_obj, self.pod_object(p, "selected", why)]);
        }
        let mut objects = vec![svc_obj];
        objects.extend(
            holders
                .iter()
                .map(|p| self.pod_object(p, "has the IP, not selected", None)),
        );
        let detail = if holders.is_empty() {
            format!("no pod in namespace {} has IP {ip}", sk.namespace)
        } else {
            format!("pods with IP {ip} exist, but headless Service {sk} does not select them")
        };
        Findings::new(Reason::NoPodWithIp, detail)
            .ns(&sk.namespace)
            .with(objects)
    }

    /// `_<port>._<proto>.<svc>.<ns>.svc`.
    fn explain_srv(&self, ns: &str, name: &str, port: &str, proto: &str) -> Findings {
        let sk = ObjKey::new(ns, name);
        let Some(svc) = self.services.get(&sk) else {
            return Findings::new(Reason::NoService, format!("no Service {sk}")).ns(ns);
        };
        let named = svc
            .ports
            .iter()
            .any(|p| p.name.as_deref() == Some(port) && p.protocol.label() == proto);
        if !named {
            return Findings::new(
                Reason::NoSuchName,
                format!("Service {sk} has no port named {port} over {proto}"),
            )
            .ns(ns)
            .with(vec![self.service_object(svc, "has no such port")]);
        }
        let mut f = match svc.kind {
            ServiceKind::Headless => {
                let mut f = self.explain_headless(svc);
                if f.reason == Reason::HeadlessService {
                    f.reason = Reason::ServicePort;
                    f.detail = format!(
                        "named port {port}/{proto} of headless Service {sk}: one SRV record per published pod"
                    );
                }
                f
            }
            ServiceKind::ClusterIp(_) => Findings::new(
                Reason::ServicePort,
                format!("named port {port}/{proto} of Service {sk}"),
            )
            .with(vec![self.service_object(svc, "answers")]),
            ServiceKind::ExternalName(_) => Findings::new(
                Reason::NoSuchName,
                format!("Service {sk} is an ExternalName: its ports publish no SRV records"),
            )
            .with(vec![self.service_object(svc, "has the port")]),
        };
        f.namespace = Some(ns.into());
        f
    }

    // ---- <...>.pod -----------------------------------------------------

    fn explain_pod_name(&self, ns: &str, label: Label<'_>) -> Findings {
        let dashed = label.as_str();
        let Some(ip) = label.ip() else {
            if let Some(ip) = label.loose_ip() {
                return not_canonical(dashed, ip).ns(ns);
            }
            return Findings::new(
                Reason::NoSuchName,
                format!("{dashed} is not a dashed IP address (a-b-c-d)"),
            )
            .ns(ns);
        };
        let mut holders: Vec<&Pod> = self.ip_holders(ip).filter(|p| **p.ns() == *ns).collect();
        holders.sort_by(|a, b| a.duplicate_order(b));
        if let Some(p) = holders.iter().find(|p| self.makes_pod_name(p, ns)) {
            return Findings::new(
                Reason::PodIp,
                format!(
                    "pod {ns}/{} has IP {ip} (names under pod are verified)",
                    p.name()
                ),
            )
            .ns(ns)
            .with(vec![self.pod_object(p, "answers", None)]);
        }
        let Some(p) = holders.first() else {
            return Findings::new(
                Reason::NoPodWithIp,
                format!("no pod in namespace {ns} has IP {ip}"),
            )
            .ns(ns);
        };
        let why = if p.host_network() {
            Reason::PodHostNetwork
        } else {
            self.not_published(p, false).unwrap_or(Reason::NoSuchName)
        };
        Findings::new(
            why,
            format!(
                "pod {ns}/{} has IP {ip} but is not published ({})",
                p.name(),
                why.code()
            ),
        )
        .ns(ns)
        .with(vec![self.pod_object(p, "has the IP", Some(why))])
    }

    // ---- reverse -------------------------------------------------------

    fn explain_reverse(&self, key: &str, ip: Option<IpAddr>) -> Findings {
        let Some(ip) = ip else {
            return if self.has_names_below(key) {
                Findings::new(
                    Reason::EmptyNonTerminal,
                    "a partial reverse name: known IPs lie below it",
                )
            } else {
                Findings::new(
                    Reason::NoSuchName,
                    "not a complete reverse name (in the canonical spelling), and no known IP lies below it",
                )
            };
        };
        if let Some(choice) = self.ptr_choice(ip) {
            let pod = match choice.owner {
                PtrOwner::Service(sk) => {
                    let objects = self
                        .services
                        .get(sk)
                        .map(|svc| vec![self.service_object(svc, "answers")])
                        .unwrap_or_default();
                    return Findings::new(
                        Reason::PtrService,
                        format!("{ip} is the ClusterIP of Service {sk}"),
                    )
                    .ns(&sk.namespace)
                    .with(objects);
                }
                PtrOwner::Pod(pod) => pod,
                PtrOwner::Slice(slice) => {
                    let dashed = self.slices.by_key.get(slice).is_some_and(|sl| {
                        matches!(&choice.target, Target::Name(t)
                            if *t == names::member_name(ip, &sl.service, &slice.namespace))
                    });
                    let rule = if dashed {
                        "its dashed name under the Service (the endpoint has no hostname)"
                    } else {
                        "its hostname name"
                    };
                    return Findings::new(
                        Reason::EndpointSlice,
                        format!(
                            "{ip} is an address of EndpointSlice {slice}: the PTR points at {rule}"
                        ),
                    )
                    .ns(&slice.namespace);
                }
            };
            let rule = match choice.target {
                Target::Name(_) => "its hostname name, the most specific",
                Target::Pod(_) => {
                    "its pod name (no hostname name or headless Service publishes it)"
                }
                Target::Member(..) => {
                    "its dashed name under the headless Service that publishes it"
                }
            };
            return Findings::new(
                Reason::PtrPod,
                format!(
                    "{ip} belongs to pod {}/{}: the PTR points at {rule}",
                    pod.ns(),
                    pod.name()
                ),
            )
            .ns(pod.ns())
            .with(vec![self.pod_object(pod, "answers", None)]);
        }
        let mut holders: Vec<&Pod> = self.ip_holders(ip).collect();
        holders.sort_by(|a, b| a.duplicate_order(b));
        let Some(first) = holders.first() else {
            return Findings::new(
                Reason::NoPodWithIp,
                format!("no pod or Service has IP {ip}"),
            );
        };
        let why = if first.host_network() {
            Reason::PodHostNetwork
        } else {
            self.not_published(first, false)
                .unwrap_or(Reason::NoSuchName)
        };
        let detail = if why == Reason::PodHostNetwork {
            format!(
                "{ip} is held by hostNetwork pod {}/{}: it is the node's IP, so podns gives it no PTR",
                first.ns(),
                first.name()
            )
        } else {
            format!(
                "{ip} is held by pod {}/{}, which is not published ({})",
                first.ns(),
                first.name(),
                why.code()
            )
        };
        Findings::new(why, detail)
            .ns(first.ns())
            .with(vec![self.pod_object(first, "has the IP", Some(why))])
    }

    // ---- <...>.rank ----------------------------------------------------

    /// `<first>.<rest>.rank`: a rank or the leader of the gang `rest`, else
    /// the summary of the gang `whole` (the table's order: a name kept
    /// by number is looked for first).
    fn explain_rank(&self, first: Label<'_>, rest: &str, whole: &str) -> Findings {
        let idx = first.as_str();
        let leader = idx == "leader";
        let index = first.number();
        if let Some((job, ns)) = rest.rsplit_once('.')
            && (leader || index.is_some())
        {
            for set in [false, true] {
                let g = group(set, ns, job);
                let built = match index {
                    Some(i) => self.build_rank(&g, i),
                    None => self.build_leader(&g),
                };
                if let Some((_, rrs)) = built.into_iter().next() {
                    let kind = if set { "JobSet" } else { "Job" };
                    let ip = rrs
                        .a
                        .first()
                        .map(|a| IpAddr::V4(*a))
                        .or_else(|| rrs.aaaa.first().map(|a| IpAddr::V6(*a)));
                    let mut holders: Vec<&Pod> = ip
                        .into_iter()
                        .flat_map(|ip| self.ip_holders(ip))
                        .filter(|p| **p.ns() == *ns && self.published(p, true))
                        .collect();
                    holders.sort_by(|a, b| a.duplicate_order(b));
                    let objects: Vec<Object> = holders
                        .into_iter()
                        .take(1)
                        .map(|p| self.pod_object(p, "answers", None))
                        .collect();
                    let (reason, what) = if leader {
                        (
                            Reason::RankLeader,
                            "the leader (rank 0, or the JobSet coordinator)".to_string(),
                        )
                    } else {
                        (Reason::Rank, format!("rank {idx}"))
                    };
                    return Findings::new(reason, format!("{what} of {kind} {ns}/{job}"))
                        .ns(ns)
                        .with(objects);
                }
            }
        }
        if let Some((job, ns)) = whole.rsplit_once('.') {
            for set in [false, true] {
                let g = group(set, ns, job);
                if let Some((_, rrs)) = self.build_summary(&g).into_iter().next() {
                    let kind = if set { "JobSet" } else { "Job" };
                    return Findings::new(
                        Reason::RankSummary,
                        format!(
                            "{kind} {ns}/{job}: {}",
                            rrs.txt.as_deref().unwrap_or_default()
                        ),
                    )
                    .ns(ns);
                }
            }
        }
        let Some((job, ns)) = rest.rsplit_once('.') else {
            let (job, ns) = (idx, rest);
            return Findings::new(
                Reason::NoRank,
                format!("no Job or JobSet {ns}/{job} with ranks is known"),
            )
            .ns(ns);
        };
        if leader {
            return self.explain_missing_rank(ns, job, "leader", 0);
        }
        match (index, idx.parse::<u32>()) {
            (Some(i), _) => self.explain_missing_rank(ns, job, idx, i),
            (None, Ok(i)) => Findings::new(
                Reason::NoSuchName,
                format!("{idx} is not the canonical spelling of rank {i}: DNS answers only {i}.{job}.{ns}.rank"),
            )
            .ns(ns),
            (None, Err(_)) => Findings::new(
                Reason::NoSuchName,
                "rank names are <index>.<job>.<namespace>.rank or leader.<job>.<namespace>.rank",
            )
            .ns(ns),
        }
    }

    /// A rank without a published pod: the pods of the Job that carry that
    /// completion index, in any state (a scan of the namespace: this is a
    /// debugging endpoint, not the query path).
    fn explain_missing_rank(&self, ns: &str, job: &str, idx: &str, index: u32) -> Findings {
        let mut pods: Vec<&Pod> = self
            .ns_pods
            .get(ns)
            .into_iter()
            .flat_map(|names| names.iter())
            .map(|id| self.pod(id))
            .filter(|p| {
                p.label(JOB_NAME).or_else(|| p.label(LEGACY_JOB_NAME)) == Some(job)
                    && p.label(COMPLETION_INDEX)
                        .or_else(|| p.annotation(COMPLETION_INDEX))
                        .and_then(|v| v.parse::<u32>().ok())
                        == Some(index)
            })
            .collect();
        pods.sort_by(|a, b| a.duplicate_order(b));
        let Some(first) = pods.first() else {
            return Findings::new(
                Reason::NoRank,
                format!("no pod of Job or JobSet {ns}/{job} holds rank {idx}"),
            )
            .ns(ns);
        };
        let why = self.not_published(first, true).unwrap_or(Reason::NoRank);
        let objects = pods
            .iter()
            .map(|p| self.pod_object(p, "holds the rank", self.not_published(p, true)))
            .collect();
        Findings::new(
            why,
            format!(
                "pod {ns}/{} holds rank {index} of Job {ns}/{job} but is not published ({})",
                first.name(),
                why.code()
            ),
        )
        .ns(ns)
        .with(objects)
    }
}

/// Which step of the duplicate rule put `winner` before `other`
/// ([`Pod::duplicate_step`]), as a code and a few words.
fn chosen_by(winner: &Pod, other: &Pod) -> (&'static str, String) {
    let (_, step) = winner.duplicate_step(other);
    let why = match step {
        DuplicateStep::Ready => format!("it is Ready and {} is not", other.name()),
        DuplicateStep::Running => {
            format!("it is Running and {} is {:?}", other.name(), other.phase)
        }
        DuplicateStep::Older => format!(
            "both are {}, and it is older (created {} s earlier)",
            if winner.ready() { "Ready" } else { "not Ready" },
            other.created.abs_diff(winner.created)
        ),
        DuplicateStep::Name | DuplicateStep::Namespace => {
            "they are alike in readiness, phase and age, and its name sorts first".to_string()
        }
    };
    (step.code(), why)
}

/// A label that spells an address, but not as DNS names carry it.
fn not_canonical(label: &str, ip: IpAddr) -> Findings {
    Findings::new(
        Reason::NoSuchName,
        format!(
            "{label} spells {ip}, but not canonically: DNS answers only {}",
            names::dashed(ip)
        ),
    )
}

#[cfg(test)]
mod tests;
