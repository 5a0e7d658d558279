//! The reverse zones podns owns: the `in-addr.arpa` / `ip6.arpa` zones of
//! the cluster's pod and Service ranges, and no others.
//!
//! A range is owned as whole zones only: a prefix whose length is not a
//! multiple of 8 (IPv4) or 4 (IPv6) is split into the zones of the next
//! aligned length (`10.96.0.0/12` → the sixteen zones `96.10.in-addr.arpa`
//! … `111.10.in-addr.arpa`), so podns never claims a name that lies partly
//! outside its ranges (no RFC 2317 delegation tricks). The names above a
//! zone (`10.in-addr.arpa`) and every reverse name outside one belong to
//! someone else: the rules answer REFUSED there, so a resolver tries its
//! next server instead of caching an authoritative NXDOMAIN.
//!
//! The set is built whole ([`ReverseZones::given`] from `--reverse-cidr`,
//! [`ReverseZones::learned`] from Nodes' `spec.podCIDRs` and ServiceCIDRs)
//! and swapped into the table as one value, so a query reads one snapshot
//! without a lock.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::names::{IN_ADDR_ARPA, IP6_ARPA};

/// Where the set came from, for `podns explain` and the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--reverse-cidr`: exactly these, nothing learned.
    Given,
    /// Learned from the API: Nodes' `spec.podCIDRs` and ServiceCIDR objects.
    Learned,
    /// Every reverse name (`0.0.0.0/0` and `::/0`): the table's default,
    /// for tests and `podns zonefile`; `serve` always sets one of the others.
    All,
}

/// The reverse zones podns is authoritative for: aligned, disjoint, sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReverseZones {
    zones: Vec<IpNet>,
    origin: Origin,
}

/// The zone a reverse name falls in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneOf<'n> {
    /// The zone's apex, a suffix of the name asked.
    pub apex: &'n str,
    /// The network the zone covers.
    pub net: IpNet,
}

impl Default for ReverseZones {
    fn default() -> Self {
        Self::all()
    }
}

impl ReverseZones {
    /// Every reverse name: the zones `in-addr.arpa` and `ip6.arpa`.
    pub fn all() -> Self {
        let mut z = Self::build([
            IpNet::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0).expect("valid prefix"),
            IpNet::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0).expect("valid prefix"),
        ]);
        z.origin = Origin::All;
        z
    }

    /// The zones of `--reverse-cidr`.
    pub fn given(cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        let mut z = Self::build(cidrs);
        z.origin = Origin::Given;
        z
    }

    /// The zones of the ranges learned from the API (duplicates welcome).
    pub fn learned(cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        let mut z = Self::build(cidrs);
        z.origin = Origin::Learned;
        z
    }

    /// Aggregate the ranges (adjacent and nested ones merge), then split
    /// each into whole zones.
    fn build(cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        let nets: Vec<IpNet> = cidrs.into_iter().map(|n| n.trunc()).collect();
        let mut zones = Vec::new();
        for net in IpNet::aggregate(&nets) {
            let step = if net.addr().is_ipv4() { 8 } else { 4 };
            let aligned = net.prefix_len().div_ceil(step) * step;
            match net.subnets(aligned) {
                Ok(subnets) => zones.extend(subnets),
                Err(_) => zones.push(net),
            }
        }
        zones.sort_unstable();
        Self {
            zones,
            origin: Origin::Learned,
        }
    }

    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The zones, sorted (IPv4 first).
    pub fn zones(&self) -> &[IpNet] {
        &self.zones
    }

    pub fn is_empty(&self) -> bool {
        self.zones.is_empty()
    }

    /// The owned zone that holds `name` (lower case, absolute, no trailing
    /// dot), at or below its apex; `None` for a name above every zone, in
    /// none, or not a reverse name. Labels are read from the right while
    /// they spell an address canonically (`07` and `A` do not); the first
    /// prefix that is a zone wins (zones are disjoint).
    pub fn zone_of<'n>(&self, name: &'n str) -> Option<ZoneOf<'n>> {
        let (v4, rest) = if name == IN_ADDR_ARPA {
            (true, "")
        } else if name == IP6_ARPA {
            (false, "")
        } else if let Some(r) = name.strip_suffix(".in-addr.arpa") {
            (true, r)
        } else if let Some(r) = name.strip_suffix(".ip6.arpa") {
            (false, r)
        } else {
            return None;
        };
        let step: u8 = if v4 { 8 } else { 4 };
        let mut bits: u128 = 0;
        let mut len: u8 = 0;
        // Where the prefix read so far starts in `name`, and where the
        // labels not read yet end in `rest`.
        let mut apex_at = if rest.is_empty() { 0 } else { rest.len() + 1 };
        let mut end = if rest.is_empty() {
            None
        } else {
            Some(rest.len())
        };
        loop {
            let addr = if v4 {
                IpAddr::V4(Ipv4Addr::from((bits >> 96) as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(bits))
            };
            let net = IpNet::new(addr, len).ok()?;
            if self.zones.binary_search(&net).is_ok() {
                return Some(ZoneOf {
                    apex: &name[apex_at..],
                    net,
                });
            }
            let e = end?;
            let s = rest[..e].rfind('.').map_or(0, |i| i + 1);
            let value = if v4 {
                canonical_octet(&rest[s..e])?
            } else {
                nibble(&rest[s..e])?
            };
            if u32::from(len) + u32::from(step) > if v4 { 32 } else { 128 } {
                return None;
            }
            bits |= u128::from(value) << (128 - u32::from(len) - u32::from(step));
            len += step;
            apex_at = s;
            end = (s > 0).then(|| s - 1);
        }
    }
}

