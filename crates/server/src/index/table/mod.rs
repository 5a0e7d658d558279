//! The read side: a concurrent map from a name key to the record data that
//! name owns, and one from an address to the names spelled from it. Only
//! the writer mutates them; readers take a shard read lock for the time of
//! one hash lookup and an `Arc` clone, never while the writer computes
//! anything.
//!
//! The names spelled from an address (`<a-b-c-d>.<ns>.pod`,
//! `<a-b-c-d>.<svc>.<ns>.svc` and the PTR name) are three of a pod's five
//! names. They are not stored as strings: the question is parsed back into
//! the address and looked up in `ips`, whose entry says in which namespaces
//! and under which Services the address has a name, and what its PTR
//! names. A stored name (a hostname name, say) of the same spelling wins.
//!
//! The names of a gang that differ only in a number (rank names
//! `<i>.<gang>.<ns>.rank`, hostname names `<job>-<i>.<sub>.<ns>.svc`) are
//! not stored as strings either: the question is parsed into the gang and
//! the number, and the address is kept in the gang's pages by number.
//!
//! One file an idea: [`srv`] (a name's SRV records), [`value`] (what a
//! name answers, and a stored name's 16-byte entry), [`ips`] (the address
//! map), [`gangs`] (names kept by number, and the parse of a hostname
//! group), [`target`] (the names spelled from an address, and where a PTR
//! points), [`scope`] (a node instance's scope).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use dashmap::DashMap;

use super::names::QName;
use super::reverse::ReverseZones;

mod gangs;
mod ips;
mod scope;
mod srv;
mod target;
mod value;

use gangs::{Gangs, host_in, numbered};
use ips::{FactsLists, IpMap};
use value::Entry;

pub use scope::Scope;
pub use srv::{Srv, SrvSet};
pub(crate) use target::{IpName, Target};
pub use value::{Rrs, Value};

type State = foldhash::fast::RandomState;

/// What a lookup finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No such name: NXDOMAIN.
    Missing,
    /// An empty non-terminal: NODATA.
    Empty,
    Found(Arc<Rrs>),
    /// A name whose only record is this address (A or AAAA).
    Ip(IpAddr),
}

impl Lookup {
    /// What the name answers as a record set (allocated for an address);
    /// `None` for no data. Not for the answer path.
    pub fn rrs(&self) -> Option<Arc<Rrs>> {
        match self {
            Lookup::Found(rrs) => Some(rrs.clone()),
            Lookup::Ip(ip) => Some(Arc::new(value::ip_rrs(*ip))),
            Lookup::Missing | Lookup::Empty => None,
        }
    }
}

/// The shared index: the name table plus sync state. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct Table {
    /// Keys are shared: a pod's hostname name is also the target of its
    /// SRV records ([`Self::shared_name`]).
    names: DashMap<Arc<str>, Entry, State>,
    ips: IpMap,
    facts: FactsLists,
    /// Rank names (`<i>.<gang>.<ns>.rank`) that answer one address, by
    /// `<gang>.<ns>`; a rank answering more (a dual-stack pod) is a stored
    /// name. A key is in one place or the other, never both.
    ranks: Gangs,
    /// Hostname names spelled `<prefix>-<n>.<sub>.<ns>.svc` that answer one
    /// address, by `<prefix>.<sub>.<ns>`, as ranks are: 5 bytes an IPv4
    /// name in a gang, where a stored one cost ≈ 90 (a 48-byte key and a
    /// 32-byte slot at the map's load).
    hosts: Gangs,
    synced: AtomicBool,
    generation: AtomicU64,
    /// The reverse zones podns owns, swapped whole when they change (see
    /// [`super::reverse`]); every reverse name until `serve` sets them.
    reverse: ArcSwap<ReverseZones>,
    /// A node instance's scope, which the table only carries: what
    /// `dns::resolve` asks before it looks a name up.
    scope: Scope,
}

impl Table {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A node instance's scope (on any other server, never set: every
    /// namespace is held).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Look a key up. Keys are lower case: forward keys relative to the
    /// zone, reverse keys absolute, neither with a trailing dot.
    pub fn lookup(&self, key: &str) -> Lookup {
        self.find(key, &QName::parse(key))
    }

    /// [`Self::lookup`] of a key already parsed (`q` is `key`'s).
    pub fn find(&self, key: &str, q: &QName<'_>) -> Lookup {
        // A name kept by number has no data stored (`set` keeps it in one
        // place), so it is looked for first: a gang's hostname and rank
        // names are most questions, and a stored name's lookup would miss.
        if let Some(ip) = self.numbered(q) {
            return Lookup::Ip(ip);
        }
        // One map's guard is dropped before the other map is read: the
        // writer never holds both either.
        let stored = match self.names.get(key) {
            None => Lookup::Missing,
            Some(e) => match &*e {
                Entry::V4(a, _) => return Lookup::Ip(IpAddr::from(*a)),
                Entry::V6(a, _) => return Lookup::Ip(IpAddr::from(**a)),
                Entry::Set(rrs, _) => return Lookup::Found(rrs.clone()),
                Entry::Empty(below) if *below > 0 => Lookup::Empty,
                Entry::Empty(_) => Lookup::Missing,
            },
        };
        self.ip_name(q).unwrap_or(stored)
    }
    /// Does `key` have data, stored or kept by number?
    fn has_data(&self, key: &str) -> bool {
        self.names.get(key).is_some_and(|e| e.has_data())
            || self.numbered(&QName::parse(key)).is_some()
    }

