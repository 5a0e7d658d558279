//! `<svc>.<ns>.svc` and the names under a Service: its SRV names
//! (`_<port>._<proto>.<svc>`, and the `_<proto>` node above them), a
//! headless Service's members and their dashed names, and the endpoints
//! of a Service without a selector.

use std::net::IpAddr;

use super::*;
use crate::index::names::Label;

impl Writer {
    /// `_<proto>.<svc>.<ns>.svc`: the node above a named port's SRV name.
    pub(super) fn explain_proto(&self, key: &str, ns: &str, svc: &str, proto: &str) -> Findings {
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

    pub(super) fn explain_service(&self, key: &str, ns: &str, name: &str) -> Findings {
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
    pub(super) fn explain_endpoint(&self, svc: &ServiceInfo, label: Label<'_>) -> Option<Findings> {
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

    /// `<a-b-c-d>.<svc>.<ns>.svc` of a headless Service.
    pub(super) fn explain_member(&self, svc: &ServiceInfo, ip: IpAddr) -> Findings {
        let sk = &svc.key;
        let holders = self.holders(ip, Some(&sk.namespace));
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
    pub(super) fn explain_srv(&self, ns: &str, name: &str, port: &str, proto: &str) -> Findings {
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
}
