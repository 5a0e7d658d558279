//! The EndpointSlice resource: slices no controller derives from a
//! selector (hand-written, or mirrored from hand-written Endpoints), and
//! the records a headless Service without a selector takes from them.
//!
//! The rules, as the Kubernetes DNS specification and CoreDNS's
//! `kubernetes` plugin answer for such a Service:
//! - `<svc>.<ns>.svc`: A/AAAA of every published endpoint's addresses;
//!   SRV per published endpoint address and port of its slice, the target
//!   its hostname name when it has a `hostname`, else its dashed name.
//! - `_<port>._<proto>.<svc>.<ns>.svc`: the SRV records of that port.
//! - `<hostname>.<svc>.<ns>.svc`: the addresses of the published endpoints
//!   with that `hostname` (beside a pod's, should pods of that hostname
//!   and subdomain claim the name too).
//! - `<a-b-c-d>.<svc>.<ns>.svc`: a published endpoint's address.
//! - PTR of a published endpoint's address (when no Service's ClusterIP
//!   or published pod holds it): its hostname name, else its dashed name
//!   (the specification asks for the first; CoreDNS answers both).
//!
//! Published: not `terminating`, and `ready` (unset counts as ready), or
//! `--publish ip`, or the Service's `publishNotReadyAddresses`, the rule
//! pods follow. A ClusterIP Service without a selector keeps answering
//! its ClusterIP only, as the specification says.

use super::build::{NamedSrv, add_ips};
use super::*;

/// The slices the writer holds, and what finds them.
#[derive(Debug, Default)]
pub(super) struct Slices {
    pub(super) by_key: HashMap<ObjKey, SliceInfo>,
    /// Slice names by the Service (namespace, name) they belong to.
    by_service: HashMap<ObjKey, BTreeSet<String>>,
    /// Slices with an endpoint holding each address.
    by_ip: HashMap<IpAddr, SmallSet<ObjKey>>,
}

/// The Service a slice belongs to.
fn service_of(slice: &SliceInfo) -> ObjKey {
    ObjKey::new(slice.key.namespace.as_str(), slice.service.as_str())
}

/// Does this Service take its records from EndpointSlices? Only a headless
/// Service without a selector does: a selector's pods are read directly,
/// and a ClusterIP answers with itself.
pub(super) fn from_slices(svc: &ServiceInfo) -> bool {
    svc.kind == ServiceKind::Headless && svc.selector.is_none()
}

impl Writer {
    pub fn apply_slice(&mut self, slice: SliceInfo) {
        if self.slices.by_key.get(&slice.key) == Some(&slice) {
            return;
        }
        let key = slice.key.clone();
        let mut dirty = Vec::new();
        self.slice_keys(&key, &mut dirty);
        self.unlink_slice(&key);
        self.link_slice(slice);
        self.slice_keys(&key, &mut dirty);
        self.dirty.extend(dirty);
    }

    pub fn delete_slice(&mut self, key: &ObjKey) {
        if !self.slices.by_key.contains_key(key) {
            return;
        }
        let mut dirty = Vec::new();
        self.slice_keys(key, &mut dirty);
        self.unlink_slice(key);
        self.dirty.extend(dirty);
    }

