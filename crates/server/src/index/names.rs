//! Spelling of the names podns serves. Forward names are kept relative to
//! the zone (`web-0.web.default.svc`), so one entry serves every `--zone`;
//! reverse names are absolute without the trailing dot
//! (`4.3.2.10.in-addr.arpa`).

use std::fmt::Write;
use std::io::Write as _;
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

/// Names directly under a zone that the server answers itself, whatever
/// the index holds: `dns-version` (TXT), `ns.dns` (the server's
/// addresses) and `dns`, the empty non-terminal above it.
pub const RESERVED: [&str; 3] = ["dns-version", "ns.dns", "dns"];

/// The trees of a zone that the index fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tree {
    Svc,
    Pod,
    Rank,
}

impl Tree {
    pub fn label(self) -> &'static str {
        match self {
            Tree::Svc => "svc",
            Tree::Pod => "pod",
            Tree::Rank => "rank",
        }
    }
}

/// A table key (a question's name relative to its zone, or an absolute
/// reverse name; lower case, no trailing dot) parsed once: what kind of
/// name it is and its parts. The table's lookup, the answer rules and
/// `podns explain` all read a name through this one type, so they cannot
/// disagree on what a name is. Labels that may spell a number or an
/// address are kept as [`Label`]s, which read them in the canonical
/// spelling only (the one the spelling functions above write) and, for
/// explaining, in any spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QName<'a> {
    /// `""`: the zone apex.
    Apex,
    /// One of [`RESERVED`].
    Reserved(&'a str),
    /// `svc`, `pod` or `rank`: the top of a tree.
    Tree(Tree),
    /// `<ns>.<tree>`.
    Namespace(Tree, &'a str),
    /// `<svc>.<ns>.svc`.
    Service { svc: &'a str, ns: &'a str },
    /// `<host>.<sub>.<ns>.svc`: a pod's hostname name, the dashed name of
    /// a headless Service's member (`sub` is the Service), or, for a host
    /// `_<proto>`, the node above a named port's SRV name.
    Host {
        host: Label<'a>,
        sub: &'a str,
        ns: &'a str,
    },
    /// `_<port>._<proto>.<svc>.<ns>.svc`, without the underscores.
    Port {
        port: &'a str,
        proto: &'a str,
        svc: &'a str,
        ns: &'a str,
    },
    /// `<a-b-c-d>.<ns>.pod`.
    Pod { label: Label<'a>, ns: &'a str },
    /// `<first>.<rest>.rank` (two labels or more before `rank`): the
    /// rank `<i>.<job>.<ns>.rank` (`rest` is the gang `<job>.<ns>`), the
    /// leader `leader.<job>.<ns>.rank`, or the summary `<job>.<ns>.rank`
    /// (the whole, since a Job's name may hold dots).
    Gang {
        first: Label<'a>,
        rest: &'a str,
        whole: &'a str,
    },
    /// `in-addr.arpa` or `ip6.arpa`: the apex of a reverse zone.
    ReverseApex(&'static str),
    /// A name under `in-addr.arpa` or `ip6.arpa`, with the address when it
    /// names one completely in the canonical spelling.
    Reverse(Option<IpAddr>),
    /// A name no rule makes (outside the trees, or too deep in one).
    Other,
}

/// Whose data a name's answer depends on, for a node instance deciding
/// what it answers itself ([`QName::holder`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder<'a> {
    /// No object's: the apex, the reserved names, the tops of the trees.
    Zone,
    /// The objects of this namespace.
    Namespace(&'a str),
    /// Any object's: reverse names (any pod's address) and names no rule
    /// makes.
    Anyone,
}

impl<'a> QName<'a> {
    /// Whose data the answer for this name depends on.
    pub fn holder(&self) -> Holder<'a> {
        match *self {
            QName::Apex | QName::Reserved(_) | QName::Tree(_) => Holder::Zone,
            QName::Namespace(_, ns)
            | QName::Service { ns, .. }
            | QName::Host { ns, .. }
            | QName::Port { ns, .. }
            | QName::Pod { ns, .. } => Holder::Namespace(ns),
            // `<i>.<job>.<ns>`, `leader.<job>.<ns>`, `<job>.<ns>`: the
            // namespace is the last label (a Job's name may hold dots).
            QName::Gang { whole, .. } => {
                Holder::Namespace(whole.rsplit('.').next().unwrap_or(whole))
            }
            QName::ReverseApex(_) | QName::Reverse(_) | QName::Other => Holder::Anyone,
        }
    }

    pub fn parse(key: &'a str) -> Self {
        if key.is_empty() {
            return QName::Apex;
        }
        if let Some(r) = RESERVED.iter().find(|r| **r == key) {
            return QName::Reserved(r);
        }
        if let Some(apex) = [IN_ADDR_ARPA, IP6_ARPA].into_iter().find(|a| *a == key) {
            return QName::ReverseApex(apex);
        }
        if is_reverse(key) {
            return QName::Reverse(parse_reverse(key));
        }
        for tree in [Tree::Svc, Tree::Pod, Tree::Rank] {
            let t = tree.label();
            if key == t {
                return QName::Tree(tree);
            }
            if let Some(rest) = key.strip_suffix(t).and_then(|r| r.strip_suffix('.')) {
                return Self::in_tree(tree, rest);
            }
        }
        QName::Other
    }

    /// `rest`: the labels before the tree's.
    fn in_tree(tree: Tree, rest: &'a str) -> Self {
        let Some((first, below)) = rest.split_once('.') else {
            return QName::Namespace(tree, rest);
        };
        match tree {
            Tree::Svc => match below.split_once('.') {
                None => QName::Service {
                    svc: first,
                    ns: below,
                },
                Some((sub, ns)) => match ns.split_once('.') {
                    None => QName::Host {
                        host: Label(first),
                        sub,
                        ns,
                    },
                    Some((svc, ns)) if !ns.contains('.') => {
                        match (first.strip_prefix('_'), sub.strip_prefix('_')) {
                            (Some(port), Some(proto)) => QName::Port {
                                port,
                                proto,
                                svc,
                                ns,
                            },
                            _ => QName::Other,
                        }
                    }
                    Some(_) => QName::Other,
                },
            },
            Tree::Pod if !below.contains('.') => QName::Pod {
                label: Label(first),
                ns: below,
            },
            Tree::Pod => QName::Other,
            Tree::Rank => QName::Gang {
                first: Label(first),
                rest: below,
                whole: rest,
            },
        }
    }

    /// The rank a [`QName::Gang`] names by number: (i, `<job>.<ns>`).
    pub fn rank(&self) -> Option<(u32, &'a str)> {
        match self {
            QName::Gang { first, rest, .. } => Some((first.number()?, rest)),
            _ => None,
        }
    }

    /// The address a dashed name names: `<a-b-c-d>.<ns>.pod` as (ip, ns,
    /// None), `<a-b-c-d>.<svc>.<ns>.svc` as (ip, ns, Some(svc)).
    pub fn dashed(&self) -> Option<(IpAddr, &'a str, Option<&'a str>)> {
        match self {
            QName::Pod { label, ns } => Some((label.ip()?, ns, None)),
            QName::Host { host, sub, ns } => Some((host.ip()?, ns, Some(sub))),
            _ => None,
        }
    }
}

/// One label that may spell a number or an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label<'a>(pub &'a str);

impl<'a> Label<'a> {
    pub fn as_str(self) -> &'a str {
        self.0
    }

    /// The number it spells, canonically ([`rank_name`]'s spelling):
    /// `07`, `+7` and `4294967296` are no number.
    pub fn number(self) -> Option<u32> {
        number(self.0.as_bytes())
    }

    /// `<prefix>-<n>`, `n` canonical: a numbered hostname (an Indexed
    /// Job's `<job>-<i>`, a StatefulSet's `<name>-<ordinal>`).
    pub fn numbered(self) -> Option<(&'a str, u32)> {
        let (prefix, digits) = self.0.rsplit_once('-')?;
        let n = number(digits.as_bytes())?;
        (!prefix.is_empty()).then_some((prefix, n))
    }

    /// The address it spells in the canonical dashed spelling, the one
    /// [`dashed`] writes (`10-0-0-1`, `fd00--1`): `10-0-0-01` and
    /// `fd00-0-0-0-0-0-0-1` spell none. Without allocating: this runs for
    /// every question of a dashed name.
    pub fn ip(self) -> Option<IpAddr> {
        let label = self.0;
        if label.len() > 45 || label.contains(['.', ':']) {
            return None;
        }
        let mut buf = [0u8; 45];
        let spelled = &mut buf[..label.len()];
        let dots = !label.contains("--")
            && label.split('-').count() == 4
            && !label.contains(|c: char| c.is_ascii_alphabetic());
        for (b, c) in spelled.iter_mut().zip(label.bytes()) {
            *b = match c {
                b'-' if dots => b'.',
                b'-' => b':',
                c => c,
            };
        }
        let ip: IpAddr = std::str::from_utf8(spelled).ok()?.parse().ok()?;
        let mut canon = [0u8; 45];
        let mut cur = std::io::Cursor::new(&mut canon[..]);
        write!(cur, "{ip}").ok()?;
        let n = usize::try_from(cur.position()).ok()?;
        (n == label.len()
            && canon[..n]
                .iter()
                .zip(label.bytes())
                .all(|(a, b)| *a == b || (matches!(*a, b'.' | b':') && b == b'-')))
        .then_some(ip)
    }

    /// The address it spells in any spelling the address parsers take
    /// (`10-0-0-01`, `fd00-0-0-0-0-0-0-1`): only to say why a label that
    /// is not canonical names nothing. Never to answer.
    pub fn loose_ip(self) -> Option<IpAddr> {
        let label = self.0;
        if label.contains(['.', ':']) {
            return None;
        }
        let octets: Vec<u8> = label.split('-').filter_map(|o| o.parse().ok()).collect();
        if let Ok(v4) = <[u8; 4]>::try_from(octets)
            && label.split('-').count() == 4
        {
            return Some(IpAddr::V4(Ipv4Addr::from(v4)));
        }
        label
            .replace('-', ":")
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    }
}

