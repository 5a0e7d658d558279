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

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use dashmap::DashMap;

use super::containers::Interned;
use super::names::QName;
use super::paged::Paged;
use super::reverse::ReverseZones;

/// An SRV record's data; the target is a forward key (relative to the zone).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Srv {
    pub port: u16,
    /// Shared by the SRV records of one member (one per Service port).
    pub target: Arc<str>,
}

/// The SRV records of one name, sorted, and how many members add each
/// (two members may add the same record: pods of one address, say).
///
/// A persistent B-tree (`imbl::OrdSet`): the writer keeps a headless
/// Service's set in this form and publishes a copy of it, which shares
/// every node, so a member's change costs O(log n) records copied, not
/// the whole set (8,192 targets cloned and compared per event before).
/// Comparing two copies skips the nodes they share. The tree holds the
/// records alone (24 bytes each); the few added more than once are
/// counted beside it, so a count does not widen every slot of every leaf.
#[derive(Clone, Debug, Default)]
pub struct SrvSet {
    records: imbl::OrdSet<Srv>,
    /// Records added by more than one member: how many more.
    more: std::collections::HashMap<Srv, u32, State>,
}

impl SrvSet {
    /// The distinct records, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Srv> {
        self.records.iter()
    }

    /// How many distinct records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Count one more member adding `r`.
    pub(crate) fn add(&mut self, r: &Srv) {
        if self.records.contains(r) {
            *self.more.entry(r.clone()).or_default() += 1;
        } else {
            self.records.insert(r.clone());
        }
    }

    /// Count one member fewer adding `r`; the record goes with the last.
    pub(crate) fn remove(&mut self, r: &Srv) {
        match self.more.get_mut(r) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.more.remove(r);
            }
            None => {
                self.records.remove(r);
            }
        }
    }
}

/// Two sets are equal when they publish the same records.
impl PartialEq for SrvSet {
    fn eq(&self, other: &Self) -> bool {
        self.records == other.records
    }
}

impl Eq for SrvSet {}

impl FromIterator<Srv> for SrvSet {
    fn from_iter<I: IntoIterator<Item = Srv>>(records: I) -> Self {
        let mut set = Self::default();
        for r in records {
            set.add(&r);
        }
        set
    }
}

impl<'a> IntoIterator for &'a SrvSet {
    type Item = &'a Srv;
    type IntoIter = imbl::ordset::Iter<'a, Srv, imbl::shared_ptr::DefaultSharedPtr>;

    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

/// Everything one name answers, built by the writer when an event touches
/// the name. An empty `Rrs` is a name that exists with no data (NODATA).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rrs {
    pub a: Vec<Ipv4Addr>,
    pub aaaa: Vec<Ipv6Addr>,
    /// Absolute target of an ExternalName Service, no trailing dot.
    pub cname: Option<Box<str>>,
    pub srv: SrvSet,
    /// Forward key the PTR points at (relative to the first zone).
    pub ptr: Option<Arc<str>>,
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

/// What a stored name answers. Most names (a pod's hostname and rank
/// names) answer one address and nothing else: that address is kept in
/// the entry itself, with no record set allocated or shared for it, and a
/// reader copies it out without touching a reference count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Ip(IpAddr),
    Set(Arc<Rrs>),
}

impl Value {
    /// The value of `rrs`: its address when it is one A or AAAA record
    /// and nothing else.
    pub fn of(rrs: Rrs) -> Self {
        if rrs.cname.is_some() || !rrs.srv.is_empty() || rrs.ptr.is_some() || rrs.txt.is_some() {
            return Self::Set(Arc::new(rrs));
        }
        match (rrs.a.as_slice(), rrs.aaaa.as_slice()) {
            ([v4], []) => Self::Ip(IpAddr::V4(*v4)),
            ([], [v6]) => Self::Ip(IpAddr::V6(*v6)),
            _ => Self::Set(Arc::new(rrs)),
        }
    }

    /// The record set (allocated for an address): for zone export,
    /// `explain` and tests, not the answer path.
    pub fn rrs(&self) -> Arc<Rrs> {
        match self {
            Self::Set(rrs) => rrs.clone(),
            Self::Ip(ip) => Arc::new(ip_rrs(*ip)),
        }
    }
}

/// The record set of one address.
fn ip_rrs(ip: IpAddr) -> Rrs {
    match ip {
        IpAddr::V4(v4) => Rrs {
            a: vec![v4],
            ..Default::default()
        },
        IpAddr::V6(v6) => Rrs {
            aaaa: vec![v6],
            ..Default::default()
        },
    }
}

/// A stored name: its data (a [`Value`], or none), and how many names with
/// data are strictly below it: > 0 makes a name without data an empty
/// non-terminal (RFC 8020: NODATA, not NXDOMAIN). Packed in 16 bytes (a
/// struct of `Option<Value>` and the count took 32: the count could not
/// use the address's padding; an inline IPv6 address, 24), a name a pod.
#[derive(Debug)]
enum Entry {
    V4([u8; 4], u32),
    /// Boxed: inline, the address would make every entry 24 bytes, not
    /// 16 (names of single-stack IPv6 pods pay an allocation instead).
    V6(Box<[u8; 16]>, u32),
    Set(Arc<Rrs>, u32),
    Empty(u32),
}

impl Default for Entry {
    fn default() -> Self {
        Self::Empty(0)
    }
}

impl Entry {
    fn data(&self) -> Option<Value> {
        match self {
            Self::V4(a, _) => Some(Value::Ip(IpAddr::from(*a))),
            Self::V6(a, _) => Some(Value::Ip(IpAddr::from(**a))),
            Self::Set(rrs, _) => Some(Value::Set(rrs.clone())),
            Self::Empty(_) => None,
        }
    }

