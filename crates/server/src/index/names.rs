//! Spelling of the names podns serves. Forward names are kept relative to
//! the zone (`web-0.web.default.svc`), so one entry serves every `--zone`;
//! reverse names are absolute without the trailing dot
//! (`4.3.2.10.in-addr.arpa`).

use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The dashed form of an IP used as a DNS label: `10-0-0-1`, and for IPv6
/// the compressed form with `:` → `-` (`fd00--1`), as the Kubernetes DNS
/// specification and CoreDNS spell it.
pub fn dashed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}

/// Parse a dashed label back into an IP (`10-0-0-1`, `fd00--1`).
pub fn undashed(label: &str) -> Option<IpAddr> {
    if label.contains('.') || label.contains(':') {
        return None;
    }
    if let Ok(v4) = label.replace('-', ".").parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    label
        .replace('-', ":")
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// `d.c.b.a.in-addr.arpa` or the 32-nibble `ip6.arpa` name of an address.
pub fn reverse(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        IpAddr::V6(v6) => {
            let mut s = String::with_capacity(72);
            for byte in v6.octets().iter().rev() {
                let _ = write!(s, "{:x}.{:x}.", byte & 0xf, byte >> 4);
            }
            s.push_str("ip6.arpa");
            s
        }
    }
}

// The spelling of every forward name the index publishes, each in one
// function (keys relative to the zone, lower case, no trailing dot).

/// `<host>.<sub>.<ns>.svc`: a pod's hostname name.
pub fn host_name(host: &str, sub: &str, ns: &str) -> String {
    format!("{host}.{sub}.{ns}.svc")
}

/// `<svc>.<ns>.svc`: a Service's own name.
pub fn service_name(svc: &str, ns: &str) -> String {
    format!("{svc}.{ns}.svc")
}

/// `_<port>._<proto>.<svc>.<ns>.svc`: a named port's SRV name.
pub fn port_name(port: &str, proto: &str, svc: &str, ns: &str) -> String {
    format!("_{port}._{proto}.{svc}.{ns}.svc")
}

/// `<a-b-c-d>.<svc>.<ns>.svc`: a member's dashed name under a headless Service.
pub fn member_name(ip: IpAddr, svc: &str, ns: &str) -> String {
    format!("{}.{svc}.{ns}.svc", dashed(ip))
}

/// `<a-b-c-d>.<ns>.pod`: a pod's dashed name.
pub fn pod_name(ip: IpAddr, ns: &str) -> String {
    format!("{}.{ns}.pod", dashed(ip))
}

/// `<i>.<gang>.<ns>.rank`: one rank of a Job or JobSet.
pub fn rank_name(idx: u32, gang: &str, ns: &str) -> String {
    format!("{idx}.{gang}.{ns}.rank")
}

/// `leader.<gang>.<ns>.rank`: rank 0's address.
pub fn leader_name(gang: &str, ns: &str) -> String {
    format!("leader.{gang}.{ns}.rank")
}

/// `<gang>.<ns>.rank`: the gang's TXT summary.
pub fn gang_name(gang: &str, ns: &str) -> String {
    format!("{gang}.{ns}.rank")
}

pub const IN_ADDR_ARPA: &str = "in-addr.arpa";
pub const IP6_ARPA: &str = "ip6.arpa";

/// A reverse name (lower case, no trailing dot) as an address, if it names
/// one completely.
pub fn parse_reverse(name: &str) -> Option<IpAddr> {
    if let Some(rest) = name.strip_suffix(".in-addr.arpa") {
        let mut octets = [0u8; 4];
        let labels: Vec<&str> = rest.split('.').collect();
        if labels.len() != 4 {
            return None;
        }
        for (i, l) in labels.iter().enumerate() {
            // No leading zeros, as in canonical reverse names.
            if l.is_empty() || (l.len() > 1 && l.starts_with('0')) {
                return None;
            }
            octets[3 - i] = l.parse().ok()?;
        }
        return Some(IpAddr::V4(Ipv4Addr::from(octets)));
    }
    if let Some(rest) = name.strip_suffix(".ip6.arpa") {
        let labels: Vec<&str> = rest.split('.').collect();
        if labels.len() != 32 {
            return None;
        }
        let mut v: u128 = 0;
        for l in labels.iter().rev() {
            if l.len() != 1 {
                return None;
            }
            v = (v << 4) | u128::from(u8::from_str_radix(l, 16).ok()?);
        }
        return Some(IpAddr::V6(Ipv6Addr::from(v)));
    }
    None
}

