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
use crate::k8s::objects::{
    Relayed, Served, Slim, SlimEndpointSlice, SlimJob, SlimNode, SlimPod, SlimService,
    SlimServiceCidr,
};
use crate::k8s::pb;

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

/// `$each::<K>(data, then)` for every kind podns decodes, `then` being
/// [`served_round_trip`] for those the relay serves.
macro_rules! every_kind {
    ($each:ident, $data:expr) => {
        $each::<SlimPod>($data, served_round_trip);
        $each::<SlimService>($data, served_round_trip);
        $each::<SlimJob>($data, served_round_trip);
        $each::<SlimEndpointSlice>($data, served_round_trip);
        $each::<SlimNode>($data, |_| {});
        $each::<SlimServiceCidr>($data, |_| {});
    };
}

/// Arbitrary bytes as a watch event's object: decode leniently, convert or
/// reject, never panic; what the relay serves of it decodes back to what
/// it served ([`served_round_trip`]).
pub fn decode(data: &[u8]) {
    fn each<K: Slim + serde::de::DeserializeOwned>(data: &[u8], then: impl Fn(&K)) {
        if let Ok(k) = serde_json::from_slice::<K>(data) {
            let _ = k.convert();
            then(&k);
        }
    }
    every_kind!(each, data);
}

/// Arbitrary bytes through the slim Protobuf decoder as every way podns
/// meets them: a list body, a watch frame (also cut by the framer), and a
/// bare object, enveloped or not. Errors are fine, panics are not; what
/// the relay serves of an object decodes back to what it served.
pub fn pb(data: &[u8]) {
    fn each<K: Slim>(data: &[u8], conv: impl Fn(&K)) {
        let conv = |k: &K| {
            let _ = k.convert();
            conv(k);
        };
        if let Ok(l) = pb::list::<K>(data) {
            l.items.iter().for_each(conv);
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
    every_kind!(each, data);
    // The stream path: frames cut from the same bytes.
    let mut f = pb::Framer::default();
    f.push(data);
    while let Ok(Some(frame)) = f.next_frame() {
        let _ = pb::watch_event::<SlimPod>(frame);
    }
}

/// `run` over `data` whole, then cut in two at every tenth byte: a
/// stream's decoder must not care where its reads end.
fn whole_and_cut(data: &[u8], run: impl Fn(&[&[u8]])) {
    run(&[data]);
    for cut in (0..data.len()).step_by(10) {
        run(&[&data[..cut], &data[cut..]]);
    }
}

/// Arbitrary bytes as a relay's compact stream, whole and cut in two at
/// every tenth byte: decoded frames, objects decoded as pods. Errors are
/// fine (each a `DecodeError`), panics and unbounded allocations are not.
pub fn compact(data: &[u8]) {
    use crate::k8s::compact::{Decoded, Held, content_id};
    // A node instance that holds one dictionary (a raw one), so a frame
    // naming it (its content id) decodes too.
    let held = std::sync::Arc::new(Held::default());
    let raw: &[u8] = b"metadata name namespace labels batch.kubernetes.io/job-name";
    held.keep(content_id(raw), raw);
    let run = |parts: &[&[u8]]| {
        let (mut d, _) = held.claim();
        for p in parts {
            d.push(p);
            loop {
                match d.next_event() {
                    Ok(Some(Decoded::Event(_, raw))) => {
                        let _ = SlimPod::decode_pb(&raw).convert();
                    }
                    Ok(Some(Decoded::Protobuf(raw))) => {
                        let _ = pb::watch_event::<SlimPod>(&raw);
                    }
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
        let _ = d.finish();
    };
    whole_and_cut(data, run);
}

/// Arbitrary bytes as a relay's multiplexed watch, whole and cut in two at
/// every tenth byte: outer frames split by `k8s::mux`'s decoder, each
/// inner watch's bytes (the first [`crate::k8s::mux::MAX_INNER`] indices)
/// through a compact decoder of its own, as a node instance reads them.
/// Errors are fine, panics and unbounded allocations are not.
pub fn mux(data: &[u8]) {
    use crate::k8s::compact::{Decoded, Decoder as Inner};
    use crate::k8s::mux::{Decoder, MAX_INNER, Outer};
    let run = |parts: &[&[u8]]| {
        let mut outer = Decoder::default();
        let mut inner: Vec<Option<Inner>> = Vec::new();
        for p in parts {
            outer.push(p);
            loop {
                match outer.next_frame() {
                    Ok(Some(Outer::Data(i, bytes))) if i < MAX_INNER => {
                        if inner.len() <= i {
                            inner.resize_with(i + 1, || None);
                        }
                        let d = inner[i].get_or_insert_with(Inner::default);
                        d.push(&bytes);
                        while let Ok(Some(ev)) = d.next_event() {
                            if let Decoded::Event(_, raw) = ev {
                                let _ = SlimPod::decode_pb(&raw).convert();
                            }
                        }
                    }
                    Ok(Some(Outer::End(i, status))) => {
                        if let Some(d) = inner.get_mut(i).and_then(Option::take) {
                            let _ = d.finish();
                        }
                        if let Some(s) = status {
                            let _ = serde_json::from_slice::<serde_json::Value>(&s);
                        }
                    }
                    Ok(Some(Outer::Data(..))) => return,
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
        let _ = outer.finish();
    };
    whole_and_cut(data, run);
}

/// What the relay serves of an object, when it serves it, is a fixed
/// point: its Protobuf decodes and is served again as the same bytes, and
/// its JSON decodes and is served as the same Protobuf.
pub fn served_round_trip<K: Relayed>(k: &K) {
    let Some(served) = k.served() else {
        return;
    };
    let Ok(item) = served.pb_item() else {
        return;
    };
    let raw = podns_kapi::pbenc::object(&item).expect("an item holds one object");
    let again = Served::decode(K::KIND, raw).expect("a served object decodes");
    assert_eq!(again.pb_item().ok().as_ref(), Some(&item), "{again:?}");
    let json = served.json();
    let from_json = decode_json(K::KIND, &json).expect("the served JSON decodes");
    assert_eq!(
        from_json.pb_item().ok().as_ref(),
        Some(&item),
        "{}",
        String::from_utf8_lossy(&json)
    );
}

/// JSON as the relay's clients read it, served again.
fn decode_json(kind: podns_kapi::Kind, json: &[u8]) -> Option<Served> {
    fn served<K: Relayed + serde::de::DeserializeOwned>(json: &[u8]) -> Option<Served> {
        serde_json::from_slice::<K>(json).ok()?.served()
    }
    match kind {
        podns_kapi::Kind::Pod => served::<SlimPod>(json),
        podns_kapi::Kind::Service => served::<SlimService>(json),
        podns_kapi::Kind::Job => served::<SlimJob>(json),
        podns_kapi::Kind::EndpointSlice => served::<SlimEndpointSlice>(json),
        _ => None,
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
