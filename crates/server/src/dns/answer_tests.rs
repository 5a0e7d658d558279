//! Rule-by-rule tests of the answer path, without sockets.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::*;
use crate::admin::Metrics;
use crate::index::testing::*;
use crate::index::{
    Change, Phase, PodInfo, Policy, ServiceInfo, SyncNeeds, Table, TargetPort, Update, Writer,
};
use crate::index::{Duplicates, Hostnames, Publish};

struct World {
    writer: Writer,
    answerer: Answerer,
}

fn world_with(policy: Policy, cfg: AnswerConfig) -> World {
    let writer = synced_writer(policy);
    let answerer = Answerer::new(writer.table().clone(), cfg);
    World { writer, answerer }
}

fn world() -> World {
    world_with(Policy::default(), AnswerConfig::default())
}

impl World {
    fn pod(&mut self, p: PodInfo) -> &mut Self {
        self.writer.apply(Update::Pod(Change::Apply(p)));
        self
    }
    fn svc(&mut self, s: ServiceInfo) -> &mut Self {
        self.writer.apply(Update::Service(Change::Apply(s)));
        self
    }
    fn ask(&self, name: &str, qtype: RecordType) -> Message {
        self.answerer.answer(&query(name, qtype))
    }
}

fn query(name: &str, qtype: RecordType) -> Message {
    let mut m = Message::new(4242, MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m
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
    let mut w = world_with(
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
    let mut w = world_with(Policy::default(), cfg);
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
    let mut w = world_with(
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
fn reverse_cidrs_refuse_other_networks() {
    let cfg = AnswerConfig {
        reverse_cidrs: vec!["10.1.0.0/16".parse().unwrap()],
        ..Default::default()
    };
    let mut w = world_with(Policy::default(), cfg);
    w.pod(pod("ml", "r", "10.1.0.21"));
    assert_eq!(
        ptr_of(&w, "21.0.1.10.in-addr.arpa."),
        "10-1-0-21.ml.pod.cluster.local."
    );
    let m = w.ask("1.0.0.192.in-addr.arpa.", RecordType::PTR);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    assert_nodata(&w.ask("1.10.in-addr.arpa.", RecordType::PTR));
    assert_nodata(&w.ask("10.in-addr.arpa.", RecordType::PTR));
    assert_eq!(
        w.ask("11.in-addr.arpa.", RecordType::PTR)
            .metadata
            .response_code,
        ResponseCode::Refused
    );
}

#[test]
fn apex_soa_ns_version_and_ns_address() {
    let cfg = AnswerConfig {
        ns_addrs: vec![ip("10.0.0.53")],
        ..Default::default()
    };
    let w = world_with(Policy::default(), cfg);
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
        SyncNeeds {
            pod_scopes: 1,
            service_scopes: 1,
            job_scopes: 0,
        },
    );
    let a = Answerer::new(table, AnswerConfig::default());
    let ask = |a: &Answerer, n| a.answer(&query(n, RecordType::A)).metadata.response_code;
    assert_eq!(ask(&a, "x.ml.svc.cluster.local."), ResponseCode::ServFail);
    writer.apply(Update::Pod(Change::Reset {
        namespace: None,
        items: vec![pod("ml", "p", "10.0.0.1")],
    }));
    assert_eq!(
        ask(&a, "x.ml.svc.cluster.local."),
        ResponseCode::ServFail,
        "services not listed yet"
    );
    writer.apply(Update::Service(Change::Reset {
        namespace: None,
        items: vec![],
    }));
    assert_eq!(ask(&a, "x.ml.svc.cluster.local."), ResponseCode::NXDomain);
    assert_eq!(ask(&a, "example.com."), ResponseCode::Refused);
    assert_eq!(ask(&a, "local."), ResponseCode::Refused);
}

#[test]
fn transfers_opcodes_classes_and_question_counts() {
    let w = world();
    assert_eq!(
        w.ask("cluster.local.", RecordType::AXFR)
            .metadata
            .response_code,
        ResponseCode::Refused
    );
    assert_eq!(
        w.ask("cluster.local.", RecordType::IXFR)
            .metadata
            .response_code,
        ResponseCode::Refused
    );
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

#[test]
fn edns_is_echoed_and_bad_versions_get_badvers() {
    let w = world();
    let mut m = query("cluster.local.", RecordType::SOA);
    let mut e = Edns::new();
    e.set_max_payload(4096);
    m.set_edns(e.clone());
    let r = w.answerer.answer(&m);
    assert_eq!(
        r.edns.as_ref().map(|e| e.max_payload()),
        Some(MAX_UDP_PAYLOAD)
    );
    e.set_version(1);
    m.set_edns(e);
    let bytes = w
        .answerer
        .handle(&m.to_vec().unwrap(), Transport::Udp)
        .unwrap()
        .bytes;
    let r = Message::from_vec(&bytes).unwrap();
    // BADVERS and BADSIG share code 16 (RFC 6891 §9); a decoder may name either.
    assert_eq!(u16::from(r.metadata.response_code), 16);
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
    let udp = w
        .answerer
        .handle(&q.to_vec().unwrap(), Transport::Udp)
        .unwrap();
    assert!(udp.truncated && udp.bytes.len() <= 512);
    let r = Message::from_vec(&udp.bytes).unwrap();
    assert!(r.metadata.truncation && r.answers.is_empty());
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
    let mut w = world_with(
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
    w.writer.apply(Update::Pod(Change::Reset {
        namespace: None,
        items: vec![keep, newer],
    }));
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
    let mut w = world_with(Policy::default(), cfg);
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

#[test]
fn unused_record_helper_compiles() {
    // Keep Record in scope for readers of these tests.
    let _: Option<Record> = None;
    let _ = Arc::new(());
}

/// The wire fast path and the general path give the same reply, field by
/// field, for every kind of question the fast path takes and for the ones
/// it must hand over.
#[test]
fn fast_path_agrees_with_the_general_path() {
    let mut w = world_with(
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
    let mut fast_taken = 0;
    for name in names {
        for qtype in types {
            for edns in [None, Some(512u16), Some(1232), Some(4096)] {
                for cd in [false, true] {
                    let mut q = query(name, qtype);
                    q.metadata.checking_disabled = cd;
                    if let Some(p) = edns {
                        let mut e = Edns::new();
                        e.set_max_payload(p);
                        q.set_edns(e);
                    }
                    let bytes = q.to_vec().unwrap();
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
                        let what = format!("{name} {qtype} edns={edns:?} {transport:?}");
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
                        if transport == Transport::Udp {
                            assert!(out.len() <= usize::from(edns.unwrap_or(512).clamp(512, 1232)));
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
