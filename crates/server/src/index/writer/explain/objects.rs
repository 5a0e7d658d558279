//! The objects an explanation names, as it shows them, and why a pod
//! is not published for a name.

use std::net::IpAddr;

use super::*;

impl Writer {
    pub(super) fn pod_object(
        &self,
        pod: &Pod,
        role: impl Into<String>,
        why_not: Option<Reason>,
    ) -> Object {
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

    pub(super) fn service_object(&self, svc: &ServiceInfo, role: impl Into<String>) -> Object {
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
    pub(super) fn not_published(&self, pod: &Pod, pnr: bool) -> Option<Reason> {
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
    pub(super) fn host_not_published(&self, pod: &Pod) -> Option<Reason> {
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

    /// The pods that hold `ip` (those of namespace `ns`, if given), in
    /// the duplicate rule's order: the first is the one a name would
    /// answer with.
    pub(super) fn holders(&self, ip: IpAddr, ns: Option<&str>) -> Vec<&Pod> {
        let mut holders: Vec<&Pod> = self
            .ip_holders(ip)
            .filter(|p| ns.is_none_or(|ns| **p.ns() == *ns))
            .collect();
        holders.sort_by(|a, b| a.duplicate_order(b));
        holders
    }

    /// Why a pod that holds an address has no name spelled from it: a
    /// hostNetwork pod's address is its node's, else it is not published.
    pub(super) fn why_unnamed(&self, pod: &Pod) -> Reason {
        if pod.host_network() {
            Reason::PodHostNetwork
        } else {
            self.not_published(pod, false).unwrap_or(Reason::NoSuchName)
        }
    }
}