    fn has_data(&self) -> bool {
        !matches!(self, Self::Empty(_))
    }

    fn below(&self) -> u32 {
        match self {
            Self::V4(_, n) | Self::V6(_, n) | Self::Set(_, n) | Self::Empty(n) => *n,
        }
    }

    fn below_mut(&mut self) -> &mut u32 {
        match self {
            Self::V4(_, n) | Self::V6(_, n) | Self::Set(_, n) | Self::Empty(n) => n,
        }
    }

    /// Does it hold `v`? (Sets compare by content.)
    fn holds(&self, v: &Value) -> bool {
        match (self, v) {
            (Self::V4(a, _), Value::Ip(IpAddr::V4(b))) => *a == b.octets(),
            (Self::V6(a, _), Value::Ip(IpAddr::V6(b))) => **a == b.octets(),
            (Self::Set(a, _), Value::Set(b)) => a == b,
            _ => false,
        }
    }

    /// Put `v` (or no data) in, keeping the count; the old data comes back.
    fn replace(&mut self, v: Option<Value>) -> Option<Value> {
        let below = self.below();
        let new = match v {
            Some(Value::Ip(IpAddr::V4(a))) => Self::V4(a.octets(), below),
            Some(Value::Ip(IpAddr::V6(a))) => Self::V6(Box::new(a.octets()), below),
            Some(Value::Set(rrs)) => Self::Set(rrs, below),
            None => Self::Empty(below),
        };
        match std::mem::replace(self, new) {
            Self::V4(a, _) => Some(Value::Ip(IpAddr::from(a))),
            Self::V6(a, _) => Some(Value::Ip(IpAddr::from(*a))),
            Self::Set(rrs, _) => Some(Value::Set(rrs)),
            Self::Empty(_) => None,
        }
    }

    /// No data and nothing below: the name does not exist.
    fn vacant(&self) -> bool {
        matches!(self, Self::Empty(0))
    }
}

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
            Lookup::Ip(ip) => Some(Arc::new(ip_rrs(*ip))),
            Lookup::Missing | Lookup::Empty => None,
        }
    }
}

/// What one address answers as a name: the names spelled from it (each
/// answers the address) and what its PTR record names. 16 bytes beside a
/// 4-byte IPv4 key, with no allocation of its own: the facts are one
/// interned list that a gang's addresses share (the thousand pods of one
/// Job, namespace and headless Service), and the one thing each address
/// has alone, the number in its PTR target (`w-7.w.ml.svc`), is kept here.
#[derive(Debug, Default)]
struct IpNames {
    facts: Option<Arc<Facts>>,
    /// `n` of a [`Ptr::Host`] target; 0 otherwise.
    n: u32,
}

impl IpNames {
    fn is_empty(&self) -> bool {
        self.facts.is_none()
    }

    fn names(&self) -> &[IpName] {
        self.facts.as_ref().map_or(&[], |f| &f.names)
    }

    fn ptr(&self) -> Option<&Ptr> {
        self.facts.as_ref()?.ptr.as_ref()
    }

    /// The name the PTR record of `ip` points at (relative to the first
    /// zone), spelled.
    fn ptr_target(&self, ip: IpAddr) -> Option<Arc<str>> {
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
struct Facts {
    /// Sorted, no repeats.
    names: Box<[IpName]>,
    ptr: Option<Ptr>,
}

/// What a PTR record points at. Kept as a pointer into something shared,
/// so the pods of a gang share it: their hostname names' group, or a name
/// spelled from the address itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Ptr {
    /// A name spelled out: a stored name's own key ([`Table::shared_name`]),
    /// or a copy of its own.
    Name(Arc<str>),
    /// The hostname name `<prefix>-<n>.<sub>.<ns>.svc` of a group kept by
    /// number ([`Table::hosts`]), by the group's key; `n` is the entry's.
    Host(Arc<[u8]>),
    /// The address's `k`-th spelled name.
    Spelled(u16),
}

/// The [`Facts`] in use, one copy of each. Only the writer takes the lock
/// (readers follow an entry's pointer).
#[derive(Debug, Default)]
struct FactsLists(std::sync::Mutex<Interned<Facts>>);

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

type State = foldhash::fast::RandomState;

/// The address entries, IPv4 and IPv6 apart: an `IpAddr` key is 17 bytes,
/// padded to 24 beside an entry, where an IPv4 key is 4 (16 bytes less a
/// slot for nearly every pod).
#[derive(Debug, Default)]
struct IpMap {
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
    fn read<R>(&self, ip: IpAddr, f: impl FnOnce(&IpNames) -> R) -> Option<R> {
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
    fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    fn for_each(&self, mut f: impl FnMut(IpAddr, &IpNames)) {
        for e in self.v4.iter() {
            f(IpAddr::V4(*e.key()), e.value());
        }
        for e in self.v6.iter() {
            f(IpAddr::V6(*e.key()), e.value());
        }
    }
}

/// One name spelled from an address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum IpName {
    /// `<a-b-c-d>.<ns>.pod`
    Pod(Arc<str>),
    /// `<a-b-c-d>.<svc>.<ns>.svc`: namespace, Service.
    Member(Arc<str>, Arc<str>),
}

impl IpName {
    /// The key of the name (relative to the zone).
    fn key(&self, ip: IpAddr) -> String {
        match self {
            IpName::Pod(ns) => super::names::pod_name(ip, ns),
            IpName::Member(ns, svc) => super::names::member_name(ip, svc, ns),
        }
    }
}

/// The numbered names of one gang that answer one address (nearly all
/// of them), by number: 5 bytes an IPv4 name, 17 an IPv6 one, where a
/// stored name cost ≈ 85 (its key, its slot at a hash table's load, its
/// spelling). A name is in one family's pages, never both.
#[derive(Debug, Default)]
struct GangRanks {
    v4: Paged<[u8; 4]>,
    v6: Paged<[u8; 16]>,
}

impl GangRanks {
    fn get(&self, i: u32) -> Option<IpAddr> {
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

    fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = (u32, IpAddr)> + '_ {
        let v4 = self.v4.iter().map(|(i, a)| (i, IpAddr::from(*a)));
        v4.chain(self.v6.iter().map(|(i, a)| (i, IpAddr::from(*a))))
    }
}

/// The numbered names of many gangs, by gang. Keys are bytes: a hostname
/// group's is spelled from two pieces of the question, and checking them
/// again for UTF-8 cost more than the map's lookup.
#[derive(Debug, Default)]
struct Gangs(DashMap<Arc<[u8]>, GangRanks, State>);

impl Gangs {
    fn get(&self, gang: &[u8], i: u32) -> Option<IpAddr> {
        self.0.get(gang)?.get(i)
    }

