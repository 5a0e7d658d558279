//! Rule-by-rule tests of the answer path, without sockets.

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use super::*;
use crate::dns::testing::{World, query};
use crate::index::testing::*;
use crate::index::{
    Change, Phase, Policy, ServiceInfo, SyncNeeds, Table, TargetPort, Update, Writer,
};
use crate::index::{Duplicates, Hostnames, Publish};
use crate::metrics::Metrics;

mod slices;

fn world() -> World {
    World::new(Policy::default(), AnswerConfig::default())
}

fn ips(m: &Message) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn soa_minimum(m: &Message) -> Option<u32> {
    m.authorities.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(soa.minimum),
        _ => None,
    })
}

fn assert_nodata(m: &Message) {
    assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{m:?}");
    assert!(m.answers.is_empty(), "{:?}", m.answers);
    assert!(soa_minimum(m).is_some(), "SOA in authority: {m:?}");
    assert!(m.metadata.authoritative);
}

fn assert_nxdomain(m: &Message) {
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{m:?}");
    assert!(m.answers.is_empty());
    assert!(soa_minimum(m).is_some(), "SOA in authority");
}

fn trainer(w: &mut World, n: usize) {
    w.svc(headless("ml", "trainer", "trainer").port(Some("nccl"), 29500, TargetPort::Same));
    for i in 0..n {
        w.pod(
            pod(
                "ml",
                &format!("trainer-{i}-abcde"),
                &format!("10.1.0.{}", i + 1),
            )
            .host(&format!("trainer-{i}"), "trainer")
            .label("app", "trainer"),
        );
    }
}

#[test]
fn hostname_name_answers_the_pod_ip_keeping_the_question_spelling() {
    let mut w = world();
    trainer(&mut w, 2);
    let m = w.ask("Trainer-1.TRAINER.ml.svc.Cluster.Local.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.metadata.authoritative);
    assert_eq!(ips(&m), [ip("10.1.0.2")]);
    assert_eq!(
        m.answers[0].name.to_ascii(),
        "Trainer-1.TRAINER.ml.svc.Cluster.Local."
    );
    assert_eq!(m.answers[0].ttl, 5);
}

#[test]
fn hostname_without_service_is_served_from_the_pod_alone() {
    let mut w = world();
    w.pod(pod("ml", "w-0-x", "10.1.0.9").host("w-0", "nosvc"));
    assert_eq!(
        ips(&w.ask("w-0.nosvc.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.9")]
    );
}

#[test]
fn hostnames_service_policy_requires_the_headless_service() {
    let mut w = World::new(
        Policy {
            hostnames: Hostnames::Service,
            ..Default::default()
        },
        AnswerConfig::default(),
    );
    w.pod(pod("ml", "w-0-x", "10.1.0.9").host("w-0", "late"));
    assert_nxdomain(&w.ask("w-0.late.ml.svc.cluster.local.", RecordType::A));
    // volcano#3753: the Service arrives after the pods.
    w.svc(headless("ml", "late", "none"));
    assert_eq!(
        ips(&w.ask("w-0.late.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.9")]
    );
}

#[test]
fn aaaa_on_an_ipv4_pod_is_nodata_with_soa() {
    let mut w = world();
    trainer(&mut w, 1);
    let m = w.ask("trainer-0.trainer.ml.svc.cluster.local.", RecordType::AAAA);
    assert_nodata(&m);
    assert_eq!(soa_minimum(&m), Some(1));
    assert_eq!(m.authorities[0].ttl, 1);
}

#[test]
fn missing_name_is_nxdomain_with_negative_ttl() {
    let cfg = AnswerConfig {
        negative_ttl: 3,
        ..Default::default()
    };
    let mut w = World::new(Policy::default(), cfg);
    trainer(&mut w, 1);
    let m = w.ask("trainer-9.trainer.ml.svc.cluster.local.", RecordType::A);
    assert_nxdomain(&m);
    assert_eq!(soa_minimum(&m), Some(3));
}

#[test]
fn empty_non_terminals_are_nodata() {
    let mut w = world();
    w.pod(pod("ml", "w-0-x", "10.1.0.9").host("w-0", "nosvc"));
    assert_nodata(&w.ask("nosvc.ml.svc.cluster.local.", RecordType::A));
    assert_nodata(&w.ask("ml.svc.cluster.local.", RecordType::A));
    assert_nodata(&w.ask("svc.cluster.local.", RecordType::A));
    assert_nxdomain(&w.ask("other.svc.cluster.local.", RecordType::A));
    assert_nodata(&w.ask("dns.cluster.local.", RecordType::A));
}

#[test]
fn headless_service_answers_all_published_pods() {
    let mut w = world();
    trainer(&mut w, 3);
    w.pod(pod("ml", "pending", "").label("app", "trainer"));
    w.pod(
        pod("ml", "done", "10.1.0.50")
            .label("app", "trainer")
            .phase(Phase::Succeeded),
    );
    w.pod(
        pod("ml", "going", "10.1.0.51")
            .label("app", "trainer")
            .deleting(),
    );
    w.pod(pod("ml", "other", "10.1.0.52").label("app", "other"));
    w.pod(
        pod("ml", "notready", "10.1.0.53")
            .label("app", "trainer")
            .ready(false),
    );
    let m = w.ask("trainer.ml.svc.cluster.local.", RecordType::A);
    assert_eq!(
        ips(&m),
        [
            ip("10.1.0.1"),
            ip("10.1.0.2"),
            ip("10.1.0.3"),
            ip("10.1.0.53")
        ]
    );
}

#[test]
fn publish_ready_narrows_to_ready_pods_unless_publish_not_ready() {
    let mut w = World::new(
        Policy {
            publish: Publish::Ready,
            ..Default::default()
        },
        AnswerConfig::default(),
    );
    w.svc(headless("ml", "a", "x"));
    w.svc(headless("ml", "b", "x").publish_not_ready());
    w.pod(
        pod("ml", "p0", "10.1.0.1")
            .label("app", "x")
            .ready(false)
            .host("p0", "a"),
    );
    w.pod(pod("ml", "p1", "10.1.0.2").label("app", "x"));
    assert_eq!(
        ips(&w.ask("a.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.2")]
    );
    assert_eq!(
        ips(&w.ask("b.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.1"), ip("10.1.0.2")]
    );
    assert_nxdomain(&w.ask("p0.a.ml.svc.cluster.local.", RecordType::A));
    w.pod(
        pod("ml", "p0", "10.1.0.1")
            .label("app", "x")
            .ready(true)
            .host("p0", "a"),
    );
    assert_eq!(
        ips(&w.ask("p0.a.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.1")]
    );
}

#[test]
fn dashed_name_under_headless_service() {
    let mut w = world();
    trainer(&mut w, 2);
    assert_eq!(
        ips(&w.ask("10-1-0-2.trainer.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.2")]
    );
    assert_nxdomain(&w.ask("10-1-0-99.trainer.ml.svc.cluster.local.", RecordType::A));
}

#[test]
fn clusterip_service_and_its_srv_records() {
    let mut w = world();
    w.svc(
        cluster_ip("web", "api", "10.96.0.10")
            .port(Some("http"), 80, TargetPort::Name("web".into()))
            .port(Some("grpc"), 9090, TargetPort::Number(19090))
            .port(None, 8443, TargetPort::Same),
    );
    assert_eq!(
        ips(&w.ask("api.web.svc.cluster.local.", RecordType::A)),
        [ip("10.96.0.10")]
    );
    let m = w.ask("_http._tcp.api.web.svc.cluster.local.", RecordType::SRV);
    assert_eq!(m.answers.len(), 1);
    let RData::SRV(srv) = &m.answers[0].data else {
        panic!("{m:?}")
    };
    assert_eq!(srv.port, 80, "ClusterIP SRV uses the Service port");
    assert_eq!(srv.target.to_ascii(), "api.web.svc.cluster.local.");
    let mut glue = m.clone();
    glue.answers = m.additionals.clone();
    assert_eq!(ips(&glue), [ip("10.96.0.10")]);
    let all = w.ask("api.web.svc.cluster.local.", RecordType::SRV);
    assert_eq!(all.answers.len(), 3, "every port at the service name");
    assert_nxdomain(&w.ask("_http._udp.api.web.svc.cluster.local.", RecordType::SRV));
    // PTR for the ClusterIP
    let p = w.ask("10.0.96.10.in-addr.arpa.", RecordType::PTR);
    let RData::PTR(t) = &p.answers[0].data else {
        panic!("{p:?}")
    };
    assert_eq!(t.0.to_ascii(), "api.web.svc.cluster.local.");
}

#[test]
fn headless_srv_targets_pods_with_the_port_they_listen_on_and_glue() {
    let mut w = world();
    w.svc(
        headless("ml", "trainer", "trainer")
            .port(Some("nccl"), 29500, TargetPort::Same)
            .port(Some("metrics"), 9000, TargetPort::Name("prom".into()))
            .port(Some("dbg"), 1, TargetPort::Number(5678)),
    );
    w.pod(
        pod("ml", "t0", "10.1.0.1")
            .host("trainer-0", "trainer")
            .label("app", "trainer")
            .port("prom", 9100),
    );
    w.pod(pod("ml", "t1", "10.1.0.2").label("app", "trainer"));
    let m = w.ask(
        "_metrics._tcp.trainer.ml.svc.cluster.local.",
        RecordType::SRV,
    );
    let mut got: Vec<(String, u16)> = m
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::SRV(s) => (s.target.to_ascii(), s.port),
            _ => panic!(),
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("10-1-0-2.trainer.ml.svc.cluster.local.".to_string(), 9000),
            ("trainer-0.trainer.ml.svc.cluster.local.".to_string(), 9100),
        ]
    );
    let glue: Vec<IpAddr> = m
        .additionals
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            _ => None,
        })
        .collect();
    assert_eq!(glue.len(), 2);
    let dbg = w.ask("_dbg._tcp.trainer.ml.svc.cluster.local.", RecordType::SRV);
    assert!(
        dbg.answers
            .iter()
            .all(|r| matches!(&r.data, RData::SRV(s) if s.port == 5678))
    );
    let all = w.ask("trainer.ml.svc.cluster.local.", RecordType::SRV);
    assert_eq!(all.answers.len(), 6, "3 ports × 2 pods");
}

