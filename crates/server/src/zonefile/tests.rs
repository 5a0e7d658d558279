//! Zone text from a small world, checked record by record against what the
//! answer path says for the same index, without sockets.

use std::collections::BTreeMap;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

use super::*;
use crate::dns::answer::{AnswerConfig, Answerer};
use crate::index::testing::*;
use crate::index::{ServiceInfo, ServiceKind, TargetPort};

fn zones() -> Vec<Name> {
    vec![
        Name::from_ascii("cluster.local.").unwrap(),
        Name::from_ascii("Example.ORG.").unwrap(),
    ]
}

fn cfg() -> RenderConfig {
    RenderConfig {
        ttl: 5,
        negative_ttl: 1,
        ns_addrs: vec!["10.96.0.53".parse().unwrap(), "fd00::53".parse().unwrap()],
        reverse: true,
        serial: None,
    }
}

/// A headless gang with hostnames and named ports, a dual-stack pod, a
/// ClusterIP Service with a named port, two ExternalNames (one in-zone).
fn world() -> Arc<Table> {
    let table = Table::new();
    let mut w = Writer::new(
        table.clone(),
        Policy::default(),
        Metrics::new(),
        SyncNeeds::one_list(false, false),
    );
    let pods = vec![
        pod("ml", "gang-0", "10.1.0.1")
            .host("gang-0", "gang")
            .label("app", "gang")
            .port("nccl", 29500),
        pod("ml", "gang-1", "10.1.0.2")
            .host("gang-1", "gang")
            .label("app", "gang")
            .port("nccl", 29500),
        pod("ml", "dual", "10.1.0.3").ip("fd00:10::3"),
        pod("web", "api-x", "10.1.0.4").label("app", "api"),
    ];
    let services = vec![
        headless("ml", "gang", "gang").port(Some("nccl"), 29500, TargetPort::Name("nccl".into())),
        cluster_ip("web", "api", "10.96.0.10")
            .port(Some("http"), 80, TargetPort::Same)
            .port(None, 8443, TargetPort::Same),
        ServiceInfo {
            kind: ServiceKind::ExternalName("db.example.com".into()),
            ..cluster_ip("web", "db", "10.96.0.11")
        },
        ServiceInfo {
            kind: ServiceKind::ExternalName("api.web.svc.cluster.local".into()),
            ..cluster_ip("web", "alias", "10.96.0.12")
        },
    ];
    w.apply(Update::Service(Change::all(services)));
    w.apply(Update::Pod(Change::all(pods)));
    assert!(table.is_synced());
    table
}

/// One record line of our own output: owner (absolute), ttl, type, rdata.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Line {
    owner: String,
    ttl: u32,
    rtype: String,
    data: String,
}