    /// The gang's own key, if it keeps `i`.
    fn key_keeping(&self, gang: &[u8], i: u32) -> Option<Arc<[u8]>> {
        let g = self.0.get(gang)?;
        g.get(i).map(|_| g.key().clone())
    }

    /// Put `i`'s address; the old one comes back.
    fn put(&self, gang: &[u8], i: u32, ip: IpAddr) -> Option<IpAddr> {
        match self.0.get_mut(gang) {
            Some(mut g) => g.insert(i, ip),
            None => self.0.entry(gang.into()).or_default().insert(i, ip),
        }
    }

    /// Take `i`'s address; the gang goes with its last.
    fn take(&self, gang: &[u8], i: u32) -> Option<IpAddr> {
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
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Which [`Gangs`] keeps a numbered name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    /// `<i>.<gang>.<ns>.rank`, by `<gang>.<ns>`.
    Rank,
    /// `<prefix>-<n>.<sub>.<ns>.svc`, by `<prefix>.<sub>.<ns>`.
    Host,
}

/// Room to spell a hostname group's key (a name is at most 255 bytes).
type GroupBuf = [u8; 256];

/// A name kept by number, as (where, number, gang): see [`Kept`]. A
/// hostname group's key is spelled into `buf` (no allocation: this runs
/// for every question of a hostname name).
fn numbered<'a>(q: &QName<'a>, buf: &'a mut GroupBuf) -> Option<(Kept, u32, &'a [u8])> {
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
fn host_group<'a>(q: &QName<'_>, buf: &'a mut GroupBuf) -> Option<(u32, &'a [u8])> {
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
fn host_in(group: &[u8], n: u32) -> String {
    let group = String::from_utf8_lossy(group);
    let (prefix, place) = group.split_once('.').unwrap_or((&group, ""));
    format!("{prefix}-{n}.{place}.svc")
}

/// Where a PTR record points, as the writer works it out
/// (`Writer::ptr_target`); the table keeps it as a [`Ptr`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// A name spelled out: a Service's, a pod's hostname name.
    Name(String),
    /// `<a-b-c-d>.<svc>.<ns>.svc`: namespace, Service.
    Member(&'a str, &'a str),
    /// `<a-b-c-d>.<ns>.pod`: namespace.
    Pod(&'a str),
}

impl Target<'_> {
    /// The name, spelled for `ip`.
    pub(crate) fn spell(&self, ip: IpAddr) -> String {
        match self {
            Target::Name(name) => name.clone(),
            Target::Member(ns, svc) => super::names::member_name(ip, svc, ns),
            Target::Pod(ns) => super::names::pod_name(ip, ns),
        }
    }

    /// Is `name` the spelled name this target names?
    fn is(&self, name: &IpName) -> bool {
        match (self, name) {
            (Target::Member(ns, svc), IpName::Member(n, s)) => **n == **ns && **s == **svc,
            (Target::Pod(ns), IpName::Pod(n)) => **n == **ns,
            _ => false,
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
    /// A node instance's scope: the namespaces it holds whole (listed from
    /// the relay); every other name is forwarded. `None`: not a node
    /// instance, the index holds everything it answers for.
    scope: arc_swap::ArcSwapOption<HashSet<Box<str>>>,
    /// Whether `scope` is set: what every query asks first, one plain load
    /// (an `ArcSwap` load is not free on the DNS path).
    node_scoped: AtomicBool,
    /// On a node instance: headless Services without a selector, by
    /// namespace, when the relay does not serve EndpointSlices (one from
    /// before it did): their names are forwarded even in scope.
    unheld: DashMap<Box<str>, Vec<Box<str>>>,
    /// Namespaces a node instance holds only in part (some gangs' pods).
    partial: dashmap::DashSet<Box<str>>,
    /// A node instance whose relay serves EndpointSlices holds them too.
    slices_held: AtomicBool,
}

impl Table {
    /// Make this the index of a node instance: nothing in scope yet.
    pub fn set_node_scope(&self) {
        self.scope.store(Some(Arc::new(HashSet::new())));
        self.node_scoped.store(true, Ordering::Release);
    }

    /// Whether this is a node instance's index.
    pub fn is_node_scoped(&self) -> bool {
        self.node_scoped.load(Ordering::Relaxed)
    }

    /// Whether the names of namespace `ns` are answered from this index
    /// (always, except on a node instance, for the namespaces it holds).
    pub fn in_scope(&self, ns: &str) -> bool {
        self.scope.load().as_ref().is_none_or(|s| s.contains(ns))
    }

    /// The namespaces in a node instance's scope.
    pub fn scope(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .scope
            .load()
            .as_ref()
            .map(|s| s.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// A node instance holds EndpointSlices (its relay serves them): set
    /// before the first namespace comes into scope.
    pub fn set_slices_held(&self, on: bool) {
        self.slices_held.store(on, Ordering::Release);
    }

    pub fn slices_held(&self) -> bool {
        self.slices_held.load(Ordering::Acquire)
    }

    /// Whether a node instance forwards the names of Service `svc` of `ns`
    /// although `ns` is in scope (a headless Service without a selector,
    /// from a relay that serves no EndpointSlices).
    pub fn is_unheld(&self, ns: &str, svc: &str) -> bool {
        self.unheld
            .get(ns)
            .is_some_and(|names| names.iter().any(|n| &**n == svc))
    }

    /// Whether a node instance holds only some gangs' pods of `ns`: then
    /// only a name found among them is answered here (a missing one may
    /// be another gang's), with the names of Services held whole.
    pub fn is_partial(&self, ns: &str) -> bool {
        self.partial.contains(ns)
    }

    /// Mark or unmark `ns` as [`Self::is_partial`] (the writer).
    pub(crate) fn set_partial(&self, ns: &str, on: bool) {
        if on {
            self.partial.insert(ns.into());
        } else {
            self.partial.remove(ns);
        }
    }

    /// Mark or unmark a Service as [`Self::is_unheld`] (the writer).
    pub(crate) fn set_unheld(&self, ns: &str, svc: &str, on: bool) {
        if on {
            let mut names = self.unheld.entry(ns.into()).or_default();
            if !names.iter().any(|n| &**n == svc) {
                names.push(svc.into());
            }
        } else {
            let empty = self.unheld.get_mut(ns).is_some_and(|mut names| {
                names.retain(|n| &**n != svc);
                names.is_empty()
            });
            if empty {
                self.unheld.remove(ns);
            }
        }
    }

    /// Add or drop a namespace of a node instance's scope (the writer);
    /// the number of namespaces in scope after.
    pub(crate) fn set_in_scope(&self, ns: &str, on: bool) -> usize {
        let Some(now) = self.scope.load_full() else {
            return 0;
        };
        if now.contains(ns) == on {
            return now.len();
        }
        let mut next = (*now).clone();
        if on {
            next.insert(ns.into());
        } else {
            next.remove(ns);
        }
        let n = next.len();
        self.scope.store(Some(Arc::new(next)));
        n
    }

    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
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

    fn gangs(&self, kept: Kept) -> &Gangs {
        match kept {
            Kept::Rank => &self.ranks,
            Kept::Host => &self.hosts,
        }
    }

    /// The address a numbered name answers, if it is kept by number.
    fn numbered(&self, q: &QName<'_>) -> Option<IpAddr> {
        let mut buf = [0; 256];
        let (kept, i, gang) = numbered(q, &mut buf)?;
        self.gangs(kept).get(gang, i)
    }

    /// Does `key` have data, stored or kept by number?
    fn has_data(&self, key: &str) -> bool {
        self.names.get(key).is_some_and(|e| e.has_data())
            || self.numbered(&QName::parse(key)).is_some()
    }

    /// The data of a name spelled from an address, if it exists.
    fn ip_name(&self, q: &QName<'_>) -> Option<Lookup> {
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
        let fresh = self.change_facts(ip, true, |names, ptr, n| {
            if names.contains(&name) {
                return (None, false);
            }
            let mut now = Vec::with_capacity(names.len() + 1);
            now.extend(names.iter().cloned());
            now.push(name.clone());
            now.sort_unstable();
            let ptr = ptr.map(|p| moved(p, names, &now, ip));
            let facts = Facts {
                names: now.into_boxed_slice(),
                ptr,
            };
            (Some((facts, n)), true)
        }) == Some(true);
        if fresh {
            self.count_ancestors(&name.key(ip), 1);
        }
        fresh
    }

    /// Take name `name` from `ip`. Returns whether it had it.
    pub(crate) fn remove_ip_name(&self, ip: IpAddr, name: &IpName) -> bool {
        let had = self.change_facts(ip, false, |names, ptr, n| {
            if !names.contains(name) {
                return (None, false);
            }
            let now: Vec<IpName> = names.iter().filter(|x| *x != name).cloned().collect();
            let ptr = ptr.map(|p| moved(p, names, &now, ip));
            let facts = Facts {
                names: now.into_boxed_slice(),
                ptr,
            };
            (Some((facts, n)), true)
        }) == Some(true);
        if had {
            self.count_ancestors(&name.key(ip), -1);
        }
        had
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
            self.count_ancestors(&super::names::reverse(ip), change);
        }
        change
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

/// A PTR kept across a change of the address's names (`was` to `now`):
/// one pointing at a spelled name follows it to its new place, or, when
/// the name goes, keeps its spelling (the writer sets the PTR again later
/// in the batch).
fn moved(ptr: &Ptr, was: &[IpName], now: &[IpName], ip: IpAddr) -> Ptr {
    let Ptr::Spelled(k) = ptr else {
        return ptr.clone();
    };
    let name = &was[usize::from(*k)];
    match now.iter().position(|x| x == name) {
        Some(k) if k <= usize::from(u16::MAX) => Ptr::Spelled(k as u16),
        _ => Ptr::Name(name.key(ip).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::names::Label;

    fn ip(a: &str) -> Value {
        Value::Ip(a.parse().unwrap())
    }

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

    /// The name map's slot is a key and an entry: 16 + 16 bytes.
    #[test]
    fn an_entry_is_sixteen_bytes_and_keeps_an_ipv6_address() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        let t = Table::default();
        t.set("a.ml.pod", ip("fd00::7"));
        assert!(
            matches!(t.lookup("a.ml.pod"), Lookup::Ip(a) if a == "fd00::7".parse::<IpAddr>().unwrap())
        );
        assert!(
            !t.set("a.ml.pod", ip("fd00::7")),
            "the same address: not new"
        );
        assert!(
            matches!(t.lookup("a.ml.pod"), Lookup::Ip(a) if a == "fd00::7".parse::<IpAddr>().unwrap())
        );
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

    /// Hostname names that differ in their number are kept by it, as
    /// ranks are; anything else spelled like them is stored.
    #[test]
    fn numbered_hostname_names_are_kept_by_number() {
        let t = Table::default();
        assert!(t.set("w-0.w.ml.svc", ip("10.0.0.1")));
        assert!(t.set("w-70.w.ml.svc", ip("10.0.0.2")));
        assert!(!t.set("w-70.w.ml.svc", ip("10.0.0.3")), "replaced, not new");
        assert!(t.set("w-x-1.w.ml.svc", ip("10.0.0.4")), "another group");
        assert_eq!(t.hosts.0.len(), 2);
        assert!(t.names.get("w-0.w.ml.svc").is_none(), "not stored");
        assert_eq!(
            t.hosts.get(b"w.w.ml", 70),
            Some("10.0.0.3".parse().unwrap())
        );
        assert_eq!(
            t.lookup("w-0.w.ml.svc"),
            Lookup::Ip("10.0.0.1".parse().unwrap())
        );
        assert_eq!(t.lookup("w-1.w.ml.svc"), Lookup::Missing);
        assert_eq!(t.lookup("w-00.w.ml.svc"), Lookup::Missing, "canonical only");
        assert_eq!(
            t.lookup("w-0.x.ml.svc"),
            Lookup::Missing,
            "another subdomain"
        );
        assert_eq!(t.lookup("w.ml.svc"), Lookup::Empty);
        // Not numbered, or not a hostname name: stored as before.
        for key in [
            "w.w.ml.svc",
            "w-07.w.ml.svc",
            "-7.w.ml.svc",
            "w-7.ml.svc",
            "a.w-7.w.ml.svc",
        ] {
            assert!(t.set(key, ip("10.0.0.9")), "{key}");
            assert!(
                t.names.get(key).is_some_and(|e| e.has_data()),
                "{key} is stored"
            );
            assert_eq!(t.lookup(key), Lookup::Ip("10.0.0.9".parse().unwrap()));
        }
        let names: Vec<String> = t.snapshot().into_iter().map(|(n, _)| n).collect();
        for key in [
            "w-0.w.ml.svc",
            "w-70.w.ml.svc",
            "w-x-1.w.ml.svc",
            "w-7.ml.svc",
        ] {
            assert!(names.iter().any(|n| n == key), "{key} exported");
        }
        // Two addresses: stored from then on, and back.
        let both = Arc::new(Rrs {
            a: vec!["10.0.0.1".parse().unwrap()],
            aaaa: vec!["fd00::1".parse().unwrap()],
            ..Default::default()
        });
        assert!(!t.set("w-0.w.ml.svc", Value::Set(both.clone())), "not new");
        assert_eq!(t.lookup("w-0.w.ml.svc"), Lookup::Found(both));
        assert_eq!(t.hosts.get(b"w.w.ml", 0), None);
        assert!(!t.set("w-0.w.ml.svc", ip("10.0.0.5")));
        assert_eq!(t.remove("w-0.w.ml.svc"), Some(ip("10.0.0.5")));
        assert_eq!(t.remove("w-70.w.ml.svc"), Some(ip("10.0.0.3")));
        assert_eq!(t.remove("w-x-1.w.ml.svc"), Some(ip("10.0.0.4")));
        assert!(t.hosts.is_empty(), "a group goes with its last name");
        assert_eq!(
            t.lookup("w.ml.svc"),
            Lookup::Empty,
            "a.w-7.w.ml.svc is below it"
        );
    }

    /// The PTR of a pod whose hostname name is kept by number points at
    /// the group and keeps the number: the pods of a gang share one list
    /// of facts, and each address costs its 16-byte entry alone.
    #[test]
    fn a_gangs_addresses_share_their_facts_and_ptr() {
        assert_eq!(std::mem::size_of::<IpNames>(), 16);
        let t = Table::default();
        let ml: Arc<str> = "ml".into();
        let ips: Vec<IpAddr> = (0..3)
            .map(|i| format!("10.0.0.{i}").parse().unwrap())
            .collect();
        for (i, ip) in ips.iter().enumerate() {
            t.set(&format!("w-{i}.w.ml.svc"), Value::Ip(*ip));
            t.add_ip_name(*ip, IpName::Pod(ml.clone()));
            assert_eq!(
                t.set_ptr(*ip, Some(Target::Name(format!("w-{i}.w.ml.svc")))),
                1
            );
        }
        let facts = |ip: IpAddr| t.ips.read(ip, |e| e.facts.clone()).flatten().unwrap();
        assert!(Arc::ptr_eq(&facts(ips[0]), &facts(ips[2])));
        assert_eq!(t.facts.0.lock().unwrap().len(), 1);
        let ptr = |ip: &IpAddr| match t.lookup(&crate::index::names::reverse(*ip)) {
            Lookup::Found(rrs) => rrs.ptr.as_deref().map(str::to_string),
            other => panic!("{other:?}"),
        };
        assert_eq!(ptr(&ips[2]).as_deref(), Some("w-2.w.ml.svc"));
        assert_eq!(
            t.set_ptr(ips[2], Some(Target::Name("w-2.w.ml.svc".into()))),
            0,
            "the same target again: no change"
        );
        // A hostname name that is stored (not kept by number) is named.
        t.set("db.w.ml.svc", ip("10.0.0.9"));
        let nine: IpAddr = "10.0.0.9".parse().unwrap();
        t.set_ptr(nine, Some(Target::Name("db.w.ml.svc".into())));
        assert_eq!(ptr(&nine).as_deref(), Some("db.w.ml.svc"));
        // A name the address spells is pointed at, and followed as the
        // address's names change; its spelling stays when it goes.
        let web: Arc<str> = "web".into();
        t.add_ip_name(nine, IpName::Member(ml.clone(), web.clone()));
        t.set_ptr(nine, Some(Target::Member("ml", "web")));
        assert_eq!(ptr(&nine).as_deref(), Some("10-0-0-9.web.ml.svc"));
        t.add_ip_name(nine, IpName::Pod(ml.clone()));
        t.add_ip_name(nine, IpName::Member(ml.clone(), "aaa".into()));
        assert_eq!(ptr(&nine).as_deref(), Some("10-0-0-9.web.ml.svc"));
        t.remove_ip_name(nine, &IpName::Member(ml.clone(), "aaa".into()));
        assert_eq!(ptr(&nine).as_deref(), Some("10-0-0-9.web.ml.svc"));
        t.remove_ip_name(nine, &IpName::Member(ml.clone(), web.clone()));
        assert_eq!(ptr(&nine).as_deref(), Some("10-0-0-9.web.ml.svc"));
        t.set_ptr(nine, Some(Target::Pod("ml")));
        assert_eq!(ptr(&nine).as_deref(), Some("10-0-0-9.ml.pod"));
        // A target the address does not spell is spelled out.
        t.set_ptr(nine, Some(Target::Member("ml", "gone")));
        assert_eq!(ptr(&nine).as_deref(), Some("10-0-0-9.gone.ml.svc"));
        for (i, ip) in ips.iter().enumerate() {
            assert_eq!(t.set_ptr(*ip, None), -1);
            t.remove_ip_name(*ip, &IpName::Pod(ml.clone()));
            t.remove(&format!("w-{i}.w.ml.svc"));
        }
        t.set_ptr(nine, None);
        t.remove_ip_name(nine, &IpName::Pod(ml.clone()));
        t.remove("db.w.ml.svc");
        assert!(t.ips.is_empty() && t.names.is_empty() && t.hosts.is_empty());
        assert_eq!(t.facts.0.lock().unwrap().len(), 0, "nothing left behind");
    }

    /// Rank names that answer one address are kept by index, not stored,
    /// and answer, count as names below their gang, and export alike.
    #[test]
    fn ranks_are_kept_by_index_and_answer_as_names() {
        let t = Table::default();
        assert!(t.set("0.w.ml.rank", ip("10.0.0.1")));
        assert!(t.set("70.w.ml.rank", ip("10.0.0.2")), "another chunk");
        assert!(!t.set("70.w.ml.rank", ip("10.0.0.3")), "replaced, not new");
        assert!(
            t.set("3000000000.w.ml.rank", ip("10.0.0.4")),
            "far away: one chunk"
        );
        assert_eq!(t.ranks.0.get(b"w.ml".as_slice()).unwrap().v4.pages(), 3);
        assert!(t.names.get("0.w.ml.rank").is_none(), "not stored as a name");
        assert_eq!(
            t.lookup("0.w.ml.rank"),
            Lookup::Ip("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            t.lookup("70.w.ml.rank"),
            Lookup::Ip("10.0.0.3".parse().unwrap())
        );
        assert_eq!(t.lookup("1.w.ml.rank"), Lookup::Missing);
        assert_eq!(
            t.lookup("070.w.ml.rank"),
            Lookup::Missing,
            "canonical spelling only"
        );
        assert_eq!(t.lookup("+70.w.ml.rank"), Lookup::Missing);
        assert_eq!(t.lookup("0.other.ml.rank"), Lookup::Missing);
        assert_eq!(
            t.lookup("w.ml.rank"),
            Lookup::Empty,
            "the gang is below them"
        );
        assert_eq!(t.lookup("ml.rank"), Lookup::Empty);
        let names: Vec<String> = t.snapshot().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["0.w.ml.rank", "3000000000.w.ml.rank", "70.w.ml.rank"]
        );
        // A dual-stack rank is a stored name, and back.
        let both = Arc::new(Rrs {
            a: vec!["10.0.0.1".parse().unwrap()],
            aaaa: vec!["fd00::1".parse().unwrap()],
            ..Default::default()
        });
        assert!(!t.set("0.w.ml.rank", Value::Set(both.clone())), "not new");
        assert_eq!(t.lookup("0.w.ml.rank"), Lookup::Found(both.clone()));
        assert_eq!(t.ranks.get(b"w.ml", 0), None);
        assert!(!t.set("0.w.ml.rank", ip("10.0.0.5")));
        assert_eq!(
            t.lookup("0.w.ml.rank"),
            Lookup::Ip("10.0.0.5".parse().unwrap())
        );
        assert_eq!(t.remove("0.w.ml.rank"), Some(ip("10.0.0.5")));
        assert_eq!(t.remove("70.w.ml.rank"), Some(ip("10.0.0.3")));
        assert_eq!(t.remove("70.w.ml.rank"), None);
        assert_eq!(t.lookup("w.ml.rank"), Lookup::Empty);
        assert_eq!(t.remove("3000000000.w.ml.rank"), Some(ip("10.0.0.4")));
        assert!(t.ranks.is_empty(), "the last rank takes its gang along");
        assert_eq!(t.lookup("w.ml.rank"), Lookup::Missing);
        assert_eq!(t.lookup("rank"), Lookup::Missing);
        assert!(t.names.is_empty());
    }

    /// A name keeps its count of names below through every change of its
    /// data, and answers each kind of value as it was set.
    #[test]
    fn a_name_with_data_and_names_below_keeps_both() {
        let t = Table::default();
        assert!(t.set("a.web.ns.svc", ip("10.0.0.9")));
        assert!(t.set("web.ns.svc", ip("fd00::1")));
        assert_eq!(
            t.lookup("web.ns.svc"),
            Lookup::Ip("fd00::1".parse().unwrap())
        );
        assert!(
            !t.set("web.ns.svc", ip("fd00::1")),
            "the same data is no change"
        );
        let rrs = Arc::new(Rrs {
            txt: Some("x".into()),
            ..Default::default()
        });
        assert!(
            !t.set("web.ns.svc", Value::Set(rrs.clone())),
            "replaced, not new"
        );
        assert_eq!(t.lookup("web.ns.svc"), Lookup::Found(rrs.clone()));
        assert_eq!(t.remove("web.ns.svc"), Some(Value::Set(rrs)));
        assert_eq!(
            t.lookup("web.ns.svc"),
            Lookup::Empty,
            "a.web is still below"
        );
        assert!(t.set("web.ns.svc", ip("10.0.0.1")));
        assert_eq!(t.remove("a.web.ns.svc"), Some(ip("10.0.0.9")));
        assert_eq!(
            t.lookup("web.ns.svc"),
            Lookup::Ip("10.0.0.1".parse().unwrap())
        );
        assert!(t.remove("web.ns.svc").is_some());
        assert_eq!(t.lookup("web.ns.svc"), Lookup::Missing);
        assert_eq!(t.lookup("svc"), Lookup::Missing);
    }

    #[test]
    fn empty_non_terminals_come_and_go_with_their_children() {
        let t = Table::default();
        assert!(t.set("web-0.web.ns.svc", ip("10.0.0.1")));
        assert!(t.set("web-1.web.ns.svc", ip("10.0.0.2")));
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
    fn names_spelled_from_an_address() {
        let t = Table::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let ml: Arc<str> = "ml".into();
        let web: Arc<str> = "web".into();
        assert!(t.add_ip_name(ip, IpName::Pod(ml.clone())));
        assert!(!t.add_ip_name(ip, IpName::Pod(ml.clone())), "once");
        assert!(t.add_ip_name(ip, IpName::Member(ml.clone(), web.clone())));
        assert_eq!(t.lookup("10-0-0-1.ml.pod"), Lookup::Ip(ip));
        assert_eq!(t.lookup("10-0-0-1.web.ml.svc"), Lookup::Ip(ip));
        assert_eq!(t.lookup("10-0-0-1.other.ml.svc"), Lookup::Missing);
        assert_eq!(
            t.lookup("10-0-0-01.ml.pod"),
            Lookup::Missing,
            "canonical only"
        );
        assert_eq!(t.lookup("10-0-0-1.web.pod"), Lookup::Missing);
        assert_eq!(t.lookup("ml.pod"), Lookup::Empty);
        assert_eq!(t.lookup("web.ml.svc"), Lookup::Empty);
        assert_eq!(t.set_ptr(ip, Some(Target::Name("a.web.ml.svc".into()))), 1);
        let Lookup::Found(p) = t.lookup("1.0.0.10.in-addr.arpa") else {
            panic!("PTR")
        };
        assert_eq!(p.ptr.as_deref(), Some("a.web.ml.svc"));
        assert_eq!(t.lookup("0.0.10.in-addr.arpa"), Lookup::Empty);
        assert_eq!(t.snapshot().len(), 3);
        // A stored name of the same spelling wins.
        t.set(
            "10-0-0-1.web.ml.svc",
            Value::Ip("10.9.9.9".parse().unwrap()),
        );
        assert_eq!(
            t.lookup("10-0-0-1.web.ml.svc"),
            Lookup::Ip("10.9.9.9".parse().unwrap())
        );
        assert_eq!(t.snapshot().len(), 3);
        t.remove("10-0-0-1.web.ml.svc");
        assert!(t.remove_ip_name(ip, &IpName::Pod(ml.clone())));
        assert!(!t.remove_ip_name(ip, &IpName::Pod(ml.clone())), "once");
        assert!(t.remove_ip_name(ip, &IpName::Member(ml, web)));
        assert_eq!(t.set_ptr(ip, None), -1);
        assert!(
            t.names.is_empty() && t.ips.is_empty() && t.facts.0.lock().unwrap().len() == 0,
            "nothing left behind"
        );
    }

    /// A record two members add stays until both have taken it.
    #[test]
    fn an_srv_record_added_twice_is_counted() {
        let r = |t: &str| Srv {
            port: 80,
            target: t.into(),
        };
        let mut set: SrvSet = [r("a"), r("b"), r("a")].into_iter().collect();
        assert!(set.iter().eq([&r("a"), &r("b")]));
        let copy = set.clone();
        set.remove(&r("a"));
        assert!(
            set.iter().eq([&r("a"), &r("b")]),
            "one member still adds it"
        );
        assert_eq!(set, copy, "equal: the same records");
        set.remove(&r("a"));
        assert!(set.iter().eq([&r("b")]));
        set.remove(&r("a"));
        set.add(&r("a"));
        assert!(
            set.iter().eq([&r("a"), &r("b")]),
            "a record never added is no count"
        );
        set.remove(&r("a"));
        set.remove(&r("b"));
        assert!(set.is_empty() && set.more.is_empty());
    }

    /// A target naming a stored name is that name's own key; one naming
    /// nothing stored is a string of its own.
    #[test]
    fn a_target_shares_the_stored_names_bytes() {
        let t = Table::default();
        t.set("a.web.ml.svc", ip("10.0.0.1"));
        let (one, two) = (
            t.shared_name("a.web.ml.svc".into()),
            t.shared_name("a.web.ml.svc".into()),
        );
        assert!(Arc::ptr_eq(&one, &two));
        assert!(Arc::ptr_eq(
            &one,
            t.names.get("a.web.ml.svc").unwrap().key()
        ));
        let other = t.shared_name("b.web.ml.svc".into());
        assert_eq!(&*other, "b.web.ml.svc");
        assert!(
            t.names.get("b.web.ml.svc").is_none(),
            "nothing stored for it"
        );
    }

    /// Addresses with the same spelled names share one list, which goes
    /// with the last of them.
    #[test]
    fn addresses_share_their_spelled_names() {
        let t = Table::default();
        let ml: Arc<str> = "ml".into();
        let web: Arc<str> = "web".into();
        let ips: Vec<IpAddr> = (1..=3)
            .map(|i| format!("10.0.0.{i}").parse().unwrap())
            .collect();
        for ip in &ips {
            // In either order: the list is sorted.
            if ip == &ips[1] {
                t.add_ip_name(*ip, IpName::Member(ml.clone(), web.clone()));
                t.add_ip_name(*ip, IpName::Pod(ml.clone()));
            } else {
                t.add_ip_name(*ip, IpName::Pod(ml.clone()));
                t.add_ip_name(*ip, IpName::Member(ml.clone(), web.clone()));
            }
        }
        let list = |ip: IpAddr| t.ips.read(ip, |e| e.facts.clone()).flatten().unwrap();
        assert!(Arc::ptr_eq(&list(ips[0]), &list(ips[1])));
        assert!(Arc::ptr_eq(&list(ips[0]), &list(ips[2])));
        let interned = || t.facts.0.lock().unwrap().len();
        assert_eq!(interned(), 1, "one list: the one of both names");
        t.remove_ip_name(ips[0], &IpName::Member(ml.clone(), web.clone()));
        assert_eq!(interned(), 2, "and the pod name alone");
        for ip in &ips[1..] {
            t.remove_ip_name(*ip, &IpName::Pod(ml.clone()));
        }
        assert_eq!(interned(), 2, "the pod name alone, and the member alone");
        assert_eq!(t.lookup("10-0-0-2.web.ml.svc"), Lookup::Ip(ips[1]));
        assert_eq!(t.lookup("10-0-0-2.ml.pod"), Lookup::Missing);
        t.remove_ip_name(ips[0], &IpName::Pod(ml.clone()));
        for ip in &ips[1..] {
            t.remove_ip_name(*ip, &IpName::Member(ml.clone(), web.clone()));
        }
        assert_eq!(interned(), 0);
        assert!(t.ips.is_empty() && t.names.is_empty());
    }

    #[test]
    fn one_address_is_kept_inline_and_anything_more_as_a_set() {
        let v4: Ipv4Addr = "10.0.0.1".parse().unwrap();
        let v6: Ipv6Addr = "fd00::1".parse().unwrap();
        let one = |a: Vec<Ipv4Addr>, aaaa: Vec<Ipv6Addr>| Rrs {
            a,
            aaaa,
            ..Default::default()
        };
        assert_eq!(Value::of(one(vec![v4], vec![])), Value::Ip(v4.into()));
        assert_eq!(Value::of(one(vec![], vec![v6])), Value::Ip(v6.into()));
        let dual = one(vec![v4], vec![v6]);
        assert_eq!(Value::of(dual.clone()), Value::Set(Arc::new(dual)));
        let with_txt = Rrs {
            txt: Some("x".into()),
            ..one(vec![v4], vec![])
        };
        assert!(matches!(Value::of(with_txt), Value::Set(_)));
        assert_eq!(*Value::Ip(v6.into()).rrs(), one(vec![], vec![v6]));
        let t = Table::default();
        t.set("a.web.ml.svc", Value::Ip(v4.into()));
        assert_eq!(t.lookup("a.web.ml.svc").rrs().unwrap().a, [v4]);
        assert_eq!(t.snapshot()[0].1.a, [v4]);
    }

    #[test]
    fn dashed_labels_parse_only_in_their_canonical_spelling() {
        for (label, ip) in [
            ("10-0-0-1", Some("10.0.0.1")),
            ("fd00--1", Some("fd00::1")),
            ("2001-db8--a-b", Some("2001:db8::a:b")),
            ("10-0-0-01", None),
            ("fd00-0-0-0-0-0-0-1", None),
            ("FD00--1", None),
            ("10-0-0", None),
            ("web", None),
            ("1-2-3-4-5", None),
        ] {
            assert_eq!(Label(label).ip(), ip.map(|s| s.parse().unwrap()), "{label}");
        }
    }

    #[test]
    fn replacing_data_does_not_double_count() {
        let t = Table::default();
        assert!(t.set("web.ns.svc", ip("10.0.0.1")));
        assert!(!t.set("web.ns.svc", ip("10.0.0.2")));
        assert!(t.remove("web.ns.svc").is_some());
        assert_eq!(t.lookup("ns.svc"), Lookup::Missing);
        assert!(t.remove("web.ns.svc").is_none());
    }

    #[test]
    fn a_name_with_data_and_children_keeps_both() {
        let t = Table::default();
        t.set("web.ns.svc", ip("10.0.0.9"));
        t.set("web-0.web.ns.svc", ip("10.0.0.1"));
        t.remove("web.ns.svc");
        assert_eq!(t.lookup("web.ns.svc"), Lookup::Empty);
        t.set("web.ns.svc", ip("10.0.0.9"));
        t.remove("web-0.web.ns.svc");
        assert!(matches!(t.lookup("web.ns.svc"), Lookup::Ip(_)));
    }
}
