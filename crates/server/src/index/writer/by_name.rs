//! Pod ids indexed by a name or an address the pod itself holds: its name
//! in a namespace, its hostname under a subdomain, its IPs. The hash table
//! holds 4-byte ids and hashes the pod's own string or address, which the
//! writer's slab keeps anyway. A map keyed by a copy of the name or address
//! cost a key and a value a slot (24 to 48 bytes) and often an allocation,
//! twice that at the half load a hash table runs at right after doubling.
//!
//! The caller says where an id's name or addresses are (`name_of`,
//! `ips_of`); every id in an index must be a live pod that still has the
//! name or addresses it was added under.

use std::hash::BuildHasher;
use std::net::IpAddr;

use hashbrown::HashTable;

use super::headless::PodId;

#[derive(Debug, Default)]
pub(crate) struct ByName {
    ids: HashTable<PodId>,
    hasher: foldhash::fast::RandomState,
}

impl ByName {
    /// Add `id`, named `name_of(id)`. Names may repeat (two pods of one
    /// hostname); an id is added once.
    pub(crate) fn insert<'a>(&mut self, id: PodId, name_of: impl Fn(PodId) -> &'a str) {
        let hasher = &self.hasher;
        let h = hasher.hash_one(name_of(id));
        self.ids
            .insert_unique(h, id, |&i| hasher.hash_one(name_of(i)));
    }

    /// Take `id`, added under `name`. Returns whether it was there.
    pub(crate) fn remove(&mut self, id: PodId, name: &str) -> bool {
        let h = self.hasher.hash_one(name);
        match self.ids.find_entry(h, |&i| i == id) {
            Ok(e) => {
                e.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// The ids named `name`.
    pub(crate) fn get<'s, 'n>(
        &'s self,
        name: &'s str,
        name_of: impl Fn(PodId) -> &'n str + 's,
    ) -> impl Iterator<Item = PodId> + 's {
        self.ids
            .iter_hash(self.hasher.hash_one(name))
            .copied()
            .filter(move |&i| name_of(i) == name)
    }

    /// Every id, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = PodId> + '_ {
        self.ids.iter().copied()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Pod ids by address. An entry is (id, index of the address in the pod's
/// list), so a dual-stack pod's two entries are told apart.
#[derive(Debug, Default)]
pub(crate) struct ByIp {
    ids: HashTable<(PodId, u16)>,
    hasher: foldhash::fast::RandomState,
}

/// The addresses of a pod to index: each once, at its first position (a
/// pod lists at most one per family; more are kept, repeats are not).
fn distinct(ips: &[IpAddr]) -> impl Iterator<Item = (u16, &IpAddr)> {
    ips.iter()
        .enumerate()
        .take(usize::from(u16::MAX))
        .filter(|&(k, ip)| !ips[..k].contains(ip))
        .map(|(k, ip)| (k as u16, ip))
}

impl ByIp {
    /// Add pod `id`, whose addresses are `ips_of(id)`.
    pub(crate) fn insert<'a>(&mut self, id: PodId, ips_of: impl Fn(PodId) -> &'a [IpAddr]) {
        let hasher = &self.hasher;
        for (k, ip) in distinct(ips_of(id)) {
            self.ids
                .insert_unique(hasher.hash_one(ip), (id, k), |&(i, k)| {
                    hasher.hash_one(ips_of(i)[usize::from(k)])
                });
        }
    }

    /// Take pod `id`, added with addresses `ips`.
    pub(crate) fn remove(&mut self, id: PodId, ips: &[IpAddr]) {
        for (k, ip) in distinct(ips) {
            if let Ok(e) = self
                .ids
                .find_entry(self.hasher.hash_one(ip), |&e| e == (id, k))
            {
                e.remove();
            }
        }
    }

    /// The pods holding `ip`.
    pub(crate) fn get<'s, 'p>(
        &'s self,
        ip: IpAddr,
        ips_of: impl Fn(PodId) -> &'p [IpAddr] + 's,
    ) -> impl Iterator<Item = PodId> + 's {
        self.ids
            .iter_hash(self.hasher.hash_one(ip))
            .filter(move |&&(i, k)| ips_of(i)[usize::from(k)] == ip)
            .map(|&(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_by_their_name_and_taken_by_id() {
        let names = ["a", "b", "a", "c"];
        let name_of = |i: PodId| names[i as usize];
        let mut by = ByName::default();
        // Enough ids to make the table grow (rehashing through `name_of`).
        let many: Vec<String> = (0..200).map(|i| format!("p{i}")).collect();
        let many_of = |i: PodId| match i {
            0..4 => names[i as usize],
            _ => many[i as usize - 4].as_str(),
        };
        for i in 0..4 {
            by.insert(i, name_of);
        }
        let mut a: Vec<PodId> = by.get("a", name_of).collect();
        a.sort_unstable();
        assert_eq!(a, [0, 2], "two pods of one name");
        assert_eq!(by.get("b", name_of).collect::<Vec<_>>(), [1]);
        assert_eq!(by.get("z", name_of).count(), 0);
        for i in 4..204 {
            by.insert(i, many_of);
        }
        assert_eq!(by.get("p150", many_of).collect::<Vec<_>>(), [154]);
        assert_eq!(by.get("c", many_of).collect::<Vec<_>>(), [3]);
        // From here on every id is asked its name through `many_of`: a
        // lookup may ask any id whose hash is near the name's.
        assert!(by.remove(2, "a"));
        assert!(!by.remove(2, "a"), "taken once");
        assert!(!by.remove(1, "a"), "not under that name");
        assert_eq!(by.get("a", many_of).collect::<Vec<_>>(), [0]);
        assert_eq!(by.iter().count(), 203);
        for i in (0..204).filter(|&i| i != 2) {
            assert!(by.remove(i, many_of(i)));
        }
        assert!(by.is_empty());
    }

    #[test]
    fn pods_are_found_by_each_of_their_addresses() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let pods: Vec<Vec<IpAddr>> = vec![
            vec![ip("10.0.0.1"), ip("fd00::1")],
            vec![ip("10.0.0.1")],
            vec![ip("10.0.0.2"), ip("10.0.0.2")],
        ];
        let many: Vec<Vec<IpAddr>> = (0..300u32)
            .map(|i| vec![IpAddr::from(std::net::Ipv4Addr::from(0x0b00_0000 + i))])
            .collect();
        let ips_of = |i: PodId| match i {
            0..3 => pods[i as usize].as_slice(),
            _ => many[i as usize - 3].as_slice(),
        };
        let mut by = ByIp::default();
        for i in 0..303 {
            by.insert(i, ips_of);
        }
        let mut holders: Vec<PodId> = by.get(ip("10.0.0.1"), ips_of).collect();
        holders.sort_unstable();
        assert_eq!(holders, [0, 1]);
        assert_eq!(by.get(ip("fd00::1"), ips_of).collect::<Vec<_>>(), [0]);
        assert_eq!(
            by.get(ip("10.0.0.2"), ips_of).collect::<Vec<_>>(),
            [2],
            "once"
        );
        assert_eq!(by.get(ip("11.0.0.7"), ips_of).collect::<Vec<_>>(), [10]);
        by.remove(0, &pods[0]);
        assert_eq!(by.get(ip("10.0.0.1"), ips_of).collect::<Vec<_>>(), [1]);
        assert_eq!(by.get(ip("fd00::1"), ips_of).count(), 0);
        by.remove(2, &pods[2]);
        assert_eq!(by.get(ip("10.0.0.2"), ips_of).count(), 0);
        assert_eq!(by.ids.len(), 301);
    }
}
