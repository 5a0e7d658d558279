//! The derived names: a batch's touched keys rebuilt into the table's
//! names, each key by the model's current objects.

use super::*;

impl Writer {
    pub(super) fn rebuild(&mut self, dirty: Vec<Key>) {
        let mut again = Vec::new();
        // Members sort before the Service that publishes their set.
        let mut changed: HashMap<ObjKey, Vec<PodId>> = HashMap::default();
        for key in dirty {
            match key {
                Key::Member(sk, id) => {
                    changed.entry(sk).or_default().push(id);
                    continue;
                }
                Key::Svc(ref sk) => {
                    let ids = changed.remove(sk).unwrap_or_default();
                    self.update_set(sk, ids);
                }
                _ => {}
            }
            self.rebuild_key(key, Some(&mut again));
        }
        for key in again {
            self.rebuild_key(key, None);
        }
        self.metrics.index_names.set(self.name_count);
    }

    /// Bring a headless Service's set up to date: what the `changed`
    /// members add now, or every member's when the Service itself changed.
    pub(super) fn update_set(&mut self, sk: &ObjKey, changed: Vec<PodId>) {
        let Some(svc) = self
            .services
            .get(sk)
            .filter(|s| s.kind == ServiceKind::Headless)
        else {
            self.stale_sets.remove(sk);
            self.sets.remove(sk);
            return;
        };
        if self.stale_sets.remove(sk) || !self.sets.contains_key(sk) {
            let mut set = HeadlessSet::new(&svc.ports);
            for &id in self.members.get(sk).into_iter().flatten() {
                set.put(id, &self.pods.get(id).ips, self.added(svc, id));
            }
            self.sets.insert(sk.clone(), set);
            return;
        }
        // A member that left was taken out when its pod was unlinked.
        let now: Vec<(PodId, SrvAdded, bool)> = changed
            .into_iter()
            .filter(|&id| self.pods.try_get(id).is_some())
            .map(|id| match self.added(svc, id) {
                Some(srv) => (id, srv, true),
                None => (id, SrvAdded::default(), false),
            })
            .collect();
        let Some(set) = self.sets.get_mut(sk) else {
            return;
        };
        for (id, srv, published) in now {
            let ips = &self.pods.get(id).ips;
            set.put(id, ips, published.then_some(srv));
        }
    }

    /// The SRV records pod `id` adds to headless Service `svc` as things
    /// are now, or `None` unless it is a live, published member.
    pub(super) fn added(&self, svc: &ServiceInfo, id: PodId) -> Option<SrvAdded> {
        let p = self.pods.try_get(id)?;
        if **p.ns() != *svc.key.namespace
            || !p.services.contains(svc.key.name.as_str())
            || !self.published(p, svc.publish_not_ready)
        {
            return None;
        }
        let mut srv = Vec::new();
        // JobSet's Services have no ports: no SRV, and no per-member
        // target to work out.
        if !svc.ports.is_empty() {
            for ip in &p.ips {
                let target = self
                    .table
                    .shared_name(self.target_under(p, &svc.key.name, *ip));
                for (i, port) in svc.ports.iter().enumerate() {
                    let r = Srv {
                        port: pod_port(port, p),
                        target: target.clone(),
                    };
                    srv.push((u16::try_from(i).unwrap_or(u16::MAX), r));
                }
            }
        }
        Some(srv.into_boxed_slice())
    }

    /// Publish the names of one key as [`Self::build`] makes them now. A
    /// name removed here that another key may also build (see
    /// [`collider`]) queues that key in `again`, to be rebuilt after the
    /// batch, so the name stays if the other key still publishes it.
    pub(super) fn rebuild_key(&mut self, key: Key, again: Option<&mut Vec<Key>>) {
        match &key {
            Key::Rank(group, idx) => self.update_rank_state(group, *idx),
            Key::Summary(group) => self.settle_group(group),
            // Names spelled from an address: the table keeps facts, not names.
            Key::PodIp { ns, ip } => {
                let name = IpName::Pod(self.strs.get(ns.as_str()));
                return self.publish_ip_name(*ip, name, &key);
            }
            Key::SvcIp(sk, ip) => {
                let name = IpName::Member(
                    self.strs.get(sk.namespace.as_str()),
                    self.strs.get(sk.name.as_str()),
                );
                return self.publish_ip_name(*ip, name, &key);
            }
            Key::Ptr(ip) => {
                self.name_count += self.table.set_ptr(*ip, self.ptr_target(*ip));
                return;
            }
            _ => {}
        }
        let names = self.build(&key);
        let Some(name) = key_name(&key) else {
            // A Service: how many names it has depends on its ports.
            let old = self.svc_published.remove(&key).unwrap_or_default();
            let mut now = Vec::with_capacity(names.len());
            for (name, rrs) in names {
                self.set_name(&name, rrs);
                now.push(name.into_boxed_str());
            }
            for name in old {
                if !now.contains(&name) {
                    self.remove_name(&name);
                }
            }
            if !now.is_empty() {
                self.svc_published.insert(key, now);
            }
            return;
        };
        debug_assert!(names.len() <= 1 && names.iter().all(|(n, _)| *n == name));
        match names.into_iter().next() {
            Some((_, rrs)) => self.set_name(&name, rrs),
            None => {
                if self.remove_name(&name)
                    && let (Some(again), Some(other)) = (again, collider(&key))
                {
                    again.push(other);
                }
            }
        }
    }

