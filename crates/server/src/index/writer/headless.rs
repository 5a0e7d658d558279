//! Derived data: the record sets of headless Services, kept member by
//! member. A pod event changes what one member adds (its addresses and SRV
//! records), so it costs O(log n) for the SRV records (kept in the
//! persistent form they are published in, [`SrvSet`]) and one copy of the
//! n addresses (4 or 16 bytes each), never a walk over every member with
//! its publishing rules and names. A Service event (ports, selector,
//! `publishNotReadyAddresses`) recounts the whole set.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::index::containers::{HashMap, HashSet};
use crate::index::table::{Rrs, Srv, SrvSet};
use crate::index::types::ServicePort;

/// A pod's place in the writer's slab.
pub(crate) type PodId = u32;

/// A sorted multiset in one `Vec`: two members may add the same record
/// (two pods of one address, hostNetwork pods of one node), and the record
/// stays until the last of them leaves.
#[derive(Debug, Clone)]
pub(crate) struct Counted<T>(Vec<(T, u32)>);

impl<T> Default for Counted<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: Ord + Clone> Counted<T> {
    pub(crate) fn add(&mut self, v: &T) {
        match self.0.binary_search_by(|(x, _)| x.cmp(v)) {
            Ok(i) => self.0[i].1 += 1,
            Err(i) => self.0.insert(i, (v.clone(), 1)),
        }
    }

    pub(crate) fn remove(&mut self, v: &T) {
        if let Ok(i) = self.0.binary_search_by(|(x, _)| x.cmp(v)) {
            if self.0[i].1 > 1 {
                self.0[i].1 -= 1;
            } else {
                self.0.remove(i);
            }
        }
    }

    /// The distinct values, in order.
    pub(crate) fn values(&self) -> impl ExactSizeIterator<Item = &T> {
        self.0.iter().map(|(v, _)| v)
    }
}

/// The SRV records one member adds, each with the index of the Service
/// port it is for (its named SRV name, if the port has a name).
pub(crate) type SrvAdded = Box<[(u16, Srv)]>;

/// The records of one headless Service, counted over its published members.
///
/// A member's addresses are not stored: they are its pod's, and a pod's
/// addresses only change through an unlink (when the writer calls
/// [`Self::take`] with the old pod) and a new link. Only which members are
/// counted is kept, and the SRV records of Services with ports (their
/// targets depend on other pods).
#[derive(Debug, Default)]
pub(crate) struct HeadlessSet {
    a: Counted<Ipv4Addr>,
    aaaa: Counted<Ipv6Addr>,
    /// Every member's SRV records: the Service name's.
    srv: SrvSet,
    /// SRV records by Service port index, for the named SRV names of a
    /// Service with more than one port. With one port, that port's records
    /// are `srv`: a second B-tree of the same records cost 72 bytes a
    /// member (`cargo bench --bench memory`). Unnamed ports have no name of their own.
    by_port: HashMap<u16, SrvSet>,
    /// Which port indexes `by_port` keeps (empty: none, one port or none).
    split: Box<[bool]>,
    counted: HashSet<PodId>,
    srv_added: HashMap<PodId, SrvAdded>,
}

impl HeadlessSet {
    /// An empty set for a Service with these ports.
    pub(crate) fn new(ports: &[ServicePort]) -> Self {
        let split = if ports.len() > 1 {
            ports.iter().map(|p| p.name.is_some()).collect()
        } else {
            Box::default()
        };
        Self {
            split,
            ..Self::default()
        }
    }

    fn keeps(&self, port: u16) -> bool {
        self.split.get(usize::from(port)).copied().unwrap_or(false)
    }

    /// Count member `id`, whose pod has `ips`, as it is now: published
    /// with these SRV records (`Some`), or not (`None`).
    pub(crate) fn put(&mut self, id: PodId, ips: &[IpAddr], now: Option<SrvAdded>) {
        if self.counted.contains(&id)
            && let Some(now) = &now
            && self
                .srv_added
                .get(&id)
                .map_or(now.is_empty(), |old| old == now)
        {
            return;
        }
        self.take(id, ips);
        let Some(srv) = now else { return };
        for ip in ips {
            match ip {
                IpAddr::V4(v4) => self.a.add(v4),
                IpAddr::V6(v6) => self.aaaa.add(v6),
            }
        }
        for (port, r) in &srv {
            self.srv.add(r);
            if self.keeps(*port) {
                self.by_port.entry(*port).or_default().add(r);
            }
        }
        self.counted.insert(id);
        if !srv.is_empty() {
            self.srv_added.insert(id, srv);
        }
    }

    /// Stop counting member `id`, whose pod has (or had, until now) `ips`.
    pub(crate) fn take(&mut self, id: PodId, ips: &[IpAddr]) {
        if !self.counted.remove(&id) {
            return;
        }
        for ip in ips {
            match ip {
                IpAddr::V4(v4) => self.a.remove(v4),
                IpAddr::V6(v6) => self.aaaa.remove(v6),
            }
        }
        for (port, r) in self.srv_added.remove(&id).into_iter().flatten() {
            self.srv.remove(&r);
            if let Some(c) = self.by_port.get_mut(&port) {
                c.remove(&r);
                if c.is_empty() {
                    self.by_port.remove(&port);
                }
            }
        }
    }

    /// The Service's own name: every member's addresses and SRV records.
    pub(crate) fn rrs(&self) -> Rrs {
        Rrs {
            a: self.a.values().copied().collect(),
            aaaa: self.aaaa.values().copied().collect(),
            srv: self.srv.clone(),
            ..Default::default()
        }
    }

