//! The names spelled from an address: `<a-b-c-d>.<ns>.pod` and the
//! reverse names (which PTR the writer chose, and why).

use std::net::IpAddr;

use super::super::publish::PtrOwner;
use super::*;
use crate::index::names::{self, Label};
use crate::index::table::Target;

impl Writer {
    pub(super) fn explain_pod_name(&self, ns: &str, label: Label<'_>) -> Findings {
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
        let holders = self.holders(ip, Some(ns));
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
        let why = self.why_unnamed(p);
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

    pub(super) fn explain_reverse(&self, key: &str, ip: Option<IpAddr>) -> Findings {
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
        let holders = self.holders(ip, None);
        let Some(first) = holders.first() else {
            return Findings::new(
                Reason::NoPodWithIp,
                format!("no pod or Service has IP {ip}"),
            );
        };
        let why = self.why_unnamed(first);
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
}