#[test]
fn external_name_is_a_cname_and_chased_inside_the_zone() {
    let mut w = world();
    w.svc(ServiceInfo {
        kind: crate::index::ServiceKind::ExternalName("db.example.com".into()),
        ..cluster_ip("web", "db", "10.96.0.1")
    });
    w.svc(ServiceInfo {
        kind: crate::index::ServiceKind::ExternalName("api.web.svc.cluster.local".into()),
        ..cluster_ip("web", "alias", "10.96.0.1")
    });
    w.svc(cluster_ip("web", "api", "10.96.0.10"));
    let m = w.ask("db.web.svc.cluster.local.", RecordType::A);
    assert_eq!(m.answers.len(), 1);
    assert!(matches!(&m.answers[0].data, RData::CNAME(c) if c.0.to_ascii() == "db.example.com."));
    let m = w.ask("alias.web.svc.cluster.local.", RecordType::A);
    assert_eq!(m.answers.len(), 2, "{m:?}");
    assert_eq!(ips(&m), [ip("10.96.0.10")]);
    let m = w.ask("db.web.svc.cluster.local.", RecordType::CNAME);
    assert_eq!(m.answers.len(), 1);
}

#[test]
fn verified_pod_names() {
    let mut w = world();
    w.pod(pod("ml", "p", "10.1.0.7"));
    w.pod(pod("ml", "hn", "192.168.0.5").host_network());
    assert_eq!(
        ips(&w.ask("10-1-0-7.ml.pod.cluster.local.", RecordType::A)),
        [ip("10.1.0.7")]
    );
    assert_nxdomain(&w.ask("10-1-0-7.other.pod.cluster.local.", RecordType::A));
    assert_nxdomain(&w.ask("10-1-0-8.ml.pod.cluster.local.", RecordType::A));
    assert_nxdomain(&w.ask("192-168-0-5.ml.pod.cluster.local.", RecordType::A));
    assert_nxdomain(&w.ask("5.0.168.192.in-addr.arpa.", RecordType::PTR));
}

#[test]
fn host_network_pods_join_hostname_names_and_headless_sets() {
    let mut w = world();
    w.svc(headless("ml", "hn", "hn"));
    w.pod(
        pod("ml", "p", "192.168.0.5")
            .host_network()
            .host("node-a", "hn")
            .label("app", "hn"),
    );
    assert_eq!(
        ips(&w.ask("node-a.hn.ml.svc.cluster.local.", RecordType::A)),
        [ip("192.168.0.5")]
    );
    assert_eq!(
        ips(&w.ask("hn.ml.svc.cluster.local.", RecordType::A)),
        [ip("192.168.0.5")]
    );
}

fn ptr_of(w: &World, name: &str) -> String {
    let m = w.ask(name, RecordType::PTR);
    match m.answers.first().map(|r| &r.data) {
        Some(RData::PTR(p)) => p.0.to_ascii(),
        _ => panic!("no PTR for {name}: {m:?}"),
    }
}

#[test]
fn ptr_points_at_the_most_specific_forward_name() {
    let mut w = world();
    trainer(&mut w, 1);
    w.svc(headless("ml", "plain", "plain"));
    w.pod(pod("ml", "q", "10.1.0.20").label("app", "plain"));
    w.pod(pod("ml", "r", "10.1.0.21"));
    w.pod(pod("ml", "v6", "fd00::21"));
    assert_eq!(
        ptr_of(&w, "1.0.1.10.in-addr.arpa."),
        "trainer-0.trainer.ml.svc.cluster.local."
    );
    assert_eq!(
        ptr_of(&w, "20.0.1.10.in-addr.arpa."),
        "10-1-0-20.plain.ml.svc.cluster.local."
    );
    assert_eq!(
        ptr_of(&w, "21.0.1.10.in-addr.arpa."),
        "10-1-0-21.ml.pod.cluster.local."
    );
    let v6 = crate::index::names::reverse(ip("fd00::21"));
    assert_eq!(
        ptr_of(&w, &format!("{v6}.")),
        "fd00--21.ml.pod.cluster.local."
    );
    assert_eq!(
        ips(&w.ask("fd00--21.ml.pod.cluster.local.", RecordType::AAAA)),
        [ip("fd00::21")]
    );
    // unknown address in the reverse zone: NXDOMAIN; partial: NODATA
    assert_nxdomain(&w.ask("99.0.1.10.in-addr.arpa.", RecordType::PTR));
    assert_nodata(&w.ask("0.1.10.in-addr.arpa.", RecordType::PTR));
}