fn parse(text: &str) -> (String, Vec<Line>) {
    let mut origin = String::new();
    let mut out = Vec::new();
    for l in text.lines() {
        if l.starts_with(';') || l.starts_with("$TTL") || l.trim().is_empty() {
            continue;
        }
        if let Some(o) = l.strip_prefix("$ORIGIN ") {
            origin = o.trim().to_string();
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(f.len(), 5, "owner ttl class type rdata: {l:?}");
        assert_eq!(f[2], "IN");
        let owner = match f[0] {
            "@" => origin.clone(),
            o => format!("{o}.{origin}"),
        };
        out.push(Line {
            owner,
            ttl: f[1].parse().unwrap(),
            rtype: f[3].into(),
            data: f[4].into(),
        });
    }
    (origin, out)
}

/// The answer section of podns for (name, type) in zone-text spelling.
fn podns_says(answerer: &Answerer, name: &str, rtype: &str) -> (ResponseCode, Vec<Line>) {
    let qtype: RecordType = rtype.parse().unwrap();
    let mut q = Message::new(1, MessageType::Query, OpCode::Query);
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    let r = answerer.answer(&q);
    let mut lines: Vec<Line> = r
        .answers
        .iter()
        .filter(|rec| rec.record_type() == qtype)
        .map(|rec| Line {
            owner: rec.name.to_ascii(),
            ttl: rec.ttl,
            rtype: rec.record_type().to_string(),
            data: match &rec.data {
                RData::A(a) => a.0.to_string(),
                RData::AAAA(a) => a.0.to_string(),
                RData::CNAME(c) => c.0.to_ascii(),
                RData::PTR(p) => p.0.to_ascii(),
                RData::NS(n) => n.0.to_ascii(),
                RData::SRV(s) => format!(
                    "{} {} {} {}",
                    s.priority,
                    s.weight,
                    s.port,
                    s.target.to_ascii()
                ),
                RData::TXT(t) => {
                    let parts: Vec<String> = t
                        .txt_data
                        .iter()
                        .map(|b| format!("\"{}\"", String::from_utf8_lossy(b)))
                        .collect();
                    parts.join(" ")
                }
                other => panic!("unexpected {other:?}"),
            },
        })
        .collect();
    lines.sort();
    (r.metadata.response_code, lines)
}

#[test]
fn every_record_is_what_podns_answers_and_every_name_is_there() {
    let table = world();
    let zones = zones();
    let cfg = cfg();
    let answerer = Answerer::new(
        table.clone(),
        AnswerConfig {
            zones: zones.clone(),
            ttl: cfg.ttl,
            negative_ttl: cfg.negative_ttl,
            ns_addrs: cfg.ns_addrs.clone(),
        },
    );
    let texts = render_zones(&table.snapshot(), &zones, &cfg);
    let origins: Vec<&str> = texts.iter().map(|z| z.origin.as_str()).collect();
    assert_eq!(
        origins,
        [
            "cluster.local.",
            "example.org.",
            "in-addr.arpa.",
            "ip6.arpa."
        ]
    );
    let mut owners = std::collections::BTreeSet::new();
    for z in &texts {
        let (origin, lines) = parse(&z.text);
        assert_eq!(origin, z.origin);
        let mut sets: BTreeMap<(String, String), Vec<Line>> = BTreeMap::new();
        for l in lines {
            owners.insert(l.owner.clone());
            sets.entry((l.owner.clone(), l.rtype.clone()))
                .or_default()
                .push(l);
        }
        for ((owner, rtype), mut want) in sets {
            if rtype == "SOA" {
                continue; // the serial differs by design (generation vs hash)
            }
            want.sort();
            let (rcode, got) = podns_says(&answerer, &owner, &rtype);
            assert_eq!(rcode, ResponseCode::NoError, "{owner} {rtype}");
            assert_eq!(got, want, "{owner} {rtype}");
        }
    }
    // Every name with data, in every zone, made it into the text.
    for (key, _) in table.snapshot() {
        if key.ends_with(".arpa") {
            assert!(owners.contains(&format!("{key}.")), "{key}");
        } else {
            for z in ["cluster.local.", "example.org."] {
                assert!(owners.contains(&format!("{key}.{z}")), "{key}.{z}");
            }
        }
    }
    for must in [
        "gang-0.gang.ml.svc.cluster.local.",
        "_nccl._tcp.gang.ml.svc.example.org.",
        "10-1-0-3.ml.pod.cluster.local.",
        "db.web.svc.cluster.local.",
        "1.0.1.10.in-addr.arpa.",
        "dns-version.cluster.local.",
        "ns.dns.example.org.",
    ] {
        assert!(owners.contains(must), "{must} missing");
    }
}

#[test]
fn soa_ns_and_glue_match_the_answer_rules() {
    let table = world();
    let text = render(&table.snapshot(), &zones(), &cfg());
    assert!(text.starts_with("; podns zone cluster.local.\n$ORIGIN cluster.local.\n$TTL 5\n"));
    let serial = render_zones(&table.snapshot(), &zones(), &cfg())[0]
        .text
        .lines()
        .find(|l| l.contains("\tSOA\t"))
        .unwrap()
        .split_whitespace()
        .nth(6)
        .unwrap()
        .to_string();
    assert!(text.contains(&format!(
        "@\t5\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local. {serial} 7200 1800 86400 1\n"
    )));
    assert!(text.contains("@\t5\tIN\tNS\tns.dns.cluster.local.\n"));
    assert!(text.contains("ns.dns\t5\tIN\tA\t10.96.0.53\n"));
    assert!(text.contains("ns.dns\t5\tIN\tAAAA\tfd00::53\n"));
    assert!(text.contains("dns-version\t5\tIN\tTXT\t\"1.1.0\"\n"));
    // Reverse zones point at the first zone's server, as podns's reverse SOA does.
    assert!(text.contains(
        "$ORIGIN in-addr.arpa.\n$TTL 5\n@\t5\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local."
    ));
    assert_eq!(text.matches(SECTION_MARKER).count(), 4);
}

#[test]
fn a_cname_owner_has_nothing_else_and_srv_targets_follow_each_zone() {
    let table = world();
    let text = render(&table.snapshot(), &zones(), &cfg());
    let db: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("db.web.svc\t"))
        .collect();
    assert_eq!(
        db,
        [
            "db.web.svc\t5\tIN\tCNAME\tdb.example.com.",
            "db.web.svc\t5\tIN\tCNAME\tdb.example.com."
        ],
        "one CNAME per forward zone and nothing beside it"
    );
    assert!(text.contains(
        "_nccl._tcp.gang.ml.svc\t5\tIN\tSRV\t0 50 29500 gang-0.gang.ml.svc.example.org.\n"
    ));
    assert!(text.contains(
        "_nccl._tcp.gang.ml.svc\t5\tIN\tSRV\t0 50 29500 gang-0.gang.ml.svc.cluster.local.\n"
    ));
    // PTRs point into the first zone only.
    assert!(text.contains("1.0.1.10\t5\tIN\tPTR\tgang-0.gang.ml.svc.cluster.local.\n"));
}