    pub(super) fn retain_slices<'a>(
        &mut self,
        namespace: Option<&str>,
        listed: impl Iterator<Item = &'a ObjKey>,
    ) {
        for k in &vanished(&self.slices.by_key, namespace, listed) {
            self.delete_slice(k);
        }
    }

    /// Every key whose names depend on this slice as it is now.
    fn slice_keys(&self, key: &ObjKey, out: &mut Vec<Key>) {
        if let Some(slice) = self.slices.by_key.get(key) {
            out.push(Key::Svc(service_of(slice)));
            endpoint_keys(slice, out);
        }
    }

    /// The keys the slices of Service `sk` touch besides `Key::Svc`: what
    /// a change of the Service itself must rebuild.
    pub(super) fn slice_service_keys(&self, sk: &ObjKey, out: &mut Vec<Key>) {
        for slice in self.service_slices(sk) {
            endpoint_keys(slice, out);
        }
    }

    fn link_slice(&mut self, slice: SliceInfo) {
        let key = slice.key.clone();
        self.slices
            .by_service
            .entry(service_of(&slice))
            .or_default()
            .insert(key.name.clone());
        for ip in slice.endpoints.iter().flat_map(|e| &e.ips) {
            self.slices
                .by_ip
                .entry(*ip)
                .or_default()
                .insert(key.clone());
        }
        self.slices.by_key.insert(key, slice);
    }

    fn unlink_slice(&mut self, key: &ObjKey) {
        let Some(slice) = self.slices.by_key.remove(key) else {
            return;
        };
        remove_from(&mut self.slices.by_service, &service_of(&slice), &key.name);
        for ip in slice.endpoints.iter().flat_map(|e| &e.ips) {
            remove_from(&mut self.slices.by_ip, ip, key);
        }
    }

    /// The slices of Service `sk`, in name order.
    pub(super) fn service_slices<'a>(
        &'a self,
        sk: &'a ObjKey,
    ) -> impl Iterator<Item = &'a SliceInfo> + 'a {
        self.slices
            .by_service
            .get(sk)
            .into_iter()
            .flatten()
            .filter_map(move |name| {
                self.slices
                    .by_key
                    .get(&ObjKey::new(sk.namespace.as_str(), name.as_str()))
            })
    }

    /// Is this endpoint published for `svc`? The pods' rule: not
    /// terminating, and ready unless `--publish ip` or the Service's
    /// `publishNotReadyAddresses` says otherwise.
    pub(super) fn endpoint_published(&self, svc: &ServiceInfo, ep: &SliceEndpoint) -> bool {
        !ep.ips.is_empty()
            && !ep.terminating
            && (self.policy.publish == Publish::Ip || ep.ready || svc.publish_not_ready)
    }

    /// The published endpoints of a Service that answers from slices,
    /// with the slice each is in.
    pub(super) fn published_endpoints<'a>(
        &'a self,
        svc: &'a ServiceInfo,
    ) -> impl Iterator<Item = (&'a SliceInfo, &'a SliceEndpoint)> + 'a {
        from_slices(svc)
            .then(|| self.service_slices(&svc.key))
            .into_iter()
            .flatten()
            .flat_map(|s| s.endpoints.iter().map(move |e| (s, e)))
            .filter(|(_, e)| self.endpoint_published(svc, e))
    }

    /// Does a published endpoint of `svc` hold `ip` (its dashed name
    /// `<a-b-c-d>.<svc>.<ns>.svc`)?
    pub(super) fn endpoint_holds(&self, svc: &ServiceInfo, ip: IpAddr) -> bool {
        from_slices(svc)
            && self.slices.by_ip.get(&ip).is_some_and(|keys| {
                keys.iter()
                    .filter_map(|k| self.slices.by_key.get(k))
                    .filter(|s| s.key.namespace == svc.key.namespace && s.service == svc.key.name)
                    .flat_map(|s| &s.endpoints)
                    .any(|e| e.ips.contains(&ip) && self.endpoint_published(svc, e))
            })
    }

    /// The addresses of the published endpoints named `host` of the
    /// headless Service `<sub>` of `ns`, when it answers from slices.
    pub(super) fn endpoint_host_ips(&self, ns: &str, sub: &str, host: &str) -> Vec<IpAddr> {
        let mut ips = Vec::new();
        let Some(svc) = self.headless(ns, sub) else {
            return ips;
        };
        for (_, e) in self.published_endpoints(svc) {
            if e.hostname.as_deref() == Some(host) {
                for ip in &e.ips {
                    if !ips.contains(ip) {
                        ips.push(*ip);
                    }
                }
            }
        }
        ips
    }

    /// The name an endpoint's address answers to under its Service: its
    /// hostname name, else its dashed name.
    fn endpoint_target(&self, sk: &ObjKey, ep: &SliceEndpoint, ip: IpAddr) -> String {
        match &ep.hostname {
            Some(host) => host_name(host, &sk.name, &sk.namespace),
            None => member_name(ip, &sk.name, &sk.namespace),
        }
    }

    /// The PTR of an address held by a published endpoint: its hostname
    /// name when it has a `hostname` (the specification's rule), else its
    /// dashed name under the Service (as a pod's, and as CoreDNS answers),
    /// and the slice it is in. An endpoint with a hostname wins over one
    /// without, then the first slice by key.
    pub(super) fn endpoint_ptr(&self, ip: IpAddr) -> Option<(String, &ObjKey)> {
        let mut dashed = None;
        for key in self.slices.by_ip.get(&ip)? {
            let Some(slice) = self.slices.by_key.get(key) else {
                continue;
            };
            let Some(svc) = self.headless(&key.namespace, &slice.service) else {
                continue;
            };
            if !from_slices(svc) {
                continue;
            }
            for e in &slice.endpoints {
                if !e.ips.contains(&ip) || !self.endpoint_published(svc, e) {
                    continue;
                }
                if e.hostname.is_some() {
                    return Some((self.endpoint_target(&svc.key, e, ip), key));
                }
                if dashed.is_none() {
                    dashed = Some((self.endpoint_target(&svc.key, e, ip), key));
                }
            }
        }
        dashed
    }

    /// The names of a headless Service without a selector: its addresses
    /// and SRV records, from its slices' published endpoints and ports.
    pub(super) fn build_slice_service(&self, svc: &ServiceInfo) -> Vec<(String, Rrs)> {
        let sk = &svc.key;
        let mut ips: Vec<IpAddr> = Vec::new();
        let mut rrs = Rrs::default();
        let mut named = NamedSrv::default();
        for (slice, e) in self.published_endpoints(svc) {
            for ip in &e.ips {
                if !ips.contains(ip) {
                    ips.push(*ip);
                }
                let target = self.table.shared_name(self.endpoint_target(sk, e, *ip));
                for port in &slice.ports {
                    let srv = Srv {
                        port: port.port,
                        target: target.clone(),
                    };
                    named.add(&mut rrs, sk, port.name.as_deref(), port.protocol, &srv);
                }
            }
        }
        ips.sort_unstable();
        add_ips(&mut rrs, &ips);
        let mut out = vec![(service_name(&sk.name, &sk.namespace), rrs)];
        out.extend(named.names());
        out
    }
}

/// The keys an endpoint's names live under: its dashed name, its PTR and
/// its hostname name.
fn endpoint_keys(slice: &SliceInfo, out: &mut Vec<Key>) {
    let sk = service_of(slice);
    for e in &slice.endpoints {
        for ip in &e.ips {
            out.push(Key::SvcIp(sk.clone(), *ip));
            out.push(Key::Ptr(*ip));
        }
        if let Some(host) = &e.hostname {
            out.push(Key::Host {
                ns: sk.namespace.clone(),
                sub: sk.name.clone(),
                host: host.clone(),
            });
        }
    }
}