    /// Give or take one name spelled from `ip`, as [`Self::build`] says.
    pub(super) fn publish_ip_name(&mut self, ip: IpAddr, name: IpName, key: &Key) {
        if self.build(key).is_empty() {
            if self.table.remove_ip_name(ip, &name) {
                self.name_count -= 1;
            }
        } else if self.table.add_ip_name(ip, name.clone()) {
            self.name_count += 1;
        }
        match name {
            IpName::Pod(ns) => self.strs.release(&ns),
            IpName::Member(ns, svc) => {
                self.strs.release(&ns);
                // Dropped before the next: a Service named as its
                // namespace is one string, held twice here.
                drop(ns);
                self.strs.release(&svc);
            }
        }
    }

    /// Publish a name's data: one address inline (a pod's hostname and
    /// rank names), anything else as a shared record set.
    pub(super) fn set_name(&mut self, name: &str, rrs: Rrs) {
        if self.table.set(name, Value::of(rrs)) {
            self.name_count += 1;
        }
    }

    /// Remove a name's data; true if it had any.
    pub(super) fn remove_name(&mut self, name: &str) -> bool {
        let had = self.table.remove(name).is_some();
        if had {
            self.name_count -= 1;
        }
        had
    }

    /// The names and data of one key, from the model as it is now.
    pub(super) fn build(&self, key: &Key) -> Vec<(String, Rrs)> {
        match key {
            Key::Host { ns, sub, host } => {
                let pods: Vec<&Pod> = self
                    .host_pods(ns, sub, host)
                    .map(|id| self.pod(id))
                    .filter(|p| self.host_published(p))
                    .collect();
                let chosen = self.choose(pods);
                // Endpoints of a Service without a selector named so.
                let endpoints = self.endpoint_host_ips(ns, sub, host);
                if chosen.is_empty() && endpoints.is_empty() {
                    return vec![];
                }
                let mut rrs = Rrs::default();
                for p in chosen {
                    add_ips(&mut rrs, &p.ips);
                }
                for ip in endpoints {
                    if !rrs.a.iter().map(|a| IpAddr::V4(*a)).any(|a| a == ip)
                        && !rrs.aaaa.iter().map(|a| IpAddr::V6(*a)).any(|a| a == ip)
                    {
                        add_ips(&mut rrs, &[ip]);
                    }
                }
                vec![(host_name(host, sub, ns), rrs)]
            }
            // Members have no names of their own (see `rebuild`).
            Key::Member(..) => vec![],
            Key::Svc(sk) => self.build_service(sk),
            Key::SvcIp(sk, ip) => {
                let Some(svc) = self
                    .services
                    .get(sk)
                    .filter(|s| s.kind == ServiceKind::Headless)
                else {
                    return vec![];
                };
                // Through the pods holding this IP, not the Service's members:
                // O(1) per name, not O(size of the gang).
                let holds = self.ip_holders(*ip).any(|p| self.makes_member_name(p, svc))
                    || self.endpoint_holds(svc, *ip);
                if !holds {
                    return vec![];
                }
                let mut rrs = Rrs::default();
                add_ips(&mut rrs, &[*ip]);
                vec![(member_name(*ip, &sk.name, &sk.namespace), rrs)]
            }
            Key::PodIp { ns, ip } => {
                let exists = self.ip_holders(*ip).any(|p| self.makes_pod_name(p, ns));
                if !exists {
                    return vec![];
                }
                let mut rrs = Rrs::default();
                add_ips(&mut rrs, &[*ip]);
                vec![(pod_name(*ip, ns), rrs)]
            }
            Key::Rank(group, idx) => self.build_rank(group, *idx),
            Key::Leader(group) => self.build_leader(group),
            Key::Summary(group) => self.build_summary(group),
            Key::Ptr(ip) => match self.ptr_target(*ip) {
                Some(target) => {
                    vec![(
                        reverse(*ip),
                        Rrs {
                            ptr: Some(target.spell(*ip).into()),
                            ..Default::default()
                        },
                    )]
                }
                None => vec![],
            },
        }
    }

