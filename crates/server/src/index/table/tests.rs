//! The table as a whole: lookups against every store, the counts of names
//! below (empty non-terminals), and what each change leaves behind.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::ips::IpNames;
use super::*;

fn ip(a: &str) -> Value {
    Value::Ip(a.parse().unwrap())
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

/// A name of one address, kept inline, reads back as a record set.
#[test]
fn one_address_is_kept_inline_and_read_back_as_a_set() {
    let v4: Ipv4Addr = "10.0.0.1".parse().unwrap();
    let t = Table::default();
    t.set("a.web.ml.svc", Value::Ip(v4.into()));
    assert_eq!(t.lookup("a.web.ml.svc").rrs().unwrap().a, [v4]);
    assert_eq!(t.snapshot()[0].1.a, [v4]);
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