    /// The SRV records of Service port `port` (a named one).
    pub(crate) fn port_srv(&self, port: u16) -> SrvSet {
        if self.split.is_empty() {
            return self.srv.clone();
        }
        self.by_port.get(&port).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn srv(port: u16, t: &str) -> Srv {
        Srv {
            port,
            target: t.into(),
        }
    }

    /// Service ports named as given (`None`: unnamed).
    fn ports(names: &[Option<&str>]) -> Vec<ServicePort> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| ServicePort {
                name: n.map(str::to_string),
                port: 8000 + i as u16,
                protocol: crate::index::types::Proto::Tcp,
                target: crate::index::types::TargetPort::Number(8000 + i as u16),
            })
            .collect()
    }

    fn one_port() -> HeadlessSet {
        HeadlessSet::new(&ports(&[Some("http")]))
    }

    #[test]
    fn a_record_stays_until_its_last_member_leaves() {
        let mut s = one_port();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let one = || -> SrvAdded { Box::new([(0, srv(80, "a.web.ns.svc"))]) };
        s.put(1, &[ip], Some(one()));
        s.put(2, &[ip], Some(one()));
        assert_eq!(s.rrs().a.len(), 1);
        s.put(1, &[ip], None);
        assert_eq!(s.rrs().a, ["10.0.0.1".parse::<Ipv4Addr>().unwrap()]);
        assert!(s.port_srv(0).iter().eq([&srv(80, "a.web.ns.svc")]));
        s.take(2, &[ip]);
        assert!(s.rrs().is_empty());
        assert!(s.port_srv(0).is_empty() && s.by_port.is_empty());
        s.take(2, &[ip]);
        assert!(s.rrs().is_empty(), "a second take changes nothing");
    }

    #[test]
    fn a_member_that_changes_replaces_what_it_added() {
        let mut s = HeadlessSet::new(&ports(&[Some("a"), Some("b")]));
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::2".parse().unwrap();
        s.put(7, &[v4], Some(Box::new([])));
        // Relinked with another address: the writer takes the old pod.
        s.take(7, &[v4]);
        s.put(7, &[v6], Some(Box::new([(1, srv(53, "x"))])));
        let r = s.rrs();
        assert!(r.a.is_empty());
        assert_eq!(r.aaaa.len(), 1);
        assert!(r.srv.iter().eq([&srv(53, "x")]));
        assert!(s.port_srv(0).is_empty());
        assert!(s.port_srv(1).iter().eq([&srv(53, "x")]));
        // Its SRV target changes (another pod won its hostname).
        s.put(7, &[v6], Some(Box::new([(1, srv(53, "y"))])));
        assert!(s.rrs().srv.iter().eq([&srv(53, "y")]));
        assert_eq!(s.rrs().aaaa.len(), 1);
    }

    /// What the writer published stays as it was while the set changes:
    /// the copy shares the B-tree's nodes, and a change copies its path.
    #[test]
    fn a_published_copy_keeps_its_records_while_the_set_changes() {
        let mut s = one_port();
        let ip = |i: u32| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        let mine = |t: &str| -> SrvAdded { Box::new([(0, srv(80, t))]) };
        // More than one B-tree node's worth of records.
        for i in 0..300 {
            s.put(i, &[ip(i)], Some(mine(&format!("r{i}.web.ns.svc"))));
        }
        let before = s.rrs();
        s.take(7, &[ip(7)]);
        s.put(7, &[ip(7)], Some(mine("moved.web.ns.svc")));
        let after = s.rrs();
        let has = |r: &Rrs, t: &str| r.srv.iter().any(|x| &*x.target == t);
        assert_eq!((before.srv.len(), after.srv.len()), (300, 300));
        assert!(has(&before, "r7.web.ns.svc") && !has(&before, "moved.web.ns.svc"));
        assert!(has(&after, "moved.web.ns.svc") && !has(&after, "r7.web.ns.svc"));
        assert_ne!(before, after);
        assert_eq!(after, s.rrs());
        assert!(s.port_srv(0).iter().eq(after.srv.iter()));
        let targets: Vec<&str> = after.srv.iter().map(|x| &*x.target).collect();
        assert!(targets.is_sorted(), "records come out in order");
    }

    /// A named port's records are kept apart only when the Service has
    /// other ports; with one port they are the Service name's, shared.
    #[test]
    fn a_port_keeps_its_own_records_only_beside_other_ports() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let added =
            |n: u16| -> SrvAdded { (0..n).map(|i| (i, srv(8000 + i, "a.web.ns.svc"))).collect() };
        let mut one = one_port();
        one.put(1, &[ip], Some(added(1)));
        assert!(one.by_port.is_empty(), "one port: no second copy");
        assert_eq!(one.port_srv(0), one.rrs().srv);

        let mut three = HeadlessSet::new(&ports(&[Some("a"), None, Some("c")]));
        three.put(1, &[ip], Some(added(3)));
        assert_eq!(three.rrs().srv.len(), 3);
        let mut kept: Vec<u16> = three.by_port.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, [0, 2], "the unnamed port has no name of its own");
        assert!(three.port_srv(0).iter().eq([&srv(8000, "a.web.ns.svc")]));
        assert!(three.port_srv(2).iter().eq([&srv(8002, "a.web.ns.svc")]));
        three.take(1, &[ip]);
        assert!(three.by_port.is_empty() && three.rrs().is_empty());
    }
}