    /// True once every watch has applied its first complete list.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub(crate) fn set_synced(&self, v: bool) {
        self.synced.store(v, Ordering::Release);
    }

    /// The reverse zones owned now: one snapshot, read without a lock.
    pub fn reverse_zones(&self) -> arc_swap::Guard<Arc<ReverseZones>> {
        self.reverse.load()
    }

    /// Replace the reverse zones (`serve` for `--reverse-cidr`, else the
    /// writer as Nodes and ServiceCIDRs change).
    pub fn set_reverse_zones(&self, zones: ReverseZones) {
        self.reverse.store(Arc::new(zones));
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
        self.snapshot().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every name with data (for zone export and tests). Not for the hot path.
    pub fn snapshot(&self) -> Vec<(String, Arc<Rrs>)> {
        let mut v: Vec<_> = self
            .names
            .iter()
            .filter_map(|e| e.data().map(|r| (e.key().to_string(), r.rrs())))
            .collect();
        for gang in self.ranks.0.iter() {
            let name = String::from_utf8_lossy(gang.key());
            for (i, ip) in gang.value().iter() {
                v.push((format!("{i}.{name}.rank"), Value::Ip(ip).rrs()));
            }
        }
        for group in self.hosts.0.iter() {
            for (n, ip) in group.value().iter() {
                v.push((host_in(group.key(), n), Value::Ip(ip).rrs()));
            }
        }
        let mut spelled: Vec<(String, Arc<Rrs>)> = Vec::new();
        self.ips.for_each(|ip, e| {
            if !e.names().is_empty() {
                let rrs = Value::Ip(ip).rrs();
                spelled.extend(e.names().iter().map(|n| (n.key(ip), rrs.clone())));
            }
            if let Some(target) = e.ptr_target(ip) {
                let rrs = Rrs {
                    ptr: Some(target),
                    ..Default::default()
                };
                v.push((super::names::reverse(ip), Arc::new(rrs)));
            }
        });
        for (key, rrs) in spelled {
            // A stored name of the same spelling wins (see `lookup`).
            if !self.has_data(&key) {
                v.push((key, rrs));
            }
        }
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// `key` as a stored name's own copy of it when there is one, else
    /// as a new string: an SRV target that names a stored name (a
    /// hostname name, published earlier in the batch: `Key::Host` sorts
    /// first) shares its bytes instead of repeating them.
    pub(crate) fn shared_name(&self, key: String) -> Arc<str> {
        match self.names.get(key.as_str()) {
            Some(e) => e.key().clone(),
            None => key.into(),
        }
    }

    /// A name with data came (+1) or went (-1): its ancestors are empty
    /// non-terminals while it exists (or hold data of their own).
    fn count_ancestors(&self, key: &str, by: i64) {
        for anc in super::names::ancestors(key) {
            if by > 0 {
                *self.names.entry(anc.into()).or_default().below_mut() += 1;
            } else {
                if let Some(mut e) = self.names.get_mut(anc) {
                    let below = e.below_mut();
                    *below = below.saturating_sub(1);
                }
                self.names.remove_if(anc, |_, e| e.vacant());
            }
        }
    }

    /// Set (or replace) the data of `key`; identical data is left alone so
    /// readers keep sharing it. Returns whether the name is new. A rank or
    /// numbered hostname name that answers one address is kept by number.
    pub(crate) fn set(&self, key: &str, value: Value) -> bool {
        let mut buf = [0; 256];
        if let Some((kept, i, gang)) = numbered(&QName::parse(key), &mut buf) {
            let gangs = self.gangs(kept);
            let stored = self.names.get(key).is_some_and(|e| e.has_data());
            match value {
                Value::Ip(ip) if !stored => {
                    let new = gangs.put(gang, i, ip).is_none();
                    if new {
                        self.count_ancestors(key, 1);
                    }
                    return new;
                }
                // Kept by number, now more than one address: a stored name
                // from here on, not a new one.
                Value::Set(_) => {
                    if gangs.take(gang, i).is_some() {
                        self.names
                            .entry(key.into())
                            .or_default()
                            .replace(Some(value));
                        return false;
                    }
                }
                Value::Ip(_) => {}
            }
        }
        if let Some(e) = self.names.get(key)
            && e.holds(&value)
        {
            return false;
        }
        let old = {
            let mut e = self.names.entry(key.into()).or_default();
            e.replace(Some(value))
        };
        if old.is_none() {
            self.count_ancestors(key, 1);
        }
        old.is_none()
    }

    /// Remove the data of `key`, returning it if it had any.
    pub(crate) fn remove(&self, key: &str) -> Option<Value> {
        let mut buf = [0; 256];
        if let Some((kept, i, gang)) = numbered(&QName::parse(key), &mut buf)
            && let Some(ip) = self.gangs(kept).take(gang, i)
        {
            self.count_ancestors(key, -1);
            return Some(Value::Ip(ip));
        }
        let had = match self.names.get_mut(key) {
            Some(mut e) => e.replace(None),
            None => None,
        };
        if had.is_some() {
            self.names.remove_if(key, |_, e| e.vacant());
            self.count_ancestors(key, -1);
        }
        had
    }
}

#[cfg(test)]
mod tests;
