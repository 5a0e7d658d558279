//! The address map: per address, the names spelled from it and what its
//! PTR record names. The names are not stored as strings: a question is
//! parsed back into the address ([`QName::dashed`], a reverse name) and
//! looked up here, whose entry says in which namespaces and under which
//! Services the address has a name. A stored name of the same spelling
//! wins ([`Table::find`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use dashmap::DashMap;

use super::gangs::{host_group, host_in};
use super::target::{IpName, Ptr, Target, moved};
use super::value::Rrs;
use super::{Lookup, State, Table};
use crate::index::containers::Interned;
use crate::index::names::{self, QName};

/// What one address answers as a name: the names spelled from it (each
/// answers the address) and what its PTR record names. 16 bytes beside a
/// 4-byte IPv4 key, with no allocation of its own: the facts are one
/// interned list that a gang's addresses share (the thousand pods of one
/// Job, namespace and headless Service), and the one thing each address
/// has alone, the number in its PTR target (`w-7.w.ml.svc`), is kept here.
#[derive(Debug, Default)]
pub(super) struct IpNames {
    pub(super) facts: Option<Arc<Facts>>,
    /// `n` of a [`Ptr::Host`] target; 0 otherwise.
    n: u32,
}

impl IpNames {
    pub(super) fn is_empty(&self) -> bool {
        self.facts.is_none()
    }

    pub(super) fn names(&self) -> &[IpName] {
        self.facts.as_ref().map_or(&[], |f| &f.names)
    }

    fn ptr(&self) -> Option<&Ptr> {
        self.facts.as_ref()?.ptr.as_ref()
    }

    /// The name the PTR record of `ip` points at (relative to the first
    /// zone), spelled.
    pub(super) fn ptr_target(&self, ip: IpAddr) -> Option<Arc<str>> {
        Some(match self.ptr()? {
            Ptr::Name(name) => name.clone(),
            Ptr::Host(group) => host_in(group, self.n).into(),
            Ptr::Spelled(k) => self.names().get(usize::from(*k))?.key(ip).into(),
        })
    }
}

/// The facts of an address ([`IpNames`]), shared by every address that
/// has the same ones ([`FactsLists`]).
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Facts {
    /// Sorted, no repeats.
    names: Box<[IpName]>,
    ptr: Option<Ptr>,
}

/// The [`Facts`] in use, one copy of each. Only the writer takes the lock
/// (readers follow an entry's pointer).
#[derive(Debug, Default)]
pub(super) struct FactsLists(pub(super) std::sync::Mutex<Interned<Facts>>);

impl FactsLists {
    /// The shared copy of `facts`, or none for no facts; `old`, the copy
    /// it replaces, is given back.
    fn swap(&self, old: Option<Arc<Facts>>, facts: Facts) -> Option<Arc<Facts>> {
        let mut lists = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let new = (!facts.names.is_empty() || facts.ptr.is_some()).then(|| lists.get(facts));
        if let Some(old) = &old {
            lists.release(old);
        }
        new
    }
}

/// The address entries, IPv4 and IPv6 apart: an `IpAddr` key is 17 bytes,
/// padded to 24 beside an entry, where an IPv4 key is 4 (16 bytes less a
/// slot for nearly every pod).
#[derive(Debug, Default)]
pub(super) struct IpMap {
    v4: DashMap<Ipv4Addr, IpNames, State>,
    v6: DashMap<Ipv6Addr, IpNames, State>,
}

/// [`IpMap::update`] on one family's map.
fn update_in<K: Eq + std::hash::Hash + Copy, R>(
    map: &DashMap<K, IpNames, State>,
    key: K,
    make: bool,
    f: impl FnOnce(&mut IpNames) -> R,
) -> Option<R> {
    let (r, empty) = {
        let mut e = if make {
            map.entry(key).or_default()
        } else {
            map.get_mut(&key)?
        };
        let r = f(&mut e);
        (r, e.is_empty())
    };
    if empty {
        map.remove_if(&key, |_, e| e.is_empty());
    }
    Some(r)
}

impl IpMap {
    /// Read `ip`'s entry, if it has one.
    pub(super) fn read<R>(&self, ip: IpAddr, f: impl FnOnce(&IpNames) -> R) -> Option<R> {
        match ip {
            IpAddr::V4(a) => self.v4.get(&a).map(|e| f(&e)),
            IpAddr::V6(a) => self.v6.get(&a).map(|e| f(&e)),
        }
    }

    /// Change `ip`'s entry (made first if missing and `make`); an entry
    /// left empty goes.
    fn update<R>(&self, ip: IpAddr, make: bool, f: impl FnOnce(&mut IpNames) -> R) -> Option<R> {
        match ip {
            IpAddr::V4(a) => update_in(&self.v4, a, make, f),
            IpAddr::V6(a) => update_in(&self.v6, a, make, f),
        }
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    pub(super) fn for_each(&self, mut f: impl FnMut(IpAddr, &IpNames)) {
        for e in self.v4.iter() {
            f(IpAddr::V4(*e.key()), e.value());
        }
        for e in self.v6.iter() {
            f(IpAddr::V6(*e.key()), e.value());
        }
    }
}

impl Table {
    /// The data of a name spelled from an address, if it exists.
    pub(super) fn ip_name(&self, q: &QName<'_>) -> Option<Lookup> {
        if let QName::Reverse(ip) = *q {
            let ip = ip?;
            let target = self.ips.read(ip, |e| e.ptr_target(ip))??;
            // PTR questions are rare: the record set is made for each.
            return Some(Lookup::Found(Arc::new(Rrs {
                ptr: Some(target),
                ..Default::default()
            })));
        }
        let (ip, ns, svc) = q.dashed()?;
        let named = self.ips.read(ip, |e| {
            e.names().iter().any(|n| match (n, svc) {
                (IpName::Pod(n), None) => **n == *ns,
                (IpName::Member(n, s), Some(svc)) => **n == *ns && **s == *svc,
                _ => false,
            })
        })?;
        named.then_some(Lookup::Ip(ip))
    }

