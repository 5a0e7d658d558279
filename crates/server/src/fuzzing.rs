//! The bodies of the `cargo fuzz` targets in `fuzz/`, here so the fuzzers
//! and the corpus replay test (`tests/integration/fuzz_corpus.rs`) run the
//! very same code. Each panics on a broken invariant; libFuzzer reports
//! that as a crash.

use std::sync::OnceLock;

use hickory_proto::op::Message;
use hickory_proto::rr::Name;
use kube::core::WatchEvent;

use crate::dns::answer::{AnswerConfig, Answerer, MAX_UDP_PAYLOAD, Transport, udp_limit};
use crate::dns::testing::World;
use crate::index::testing::{PodExt, SvcExt, cluster_ip, headless, job, pod, rank_pod};
use crate::index::{Change, Policy, ServiceInfo, ServiceKind, TargetPort, Update};
use crate::k8s::pb::PbObject;
use crate::k8s::slim::{SlimEndpointSlice, SlimJob, SlimPod, SlimService};
use crate::k8s::{convert, pb};

/// A small world with every kind of name: a 40-pod headless gang with
/// hostnames and ports, a dual-stack pod, ClusterIP and ExternalName
/// Services (one chasing into the zone), and a ranked Job.
fn world() -> &'static Answerer {
    static WORLD: OnceLock<Answerer> = OnceLock::new();
    WORLD.get_or_init(|| {
        let cfg = AnswerConfig {
            zones: vec![
                Name::from_ascii("cluster.local.").expect("valid zone"),
                Name::from_ascii("training.example.").expect("valid zone"),
            ],
            ns_addrs: vec!["10.0.255.1".parse().expect("valid IP")],
            ..AnswerConfig::default()
        };
        let mut w = World::new(
            Policy {
                rank_view: true,
                ..Policy::default()
            },
            cfg,
        );
        let mut updates = vec![
            Update::Service(Change::Apply(headless("ml", "gang", "gang").port(
                Some("nccl"),
                29500,
                TargetPort::Same,
            ))),
            Update::Service(Change::Apply(cluster_ip("web", "api", "10.96.0.10").port(
                Some("http"),
                80,
                TargetPort::Same,
            ))),
            Update::Service(Change::Apply(external("web", "out", "example.com"))),
            Update::Service(Change::Apply(external(
                "web",
                "in",
                "api.web.svc.cluster.local",
            ))),
            Update::Job(Change::Apply(job("ml", "train", 4, None))),
            Update::Pod(Change::Apply(
                pod("web", "dual", "10.1.0.1")
                    .ip("fd00::1")
                    .label("app", "api"),
            )),
        ];
        for i in 0..40u8 {
            updates.push(Update::Pod(Change::Apply(
                pod("ml", &format!("gang-{i}"), &format!("10.0.0.{i}"))
                    .host(&format!("gang-{i}"), "gang")
                    .label("app", "gang")
                    .port("nccl", 29500),
            )));
        }
        for i in 0..4u32 {
            updates.push(Update::Pod(Change::Apply(rank_pod(
                "ml",
                "train",
                i,
                &format!("10.2.0.{i}"),
            ))));
        }
        for u in updates {
            w.apply(u);
        }
        w.answerer
    })
}

fn external(ns: &str, name: &str, target: &str) -> ServiceInfo {
    let mut s = cluster_ip(ns, name, "10.96.0.99");
    s.kind = ServiceKind::ExternalName(target.into());
    s.selector = None;
    s
}

/// Bytes in, through the path UDP and TCP use: never a panic, every reply
/// parses, and a UDP reply fits the payload size podns allows (RFC 6891,
/// at most 1232 bytes) or the client's 512 without EDNS.
pub fn request(data: &[u8]) {
    let a = world();
    for transport in [Transport::Udp, Transport::Tcp] {
        let Some(reply) = a.handle(data, transport) else {
            continue;
        };
        let parsed = Message::from_vec(&reply.bytes);
        assert!(parsed.is_ok(), "reply does not parse: {parsed:?}");
        match transport {
            Transport::Udp => {
                let limit = Message::from_vec(data)
                    .map(|q| udp_limit(&q))
                    .unwrap_or(MAX_UDP_PAYLOAD);
                assert!(
                    reply.bytes.len() <= usize::from(limit),
                    "udp reply of {} bytes, limit {limit}",
                    reply.bytes.len()
                );
            }
            Transport::Tcp => assert!(reply.bytes.len() <= usize::from(u16::MAX)),
        }
    }
}

/// Arbitrary bytes as a watch event's object: decode leniently, convert or
/// reject, never panic.
pub fn decode(data: &[u8]) {
    if let Ok(p) = serde_json::from_slice::<SlimPod>(data) {
        let _ = convert::pod(&p);
    }
    if let Ok(s) = serde_json::from_slice::<SlimService>(data) {
        let _ = convert::service(&s);
    }
    if let Ok(j) = serde_json::from_slice::<SlimJob>(data) {
        let _ = convert::job(&j);
    }
    if let Ok(e) = serde_json::from_slice::<SlimEndpointSlice>(data) {
        let _ = convert::endpoint_slice(&e);
    }
}

/// Arbitrary bytes through the slim Protobuf decoder as every way podns
/// meets them: a list body, a watch frame (also cut by the framer), and a
/// bare object, enveloped or not. Errors are fine, panics are not.
pub fn pb(data: &[u8]) {
    fn each<K: PbObject>(data: &[u8], conv: impl Fn(&K)) {
        if let Ok(l) = pb::list::<K>(data) {
            l.items.iter().for_each(&conv);
        }
        if let Ok(WatchEvent::Added(k) | WatchEvent::Modified(k) | WatchEvent::Deleted(k)) =
            pb::watch_event::<K>(data)
        {
            conv(&k);
        }
        conv(&K::decode_pb(data));
        if let Ok(env) = pb::envelope(data) {
            conv(&K::decode_pb(env.raw));
        }
    }
    each::<SlimPod>(data, |p| drop(convert::pod(p)));
    each::<SlimService>(data, |s| drop(convert::service(s)));
    each::<SlimJob>(data, |j| drop(convert::job(j)));
    each::<SlimEndpointSlice>(data, |e| drop(convert::endpoint_slice(e)));
    // The stream path: frames cut from the same bytes.
    let mut f = pb::Framer::default();
    f.push(data);
    while let Ok(Some(frame)) = f.next_frame() {
        let _ = pb::watch_event::<SlimPod>(frame);
    }
}

/// A small index and eight questions decoded from the bytes
/// ([`crate::dns::agreement::from_bytes`]): whenever the wire fast path
/// answers, its reply is the general (hickory-proto) path's byte for byte,
/// over UDP and TCP. The bytes themselves are asked too, as a query.
pub fn encoders(data: &[u8]) {
    use crate::dns::agreement::{check, from_bytes};
    let (shape, asks) = from_bytes(data);
    let World { answerer, .. } = shape.build();
    for ask in &asks {
        check(&answerer, &ask.bytes(&shape));
    }
    check(&answerer, data);
}