/// A number in its canonical spelling: no sign, no leading zero, no more
/// than `u32` holds.
fn number(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    digits.iter().try_fold(0u32, |n, &d| {
        let d = u32::from(d.checked_sub(b'0').filter(|d| *d <= 9)?);
        n.checked_mul(10)?.checked_add(d)
    })
}

/// Where a question's name (lower case, no trailing dot) falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place<'n> {
    /// The key relative to the zone at this index of the zones.
    Forward { zone: usize, rel: &'n str },
    /// An absolute reverse name.
    Reverse(&'n str),
    /// Neither: REFUSED.
    Outside,
}

/// Place `name` among the zones (`(index, apex)`, apexes lower case and
/// without the trailing dot, most specific first): the first zone that
/// holds it, else the reverse trees.
pub fn place<'n, 'z>(
    name: &'n str,
    zones: impl IntoIterator<Item = (usize, &'z str)>,
) -> Place<'n> {
    for (i, z) in zones {
        if name == z {
            return Place::Forward { zone: i, rel: "" };
        }
        if let Some(rel) = name.strip_suffix(z).and_then(|r| r.strip_suffix('.')) {
            return Place::Forward { zone: i, rel };
        }
    }
    if is_reverse(name) {
        return Place::Reverse(name);
    }
    Place::Outside
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
            assert_eq!(Label(&dashed(ip)).ip(), Some(ip), "{s}");
            assert_eq!(Label(&dashed(ip)).loose_ip(), Some(ip), "{s}");
        }
        assert_eq!(dashed("10.244.1.7".parse().unwrap()), "10-244-1-7");
        assert_eq!(dashed("fd00::1".parse().unwrap()), "fd00--1");
        assert_eq!(Label("web").ip(), None);
        assert_eq!(Label("10-0-0").ip(), None);
        // Not canonical: DNS answers nothing for these, explain says why.
        for loose in ["fd00-0-0-0-0-0-0-1", "10-0-0-01", "FD00--1"] {
            assert_eq!(Label(loose).ip(), None, "{loose}");
            assert!(Label(loose).loose_ip().is_some(), "{loose}");
        }
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