/// The network a partial reverse name covers: `244.10.in-addr.arpa` →
/// (10.244.0.0, 16). `None` if the name is not a well-formed reverse prefix.
pub fn reverse_prefix(name: &str) -> Option<(IpAddr, u8)> {
    if name == IN_ADDR_ARPA {
        return Some((IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
    }
    if name == IP6_ARPA {
        return Some((IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0));
    }
    if let Some(rest) = name.strip_suffix(".in-addr.arpa") {
        let labels: Vec<&str> = rest.split('.').collect();
        if labels.len() > 4 {
            return None;
        }
        let mut octets = [0u8; 4];
        for (i, l) in labels.iter().rev().enumerate() {
            octets[i] = l.parse().ok()?;
        }
        return Some((IpAddr::V4(Ipv4Addr::from(octets)), 8 * labels.len() as u8));
    }
    if let Some(rest) = name.strip_suffix(".ip6.arpa") {
        let labels: Vec<&str> = rest.split('.').collect();
        if labels.len() > 32 {
            return None;
        }
        let mut v: u128 = 0;
        for (i, l) in labels.iter().rev().enumerate() {
            if l.len() != 1 {
                return None;
            }
            v |= u128::from(u8::from_str_radix(l, 16).ok()?) << (124 - 4 * i);
        }
        return Some((IpAddr::V6(Ipv6Addr::from(v)), 4 * labels.len() as u8));
    }
    None
}

/// Is `name` (relative or absolute, no trailing dot) a reverse name?
pub fn is_reverse(name: &str) -> bool {
    name == IN_ADDR_ARPA
        || name == IP6_ARPA
        || name.ends_with(".in-addr.arpa")
        || name.ends_with(".ip6.arpa")
}

/// The ancestors of a key that the index counts for empty non-terminals,
/// nearest first, stopping below the apex (`""` for forward names,
/// `in-addr.arpa` / `ip6.arpa` for reverse names).
pub fn ancestors(key: &str) -> impl Iterator<Item = &str> {
    let stop = if key.ends_with(IN_ADDR_ARPA) {
        IN_ADDR_ARPA.len()
    } else if key.ends_with(IP6_ARPA) {
        IP6_ARPA.len()
    } else {
        0
    };
    let mut rest = key;
    std::iter::from_fn(move || {
        let dot = rest.find('.')?;
        rest = &rest[dot + 1..];
        if rest.len() <= stop { None } else { Some(rest) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dashed_round_trips() {
        for s in ["10.0.0.1", "fd00::1", "2001:db8::a:b", "::1"] {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(undashed(&dashed(ip)), Some(ip), "{s}");
        }
        assert_eq!(dashed("10.244.1.7".parse().unwrap()), "10-244-1-7");
        assert_eq!(dashed("fd00::1".parse().unwrap()), "fd00--1");
        assert_eq!(undashed("web"), None);
        assert_eq!(undashed("10-0-0"), None);
    }

    #[test]
    fn reverse_round_trips() {
        for s in ["10.244.3.7", "fd00::1:2", "2001:db8::"] {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(parse_reverse(&reverse(ip)), Some(ip), "{s}");
        }
        assert_eq!(
            reverse("10.244.3.7".parse().unwrap()),
            "7.3.244.10.in-addr.arpa"
        );
        assert_eq!(parse_reverse("7.3.244.in-addr.arpa"), None);
        assert_eq!(parse_reverse("07.3.244.10.in-addr.arpa"), None);
        assert_eq!(parse_reverse("300.3.244.10.in-addr.arpa"), None);
    }

    #[test]
    fn reverse_prefixes() {
        assert_eq!(
            reverse_prefix("244.10.in-addr.arpa"),
            Some(("10.244.0.0".parse().unwrap(), 16))
        );
        assert_eq!(
            reverse_prefix("d.f.ip6.arpa"),
            Some(("fd00::".parse().unwrap(), 8))
        );
        assert_eq!(reverse_prefix("x.10.in-addr.arpa"), None);
    }

    #[test]
    fn ancestors_stop_below_apex() {
        let a: Vec<&str> = ancestors("web-0.web.default.svc").collect();
        assert_eq!(a, ["web.default.svc", "default.svc", "svc"]);
        let r: Vec<&str> = ancestors("7.3.244.10.in-addr.arpa").collect();
        assert_eq!(
            r,
            [
                "3.244.10.in-addr.arpa",
                "244.10.in-addr.arpa",
                "10.in-addr.arpa"
            ]
        );
        assert_eq!(ancestors("svc").count(), 0);
    }
}
