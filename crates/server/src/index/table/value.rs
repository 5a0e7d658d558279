//! What a name answers ([`Rrs`], [`Value`]) and how a stored name keeps
//! it ([`Entry`]: the data and the count of names below, in 16 bytes).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use super::srv::SrvSet;

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
pub(super) fn ip_rrs(ip: IpAddr) -> Rrs {
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
pub(super) enum Entry {
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
    pub(super) fn data(&self) -> Option<Value> {
        match self {
            Self::V4(a, _) => Some(Value::Ip(IpAddr::from(*a))),
            Self::V6(a, _) => Some(Value::Ip(IpAddr::from(**a))),
            Self::Set(rrs, _) => Some(Value::Set(rrs.clone())),
            Self::Empty(_) => None,
        }
    }

    pub(super) fn has_data(&self) -> bool {
        !matches!(self, Self::Empty(_))
    }

    fn below(&self) -> u32 {
        match self {
            Self::V4(_, n) | Self::V6(_, n) | Self::Set(_, n) | Self::Empty(n) => *n,
        }
    }

    pub(super) fn below_mut(&mut self) -> &mut u32 {
        match self {
            Self::V4(_, n) | Self::V6(_, n) | Self::Set(_, n) | Self::Empty(n) => n,
        }
    }

    /// Does it hold `v`? (Sets compare by content.)
    pub(super) fn holds(&self, v: &Value) -> bool {
        match (self, v) {
            (Self::V4(a, _), Value::Ip(IpAddr::V4(b))) => *a == b.octets(),
            (Self::V6(a, _), Value::Ip(IpAddr::V6(b))) => **a == b.octets(),
            (Self::Set(a, _), Value::Set(b)) => a == b,
            _ => false,
        }
    }

    /// Put `v` (or no data) in, keeping the count; the old data comes back.
    pub(super) fn replace(&mut self, v: Option<Value>) -> Option<Value> {
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
    pub(super) fn vacant(&self) -> bool {
        matches!(self, Self::Empty(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
