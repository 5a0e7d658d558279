//! The names of a gang that differ only in a number: rank names
//! `<i>.<gang>.<ns>.rank` and hostname names `<prefix>-<n>.<sub>.<ns>.svc`
//! (a hostname group). Not stored as strings: a question is parsed into
//! its gang and number ([`numbered`]), and the address is kept in the
//! gang's pages by number.

use std::net::IpAddr;
use std::sync::Arc;

use dashmap::DashMap;

use super::{State, Table};
use crate::index::names::QName;
use crate::index::paged::Paged;

/// The numbered names of one gang that answer one address (nearly all
/// of them), by number: 5 bytes an IPv4 name, 17 an IPv6 one, where a
/// stored name cost ≈ 85 (its key, its slot at a hash table's load, its
/// spelling). A name is in one family's pages, never both.
#[derive(Debug, Default)]
pub(super) struct GangRanks {
    pub(super) v4: Paged<[u8; 4]>,
    pub(super) v6: Paged<[u8; 16]>,
}

impl GangRanks {
    pub(super) fn get(&self, i: u32) -> Option<IpAddr> {
        match self.v4.get(i) {
            Some(a) => Some(IpAddr::from(*a)),
            None => self.v6.get(i).map(|a| IpAddr::from(*a)),
        }
    }

    /// Put rank `i`'s address; the old one comes back.
    fn insert(&mut self, i: u32, ip: IpAddr) -> Option<IpAddr> {
        let (old4, old6) = match ip {
            IpAddr::V4(a) => (self.v4.insert(i, a.octets()), self.v6.remove(i)),
            IpAddr::V6(a) => (self.v4.remove(i), self.v6.insert(i, a.octets())),
        };
        old4.map(IpAddr::from).or(old6.map(IpAddr::from))
    }

    fn remove(&mut self, i: u32) -> Option<IpAddr> {
        let old4 = self.v4.remove(i).map(IpAddr::from);
        old4.or_else(|| self.v6.remove(i).map(IpAddr::from))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, IpAddr)> + '_ {
        let v4 = self.v4.iter().map(|(i, a)| (i, IpAddr::from(*a)));
        v4.chain(self.v6.iter().map(|(i, a)| (i, IpAddr::from(*a))))
    }
}

/// The numbered names of many gangs, by gang. Keys are bytes: a hostname
/// group's is spelled from two pieces of the question, and checking them
/// again for UTF-8 cost more than the map's lookup.
#[derive(Debug, Default)]
pub(super) struct Gangs(pub(super) DashMap<Arc<[u8]>, GangRanks, State>);

impl Gangs {
    pub(super) fn get(&self, gang: &[u8], i: u32) -> Option<IpAddr> {
        self.0.get(gang)?.get(i)
    }

    /// The gang's own key, if it keeps `i`.
    pub(super) fn key_keeping(&self, gang: &[u8], i: u32) -> Option<Arc<[u8]>> {
        let g = self.0.get(gang)?;
        g.get(i).map(|_| g.key().clone())
    }

    /// Put `i`'s address; the old one comes back.
    pub(super) fn put(&self, gang: &[u8], i: u32, ip: IpAddr) -> Option<IpAddr> {
        match self.0.get_mut(gang) {
            Some(mut g) => g.insert(i, ip),
            None => self.0.entry(gang.into()).or_default().insert(i, ip),
        }
    }

    /// Take `i`'s address; the gang goes with its last.
    pub(super) fn take(&self, gang: &[u8], i: u32) -> Option<IpAddr> {
        let (old, empty) = {
            let mut g = self.0.get_mut(gang)?;
            (g.remove(i), g.is_empty())
        };
        if empty {
            self.0.remove_if(gang, |_, g| g.is_empty());
        }
        old
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Which [`Gangs`] keeps a numbered name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kept {
    /// `<i>.<gang>.<ns>.rank`, by `<gang>.<ns>`.
    Rank,
    /// `<prefix>-<n>.<sub>.<ns>.svc`, by `<prefix>.<sub>.<ns>`.
    Host,
}

/// Room to spell a hostname group's key (a name is at most 255 bytes).
pub(super) type GroupBuf = [u8; 256];

/// A name kept by number, as (where, number, gang): see [`Kept`]. A
/// hostname group's key is spelled into `buf` (no allocation: this runs
/// for every question of a hostname name).
pub(super) fn numbered<'a>(q: &QName<'a>, buf: &'a mut GroupBuf) -> Option<(Kept, u32, &'a [u8])> {
    if let Some((i, gang)) = q.rank() {
        return Some((Kept::Rank, i, gang.as_bytes()));
    }
    let (n, group) = host_group(q, buf)?;
    Some((Kept::Host, n, group))
}

/// `<prefix>-<n>.<sub>.<ns>.svc` as (n, `<prefix>.<sub>.<ns>`): the
/// hostname names of a gang (an Indexed Job's `<job>-<i>`, a
/// StatefulSet's `<name>-<ordinal>`, a training operator's
/// `<job>-worker-<i>`) differ in their number only.
pub(super) fn host_group<'a>(q: &QName<'_>, buf: &'a mut GroupBuf) -> Option<(u32, &'a [u8])> {
    let QName::Host { host, sub, ns } = q else {
        return None;
    };
    if sub.is_empty() || ns.is_empty() {
        return None;
    }
    let (prefix, n) = host.numbered()?;
    let out = buf.get_mut(..prefix.len() + sub.len() + ns.len() + 2)?;
    let mut at = 0;
    for (i, part) in [prefix, sub, ns].iter().enumerate() {
        if i > 0 {
            out[at] = b'.';
            at += 1;
        }
        out[at..at + part.len()].copy_from_slice(part.as_bytes());
        at += part.len();
    }
    Some((n, out))
}