    pub(super) fn build_service(&self, sk: &ObjKey) -> Vec<(String, Rrs)> {
        let Some(svc) = self.services.get(sk) else {
            return vec![];
        };
        let base = service_name(&sk.name, &sk.namespace);
        let mut out = Vec::new();
        match &svc.kind {
            ServiceKind::ExternalName(target) => {
                let rrs = Rrs {
                    cname: Some(target.to_ascii_lowercase().into()),
                    ..Default::default()
                };
                out.push((base, rrs));
            }
            ServiceKind::ClusterIp(ips) => {
                let mut rrs = Rrs::default();
                add_ips(&mut rrs, ips);
                let mut named = NamedSrv::default();
                for port in &svc.ports {
                    let srv = Srv {
                        port: port.port,
                        target: base.clone().into(),
                    };
                    named.add(&mut rrs, sk, port.name.as_deref(), port.protocol, &srv);
                }
                out.push((base, rrs));
                out.extend(named.names());
            }
            ServiceKind::Headless if slices::from_slices(svc) => {
                return self.build_slice_service(svc);
            }
            ServiceKind::Headless => {
                let Some(set) = self.sets.get(sk) else {
                    out.push((base, Rrs::default()));
                    return out;
                };
                out.push((base.clone(), set.rrs()));
                for (i, port) in svc.ports.iter().enumerate() {
                    let Some(pn) = &port.name else { continue };
                    let srv = set.port_srv(u16::try_from(i).unwrap_or(u16::MAX));
                    if !srv.is_empty() {
                        out.push((
                            port_name(pn, port.protocol.label(), &sk.name, &sk.namespace),
                            Rrs {
                                srv,
                                ..Default::default()
                            },
                        ));
                    }
                }
            }
        }
        out
    }
}

/// The SRV records of a Service's named ports, by their names
/// `_<port>._<proto>.<svc>.<ns>.svc`, gathered while the Service's own
/// records are.
#[derive(Default)]
pub(super) struct NamedSrv(BTreeMap<String, SrvSet>);

impl NamedSrv {
    /// One SRV record of Service `sk`: at its name (`rrs`), and at its
    /// port's name when the port has one.
    pub(super) fn add(
        &mut self,
        rrs: &mut Rrs,
        sk: &ObjKey,
        port: Option<&str>,
        protocol: Proto,
        srv: &Srv,
    ) {
        rrs.srv.add(srv);
        if let Some(name) = port {
            self.0
                .entry(port_name(name, protocol.label(), &sk.name, &sk.namespace))
                .or_default()
                .add(srv);
        }
    }

    /// The port names and their records.
    pub(super) fn names(self) -> impl Iterator<Item = (String, Rrs)> {
        self.0.into_iter().map(|(name, srv)| {
            (
                name,
                Rrs {
                    srv,
                    ..Default::default()
                },
            )
        })
    }
}

/// The one name of a key, as [`Writer::build`] spells it; `None` for a
/// Service, whose SRV names depend on its ports.
pub(super) fn key_name(key: &Key) -> Option<String> {
    Some(match key {
        Key::Host { ns, sub, host } => host_name(host, sub, ns),
        Key::Member(..) | Key::Svc(_) => return None,
        Key::SvcIp(sk, ip) => member_name(*ip, &sk.name, &sk.namespace),
        Key::PodIp { ns, ip } => pod_name(*ip, ns),
        Key::Ptr(ip) => reverse(*ip),
        Key::Rank(group, idx) => rank_name(*idx, &group.name, &group.ns),
        Key::Leader(group) => leader_name(&group.name, &group.ns),
        Key::Summary(group) => gang_name(&group.name, &group.ns),
    })
}

/// The other key that may build the same name: a pod whose hostname is a
/// dashed IP under a headless Service's name (`10-0-0-1.web.ns.svc`) meets
/// that Service's dashed name of the IP; a Job and a JobSet of one name
/// meet in the rank view.
pub(super) fn collider(key: &Key) -> Option<Key> {
    let flip = |g: &Group| group(!g.set, g.ns.clone(), g.name.clone());
    match key {
        Key::Rank(g, idx) => Some(Key::Rank(flip(g), *idx)),
        Key::Leader(g) => Some(Key::Leader(flip(g))),
        Key::Summary(g) => Some(Key::Summary(flip(g))),
        // A hostname name spelled like a dashed name under a Service of the
        // subdomain's name (`10-0-0-1.web.ns.svc`) is stored; the dashed
        // name is spelled from the address, and the stored one wins.
        Key::Host { .. } | Key::SvcIp(..) => None,
        Key::Member(..) | Key::Svc(_) | Key::PodIp { .. } | Key::Ptr(_) => None,
    }
}

/// The port a headless Service's SRV record names for one pod: `targetPort`
/// when numeric, the pod's container port of that name when named, else
/// `port` (what EndpointSlices carry).
pub(super) fn pod_port(port: &ServicePort, pod: &Pod) -> u16 {
    match &port.target {
        TargetPort::Same => port.port,
        TargetPort::Number(n) => *n,
        TargetPort::Name(name) => pod
            .ports()
            .iter()
            .find(|cp| cp.name.as_deref() == Some(name) && cp.protocol == port.protocol)
            .map(|cp| cp.port)
            .unwrap_or(port.port),
    }
}

pub(super) fn add_ips(rrs: &mut Rrs, ips: &[IpAddr]) {
    for ip in ips {
        match ip {
            IpAddr::V4(v4) => rrs.a.push(*v4),
            IpAddr::V6(v6) => rrs.aaaa.push(*v6),
        }
    }
}