#[test]
fn same_state_same_bytes_and_a_change_moves_the_serial() {
    let a = render(&world().snapshot(), &zones(), &cfg());
    let b = render(&world().snapshot(), &zones(), &cfg());
    assert_eq!(a, b, "reproducible");
    let table = world();
    let mut snap = table.snapshot();
    snap.retain(|(k, _)| k != "10-1-0-4.web.pod");
    let c = render(&snap, &zones(), &cfg());
    let serial = |t: &str| {
        t.lines()
            .find(|l| l.contains("\tSOA\t"))
            .unwrap()
            .split_whitespace()
            .nth(6)
            .unwrap()
            .to_string()
    };
    assert_ne!(serial(&a), serial(&c), "serial follows the data");
    let fixed = RenderConfig {
        serial: Some(42),
        ..cfg()
    };
    assert_eq!(serial(&render(&table.snapshot(), &zones(), &fixed)), "42");
}

#[test]
fn without_reverse_only_forward_zones_and_without_ns_address_no_glue() {
    let table = world();
    let c = RenderConfig {
        reverse: false,
        ns_addrs: vec![],
        ..cfg()
    };
    let texts = render_zones(&table.snapshot(), &zones(), &c);
    assert_eq!(texts.len(), 2);
    assert!(!texts[0].text.contains("PTR"));
    assert!(!texts[0].text.contains("ns.dns\t"));
    assert!(!texts[0].text.contains("in-addr.arpa"));
    assert_eq!(texts[1].file_name(), "example.org.zone");
}

#[test]
fn special_bytes_are_escaped() {
    assert_eq!(escape_name("a b;c"), "a\\032b\\059c");
    assert_eq!(escape_name("_http._tcp.web"), "_http._tcp.web");
    assert_eq!(quote("x\"y\\z\n"), "\"x\\\"y\\\\z\\010\"");
    let snap = vec![(
        "status.ml.rank".to_string(),
        Arc::new(Rrs {
            txt: Some("world=2 ready=\"1\"".into()),
            ..Default::default()
        }),
    )];
    let text = render(&snap, &zones()[..1], &cfg());
    assert!(text.contains("status.ml.rank\t5\tIN\tTXT\t\"world=2 ready=\\\"1\\\"\"\n"));
}