#[cfg(test)]
fn host_key<'a>(key: &str, buf: &'a mut GroupBuf) -> Option<(u32, &'a [u8])> {
    host_group(&QName::parse(key), buf)
}

/// The hostname name numbered `n` of a hostname group ([`host_key`]).
pub(super) fn host_in(group: &[u8], n: u32) -> String {
    let group = String::from_utf8_lossy(group);
    let (prefix, place) = group.split_once('.').unwrap_or((&group, ""));
    format!("{prefix}-{n}.{place}.svc")
}

impl Table {
    pub(super) fn gangs(&self, kept: Kept) -> &Gangs {
        match kept {
            Kept::Rank => &self.ranks,
            Kept::Host => &self.hosts,
        }
    }

    /// The address a numbered name answers, if it is kept by number.
    pub(super) fn numbered(&self, q: &QName<'_>) -> Option<IpAddr> {
        let mut buf = [0; 256];
        let (kept, i, gang) = numbered(q, &mut buf)?;
        self.gangs(kept).get(gang, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::names::Label;

    /// A rank's address is kept in its family's pages: one place, and it
    /// moves when the pod's family does.
    #[test]
    fn a_gangs_ranks_keep_each_address_in_its_family() {
        let mut g = GangRanks::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.7".parse().unwrap(), "fd00::7".parse().unwrap());
        assert_eq!(g.insert(7, a), None);
        assert_eq!(g.insert(8, b), None);
        assert_eq!((g.get(7), g.get(8), g.get(9)), (Some(a), Some(b), None));
        assert_eq!(g.insert(7, b), Some(a), "v4 to v6");
        assert_eq!(g.v4.get(7), None);
        assert_eq!(g.insert(7, a), Some(b), "and back");
        assert_eq!(g.v6.get(7), None);
        let mut all: Vec<_> = g.iter().collect();
        all.sort();
        assert_eq!(all, [(7, a), (8, b)]);
        assert_eq!(
            (g.remove(7), g.remove(8), g.remove(8)),
            (Some(a), Some(b), None)
        );
        assert!(g.is_empty());
    }

    #[test]
    fn numbered_names_parse_only_in_their_canonical_spelling() {
        let mut buf = [0; 256];
        let host = |k: &str, buf: &mut GroupBuf| host_key(k, buf).map(|(n, g)| (n, g.to_vec()));
        assert_eq!(
            host("w-7.w.ml.svc", &mut buf),
            Some((7, b"w.w.ml".to_vec()))
        );
        assert_eq!(
            host("a-b-4294967295.s.ml.svc", &mut buf),
            Some((u32::MAX, b"a-b.s.ml".to_vec()))
        );
        for k in [
            "w-4294967296.w.ml.svc",
            "w-07.w.ml.svc",
            "w-.w.ml.svc",
            "-7.w.ml.svc",
            "w7.w.ml.svc",
            "w-7.ml.svc",
            "w-7..ml.svc",
            "w-7.w..svc",
            "w-7.a.w.ml.svc",
            "w-7.w.ml.rank",
            "w-+7.w.ml.svc",
        ] {
            assert_eq!(host(k, &mut buf), None, "{k}");
        }
        assert_eq!(QName::parse("0.w.ml.rank").rank(), Some((0, "w.ml")));
        assert_eq!(QName::parse("00.w.ml.rank").rank(), None);
        assert_eq!(Label("4294967295").number(), Some(u32::MAX));
        assert_eq!(Label("4294967296").number(), None);
        assert_eq!(Label("").number(), None);
        assert_eq!(host_in(b"a-b.s.ml", 7), "a-b-7.s.ml.svc");
    }
}
