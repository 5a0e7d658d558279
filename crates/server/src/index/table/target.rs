//! The names spelled from an address (`<a-b-c-d>.<ns>.pod`,
//! `<a-b-c-d>.<svc>.<ns>.svc`), and where a PTR record points: as the
//! writer works it out ([`Target`]) and as the table keeps it ([`Ptr`]).

use std::net::IpAddr;
use std::sync::Arc;

use crate::index::names;

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
    pub(super) fn key(&self, ip: IpAddr) -> String {
        match self {
            IpName::Pod(ns) => names::pod_name(ip, ns),
            IpName::Member(ns, svc) => names::member_name(ip, svc, ns),
        }
    }
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
            Target::Member(ns, svc) => names::member_name(ip, svc, ns),
            Target::Pod(ns) => names::pod_name(ip, ns),
        }
    }

    /// Is `name` the spelled name this target names?
    pub(super) fn is(&self, name: &IpName) -> bool {
        match (self, name) {
            (Target::Member(ns, svc), IpName::Member(n, s)) => **n == **ns && **s == **svc,
            (Target::Pod(ns), IpName::Pod(n)) => **n == **ns,
            _ => false,
        }
    }
}

/// What a PTR record points at. Kept as a pointer into something shared,
/// so the pods of a gang share it: their hostname names' group, or a name
/// spelled from the address itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Ptr {
    /// A name spelled out: a stored name's own key ([`super::Table::shared_name`]),
    /// or a copy of its own.
    Name(Arc<str>),
    /// The hostname name `<prefix>-<n>.<sub>.<ns>.svc` of a group kept by
    /// number ([`super::Table::hosts`]), by the group's key; `n` is the entry's.
    Host(Arc<[u8]>),
    /// The address's `k`-th spelled name.
    Spelled(u16),
}

/// A PTR kept across a change of the address's names (`was` to `now`):
/// one pointing at a spelled name follows it to its new place, or, when
/// the name goes, keeps its spelling (the writer sets the PTR again later
/// in the batch).
pub(super) fn moved(ptr: &Ptr, was: &[IpName], now: &[IpName], ip: IpAddr) -> Ptr {
    let Ptr::Spelled(k) = ptr else {
        return ptr.clone();
    };
    let name = &was[usize::from(*k)];
    match now.iter().position(|x| x == name) {
        Some(k) if k <= usize::from(u16::MAX) => Ptr::Spelled(k as u16),
        _ => Ptr::Name(name.key(ip).into()),
    }
}
