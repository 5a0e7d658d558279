//! The read side: a concurrent map from a name key to the record data that
//! name owns. Only the writer mutates it; readers take a shard read lock for
//! the time of one hash lookup and an `Arc` clone, never while the writer
//! computes anything.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dashmap::DashMap;

/// An SRV record's data; the target is a forward key (relative to the zone).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Srv {
    pub port: u16,
    /// Shared by the SRV records of one member (one per Service port).
    pub target: Arc<str>,
}

/// Everything one name answers, built by the writer when an event touches
/// the name. An empty `Rrs` is a name that exists with no data (NODATA).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rrs {
    pub a: Vec<Ipv4Addr>,
    pub aaaa: Vec<Ipv6Addr>,
    /// Absolute target of an ExternalName Service, no trailing dot.
    pub cname: Option<Box<str>>,
    pub srv: Vec<Srv>,
    /// Forward key the PTR points at (relative to the first zone).
    pub ptr: Option<Box<str>>,
    pub txt: Option<Box<str>>,
}

impl Rrs {
    pub fn is_empty(&self) -> bool {
        self.a.is_empty()
            && self.aaaa.is_empty()
            && self.cname.is_none()
            && self.srv.is_empty()
            && self.ptr.is_none()
            && self.txt.is_none()
    }
}

#[derive(Debug, Default)]
struct Entry {
    rrs: Option<Arc<Rrs>>,
    /// Names with data strictly below this one: > 0 makes it an empty
    /// non-terminal when `rrs` is `None` (RFC 8020: NODATA, not NXDOMAIN).
    below: u32,
}

/// What a lookup finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No such name: NXDOMAIN.
    Missing,
    /// An empty non-terminal: NODATA.
    Empty,
    Found(Arc<Rrs>),
}

/// The shared index: the name table plus sync state. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct Table {
    names: DashMap<Box<str>, Entry, foldhash::fast::RandomState>,
    synced: AtomicBool,
    generation: AtomicU64,
}

impl Table {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Look a key up. Keys are lower case: forward keys relative to the
    /// zone, reverse keys absolute, neither with a trailing dot.
    pub fn lookup(&self, key: &str) -> Lookup {
        match self.names.get(key) {
            None => Lookup::Missing,
            Some(e) => match &e.rrs {
                Some(rrs) => Lookup::Found(rrs.clone()),
                None if e.below > 0 => Lookup::Empty,
                None => Lookup::Missing,
            },
        }
    }

    /// True once every watch has applied its first complete list.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub(crate) fn set_synced(&self, v: bool) {
        self.synced.store(v, Ordering::Release);
    }

    /// Incremented by the writer after each applied batch; used as SOA serial.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    pub(crate) fn bump_generation(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of names with data.
    pub fn len(&self) -> usize {
        self.names.iter().filter(|e| e.rrs.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every name with data (for zone export and tests). Not for the hot path.
    pub fn snapshot(&self) -> Vec<(String, Arc<Rrs>)> {
        let mut v: Vec<_> = self
            .names
            .iter()
            .filter_map(|e| e.rrs.clone().map(|r| (e.key().to_string(), r)))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Set (or replace) the data of `key`; identical data is left alone so
    /// readers keep sharing it. Returns whether the name is new, and the
    /// data the table no longer holds (the replaced data, or `rrs` itself
    /// when it was left alone), so the writer can see what it still shares.
    pub(crate) fn set(&self, key: &str, rrs: Arc<Rrs>) -> (bool, Option<Arc<Rrs>>) {
        if let Some(e) = self.names.get(key)
            && e.rrs.as_deref() == Some(&*rrs)
        {
            return (false, Some(rrs));
        }
        let old = {
            let mut e = self.names.entry(key.into()).or_default();
            e.rrs.replace(rrs)
        };
        if old.is_none() {
            for anc in super::names::ancestors(key) {
                self.names.entry(anc.into()).or_default().below += 1;
            }
        }
        (old.is_none(), old)
    }

    /// Remove the data of `key`, returning it if it had any.
    pub(crate) fn remove(&self, key: &str) -> Option<Arc<Rrs>> {
        let had = match self.names.get_mut(key) {
            Some(mut e) => e.rrs.take(),
            None => None,
        };
        if had.is_some() {
            self.names
                .remove_if(key, |_, e| e.below == 0 && e.rrs.is_none());
            for anc in super::names::ancestors(key) {
                if let Some(mut e) = self.names.get_mut(anc) {
                    e.below = e.below.saturating_sub(1);
                }
                self.names
                    .remove_if(anc, |_, e| e.below == 0 && e.rrs.is_none());
            }
        }
        had
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrs(a: &str) -> Arc<Rrs> {
        Arc::new(Rrs {
            a: vec![a.parse().unwrap()],
            ..Default::default()
        })
    }

    #[test]
    fn empty_non_terminals_come_and_go_with_their_children() {
        let t = Table::default();
        assert!(t.set("web-0.web.ns.svc", rrs("10.0.0.1")).0);
        assert!(t.set("web-1.web.ns.svc", rrs("10.0.0.2")).0);
        assert_eq!(t.lookup("web.ns.svc"), Lookup::Empty);
        assert_eq!(t.lookup("ns.svc"), Lookup::Empty);
        assert_eq!(t.lookup("svc"), Lookup::Empty);
        assert_eq!(t.lookup("other.ns.svc"), Lookup::Missing);
        assert!(t.remove("web-0.web.ns.svc").is_some());
        assert_eq!(t.lookup("web.ns.svc"), Lookup::Empty);
        assert!(t.remove("web-1.web.ns.svc").is_some());
        assert_eq!(t.lookup("web.ns.svc"), Lookup::Missing);
        assert_eq!(t.lookup("svc"), Lookup::Missing);
        assert!(t.names.is_empty(), "no entries left behind");
    }

    #[test]
    fn replacing_data_does_not_double_count() {
        let t = Table::default();
        assert!(t.set("web.ns.svc", rrs("10.0.0.1")).0);
        assert!(!t.set("web.ns.svc", rrs("10.0.0.2")).0);
        assert!(t.remove("web.ns.svc").is_some());
        assert_eq!(t.lookup("ns.svc"), Lookup::Missing);
        assert!(t.remove("web.ns.svc").is_none());
    }

    #[test]
    fn a_name_with_data_and_children_keeps_both() {
        let t = Table::default();
        t.set("web.ns.svc", rrs("10.0.0.9"));
        t.set("web-0.web.ns.svc", rrs("10.0.0.1"));
        t.remove("web.ns.svc");
        assert_eq!(t.lookup("web.ns.svc"), Lookup::Empty);
        t.set("web.ns.svc", rrs("10.0.0.9"));
        t.remove("web-0.web.ns.svc");
        assert!(matches!(t.lookup("web.ns.svc"), Lookup::Found(_)));
    }
}