/// `0`–`255` without leading zeros.
fn canonical_octet(l: &str) -> Option<u8> {
    if l.is_empty() || (l.len() > 1 && l.starts_with('0')) || !l.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    l.parse().ok()
}

/// One lower-case hex digit.
fn nibble(l: &str) -> Option<u8> {
    match l.as_bytes() {
        [b @ b'0'..=b'9'] => Some(b - b'0'),
        [b @ b'a'..=b'f'] => Some(b - b'a' + 10),
        _ => None,
    }
}

/// The apex of the zone `net` (aligned): `10.244.0.0/16` →
/// `244.10.in-addr.arpa`, `fd00::/8` → `d.f.ip6.arpa`, a /0 → the tree's
/// root.
pub fn apex_name(net: IpNet) -> String {
    let mut labels: Vec<String> = Vec::new();
    match net.addr() {
        IpAddr::V4(a) => {
            let o = a.octets();
            for byte in o.iter().take(usize::from(net.prefix_len() / 8)) {
                labels.push(byte.to_string());
            }
            labels.reverse();
            labels.push(IN_ADDR_ARPA.to_string());
        }
        IpAddr::V6(a) => {
            let v = u128::from(a);
            for i in 0..u32::from(net.prefix_len() / 4) {
                labels.push(format!("{:x}", (v >> (124 - 4 * i)) & 0xf));
            }
            labels.reverse();
            labels.push(IP6_ARPA.to_string());
        }
    }
    labels.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(s: &[&str]) -> Vec<IpNet> {
        s.iter().map(|n| n.parse().unwrap()).collect()
    }

    fn apexes(z: &ReverseZones) -> Vec<String> {
        z.zones().iter().map(|n| apex_name(*n)).collect()
    }

    #[test]
    fn node_ranges_aggregate_and_dedupe() {
        // Four nodes' /24s of one /22, one given twice, and a /16 around
        // another: the /24s stay /24 zones (a /22 is not a whole zone),
        // the nested one disappears into its /16.
        let z = ReverseZones::learned(nets(&[
            "10.244.0.0/24",
            "10.244.1.0/24",
            "10.244.2.0/24",
            "10.244.3.0/24",
            "10.244.1.0/24",
            "10.128.0.0/16",
            "10.128.7.0/24",
        ]));
        assert_eq!(
            apexes(&z),
            [
                "128.10.in-addr.arpa",
                "0.244.10.in-addr.arpa",
                "1.244.10.in-addr.arpa",
                "2.244.10.in-addr.arpa",
                "3.244.10.in-addr.arpa",
            ]
        );
        // All 256 /24s of a /16 become the one /16 zone.
        let all: Vec<IpNet> = (0..=255)
            .map(|i| format!("10.9.{i}.0/24").parse().unwrap())
            .collect();
        assert_eq!(apexes(&ReverseZones::learned(all)), ["9.10.in-addr.arpa"]);
    }

    #[test]
    fn unaligned_prefixes_split_into_whole_zones() {
        let z = ReverseZones::given(nets(&["10.96.0.0/12"]));
        assert_eq!(z.zones().len(), 16);
        assert_eq!(apex_name(z.zones()[0]), "96.10.in-addr.arpa");
        assert_eq!(apex_name(z.zones()[15]), "111.10.in-addr.arpa");
        // Host bits are dropped before anything else.
        let z = ReverseZones::given(nets(&["fd00:10:244::1/62"]));
        assert_eq!(
            apexes(&z),
            [
                "0.0.0.0.4.4.2.0.0.1.0.0.0.0.d.f.ip6.arpa",
                "1.0.0.0.4.4.2.0.0.1.0.0.0.0.d.f.ip6.arpa",
                "2.0.0.0.4.4.2.0.0.1.0.0.0.0.d.f.ip6.arpa",
                "3.0.0.0.4.4.2.0.0.1.0.0.0.0.d.f.ip6.arpa",
            ]
        );
    }

    #[test]
    fn names_at_and_below_a_zone_are_ours_and_nothing_else() {
        let z = ReverseZones::given(nets(&["10.244.0.0/16", "fd00::/8", "192.168.1.7/32"]));
        let of = |n: &'static str| z.zone_of(n).map(|m| m.apex);
        assert_eq!(of("244.10.in-addr.arpa"), Some("244.10.in-addr.arpa"));
        assert_eq!(of("3.244.10.in-addr.arpa"), Some("244.10.in-addr.arpa"));
        assert_eq!(of("7.3.244.10.in-addr.arpa"), Some("244.10.in-addr.arpa"));
        // Below a full address: still in the zone (NXDOMAIN there, not REFUSED).
        assert_eq!(of("x.7.3.244.10.in-addr.arpa"), Some("244.10.in-addr.arpa"));
        assert_eq!(
            of("7.1.168.192.in-addr.arpa"),
            Some("7.1.168.192.in-addr.arpa")
        );
        assert_eq!(of("8.1.168.192.in-addr.arpa"), None);
        // Above, beside, outside.
        assert_eq!(of("10.in-addr.arpa"), None);
        assert_eq!(of("in-addr.arpa"), None);
        assert_eq!(of("245.10.in-addr.arpa"), None);
        assert_eq!(of("8.8.8.8.in-addr.arpa"), None);
        // Not canonical spellings: never ours.
        assert_eq!(of("3.244.010.in-addr.arpa"), None);
        assert_eq!(of("example.org"), None);
        let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa";
        assert_eq!(of(v6), Some("d.f.ip6.arpa"));
        assert_eq!(of("f.ip6.arpa"), None);
        assert_eq!(of("e.f.ip6.arpa"), None);
        assert_eq!(of("ip6.arpa"), None);
    }

    #[test]
    fn all_owns_both_trees_from_their_roots() {
        let z = ReverseZones::all();
        assert_eq!(z.origin(), Origin::All);
        assert_eq!(apexes(&z), ["in-addr.arpa", "ip6.arpa"]);
        assert_eq!(
            z.zone_of("in-addr.arpa").map(|m| m.apex),
            Some("in-addr.arpa")
        );
        assert_eq!(
            z.zone_of("8.8.8.8.in-addr.arpa").map(|m| m.apex),
            Some("in-addr.arpa")
        );
        assert_eq!(z.zone_of("d.f.ip6.arpa").map(|m| m.apex), Some("ip6.arpa"));
        assert!(
            ReverseZones::learned([])
                .zone_of("8.8.8.8.in-addr.arpa")
                .is_none()
        );
    }
}