#[test]
fn reverse_names_outside_the_owned_zones_are_refused() {
    let mut w = world();
    w.writer
        .table()
        .set_reverse_zones(crate::index::reverse::ReverseZones::given([
            "10.1.0.0/16".parse().unwrap(),
            "10.96.0.0/12".parse().unwrap(),
        ]));
    w.pod(pod("ml", "r", "10.1.0.21"));
    assert_eq!(
        ptr_of(&w, "21.0.1.10.in-addr.arpa."),
        "10-1-0-21.ml.pod.cluster.local."
    );
    let refused = |w: &World, n: &str, t| w.rcode(n, t) == ResponseCode::Refused;
    // Foreign addresses no one holds, the names above a zone and the
    // trees' roots are someone else's: REFUSED, so a resolver asks its
    // next server.
    for n in [
        "8.8.8.8.in-addr.arpa.",
        "1.0.0.192.in-addr.arpa.",
        "10.in-addr.arpa.",
        "11.in-addr.arpa.",
        "in-addr.arpa.",
        "ip6.arpa.",
        "1.0.95.10.in-addr.arpa.",
    ] {
        assert!(refused(&w, n, RecordType::PTR), "{n}");
    }
    // Inside: the zone's own answers, with its apex as the SOA owner.
    let m = w.ask("22.0.1.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert!(m.metadata.authoritative);
    assert_eq!(m.authorities[0].name.to_ascii(), "1.10.in-addr.arpa.");
    assert_nodata(&w.ask("0.1.10.in-addr.arpa.", RecordType::PTR));
    let m = w.ask("1.10.in-addr.arpa.", RecordType::SOA);
    assert_eq!(m.answers.len(), 1);
    assert!(matches!(m.answers[0].data, RData::SOA(_)));
    assert!(matches!(
        w.ask("1.10.in-addr.arpa.", RecordType::NS).answers[0].data,
        RData::NS(_)
    ));
    // A /12 is sixteen /16 zones, each its own apex.
    let m = w.ask("1.0.111.10.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities[0].name.to_ascii(), "111.10.in-addr.arpa.");
    assert!(refused(&w, "1.0.112.10.in-addr.arpa.", RecordType::PTR));
}

#[test]
fn held_addresses_outside_the_owned_zones_answer_their_ptr() {
    // Nodes without podCIDRs (the AWS VPC CNI, Azure CNI), or pods outside
    // them (Calico IPAM, Cilium's cluster-pool): no zone is owned, or
    // none holds the pods. Every address the index holds still answers.
    for zones in [
        crate::index::reverse::ReverseZones::learned([]),
        crate::index::reverse::ReverseZones::learned(["10.244.0.0/16".parse().unwrap()]),
    ] {
        let mut w = world();
        w.writer.table().set_reverse_zones(zones);
        w.svc(headless("ml", "h", "h"));
        w.svc(cluster_ip("ml", "api", "10.96.0.10"));
        w.svc(selectorless("ml", "db"));
        w.pod(pod("ml", "r", "100.64.3.7").ip("fd00:64::7"));
        w.pod(pod("ml", "m", "100.64.3.8").label("app", "h"));
        w.pod(pod("ml", "hn", "100.64.3.9").host_network());
        w.slice(
            slice("ml", "db-1", "db")
                .endpoint("192.168.7.1", Some("db-0"), true)
                .endpoint("192.168.7.2", None, true),
        );
        for (name, target) in [
            (
                "7.3.64.100.in-addr.arpa.",
                "100-64-3-7.ml.pod.cluster.local.",
            ),
            (
                "8.3.64.100.in-addr.arpa.",
                "100-64-3-8.h.ml.svc.cluster.local.",
            ),
            ("10.0.96.10.in-addr.arpa.", "api.ml.svc.cluster.local."),
            ("1.7.168.192.in-addr.arpa.", "db-0.db.ml.svc.cluster.local."),
            (
                "2.7.168.192.in-addr.arpa.",
                "192-168-7-2.db.ml.svc.cluster.local.",
            ),
        ] {
            assert_eq!(ptr_of(&w, name), target);
            let m = w.ask(name, RecordType::PTR);
            // podns is the source of the record: authoritative, and
            // nothing in Authority (no SOA or NS of a zone it does not own).
            assert!(m.metadata.authoritative, "{name}");
            assert_eq!(m.metadata.response_code, ResponseCode::NoError);
            assert!(
                m.authorities.is_empty() && m.additionals.is_empty(),
                "{m:?}"
            );
            // ANY gets the minimal answer, the PTR.
            assert_eq!(w.ask(name, RecordType::ANY).answers.len(), 1, "{name}");
            // Other types there are not podns's to deny: REFUSED.
            for t in [RecordType::A, RecordType::TXT, RecordType::SOA] {
                let m = w.ask(name, t);
                assert_eq!(
                    m.metadata.response_code,
                    ResponseCode::Refused,
                    "{name} {t}"
                );
                assert!(!m.metadata.authoritative);
            }
        }
        let v6 = crate::index::names::reverse(ip("fd00:64::7"));
        assert_eq!(
            ptr_of(&w, &format!("{v6}.")),
            "fd00-64--7.ml.pod.cluster.local."
        );
        // An address no one holds, the names above and below a held one,
        // the hostNetwork pod's (the node's own address): REFUSED.
        for name in [
            "6.3.64.100.in-addr.arpa.",
            "3.64.100.in-addr.arpa.",
            "64.100.in-addr.arpa.",
            "x.7.3.64.100.in-addr.arpa.",
            "9.3.64.100.in-addr.arpa.",
            "8.8.8.8.in-addr.arpa.",
            "ip6.arpa.",
        ] {
            let m = w.ask(name, RecordType::PTR);
            assert_eq!(m.metadata.response_code, ResponseCode::Refused, "{name}");
            assert!(!m.metadata.authoritative && m.answers.is_empty(), "{name}");
        }
        // Forward names are unaffected.
        assert_eq!(
            ips(&w.ask("100-64-3-7.ml.pod.cluster.local.", RecordType::A)),
            [ip("100.64.3.7")]
        );
        // The address leaves the index: REFUSED again.
        w.apply(Update::Pod(Change::Delete(crate::index::ObjKey::new(
            "ml", "r",
        ))));
        let m = w.ask("7.3.64.100.in-addr.arpa.", RecordType::PTR);
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    }
}

#[test]
fn before_the_first_lists_held_reverse_names_are_refused_too() {
    let needs = SyncNeeds::one_list(false, false);
    let writer = Writer::new(Table::new(), Policy::default(), Metrics::new(), needs);
    writer
        .table()
        .set_reverse_zones(crate::index::reverse::ReverseZones::learned([]));
    let mut w = World::over(writer, AnswerConfig::default());
    w.pod(pod("ml", "r", "100.64.3.7"));
    assert!(!w.writer.table().is_synced());
    // Outside every zone, REFUSED (nobody caches it) until the index is
    // whole; names in the zones are SERVFAIL meanwhile.
    let m = w.ask("7.3.64.100.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    let m = w.ask("100-64-3-7.ml.pod.cluster.local.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
}

#[test]
fn apex_soa_ns_version_and_ns_address() {
    let cfg = AnswerConfig {
        ns_addrs: vec![ip("10.0.0.53")],
        ..Default::default()
    };
    let w = World::new(Policy::default(), cfg);
    let m = w.ask("cluster.local.", RecordType::SOA);
    let RData::SOA(soa) = &m.answers[0].data else {
        panic!()
    };
    assert_eq!(soa.mname.to_ascii(), "ns.dns.cluster.local.");
    assert_eq!(soa.rname.to_ascii(), "hostmaster.cluster.local.");
    let m = w.ask("cluster.local.", RecordType::NS);
    assert!(
        matches!(&m.answers[0].data, RData::NS(ns) if ns.0.to_ascii() == "ns.dns.cluster.local.")
    );
    assert_eq!(m.additionals.len(), 1, "glue");
    let m = w.ask("dns-version.cluster.local.", RecordType::TXT);
    assert!(matches!(&m.answers[0].data, RData::TXT(t) if t.to_string().contains("1.1.0")));
    assert_eq!(
        ips(&w.ask("ns.dns.cluster.local.", RecordType::A)),
        [ip("10.0.0.53")]
    );
    assert_nodata(&w.ask("ns.dns.cluster.local.", RecordType::AAAA));
    assert_nodata(&w.ask("cluster.local.", RecordType::A));
}

#[test]
fn servfail_in_zone_until_synced_refused_outside() {
    let table = Table::new();
    let mut writer = Writer::new(
        table.clone(),
        Policy::default(),
        Metrics::new(),
        SyncNeeds::one_list(false, false),
    );
    let a = Answerer::new(table, AnswerConfig::default());
    let ask = |a: &Answerer, n| a.answer(&query(n, RecordType::A)).metadata.response_code;
    assert_eq!(ask(&a, "x.ml.svc.cluster.local."), ResponseCode::ServFail);
    writer.apply(Update::Pod(Change::all(vec![pod("ml", "p", "10.0.0.1")])));
    assert_eq!(
        ask(&a, "x.ml.svc.cluster.local."),
        ResponseCode::ServFail,
        "services not listed yet"
    );
    writer.apply(Update::Service(Change::all(vec![])));
    assert_eq!(ask(&a, "x.ml.svc.cluster.local."), ResponseCode::NXDomain);
    assert_eq!(ask(&a, "example.com."), ResponseCode::Refused);
    assert_eq!(ask(&a, "local."), ResponseCode::Refused);
}

#[test]
fn transfers_opcodes_classes_and_question_counts() {
    let w = world();
    for t in [RecordType::AXFR, RecordType::IXFR] {
        assert_eq!(w.rcode("cluster.local.", t), ResponseCode::Refused, "{t}");
    }
    let mut m = query("cluster.local.", RecordType::SOA);
    m.metadata.op_code = OpCode::Update;
    assert_eq!(
        w.answerer.answer(&m).metadata.response_code,
        ResponseCode::NotImp
    );
    let mut m = query("cluster.local.", RecordType::SOA);
    m.add_query(Query::query(
        Name::from_ascii("cluster.local.").unwrap(),
        RecordType::NS,
    ));
    assert_eq!(
        w.answerer.answer(&m).metadata.response_code,
        ResponseCode::FormErr
    );
    let mut m = query("cluster.local.", RecordType::SOA);
    m.queries[0].set_query_class(hickory_proto::rr::DNSClass::CH);
    assert_eq!(
        w.answerer.answer(&m).metadata.response_code,
        ResponseCode::Refused
    );
}

#[test]
fn garbage_gets_formerr_or_is_dropped() {
    let w = world();
    let r = w
        .answerer
        .handle(
            &[0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xff],
            Transport::Udp,
        )
        .unwrap();
    assert_eq!(r.rcode, ResponseCode::FormErr);
    assert_eq!(&r.bytes[..2], &[0x12, 0x34]);
    assert!(w.answerer.handle(&[1, 2, 3], Transport::Udp).is_none());
    // a response is never answered
    let mut m = query("cluster.local.", RecordType::SOA);
    m.metadata.message_type = MessageType::Response;
    assert!(
        w.answerer
            .handle(&m.to_vec().unwrap(), Transport::Udp)
            .is_none()
    );
}

/// The client's OPT: version, DO and, with `extras`, every other flag bit
/// and options podns does not implement (a cookie, NSID, client subnet, a
/// private code). Payload 1232; [`wire`] writes any other.
fn client_edns(version: u8, dnssec_ok: bool, extras: bool) -> Edns {
    use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption, NSIDPayload};
    let mut e = Edns::new();
    e.set_max_payload(1232);
    e.set_version(version);
    e.set_dnssec_ok(dnssec_ok);
    if extras {
        e.flags_mut().z = 0x7fff;
        let opts = e.options_mut();
        opts.insert(EdnsOption::Unknown(10, vec![1, 2, 3, 4, 5, 6, 7, 8]));
        opts.insert(EdnsOption::NSID(NSIDPayload::new(vec![]).unwrap()));
        opts.insert(EdnsOption::Subnet(ClientSubnet::new(ip("10.9.8.0"), 24, 0)));
        opts.insert(EdnsOption::Unknown(65001, vec![0xab; 3]));
    }
    e
}

fn edns_query(name: &str, qtype: RecordType, edns: Edns) -> Message {
    let mut m = query(name, qtype);
    m.set_edns(edns);
    m
}

/// The reply through the general path alone and through `handle_into`
/// (the fast path when it takes the query), as bytes.
fn both_paths(w: &World, bytes: &[u8], t: Transport) -> [(&'static str, Vec<u8>); 2] {
    let general = w.answerer.handle_general(bytes, t).unwrap().bytes;
    let mut out = Vec::new();
    w.answerer.handle_into(bytes, t, &mut out).unwrap();
    [("general", general), ("handle_into", out)]
}

/// podns's OPT on the wire: always the last record, with no options, so
/// the last 11 bytes: root, TYPE 41, CLASS = payload, TTL = extended
/// rcode, version, DO|Z, Z, then RDLENGTH 0.
fn wire_opt(reply: &[u8]) -> [u8; 11] {
    let opt: [u8; 11] = reply[reply.len() - 11..].try_into().unwrap();
    assert_eq!(opt[..3], [0, 0, 41], "OPT last: {reply:02x?}");
    opt
}

#[test]
fn the_opt_in_replies_is_version_0_with_podns_payload() {
    let w = world();
    let m = edns_query(
        "cluster.local.",
        RecordType::SOA,
        client_edns(0, false, false),
    );
    let r = Message::from_vec(
        &w.answerer
            .handle(&wire(&m, 4096), Transport::Udp)
            .unwrap()
            .bytes,
    )
    .unwrap();
    let e = r.edns.as_ref().unwrap();
    assert_eq!((e.max_payload(), e.version()), (MAX_UDP_PAYLOAD, 0));
    // No OPT in, no OPT out (RFC 6891 §7).
    assert!(w.ask("cluster.local.", RecordType::SOA).edns.is_none());
}

/// RFC 6891 §6.1.3: BADVERS (16) is header RCODE 0 plus extended-rcode 1
/// in an OPT of version 0, and the question comes back, on both paths and
/// for questions the fast path takes and those it does not.
#[test]
fn edns_version_above_0_gets_badvers_with_the_question_and_an_opt_of_version_0() {
    let mut w = world();
    trainer(&mut w, 2);
    for (name, qtype, fast) in [
        (
            "trainer-0.trainer.ml.svc.cluster.local.",
            RecordType::A,
            true,
        ),
        ("Trainer.ML.svc.cluster.local.", RecordType::SRV, true),
        ("example.com.", RecordType::A, true),
        ("trainer.ml.svc.cluster.local.", RecordType::ANY, false),
        ("*.ml.svc.cluster.local.", RecordType::A, false),
        ("4.0.1.10.in-addr.arpa.", RecordType::PTR, true),
    ] {
        for (version, dnssec_ok) in [(1, false), (1, true), (255, false)] {
            let q = edns_query(name, qtype, client_edns(version, dnssec_ok, true));
            let bytes = q.to_vec().unwrap();
            let what = format!("{name} {qtype} version {version} do {dnssec_ok}");
            assert_eq!(
                w.answerer
                    .handle_fast(&bytes, Transport::Udp, &mut Vec::new())
                    .is_some(),
                fast,
                "{what}"
            );
            // The query's question ends where its OPT begins.
            let question = &bytes[12..bytes.len() - wire_len_of_opt(&q)];
            for t in [Transport::Udp, Transport::Tcp] {
                for (path, out) in both_paths(&w, &bytes, t) {
                    let what = format!("{what} {t:?} {path}");
                    assert_eq!(out[2] & 0x80, 0x80, "QR: {what}");
                    assert_eq!(out[3] & 0x0f, 0, "header RCODE 0: {what}");
                    assert_eq!(&out[4..12], &[0, 1, 0, 0, 0, 0, 0, 1], "counts: {what}");
                    assert_eq!(&out[12..12 + question.len()], question, "{what}");
                    let flags = if dnssec_ok { 0x80 } else { 0 };
                    assert_eq!(
                        wire_opt(&out),
                        [0, 0, 41, 0x04, 0xd0, 1, 0, flags, 0, 0, 0],
                        "extended-rcode 1, version 0, payload 1232: {what}"
                    );
                    let r = Message::from_vec(&out).unwrap();
                    assert_eq!(u16::from(r.metadata.response_code), 16, "{what}");
                    assert_eq!(r.queries, q.queries, "{what}");
                    assert_eq!(r.edns.as_ref().map(|e| e.version()), Some(0), "{what}");
                    assert!(!r.metadata.authoritative, "{what}");
                }
            }
        }
    }
}

/// The query's bytes with the client's payload size in its OPT. hickory
/// raises a payload size under 512 to 512 when it encodes (and when it
/// decodes), so sizes such as 0 or 100 are written here into the bytes,
/// as a client would send them.
fn wire(q: &Message, payload: u16) -> Vec<u8> {
    let mut bytes = q.to_vec().unwrap();
    let at = bytes.len() - wire_len_of_opt(q);
    assert_eq!(bytes[at..at + 3], [0, 0, 41], "the query's OPT is last");
    bytes[at + 3..at + 5].copy_from_slice(&payload.to_be_bytes());
    bytes
}

/// The length of the query's OPT record on the wire.
fn wire_len_of_opt(q: &Message) -> usize {
    let e = q.edns.as_ref().unwrap();
    11 + e
        .options()
        .as_ref()
        .iter()
        .map(|(_, o)| 4 + usize::from(o.len()))
        .sum::<usize>()
}

/// RFC 3225 §3: DO is copied from the query's OPT into the reply's, for
/// every reply that carries an OPT.
#[test]
fn the_do_bit_is_copied_into_every_reply_with_an_opt() {
    let mut w = world();
    trainer(&mut w, 100);
    let two_questions = |e: Edns| {
        let mut m = edns_query("trainer-0.trainer.ml.svc.cluster.local.", RecordType::A, e);
        m.add_query(Query::query(
            Name::from_ascii("trainer-1.trainer.ml.svc.cluster.local.").unwrap(),
            RecordType::A,
        ));
        m
    };
    let notify = |e: Edns| {
        let mut m = edns_query("cluster.local.", RecordType::SOA, e);
        m.metadata.op_code = OpCode::Notify;
        m
    };
    let q = |name: &'static str, qtype| move |e: Edns| edns_query(name, qtype, e);
    type Case<'a> = (&'a str, Box<dyn Fn(Edns) -> Message>, u16, bool);
    let cases: Vec<Case> = vec![
        (
            "positive",
            Box::new(q("trainer-0.trainer.ml.svc.cluster.local.", RecordType::A)),
            0,
            false,
        ),
        (
            "positive any",
            Box::new(q(
                "trainer-0.trainer.ml.svc.cluster.local.",
                RecordType::ANY,
            )),
            0,
            false,
        ),
        (
            "nodata",
            Box::new(q(
                "trainer-0.trainer.ml.svc.cluster.local.",
                RecordType::AAAA,
            )),
            0,
            false,
        ),
        (
            "nxdomain",
            Box::new(q("nobody.ml.svc.cluster.local.", RecordType::A)),
            3,
            false,
        ),
        (
            "refused",
            Box::new(q("example.com.", RecordType::A)),
            5,
            false,
        ),
        (
            "tc",
            Box::new(q("trainer.ml.svc.cluster.local.", RecordType::A)),
            0,
            true,
        ),
        (
            "tc srv",
            Box::new(q("trainer.ml.svc.cluster.local.", RecordType::SRV)),
            0,
            true,
        ),
        ("formerr", Box::new(two_questions), 1, false),
        ("notimp", Box::new(notify), 4, false),
    ];
    for (what, make, rcode, tc) in &cases {
        for dnssec_ok in [false, true] {
            let bytes = make(client_edns(0, dnssec_ok, false)).to_vec().unwrap();
            for (path, out) in both_paths(&w, &bytes, Transport::Udp) {
                let what = format!("{what} do={dnssec_ok} {path}");
                let r = Message::from_vec(&out).unwrap();
                assert_eq!(u16::from(r.metadata.response_code), *rcode, "{what}");
                assert_eq!(r.metadata.truncation, *tc, "{what}");
                assert_eq!(
                    r.edns.as_ref().map(|e| e.flags().dnssec_ok),
                    Some(dnssec_ok),
                    "{what}"
                );
                assert_eq!(wire_opt(&out)[7] & 0x80 != 0, dnssec_ok, "{what}");
            }
        }
    }
    let bytes = edns_query(
        "trainer-0.trainer.ml.svc.cluster.local.",
        RecordType::A,
        client_edns(0, true, false),
    )
    .to_vec()
    .unwrap();
    assert!(
        w.answerer
            .handle_fast(&bytes, Transport::Udp, &mut Vec::new())
            .is_some(),
        "the fast path's own OPT was checked above"
    );
    // SERVFAIL before the index is synced carries DO back too.
    let unsynced = Answerer::new(Table::new(), AnswerConfig::default());
    let r = unsynced
        .handle(&bytes, Transport::Udp)
        .map(|r| Message::from_vec(&r.bytes).unwrap())
        .unwrap();
    assert_eq!(r.metadata.response_code, ResponseCode::ServFail);
    assert_eq!(r.edns.map(|e| e.flags().dnssec_ok), Some(true));
}

/// RFC 6891 §6.1.2: options and flags podns does not implement are
/// ignored (the answer is the same) and never echoed (its OPT has no
/// option and no flag but DO).
#[test]
fn unknown_edns_options_and_flags_are_ignored_and_never_echoed() {
    let mut w = world();
    trainer(&mut w, 3);
    for (name, qtype) in [
        ("trainer.ml.svc.cluster.local.", RecordType::A),
        ("trainer.ml.svc.cluster.local.", RecordType::SRV),
        ("nobody.ml.svc.cluster.local.", RecordType::A),
    ] {
        let plain = edns_query(name, qtype, client_edns(0, false, false));
        let odd = edns_query(name, qtype, client_edns(0, false, true));
        assert!(odd.to_vec().unwrap().len() > plain.to_vec().unwrap().len() + 20);
        for t in [Transport::Udp, Transport::Tcp] {
            let [(_, want), _] = both_paths(&w, &plain.to_vec().unwrap(), t);
            for (path, out) in both_paths(&w, &odd.to_vec().unwrap(), t) {
                let what = format!("{name} {qtype} {t:?} {path}");
                assert_eq!(out, want, "same reply with or without them: {what}");
                assert_eq!(
                    wire_opt(&out),
                    [0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0],
                    "{what}"
                );
            }
        }
    }
}

/// RFC 6891 §6.1.1: more than one OPT is FORMERR.
#[test]
fn two_opt_records_are_formerr() {
    let mut w = world();
    trainer(&mut w, 1);
    let q = edns_query(
        "trainer-0.trainer.ml.svc.cluster.local.",
        RecordType::A,
        client_edns(0, true, false),
    );
    let mut bytes = q.to_vec().unwrap();
    let opt = bytes[bytes.len() - 11..].to_vec();
    bytes.extend_from_slice(&opt);
    bytes[11] = 2;
    let mut out = Vec::new();
    let meta = w
        .answerer
        .handle_into(&bytes, Transport::Udp, &mut out)
        .unwrap();
    assert_eq!(meta.rcode, ResponseCode::FormErr);
    assert_eq!(&out[..2], &q.metadata.id.to_be_bytes());
}

/// RFC 6891 §6.2.5: a payload size under 512 counts as 512; and podns
/// never sends more than 1232 bytes over UDP (DNS Flag Day 2020), whatever
/// the client offers. TCP always carries the whole answer.
#[test]
fn small_payload_sizes_count_as_512_and_udp_stops_at_1232() {
    let mut w = world();
    let gang = |w: &mut World, name: &str, n: u32, net: u32| {
        w.svc(headless("ml", name, name));
        for i in 0..n {
            w.pod(
                pod(
                    "ml",
                    &format!("{name}-{i}"),
                    &format!("10.{net}.0.{}", i + 1),
                )
                .label("app", name),
            );
        }
    };
    // About 380, 700 and 1,700 bytes of A records.
    gang(&mut w, "g20", 20, 20);
    gang(&mut w, "g40", 40, 40);
    gang(&mut w, "g100", 100, 100);
    // A is the fast path's; ANY (its minimal answer is the same addresses)
    // the general path's.
    for qtype in [RecordType::A, RecordType::ANY] {
        let query_bytes = |name: &str, payload: u16| {
            let q = edns_query(
                &format!("{name}.ml.svc.cluster.local."),
                qtype,
                client_edns(0, false, false),
            );
            wire(&q, payload)
        };
        let ask = |name: &str, payload: u16, t: Transport| {
            both_paths(&w, &query_bytes(name, payload), t).map(|(_, out)| {
                let r = Message::from_vec(&out).unwrap();
                (out.len(), r.metadata.truncation, ips(&r).len())
            })
        };
        for payload in [0, 1, 100, 511, 512] {
            if qtype == RecordType::A {
                let mut out = Vec::new();
                let fast =
                    w.answerer
                        .handle_fast(&query_bytes("g20", payload), Transport::Udp, &mut out);
                assert!(
                    fast.is_some_and(|m| !m.truncated),
                    "fast path, payload {payload}"
                );
            }
            for (len, tc, n) in ask("g20", payload, Transport::Udp) {
                assert!(!tc && n == 20, "{qtype} payload {payload}: fits 512");
                assert!(len > 300 && len <= 512, "{len}");
            }
            // 12 + 30 bytes of header and question, 16 a record, 11 the
            // OPT: as many whole records as fit.
            for (len, tc, n) in ask("g40", payload, Transport::Udp) {
                assert!(
                    tc && n == (512 - 42 - 11) / 16 && len <= 512,
                    "{qtype} payload {payload}: {len} {n}"
                );
            }
        }
        for payload in [1232, 4096, 65535] {
            for (len, tc, n) in ask("g40", payload, Transport::Udp) {
                assert!(
                    !tc && n == 40 && len > 512 && len <= 1232,
                    "{qtype} {payload}"
                );
            }
            for (len, tc, n) in ask("g100", payload, Transport::Udp) {
                assert!(
                    tc && n == (1232 - 43 - 11) / 16 && len <= 1232,
                    "{qtype} payload {payload}: {len} {n}"
                );
            }
        }
        for (_, tc, n) in ask("g100", 100, Transport::Tcp) {
            assert!(!tc && n == 100, "{qtype} over TCP");
        }
    }
}

#[test]
fn big_answers_truncate_over_udp_and_come_whole_over_tcp() {
    let mut w = world();
    w.svc(headless("ml", "big", "big"));
    for i in 0..300u32 {
        w.pod(
            pod(
                "ml",
                &format!("p{i}"),
                &format!("10.2.{}.{}", i / 250, i % 250 + 1),
            )
            .label("app", "big"),
        );
    }
    let q = query("big.ml.svc.cluster.local.", RecordType::A);
    let tcp = w
        .answerer
        .handle(&q.to_vec().unwrap(), Transport::Tcp)
        .unwrap();
    let all = Message::from_vec(&tcp.bytes).unwrap();
    // Over UDP: as many whole records as fit, in the set's order, TC=1.
    // 12 bytes of header, 30 of question, 16 an A record: 29 in 512.
    let udp = w
        .answerer
        .handle(&q.to_vec().unwrap(), Transport::Udp)
        .unwrap();
    assert!(udp.truncated && udp.bytes.len() <= 512);
    let r = Message::from_vec(&udp.bytes).unwrap();
    assert!(r.metadata.truncation && r.metadata.authoritative);
    assert_eq!(r.answers.len(), 29, "{}", udp.bytes.len());
    assert_eq!(udp.bytes.len(), 12 + 30 + 29 * 16);
    assert_eq!(r.answers[..], all.answers[..29]);
    assert!(r.authorities.is_empty() && r.additionals.is_empty() && r.edns.is_none());
    let mut qe = q.clone();
    let mut e = Edns::new();
    e.set_max_payload(65000);
    qe.set_edns(e);
    let udp = w
        .answerer
        .handle(&qe.to_vec().unwrap(), Transport::Udp)
        .unwrap();
    assert!(
        udp.truncated && udp.bytes.len() <= 1232,
        "EDNS payload capped at 1232"
    );
    // The OPT stays (RFC 6891 §7): 1232 - 11 bytes for the records.
    let r = Message::from_vec(&udp.bytes).unwrap();
    assert_eq!(r.answers.len(), (1232 - 11 - 42) / 16);
    assert_eq!(r.answers[..], all.answers[..r.answers.len()]);
    assert!(r.edns.is_some());
    let tcp = w
        .answerer
        .handle(&q.to_vec().unwrap(), Transport::Tcp)
        .unwrap();
    assert!(!tcp.truncated);
    assert_eq!(ips(&Message::from_vec(&tcp.bytes).unwrap()).len(), 300);
    // a small answer is not truncated
    let small = w.answerer.handle(
        &query("p1.ml.pod.cluster.local.", RecordType::A)
            .to_vec()
            .unwrap(),
        Transport::Udp,
    );
    assert!(!small.unwrap().truncated);
}

/// A headless Service `big` of `n` pods with hostnames `w-<i>`, a named
/// port `p`; IPv4 10.2.x.y, and with `v6` an IPv6 address each too.
fn crowd(w: &mut World, n: u32, v6: bool) {
    w.svc(headless("ml", "big", "big").port(Some("p"), 80, TargetPort::Same));
    for i in 0..n {
        let mut p = pod(
            "ml",
            &format!("p{i}"),
            &format!("10.2.{}.{}", i / 250, i % 250 + 1),
        )
        .host(&format!("w-{i}"), "big")
        .label("app", "big");
        if v6 {
            p = p.ip(&format!("fd00::2:{i:x}"));
        }
        w.pod(p);
    }
}

/// Ask over UDP (with an EDNS payload, or none) through both encoders,
/// which must agree; the reply, its length and the whole answer over TCP.
fn udp_and_tcp(
    w: &World,
    name: &str,
    t: RecordType,
    payload: Option<u16>,
) -> (Message, usize, Message) {
    let mut q = query(name, t);
    if let Some(p) = payload {
        let mut e = Edns::new();
        e.set_max_payload(p);
        q.set_edns(e);
    }
    let bytes = q.to_vec().unwrap();
    let [(_, general), (_, into)] = both_paths(w, &bytes, Transport::Udp);
    assert_eq!(general, into, "the two paths agree");
    let tcp = w.answerer.handle(&bytes, Transport::Tcp).unwrap();
    assert!(!tcp.truncated);
    (
        Message::from_vec(&general).unwrap(),
        general.len(),
        Message::from_vec(&tcp.bytes).unwrap(),
    )
}

#[test]
fn truncated_srv_answers_keep_whole_records_and_glue_is_left_out_by_rrset() {
    let mut w = world();
    crowd(&mut w, 60, false);
    let name = "_p._tcp.big.ml.svc.cluster.local.";
    // 60 SRV records (49 bytes each: targets are never compressed, RFC
    // 2782) do not fit 1232 bytes: TC=1, the first SRV records that fit,
    // no glue (a client that cannot retry still gets targets).
    let (m, len, all) = udp_and_tcp(&w, name, RecordType::SRV, Some(1232));
    assert_eq!(all.answers.len(), 60);
    assert_eq!(all.additionals.len(), 60);
    assert!(m.metadata.truncation && m.metadata.authoritative);
    let n = m.answers.len();
    assert!(n > 15 && n < 60, "{n}");
    assert_eq!(m.answers[..], all.answers[..n]);
    assert!(m.additionals.is_empty(), "{:?}", m.additionals);
    // Maximal: the next SRV record (the same shape) would not fit.
    let per = (len - 11 - 12 - 38) / n;
    assert!(len + per > 1232, "{len} + {per}");

    // 20 SRV records fit, their glue does not: RFC 2181 §9, the glue
    // RRsets that do not fit are left out whole and TC stays clear.
    let mut w = world();
    crowd(&mut w, 20, false);
    let (m, len, all) = udp_and_tcp(&w, name, RecordType::SRV, Some(1232));
    assert!(!m.metadata.truncation, "only glue left out: TC clear");
    assert_eq!(m.answers, all.answers, "every SRV record");
    let k = m.additionals.len();
    assert!(k > 0 && k < 20, "{k}");
    assert_eq!(m.additionals[..], all.additionals[..k]);
    // The next glue record (its owner's first label, then a pointer to
    // the Service's name in the question; 14 bytes of type, class, TTL,
    // length and address) would not fit.
    let next = &all.additionals[k];
    let label = next.name.to_ascii().split('.').next().unwrap().len();
    assert!(len + 1 + label + 2 + 14 > 1232, "{len} {next}");
    // Without EDNS the SRV records alone do not fit 512 bytes.
    let (m, len, _) = udp_and_tcp(&w, name, RecordType::SRV, None);
    assert!(m.metadata.truncation && len <= 512 && m.additionals.is_empty());
    assert!(!m.answers.is_empty());
}

#[test]
fn truncated_aaaa_and_any_answers_keep_whole_records() {
    let mut w = world();
    crowd(&mut w, 60, true);
    let name = "big.ml.svc.cluster.local.";
    // 12 + 30 bytes of header and question; an AAAA record is 28 bytes.
    let (m, len, all) = udp_and_tcp(&w, name, RecordType::AAAA, None);
    assert!(m.metadata.truncation);
    assert_eq!(m.answers.len(), (512 - 42) / 28);
    assert_eq!(len, 42 + 16 * 28);
    assert_eq!(m.answers[..], all.answers[..16]);
    let (m, _, _) = udp_and_tcp(&w, name, RecordType::AAAA, Some(1232));
    assert_eq!(m.answers.len(), (1232 - 11 - 42) / 28);
    // ANY: the addresses (RFC 8482), the A set first: all 60 A records
    // (960 bytes) and then as many AAAA as fit.
    let (m, _, all) = udp_and_tcp(&w, name, RecordType::ANY, Some(1232));
    assert!(m.metadata.truncation);
    assert_eq!(all.answers.len(), 120);
    assert_eq!(m.answers.len(), 60 + (1232 - 11 - 42 - 60 * 16) / 28);
    assert_eq!(m.answers[..], all.answers[..m.answers.len()]);
}

#[test]
fn tcp_answers_past_64k_keep_whole_records_too() {
    let mut w = world();
    crowd(&mut w, 3000, true);
    let q = query("big.ml.svc.cluster.local.", RecordType::AAAA);
    let bytes = q.to_vec().unwrap();
    let [(_, general), (_, into)] = both_paths(&w, &bytes, Transport::Tcp);
    assert_eq!(general, into);
    let m = Message::from_vec(&general).unwrap();
    assert!(m.metadata.truncation && general.len() <= 65535);
    // Every owner is a pointer to the question, however many (hickory-proto
    // alone would write them in full past the 120th name): 28 bytes an
    // AAAA record.
    assert_eq!(m.answers.len(), (65535 - 42) / 28);
    // A's 16 bytes a record: 4,093 fit with this 24-byte name, so a set
    // of 4,093 goes whole over TCP and one of 4,096 is cut to 4,093
    // whole records. 4,096 can never fit 65,535 bytes: 4,096 x 16 alone is
    // 65,536.
    for (members, answered, cut) in [(4093, 4093, false), (4096, 4093, true)] {
        let mut w = world();
        crowd(&mut w, members, false);
        let q = query("big.ml.svc.cluster.local.", RecordType::A);
        let [(_, general), (_, into)] = both_paths(&w, &q.to_vec().unwrap(), Transport::Tcp);
        assert_eq!(general, into, "{members}: the encoders agree");
        let m = Message::from_vec(&general).unwrap();
        assert_eq!(m.metadata.truncation, cut, "{members}");
        assert_eq!(m.answers.len(), answered, "{members}");
        assert!(general.len() <= 65535);
    }
}

#[test]
fn duplicate_hostnames_answer_one_pod_by_the_rule() {
    let mut w = world();
    let old = pod("ml", "w-0-old", "10.1.0.1")
        .host("w-0", "s")
        .created(100);
    let new = pod("ml", "w-0-new", "10.1.0.2")
        .host("w-0", "s")
        .created(200);
    w.pod(old.clone()).pod(new.clone().ready(false));
    let name = "w-0.s.ml.svc.cluster.local.";
    assert_eq!(
        ips(&w.ask(name, RecordType::A)),
        [ip("10.1.0.1")],
        "ready first"
    );
    w.pod(old.clone().ready(false).phase(Phase::Pending));
    assert_eq!(
        ips(&w.ask(name, RecordType::A)),
        [ip("10.1.0.2")],
        "then running"
    );
    w.pod(old.clone().ready(false));
    assert_eq!(
        ips(&w.ask(name, RecordType::A)),
        [ip("10.1.0.1")],
        "then older"
    );
    w.pod(old.clone().deleting());
    assert_eq!(
        ips(&w.ask(name, RecordType::A)),
        [ip("10.1.0.2")],
        "terminating withdrawn"
    );
    // asked many times, always the same one
    for _ in 0..10 {
        assert_eq!(ips(&w.ask(name, RecordType::A)), [ip("10.1.0.2")]);
    }
    assert_eq!(ptr_of(&w, "2.0.1.10.in-addr.arpa."), name);
}

#[test]
fn duplicate_hostnames_all_restores_the_spec() {
    let mut w = World::new(
        Policy {
            duplicates: Duplicates::All,
            ..Default::default()
        },
        AnswerConfig::default(),
    );
    w.pod(pod("ml", "a", "10.1.0.1").host("w-0", "s"));
    w.pod(pod("ml", "b", "10.1.0.2").host("w-0", "s"));
    assert_eq!(
        ips(&w.ask("w-0.s.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.1"), ip("10.1.0.2")]
    );
}

#[test]
fn deleted_and_terminal_pods_are_withdrawn_everywhere() {
    let mut w = world();
    trainer(&mut w, 2);
    w.writer
        .apply(Update::Pod(Change::Delete(crate::index::ObjKey::new(
            "ml",
            "trainer-0-abcde",
        ))));
    assert_nxdomain(&w.ask("trainer-0.trainer.ml.svc.cluster.local.", RecordType::A));
    assert_nxdomain(&w.ask("10-1-0-1.trainer.ml.svc.cluster.local.", RecordType::A));
    assert_nxdomain(&w.ask("1.0.1.10.in-addr.arpa.", RecordType::PTR));
    assert_eq!(
        ips(&w.ask("trainer.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.2")]
    );
    w.pod(
        pod("ml", "trainer-1-abcde", "10.1.0.2")
            .host("trainer-1", "trainer")
            .label("app", "trainer")
            .phase(Phase::Failed),
    );
    assert_nxdomain(&w.ask("trainer-1.trainer.ml.svc.cluster.local.", RecordType::A));
    assert_nodata(&w.ask("trainer.ml.svc.cluster.local.", RecordType::A));
}

#[test]
fn relist_applies_the_difference() {
    let mut w = world();
    trainer(&mut w, 3);
    let keep = pod("ml", "trainer-1-abcde", "10.1.0.2")
        .host("trainer-1", "trainer")
        .label("app", "trainer");
    let newer = pod("ml", "trainer-2-fghij", "10.1.0.9")
        .host("trainer-2", "trainer")
        .label("app", "trainer");
    w.writer.apply(Update::Pod(Change::all(vec![keep, newer])));
    assert_nxdomain(&w.ask("trainer-0.trainer.ml.svc.cluster.local.", RecordType::A));
    assert_eq!(
        ips(&w.ask("trainer-1.trainer.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.2")]
    );
    assert_eq!(
        ips(&w.ask("trainer-2.trainer.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.9")]
    );
    assert_eq!(w.writer.pod_count(), 2);
}

#[test]
fn a_namespace_scoped_relist_leaves_other_namespaces_alone() {
    let mut w = world();
    w.pod(pod("a", "p", "10.0.0.1"))
        .pod(pod("b", "p", "10.0.0.2"));
    w.writer.apply(Update::Pod(Change::Reset {
        namespace: Some("a".into()),
        items: vec![],
    }));
    assert_nxdomain(&w.ask("10-0-0-1.a.pod.cluster.local.", RecordType::A));
    assert_eq!(
        ips(&w.ask("10-0-0-2.b.pod.cluster.local.", RecordType::A)),
        [ip("10.0.0.2")]
    );
}

#[test]
fn service_changes_re_evaluate_members() {
    let mut w = world();
    w.pod(pod("ml", "p", "10.1.0.1").label("app", "x"));
    w.svc(headless("ml", "s", "y"));
    assert_nodata(&w.ask("s.ml.svc.cluster.local.", RecordType::A));
    w.svc(headless("ml", "s", "x"));
    assert_eq!(
        ips(&w.ask("s.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.1")]
    );
    assert_eq!(
        ptr_of(&w, "1.0.1.10.in-addr.arpa."),
        "10-1-0-1.s.ml.svc.cluster.local."
    );
    w.writer
        .apply(Update::Service(Change::Delete(crate::index::ObjKey::new(
            "ml", "s",
        ))));
    assert_nxdomain(&w.ask("s.ml.svc.cluster.local.", RecordType::A));
    assert_eq!(
        ptr_of(&w, "1.0.1.10.in-addr.arpa."),
        "10-1-0-1.ml.pod.cluster.local."
    );
}

#[test]
fn several_zones_answer_the_same_names() {
    let cfg = AnswerConfig {
        zones: vec![
            Name::from_ascii("cluster.local.").unwrap(),
            Name::from_ascii("training.example.").unwrap(),
        ],
        ..Default::default()
    };
    let mut w = World::new(Policy::default(), cfg);
    trainer(&mut w, 1);
    assert_eq!(
        ips(&w.ask("trainer-0.trainer.ml.svc.training.example.", RecordType::A)),
        [ip("10.1.0.1")]
    );
    let m = w.ask(
        "_nccl._tcp.trainer.ml.svc.training.example.",
        RecordType::SRV,
    );
    let RData::SRV(s) = &m.answers[0].data else {
        panic!()
    };
    assert_eq!(
        s.target.to_ascii(),
        "trainer-0.trainer.ml.svc.training.example."
    );
    let m = w.ask("training.example.", RecordType::SOA);
    assert!(
        matches!(&m.answers[0].data, RData::SOA(s) if s.mname.to_ascii() == "ns.dns.training.example.")
    );
}

#[test]
fn any_gets_a_minimal_answer() {
    let mut w = world();
    w.svc(cluster_ip("web", "api", "10.96.0.10").port(Some("http"), 80, TargetPort::Same));
    let m = w.ask("api.web.svc.cluster.local.", RecordType::ANY);
    assert_eq!(m.answers.len(), 1);
    assert!(matches!(&m.answers[0].data, RData::A(_)));
}

#[test]
fn random_bytes_never_panic() {
    let mut w = world();
    trainer(&mut w, 4);
    let seed = query("trainer-1.trainer.ml.svc.cluster.local.", RecordType::A)
        .to_vec()
        .unwrap();
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut answered = 0;
    for i in 0..20_000 {
        let mut b = if i % 2 == 0 {
            seed.clone()
        } else {
            vec![0u8; (next() % 64) as usize]
        };
        let flips = 1 + next() % 6;
        for _ in 0..flips {
            if b.is_empty() {
                break;
            }
            let at = (next() as usize) % b.len();
            b[at] = next() as u8;
        }
        if next() % 4 == 0 {
            b.truncate((next() as usize) % (b.len() + 1));
        }
        for t in [Transport::Udp, Transport::Tcp] {
            if let Some(r) = w.answerer.handle(&b, t) {
                answered += 1;
                assert!(r.bytes.len() >= 12);
                if t == Transport::Udp {
                    assert!(r.bytes.len() <= 1232);
                }
            }
        }
    }
    assert!(
        answered > 1000,
        "most mutated queries still get an answer: {answered}"
    );
}

/// The wire fast path and the general path give the same reply, field by
/// field, for every kind of question the fast path takes and for the ones
/// it must hand over, with and without EDNS; and both keep the EDNS rules.
#[test]
fn fast_path_agrees_with_the_general_path() {
    let mut w = World::new(
        Policy::default(),
        AnswerConfig {
            zones: vec![
                Name::from_ascii("cluster.local.").unwrap(),
                Name::from_ascii("ml.example.").unwrap(),
            ],
            ns_addrs: vec![ip("10.0.0.53")],
            ..AnswerConfig::default()
        },
    );
    w.svc(headless("ml", "gang", "gang"));
    for i in 0..40u32 {
        w.pod(
            pod("ml", &format!("r{i}"), &format!("10.1.0.{}", i + 1))
                .ip(&format!("fd00::{:x}", i + 1))
                .host(&format!("r{i}"), "gang")
                .label("app", "gang"),
        );
    }
    w.pod(
        pod("ml", "v4only", "10.1.1.1")
            .host("v4only", "gang")
            .label("app", "gang"),
    );
    w.svc(cluster_ip("web", "api", "10.96.0.10"));
    w.svc(ServiceInfo {
        kind: crate::index::ServiceKind::ExternalName("api.web.svc.cluster.local".into()),
        ..cluster_ip("web", "alias", "10.96.0.1")
    });
    let names = [
        "r3.gang.ml.svc.cluster.local.",
        "R3.Gang.ML.svc.CLUSTER.local.",
        "v4only.gang.ml.svc.cluster.local.",
        "gang.ml.svc.cluster.local.",
        "r3.gang.ml.svc.ml.example.",
        "api.web.svc.cluster.local.",
        "alias.web.svc.cluster.local.",
        "missing.ml.svc.cluster.local.",
        "missing.ml.svc.ml.example.",
        "ml.svc.cluster.local.",
        "svc.cluster.local.",
        "cluster.local.",
        "dns-version.cluster.local.",
        "ns.dns.cluster.local.",
        "dns.cluster.local.",
        "10-1-0-4.gang.ml.svc.cluster.local.",
        "4.0.1.10.in-addr.arpa.",
        "example.com.",
        "*.ml.svc.cluster.local.",
        "under_score.ml.svc.cluster.local.",
    ];
    let types = [
        RecordType::A,
        RecordType::AAAA,
        RecordType::SRV,
        RecordType::TXT,
        RecordType::MX,
        RecordType::PTR,
        RecordType::CNAME,
        RecordType::ANY,
        RecordType::AXFR,
    ];
    // EDNS as clients send it: none, payload sizes below 512 (counted as
    // 512), at and above 1232 (capped), DO, unknown flags and options,
    // and versions podns does not speak (BADVERS).
    // (payload, version, DO, other flags and options)
    let ednses = [
        None,
        Some((512u16, 0u8, false, false)),
        Some((1232, 0, false, false)),
        Some((4096, 0, false, false)),
        Some((0, 0, true, false)),
        Some((100, 0, false, true)),
        Some((511, 0, true, true)),
        Some((1232, 0, true, true)),
        Some((65535, 0, false, true)),
        Some((1232, 1, false, false)),
        Some((4096, 1, true, true)),
        Some((100, 255, true, false)),
    ];
    let mut fast_taken = 0;
    for name in names {
        for qtype in types {
            for edns in ednses {
                for cd in [false, true] {
                    let mut q = query(name, qtype);
                    q.metadata.checking_disabled = cd;
                    if let Some((_, version, dnssec_ok, extras)) = edns {
                        q.set_edns(client_edns(version, dnssec_ok, extras));
                    }
                    let bytes = match edns {
                        Some((payload, ..)) => wire(&q, payload),
                        None => q.to_vec().unwrap(),
                    };
                    for transport in [Transport::Udp, Transport::Tcp] {
                        let general = w.answerer.handle_general(&bytes, transport).unwrap();
                        let mut out = Vec::new();
                        if w.answerer
                            .handle_fast(&bytes, transport, &mut out)
                            .is_some()
                        {
                            fast_taken += 1;
                        }
                        let meta = w.answerer.handle_into(&bytes, transport, &mut out).unwrap();
                        let what = format!("{name} {qtype} edns={edns:?} cd={cd} {transport:?}");
                        let (f, g) = (
                            Message::from_vec(&out).expect(&what),
                            Message::from_vec(&general.bytes).unwrap(),
                        );
                        assert_eq!(f, g, "{what}");
                        assert_eq!(
                            (meta.rcode, meta.qtype, meta.truncated),
                            (general.rcode, general.qtype, general.truncated),
                            "{what}"
                        );
                        // What both replies must say about EDNS (they are
                        // equal, so checking one checks both).
                        match edns {
                            None => assert!(g.edns.is_none(), "{what}"),
                            Some((_, version, dnssec_ok, _)) => {
                                let e = g.edns.as_ref().expect(&what);
                                assert_eq!(
                                    (e.version(), e.max_payload(), e.flags().dnssec_ok),
                                    (0, MAX_UDP_PAYLOAD, dnssec_ok),
                                    "{what}"
                                );
                                assert_eq!(e.flags().z, 0, "{what}");
                                assert!(e.options().as_ref().is_empty(), "{what}");
                                let badvers = u16::from(g.metadata.response_code) == 16;
                                assert_eq!(badvers, version > 0, "{what}");
                                if badvers {
                                    assert_eq!(g.queries, q.queries, "{what}");
                                    for reply in [&out, &general.bytes] {
                                        assert_eq!(reply[3] & 0x0f, 0, "{what}");
                                        assert_eq!(wire_opt(reply)[5..7], [1, 0], "{what}");
                                    }
                                }
                            }
                        }
                        if transport == Transport::Udp {
                            let payload = edns.map_or(512, |(p, ..)| p);
                            let limit = usize::from(payload.clamp(512, 1232));
                            assert!(out.len() <= limit, "{what}");
                            assert!(general.bytes.len() <= limit, "{what}");
                        }
                    }
                }
            }
        }
    }
    // The fast path did answer, so the comparison above compared two paths.
    assert!(fast_taken > 100, "fast path taken {fast_taken} times");
}

/// Options in the OPT record (a cookie, as dig sends) and odd headers.
#[test]
fn fast_path_takes_options_and_refuses_what_it_does_not_know() {
    let mut w = world();
    w.pod(pod("ml", "a", "10.1.0.1").host("a", "gang"));
    w.svc(headless("ml", "gang", "gang"));
    let mut q = query("a.gang.ml.svc.cluster.local.", RecordType::A);
    let mut e = Edns::new();
    e.set_max_payload(1232);
    e.options_mut()
        .insert(hickory_proto::rr::rdata::opt::EdnsOption::Unknown(
            10,
            vec![1, 2, 3, 4, 5, 6, 7, 8],
        ));
    q.set_edns(e);
    let bytes = q.to_vec().unwrap();
    let mut out = Vec::new();
    w.answerer
        .handle_into(&bytes, Transport::Udp, &mut out)
        .unwrap();
    let r = Message::from_vec(&out).unwrap();
    assert_eq!(ips(&r), vec![ip("10.1.0.1")]);
    assert_eq!(
        r.edns.as_ref().map(|e| e.max_payload()),
        Some(MAX_UDP_PAYLOAD)
    );
    // Trailing garbage, a second question, a truncated OPT: each gets what
    // the general path gives.
    let mut trailing = bytes.clone();
    trailing.push(0);
    let mut two = query("a.gang.ml.svc.cluster.local.", RecordType::A);
    two.add_query(Query::query(
        Name::from_ascii("b.gang.ml.svc.cluster.local.").unwrap(),
        RecordType::A,
    ));
    let cut = bytes[..bytes.len() - 3].to_vec();
    for b in [trailing, two.to_vec().unwrap(), cut] {
        let general = w
            .answerer
            .handle_general(&b, Transport::Udp)
            .map(|r| r.bytes);
        let mut out = Vec::new();
        let fast = w
            .answerer
            .handle_into(&b, Transport::Udp, &mut out)
            .map(|_| out);
        assert_eq!(fast, general);
    }
}

/// A node instance holding namespace `ml` in part: the pods of gang
/// `train` (what the relay sends for `job-name in (train)`), and every
/// Service and Job.
fn partly_held() -> World {
    let table = Table::new();
    table.scope().set_node();
    let policy = Policy {
        rank_view: true,
        ..Policy::default()
    };
    let writer = Writer::new(table.clone(), policy, Metrics::new(), SyncNeeds::default());
    let mut w = World::over(writer, AnswerConfig::default());
    let key = "batch.kubernetes.io/job-name";
    w.apply(Update::Partial {
        namespace: "ml".into(),
        gangs: Some(crate::index::GangSelector {
            key: key.into(),
            values: ["train".to_string()].into(),
        }),
    });
    let by_gang = |name: &str| ServiceInfo {
        selector: Some(vec![(key.into(), name.into())]),
        ..headless("ml", name, "")
    };
    let ns = || Some("ml".to_string());
    w.apply(Update::Pod(Change::Reset {
        namespace: ns(),
        items: vec![
            rank_pod("ml", "train", 0, "10.0.0.1"),
            rank_pod("ml", "train", 1, "10.0.0.2"),
        ],
    }));
    w.apply(Update::Service(Change::Reset {
        namespace: ns(),
        items: vec![
            by_gang("train"),
            by_gang("eval"),
            cluster_ip("ml", "api", "10.96.0.9"),
        ],
    }));
    w.apply(Update::Job(Change::Reset {
        namespace: ns(),
        items: vec![job("ml", "train", 2, None), job("ml", "eval", 2, None)],
    }));
    table.set_synced(true);
    w
}

/// Whether the node instance forwards the question.
fn forwards(w: &World, name: &str) -> bool {
    let bytes = query(name, RecordType::A).to_vec().unwrap();
    let mut out = Vec::new();
    w.answerer
        .handle_into(&bytes, Transport::Udp, &mut out)
        .expect("a reply or a forward")
        .forward
}

#[test]
fn a_namespace_held_in_part_answers_what_it_finds_and_forwards_what_another_gang_may_own() {
    let mut w = partly_held();
    let table = w.writer.table().clone();
    assert!(table.scope().contains("ml") && table.scope().is_partial("ml"));
    // Found among the held gang's pods, or wholly held (every Service is
    // here; a headless Service that selects only held gangs): answered.
    for name in [
        "train-0.train.ml.svc.cluster.local.",
        "1.train.ml.rank.cluster.local.",
        "10-0-0-1.ml.pod.cluster.local.",
        "train.ml.svc.cluster.local.",
        "api.ml.svc.cluster.local.",
        "nope.ml.svc.cluster.local.",
    ] {
        assert!(!forwards(&w, name), "answered here: {name}");
    }
    assert_eq!(
        ips(&w.ask("train.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.0.0.1"), ip("10.0.0.2")]
    );
    // What another gang's pods may own: forwarded.
    for name in [
        "eval.ml.svc.cluster.local.",
        "eval-0.eval.ml.svc.cluster.local.",
        "0.eval.ml.rank.cluster.local.",
        "train-7.train.ml.svc.cluster.local.",
        "10-0-0-9.ml.pod.cluster.local.",
    ] {
        assert!(forwards(&w, name), "forwarded: {name}");
    }
    // Held whole again: the other gang's Service is answered here too.
    w.apply(Update::Partial {
        namespace: "ml".into(),
        gangs: None,
    });
    assert!(!table.scope().is_partial("ml"));
    assert!(!forwards(&w, "eval.ml.svc.cluster.local."));
    assert!(!forwards(&w, "train-7.train.ml.svc.cluster.local."));
    // Out of scope, the mark goes with it.
    w.apply(Update::Partial {
        namespace: "ml".into(),
        gangs: Some(crate::index::GangSelector {
            key: "job-name".into(),
            values: ["train".to_string()].into(),
        }),
    });
    w.apply(Update::Unscope("ml".into()));
    assert!(!table.scope().is_partial("ml"));
}

/// A namespace a node instance lists again (its watch resumed on a relay
/// without its history) is forwarded; when no relay answers, what the
/// index held of it answers instead of SERVFAIL, but only a NOERROR: a
/// name it did not hold still gets SERVFAIL, not NXDOMAIN. Listed again,
/// the namespace is answered here.
#[tokio::test]
async fn a_relisting_namespace_answers_what_it_held_when_no_relay_answers() {
    use prometheus_client::metrics::counter::Counter;
    let mut w = partly_held();
    w.apply(Update::Partial {
        namespace: "ml".into(),
        gangs: None,
    });
    let table = w.writer.table().clone();
    // A relay that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let forwarder = crate::dns::forward::Forwarder::new(
        vec![silent.local_addr().unwrap()],
        std::time::Duration::from_millis(100),
    )
    .unwrap();
    let (answered, stale, failed) = (Counter::default(), Counter::default(), Counter::default());
    let node = Answerer::new(table.clone(), AnswerConfig::default()).with_forwarding(Forwarding {
        forwarder,
        runtime: tokio::runtime::Handle::current(),
        answered: answered.clone(),
        stale: stale.clone(),
        failed: failed.clone(),
    });
    let ask = |name: &'static str, qtype| {
        let node = &node;
        async move {
            let b = query(name, qtype).to_vec().unwrap();
            Message::from_vec(&node.forwarded(&b, false).await.unwrap()).unwrap()
        }
    };
    let rank = "train-0.train.ml.svc.cluster.local.";
    assert!(!forwards(&w, rank));
    // Another namespace, out of scope and not listing: a relay's silence
    // is SERVFAIL.
    let r = ask("w-0.w.other.svc.cluster.local.", RecordType::A).await;
    assert_eq!(r.metadata.response_code, ResponseCode::ServFail);
    assert_eq!((stale.get(), failed.get()), (0, 1));

    w.apply(Update::Relisting {
        resource: "pods",
        namespace: "ml".into(),
    });
    assert!(forwards(&w, rank) && table.scope().is_stale("ml"));
    let r = ask(rank, RecordType::A).await;
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert_eq!(ips(&r), [ip("10.0.0.1")]);
    // NODATA is what it held too: A and AAAA agree, so a resolver that
    // asks both gets an address.
    let r = ask(rank, RecordType::AAAA).await;
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(r.answers.is_empty());
    assert_eq!(stale.get(), 2);
    // A name it did not hold may be new: SERVFAIL, never NXDOMAIN.
    let r = ask("train-7.train.ml.svc.cluster.local.", RecordType::A).await;
    assert_eq!(r.metadata.response_code, ResponseCode::ServFail);
    assert_eq!((stale.get(), failed.get(), answered.get()), (2, 2, 0));

    // Listed again: answered here, nothing stale.
    w.apply(Update::Pod(Change::Reset {
        namespace: Some("ml".into()),
        items: vec![rank_pod("ml", "train", 0, "10.0.0.5")],
    }));
    assert!(!forwards(&w, rank) && !table.scope().is_stale("ml"));
    assert_eq!(ips(&w.ask(rank, RecordType::A)), [ip("10.0.0.5")]);
}
