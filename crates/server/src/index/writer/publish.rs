//! The publication rules: which pods a name publishes (readiness, phase,
//! `--publish`, `--hostnames`), the duplicate rule's choice among pods
//! that claim one name, and where a PTR record points. The names built in
//! `build.rs` and `podns explain` both ask these functions.

use super::*;

impl Writer {
    /// Is the pod published for a Service whose `publishNotReadyAddresses`
    /// is `pnr`?
    pub(super) fn published(&self, pod: &Pod, pnr: bool) -> bool {
        !pod.ips.is_empty()
            && !pod.phase.is_terminal()
            && !pod.deleting()
            && (self.policy.publish == Publish::Ip || pod.ready() || pnr)
    }

    pub(super) fn headless(&self, ns: &str, name: &str) -> Option<&ServiceInfo> {
        self.services
            .get(&ObjKey::new(ns, name))
            .filter(|s| s.kind == ServiceKind::Headless)
    }

    /// Published for its hostname name: the headless Service named like the
    /// subdomain decides `publishNotReadyAddresses`, and, under
    /// `--hostnames service`, whether the name exists at all.
    pub(super) fn host_published(&self, pod: &Pod) -> bool {
        let Some(sub) = &pod.subdomain() else {
            return false;
        };
        let svc = self.headless(pod.ns(), sub);
        if self.policy.hostnames == Hostnames::Service && svc.is_none() {
            return false;
        }
        self.published(pod, svc.is_some_and(|s| s.publish_not_ready))
    }

    /// Published as a member of any Service, or for its hostname name:
    /// what PTR and `pod.<zone>` names require.
    pub(super) fn published_anywhere(&self, pod: &Pod) -> bool {
        if self.published(pod, false) || self.host_published(pod) {
            return true;
        }
        pod.services.iter().any(|s| {
            self.services
                .get(&ObjKey::new(&**pod.ns(), &**s))
                .is_some_and(|s| self.published(pod, s.publish_not_ready))
        })
    }

    /// Does `pod` make the dashed name of its IP under headless Service
    /// `svc` (`<a-b-c-d>.<svc>.<ns>.svc`): a published member of it?
    pub(super) fn makes_member_name(&self, pod: &Pod, svc: &ServiceInfo) -> bool {
        **pod.ns() == *svc.key.namespace
            && pod.services.contains(svc.key.name.as_str())
            && self.published(pod, svc.publish_not_ready)
    }

    /// Does `pod` make the pod name of its IP in `ns` (`<a-b-c-d>.<ns>.pod`)?
    /// "Verified" pod names: only a pod of `ns` published somewhere;
    /// hostNetwork pods share the node's IP, so they make none.
    pub(super) fn makes_pod_name(&self, pod: &Pod, ns: &str) -> bool {
        **pod.ns() == *ns && !pod.host_network() && self.published_anywhere(pod)
    }

    /// The pods a name answers with, in the duplicate rule's order
    /// ([`Pod::duplicate_order`]).
    pub(super) fn choose<'a>(&self, mut pods: Vec<&'a Pod>) -> Vec<&'a Pod> {
        pods.sort_by(|a, b| a.duplicate_order(b));
        if self.policy.duplicates == Duplicates::One {
            pods.truncate(1);
        }
        pods
    }

    /// One pod by the duplicate rule, whatever `--duplicate-hostnames` says
    /// (a rank name must name one rank).
    pub(super) fn choose_one<'a>(&self, pods: Vec<&'a Pod>) -> Option<&'a Pod> {
        pods.into_iter().min_by(|a, b| a.duplicate_order(b))
    }

    /// The name a pod's SRV record and PTR point at under a headless Service:
    /// its hostname name when its subdomain is that Service, else its dashed
    /// name under the Service.
    pub(super) fn target_under(&self, pod: &Pod, svc: &str, ip: IpAddr) -> String {
        let ns = pod.ns();
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain())
            && **sub == *svc
            && self
                .host_winner(ns, sub, host)
                .is_some_and(|w| std::ptr::eq(w, pod))
        {
            return host_name(host, sub, ns);
        }
        member_name(ip, svc, ns)
    }

    /// The pod that answers for a hostname name (first under the duplicate rule).
    pub(super) fn host_winner(&self, ns: &str, sub: &str, host: &str) -> Option<&Pod> {
        let pods: Vec<&Pod> = self
            .host_pods(ns, sub, host)
            .map(|id| self.pod(id))
            .filter(|p| self.host_published(p))
            .collect();
        self.choose(pods).into_iter().next()
    }

    /// Most specific name for an IP: a ClusterIP's Service name; a pod's
    /// hostname name, else its dashed name under a headless Service that
    /// publishes it, else `<a-b-c-d>.<ns>.pod`. hostNetwork pods get none.
    /// An address no pod holds: the hostname name of an EndpointSlice
    /// endpoint with a hostname (`slices.rs`).
    pub(super) fn ptr_target(&self, ip: IpAddr) -> Option<Target<'_>> {
        self.ptr_choice(ip).map(|c| c.target)
    }

    /// [`Self::ptr_target`] with what decided it: the Service or the pod
    /// the address belongs to, and which of the rule's steps named the
    /// target. `podns explain` reads the PTR rule only through this.
    pub(super) fn ptr_choice(&self, ip: IpAddr) -> Option<PtrChoice<'_>> {
        if let Some(sk) = self.ip_services.get(&ip).and_then(|s| s.iter().next()) {
            return Some(PtrChoice {
                target: Target::Name(service_name(&sk.name, &sk.namespace)),
                owner: PtrOwner::Service(sk),
            });
        }
        let pods: Vec<&Pod> = self
            .ip_holders(ip)
            .filter(|p| !p.host_network() && self.published_anywhere(p))
            .collect();
        let Some(pod) = self.choose(pods).into_iter().next() else {
            // No pod: an endpoint of a Service without a selector, if it
            // has a hostname (the specification's PTR rule).
            return self.endpoint_ptr(ip).map(|(name, slice)| PtrChoice {
                target: Target::Name(name),
                owner: PtrOwner::Slice(slice),
            });
        };
        let ns = pod.ns();
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain())
            && self.host_published(pod)
            && self
                .host_winner(ns, sub, host)
                .is_some_and(|w| std::ptr::eq(w, pod))
        {
            return Some(PtrChoice {
                target: Target::Name(host_name(host, sub, ns)),
                owner: PtrOwner::Pod(pod),
            });
        }
        for s in &pod.services {
            if let Some(svc) = self.services.get(&ObjKey::new(&**ns, &**s))
                && self.published(pod, svc.publish_not_ready)
            {
                return Some(PtrChoice {
                    target: Target::Member(ns, s),
                    owner: PtrOwner::Pod(pod),
                });
            }
        }
        Some(PtrChoice {
            target: Target::Pod(ns),
            owner: PtrOwner::Pod(pod),
        })
    }
}

/// What the PTR rule chose for an address ([`Writer::ptr_choice`]).
pub(super) struct PtrChoice<'a> {
    pub(super) target: Target<'a>,
    pub(super) owner: PtrOwner<'a>,
}

/// Whose name a PTR record names.
pub(super) enum PtrOwner<'a> {
    /// A Service's ClusterIP: the Service's name.
    Service(&'a ObjKey),
    /// The pod the duplicate rule chose among the address's published
    /// holders; the target says which of its names.
    Pod(&'a Pod),
    /// An EndpointSlice whose endpoint holds the address with a hostname.
    Slice(&'a ObjKey),
}
