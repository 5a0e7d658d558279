//! Derived data: the record sets of headless Services, kept member by
//! member. A pod event changes what one member adds (its addresses and SRV
//! records), so it costs O(log n + n copied once) in a set of n members,
//! never a walk over every member with its publishing rules and names.
//! A Service event (ports, selector, `publishNotReadyAddresses`) recounts
//! the whole set.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::table::{Rrs, Srv};
use super::writer::HashMap;

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

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What one published member adds to its Service's names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Added {
    pub ips: Box<[IpAddr]>,
    /// SRV records, each with the index of the Service port it is for (its
    /// named SRV name, if the port has a name).
    pub srv: Box<[(u16, Srv)]>,
}

/// The records of one headless Service, counted over its published members.
#[derive(Debug, Default)]
pub(crate) struct HeadlessSet {
    a: Counted<Ipv4Addr>,
    aaaa: Counted<Ipv6Addr>,
    srv: Counted<Srv>,
    /// SRV records by Service port index, for the named SRV names.
    by_port: HashMap<u16, Counted<Srv>>,
    added: HashMap<PodId, Added>,
}

impl HeadlessSet {
    /// Set what member `id` adds now (`None`: nothing, it is not published),
    /// taking back what it added before.
    pub(crate) fn put(&mut self, id: PodId, now: Option<Added>) {
        if let Some(old) = self.added.remove(&id) {
            if now.as_ref() == Some(&old) {
                self.added.insert(id, old);
                return;
            }
            for ip in &old.ips {
                match ip {
                    IpAddr::V4(v4) => self.a.remove(v4),
                    IpAddr::V6(v6) => self.aaaa.remove(v6),
                }
            }
            for (port, srv) in &old.srv {
                self.srv.remove(srv);
                if let Some(c) = self.by_port.get_mut(port) {
                    c.remove(srv);
                    if c.is_empty() {
                        self.by_port.remove(port);
                    }
                }
            }
        }
        let Some(now) = now else { return };
        for ip in &now.ips {
            match ip {
                IpAddr::V4(v4) => self.a.add(v4),
                IpAddr::V6(v6) => self.aaaa.add(v6),
            }
        }
        for (port, srv) in &now.srv {
            self.srv.add(srv);
            self.by_port.entry(*port).or_default().add(srv);
        }
        self.added.insert(id, now);
    }

    /// The Service's own name: every member's addresses and SRV records.
    pub(crate) fn rrs(&self) -> Rrs {
        Rrs {
            a: self.a.values().copied().collect(),
            aaaa: self.aaaa.values().copied().collect(),
            srv: self.srv.values().cloned().collect(),
            ..Default::default()
        }
    }

    /// The SRV records of Service port `port`.
    pub(crate) fn port_srv(&self, port: u16) -> Vec<Srv> {
        self.by_port
            .get(&port)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default()
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

    #[test]
    fn a_record_stays_until_its_last_member_leaves() {
        let mut s = HeadlessSet::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let one = || Added {
            ips: Box::new([ip]),
            srv: Box::new([(0, srv(80, "a.web.ns.svc"))]),
        };
        s.put(1, Some(one()));
        s.put(2, Some(one()));
        assert_eq!(s.rrs().a.len(), 1);
        s.put(1, None);
        assert_eq!(s.rrs().a, ["10.0.0.1".parse::<Ipv4Addr>().unwrap()]);
        assert_eq!(s.port_srv(0), [srv(80, "a.web.ns.svc")]);
        s.put(2, None);
        assert!(s.rrs().is_empty());
        assert!(s.port_srv(0).is_empty() && s.by_port.is_empty());
    }

    #[test]
    fn a_member_that_changes_replaces_what_it_added() {
        let mut s = HeadlessSet::default();
        let v6: IpAddr = "fd00::2".parse().unwrap();
        s.put(
            7,
            Some(Added {
                ips: Box::new(["10.0.0.1".parse().unwrap()]),
                srv: Box::new([]),
            }),
        );
        s.put(
            7,
            Some(Added {
                ips: Box::new([v6]),
                srv: Box::new([(1, srv(53, "x"))]),
            }),
        );
        let r = s.rrs();
        assert!(r.a.is_empty());
        assert_eq!(r.aaaa.len(), 1);
        assert_eq!(r.srv, [srv(53, "x")]);
        assert!(s.port_srv(0).is_empty());
    }
}
