//! Services without a selector, answered from their user-managed
//! EndpointSlices (`index::writer` `slices.rs`), without sockets. A child
//! of `answer::tests`, whose helpers it shares.

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

use super::{ip, ips};
use crate::dns::answer::AnswerConfig;
use crate::dns::testing::World;
use crate::index::testing::*;
use crate::index::{Change, ObjKey, Policy, Publish, Update};

fn world(policy: Policy) -> World {
    World::new(policy, AnswerConfig::default())
}

fn srv(m: &Message) -> Vec<(String, u16)> {
    let mut v: Vec<(String, u16)> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(s) => Some((s.target.to_ascii(), s.port)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn ptr(w: &World, name: &str) -> Option<String> {
    let m = w.ask(name, RecordType::PTR);
    m.answers.iter().find_map(|r| match &r.data {
        RData::PTR(p) => Some(p.0.to_ascii()),
        _ => None,
    })
}

const DB: &str = "db.ml.svc.cluster.local.";

/// An external database's three replicas, written by hand: one with a
/// hostname, one without, one terminating; and a second slice for IPv6.
fn database(w: &mut World) {
    w.svc(selectorless("ml", "db"));
    w.slice(
        slice("ml", "db-v4", "db")
            .endpoint("10.2.0.1", Some("db-0"), true)
            .endpoint("10.2.0.2", None, true)
            .terminating("10.2.0.3")
            .port(Some("pg"), 5432),
    );
    w.slice(
        slice("ml", "db-v6", "db")
            .endpoint("fd00::2:1", Some("db-0"), true)
            .port(Some("pg"), 5432),
    );
}

#[test]
fn a_headless_service_without_selector_answers_from_its_slices() {
    let mut w = world(Policy::default());
    database(&mut w);
    assert_eq!(
        ips(&w.ask(DB, RecordType::A)),
        [ip("10.2.0.1"), ip("10.2.0.2")],
        "ready endpoints, not the terminating one"
    );
    assert_eq!(ips(&w.ask(DB, RecordType::AAAA)), [ip("fd00::2:1")]);
    // The hostname name holds the addresses of both families.
    let host = "db-0.db.ml.svc.cluster.local.";
    assert_eq!(ips(&w.ask(host, RecordType::A)), [ip("10.2.0.1")]);
    assert_eq!(ips(&w.ask(host, RecordType::AAAA)), [ip("fd00::2:1")]);
    // An endpoint without a hostname has its dashed name.
    assert_eq!(
        ips(&w.ask("10-2-0-2.db.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.2.0.2")]
    );
    assert_eq!(
        w.rcode("10-2-0-3.db.ml.svc.cluster.local.", RecordType::A),
        ResponseCode::NXDomain,
        "a terminating endpoint has no name"
    );
    // SRV from the slices' ports: hostname targets, else dashed ones.
    let want = vec![
        ("10-2-0-2.db.ml.svc.cluster.local.".to_string(), 5432),
        ("db-0.db.ml.svc.cluster.local.".to_string(), 5432),
    ];
    assert_eq!(
        srv(&w.ask("_pg._tcp.db.ml.svc.cluster.local.", RecordType::SRV)),
        want
    );
    let all = w.ask(DB, RecordType::SRV);
    assert_eq!(srv(&all), want, "db-0's two addresses make one record");
    assert!(!all.additionals.is_empty(), "glue for the targets");
    // PTR: the hostname name of an endpoint with a hostname, as the
    // specification says; its dashed name for one without (as a pod's
    // and as CoreDNS answers); none for a terminating one.
    assert_eq!(
        ptr(&w, "1.0.2.10.in-addr.arpa.").as_deref(),
        Some("db-0.db.ml.svc.cluster.local.")
    );
    let v6 = crate::index::names::reverse(ip("fd00::2:1"));
    assert_eq!(
        ptr(&w, &format!("{v6}.")).as_deref(),
        Some("db-0.db.ml.svc.cluster.local.")
    );
    assert_eq!(
        ptr(&w, "2.0.2.10.in-addr.arpa.").as_deref(),
        Some("10-2-0-2.db.ml.svc.cluster.local.")
    );
    assert_eq!(ptr(&w, "3.0.2.10.in-addr.arpa."), None);
    assert_eq!(
        w.rcode("3.0.2.10.in-addr.arpa.", RecordType::PTR),
        ResponseCode::NXDomain
    );

    // A slice deleted takes its names along; the other slice stays.
    w.apply(Update::Slice(Change::Delete(ObjKey::new("ml", "db-v4"))));
    assert!(ips(&w.ask(DB, RecordType::A)).is_empty());
    assert_eq!(ips(&w.ask(DB, RecordType::AAAA)), [ip("fd00::2:1")]);
    assert!(ips(&w.ask(host, RecordType::A)).is_empty());
    assert_eq!(
        w.rcode("10-2-0-2.db.ml.svc.cluster.local.", RecordType::A),
        ResponseCode::NXDomain
    );
    assert_eq!(ptr(&w, "1.0.2.10.in-addr.arpa."), None);
}

#[test]
fn not_ready_endpoints_follow_the_publish_policy() {
    let mut ready = world(Policy {
        publish: Publish::Ready,
        ..Policy::default()
    });
    let mut ip_policy = world(Policy::default());
    for w in [&mut ready, &mut ip_policy] {
        w.svc(selectorless("ml", "db"));
        w.slice(
            slice("ml", "db-1", "db")
                .endpoint("10.2.0.1", None, true)
                .endpoint("10.2.0.2", Some("warming"), false)
                .port(None, 5432),
        );
    }
    assert_eq!(ips(&ready.ask(DB, RecordType::A)), [ip("10.2.0.1")]);
    assert_eq!(
        ready.rcode("warming.db.ml.svc.cluster.local.", RecordType::A),
        ResponseCode::NXDomain
    );
    assert_eq!(srv(&ready.ask(DB, RecordType::SRV)).len(), 1);
    // --publish ip publishes not-ready endpoints, as it does pods.
    assert_eq!(
        ips(&ip_policy.ask(DB, RecordType::A)),
        [ip("10.2.0.1"), ip("10.2.0.2")]
    );
    // publishNotReadyAddresses publishes them under --publish ready too.
    ready.svc(selectorless("ml", "db").publish_not_ready());
    assert_eq!(
        ips(&ready.ask(DB, RecordType::A)),
        [ip("10.2.0.1"), ip("10.2.0.2")]
    );
    assert_eq!(
        ips(&ready.ask("warming.db.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.2.0.2")]
    );
}

#[test]
fn only_headless_services_without_a_selector_read_slices() {
    let mut w = world(Policy::default());
    // A ClusterIP Service without a selector answers its ClusterIP only.
    let mut api = cluster_ip("ml", "api", "10.96.0.9");
    api.selector = None;
    w.svc(api);
    w.slice(
        slice("ml", "api-1", "api")
            .endpoint("10.2.1.1", Some("a0"), true)
            .port(Some("http"), 8080),
    );
    assert_eq!(
        ips(&w.ask("api.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.96.0.9")]
    );
    assert_eq!(
        w.rcode("a0.api.ml.svc.cluster.local.", RecordType::A),
        ResponseCode::NXDomain
    );
    assert_eq!(ptr(&w, "1.1.2.10.in-addr.arpa."), None);
    // A headless Service with a selector answers from its pods, never
    // from a slice someone wrote for it.
    w.svc(headless("ml", "web", "web"));
    w.pod(pod("ml", "w0", "10.1.0.7").label("app", "web"));
    w.slice(slice("ml", "web-extra", "web").endpoint("10.2.2.2", None, true));
    assert_eq!(
        ips(&w.ask("web.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.7")]
    );
    assert_eq!(
        w.rcode("10-2-2-2.web.ml.svc.cluster.local.", RecordType::A),
        ResponseCode::NXDomain
    );
    // A slice whose Service does not exist publishes nothing.
    w.slice(slice("ml", "orphan-1", "orphan").endpoint("10.2.3.3", Some("o"), true));
    assert_eq!(
        w.rcode("orphan.ml.svc.cluster.local.", RecordType::A),
        ResponseCode::NXDomain
    );
    assert_eq!(ptr(&w, "3.3.2.10.in-addr.arpa."), None);
    // ... until the Service comes, in either order.
    w.svc(selectorless("ml", "orphan"));
    assert_eq!(
        ips(&w.ask("o.orphan.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.2.3.3")]
    );
    assert_eq!(
        ptr(&w, "3.3.2.10.in-addr.arpa.").as_deref(),
        Some("o.orphan.ml.svc.cluster.local.")
    );
    // The Service gains a selector: the slice no longer counts.
    w.svc(headless("ml", "orphan", "nothing"));
    assert_eq!(
        w.rcode("o.orphan.ml.svc.cluster.local.", RecordType::A),
        ResponseCode::NXDomain
    );
    assert_eq!(ptr(&w, "3.3.2.10.in-addr.arpa."), None);
}

#[test]
fn a_pod_keeps_its_own_ptr_when_a_slice_lists_its_address() {
    let mut w = world(Policy::default());
    w.svc(selectorless("ml", "db"));
    w.pod(pod("ml", "p", "10.1.0.5"));
    w.slice(slice("ml", "db-1", "db").endpoint("10.1.0.5", Some("db-0"), true));
    assert_eq!(
        ptr(&w, "5.0.1.10.in-addr.arpa.").as_deref(),
        Some("10-1-0-5.ml.pod.cluster.local.")
    );
    assert_eq!(
        ips(&w.ask("db-0.db.ml.svc.cluster.local.", RecordType::A)),
        [ip("10.1.0.5")]
    );
}

/// The names built event by event equal those of a writer that saw only
/// the final state (slices changed, moved, relisted, the Service last).
#[test]
fn incremental_slices_equal_a_fresh_build() {
    let mut w = world(Policy::default());
    w.slice(slice("ml", "s1", "db").endpoint("10.2.0.1", Some("a"), true));
    w.svc(selectorless("ml", "db"));
    w.slice(
        slice("ml", "s1", "db")
            .endpoint("10.2.0.9", Some("a"), true)
            .port(Some("pg"), 5432),
    );
    w.slice(slice("ml", "s2", "db").endpoint("10.2.0.2", Some("b"), false));
    w.slice(slice("ml", "s3", "other").endpoint("10.2.0.3", Some("c"), true));
    w.apply(Update::Slice(Change::Reset {
        namespace: None,
        items: vec![
            slice("ml", "s1", "db")
                .endpoint("10.2.0.9", Some("a"), true)
                .port(Some("pg"), 5432),
            slice("ml", "s2", "db").endpoint("10.2.0.4", Some("b"), true),
        ],
    }));
    let mut fresh = world(Policy::default());
    fresh.svc(selectorless("ml", "db"));
    fresh.slice(
        slice("ml", "s1", "db")
            .endpoint("10.2.0.9", Some("a"), true)
            .port(Some("pg"), 5432),
    );
    fresh.slice(slice("ml", "s2", "db").endpoint("10.2.0.4", Some("b"), true));
    assert_eq!(w.writer.table().snapshot(), fresh.writer.table().snapshot());
    assert_eq!(ptr(&w, "2.0.2.10.in-addr.arpa."), None);
    assert_eq!(ptr(&w, "3.0.2.10.in-addr.arpa."), None);
    assert_eq!(
        ptr(&w, "4.0.2.10.in-addr.arpa.").as_deref(),
        Some("b.db.ml.svc.cluster.local.")
    );
}