    /// Change the facts of `ip` (made first if missing and `make`): `f`
    /// gets its names and PTR and gives them back changed, or `None` for
    /// no change; an entry left with none goes. Returns what `f` did.
    fn change_facts<R>(
        &self,
        ip: IpAddr,
        make: bool,
        f: impl FnOnce(&[IpName], Option<&Ptr>, u32) -> (Option<(Facts, u32)>, R),
    ) -> Option<R> {
        self.ips.update(ip, make, |e| {
            let (now, r) = f(e.names(), e.ptr(), e.n);
            if let Some((facts, n)) = now {
                e.facts = self.facts.swap(e.facts.take(), facts);
                e.n = n;
            }
            r
        })
    }

    /// Give `ip` the name `name` (answering the address). Returns whether
    /// the name is new.
    pub(crate) fn add_ip_name(&self, ip: IpAddr, name: IpName) -> bool {
        self.change_name(ip, &name, true)
    }

    /// Take name `name` from `ip`. Returns whether it had it.
    pub(crate) fn remove_ip_name(&self, ip: IpAddr, name: &IpName) -> bool {
        self.change_name(ip, name, false)
    }

    /// Give `ip` the name `name` (`add`) or take it; whether that changed
    /// anything. A PTR pointing at one of its names follows it
    /// ([`moved`]); the name's ancestors count it.
    fn change_name(&self, ip: IpAddr, name: &IpName, add: bool) -> bool {
        let changed = self.change_facts(ip, add, |names, ptr, n| {
            if names.contains(name) == add {
                return (None, false);
            }
            let now: Vec<IpName> = if add {
                let mut now = Vec::with_capacity(names.len() + 1);
                now.extend(names.iter().cloned());
                now.push(name.clone());
                now.sort_unstable();
                now
            } else {
                names.iter().filter(|x| *x != name).cloned().collect()
            };
            let ptr = ptr.map(|p| moved(p, names, &now, ip));
            let facts = Facts {
                names: now.into_boxed_slice(),
                ptr,
            };
            (Some((facts, n)), true)
        }) == Some(true);
        if changed {
            self.count_ancestors(&name.key(ip), if add { 1 } else { -1 });
        }
        changed
    }

    /// Set (or clear) the PTR of `ip`. Returns +1 for a new name, -1 for a
    /// removed one, 0 otherwise. A hostname target kept by number, or a
    /// name the address spells, is kept as a pointer to it (the pods of a
    /// gang share one list); any other name as its stored key.
    pub(crate) fn set_ptr(&self, ip: IpAddr, target: Option<Target<'_>>) -> i64 {
        let change = match target {
            Some(t) => {
                // Worked out before the address's entry is locked: the
                // writer never holds a guard of two maps.
                let named = match &t {
                    Target::Name(name) => {
                        let mut buf = [0; 256];
                        let host = host_group(&QName::parse(name), &mut buf)
                            .and_then(|(n, g)| Some((self.hosts.key_keeping(g, n)?, n)));
                        Some(match host {
                            Some((group, n)) => (Ptr::Host(group), n),
                            None => (Ptr::Name(self.shared_name(name.clone())), 0),
                        })
                    }
                    Target::Member(..) | Target::Pod(_) => None,
                };
                let fresh = self.change_facts(ip, true, |names, old, old_n| {
                    let (ptr, n) =
                        named.unwrap_or_else(|| match names.iter().position(|x| t.is(x)) {
                            Some(k) if k <= usize::from(u16::MAX) => (Ptr::Spelled(k as u16), 0),
                            _ => (Ptr::Name(t.spell(ip).into()), 0),
                        });
                    // The same name in another copy is taken too: it is
                    // the stored name's (`shared_name`), the old may not be.
                    let same = match (old, &ptr) {
                        (Some(Ptr::Name(a)), Ptr::Name(b)) => Arc::ptr_eq(a, b),
                        (Some(a), b) => a == b && old_n == n,
                        (None, _) => false,
                    };
                    let facts = Facts {
                        names: names.into(),
                        ptr: Some(ptr),
                    };
                    ((!same).then_some((facts, n)), old.is_none())
                });
                i64::from(fresh == Some(true))
            }
            None => {
                let had = self.change_facts(ip, false, |names, old, _| {
                    let facts = Facts {
                        names: names.into(),
                        ptr: None,
                    };
                    (old.is_some().then_some((facts, 0)), old.is_some())
                });
                -i64::from(had == Some(true))
            }
        };
        if change != 0 {
            self.count_ancestors(&names::reverse(ip), change);
        }
        change
    }
}
