//! What a pod costs podns to read, JSON (the slim serde path) against
//! Protobuf (the slim decoder of `k8s::objects`), for a realistic and a
//! `--lean-pods` rank exactly as the simulator writes them: decode time per
//! pod (bare object and whole watch event), and the bytes each encoding
//! puts on the wire per pod in a list and per watch event (printed first).
//!
//! `prost` and `prost_list` decode the same bytes with prost into the
//! `k8s-pb` types generated from Kubernetes' `.proto` files: the
//! alternative to keeping our own decoder. They stop at the generated
//! types, without the further copy into the slim types, so they are a
//! lower bound of that path's cost. `*_list` decode one whole list body of
//! [`LIST_PODS`] pods, magic and envelope included: what a cold start
//! spends its CPU on.
//!
//! Run: `cargo bench --bench decode` (about a minute).
//!
//! The process allocator is mimalloc, as in `podns` itself (`src/main.rs`):
//! a decode is mostly small allocations, so the allocator is part of what a
//! pod costs.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kube::core::WatchEvent;

use podns_server::k8s::objects::{Slim, SlimPod};
use podns_server::k8s::pb;
use podns_sim::pbenc;
use podns_sim::store::Kind;
use podns_sim::workload::sample_job_pod;
use prost::Message;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One pod in both encodings, as a bare object and as a watch event.
struct Encoded {
    json: Vec<u8>,
    json_event: Vec<u8>,
    pb: Vec<u8>,
    pb_list_item: Vec<u8>,
    pb_frame: Vec<u8>,
}

fn encoded(lean: bool) -> Encoded {
    let json = serde_json::to_vec(&sample_job_pod(lean)).expect("pod serializes");
    let mut json_event = br#"{"type":"MODIFIED","object":"#.to_vec();
    json_event.extend_from_slice(&json);
    json_event.extend_from_slice(b"}\n");
    let pb_list_item = pbenc::list_item(Kind::Pod, &json).expect("pod encodes");
    let pb = pbenc::object(&pb_list_item).expect("a list item").to_vec();
    let pb_frame = pbenc::watch_frame("MODIFIED", pbenc::envelope("v1", "Pod", pb.clone()));
    Encoded {
        json,
        json_event,
        pb,
        pb_list_item,
        pb_frame,
    }
}

/// Pods in the list of the `*_list` benches.
const LIST_PODS: usize = 1000;

/// A whole Protobuf list body of `n` copies of the pod, as the simulator
/// sends it.
fn pb_list(e: &Encoded, n: usize) -> Vec<u8> {
    let mut body = pbenc::list_head(Kind::Pod, 1, None, e.pb_list_item.len() * n);
    for _ in 0..n {
        body.extend_from_slice(&e.pb_list_item);
    }
    body
}

/// The prost path: magic, `runtime.Unknown`, then the generated `PodList`.
fn prost_list(body: &[u8]) -> k8s_pb::api::core::v1::PodList {
    let inner = body.strip_prefix(pb::MAGIC).expect("magic");
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(inner).expect("an envelope");
    k8s_pb::api::core::v1::PodList::decode(unknown.raw.as_deref().unwrap_or_default())
        .expect("a list")
}

fn print_sizes(name: &str, e: &Encoded) {
    // In a list a JSON pod is its object and a comma; a Protobuf pod is its
    // `items` field (tag, length, object). A JSON event is one line; a
    // Protobuf event is a length-prefixed, enveloped frame.
    let (jl, pl) = (e.json.len() + 1, e.pb_list_item.len());
    let (je, pe) = (e.json_event.len(), e.pb_frame.len());
    println!(
        "{name:9} bytes/pod in a list: json {jl}, protobuf {pl} ({:.0}%); \
         per watch event: json {je}, protobuf {pe} ({:.0}%)",
        100.0 * pl as f64 / jl as f64,
        100.0 * pe as f64 / je as f64,
    );
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    g.measurement_time(Duration::from_secs(3));
    for (name, lean) in [("realistic", false), ("lean", true)] {
        let e = encoded(lean);
        print_sizes(name, &e);
        g.bench_with_input(BenchmarkId::new("json", name), &e, |b, e| {
            b.iter(|| serde_json::from_slice::<SlimPod>(black_box(&e.json)).expect("decodes"))
        });
        g.bench_with_input(BenchmarkId::new("protobuf", name), &e, |b, e| {
            b.iter(|| SlimPod::decode_pb(black_box(&e.pb)))
        });
        g.bench_with_input(BenchmarkId::new("prost", name), &e, |b, e| {
            b.iter(|| k8s_pb::api::core::v1::Pod::decode(black_box(&e.pb[..])).expect("decodes"))
        });
        let list = pb_list(&e, LIST_PODS);
        assert_eq!(
            pb::list::<SlimPod>(&list).expect("decodes").items.len(),
            LIST_PODS
        );
        assert_eq!(prost_list(&list).items.len(), LIST_PODS);
        g.bench_with_input(BenchmarkId::new("protobuf_list", name), &list, |b, l| {
            b.iter(|| pb::list::<SlimPod>(black_box(l)).expect("decodes"))
        });
        g.bench_with_input(BenchmarkId::new("prost_list", name), &list, |b, l| {
            b.iter(|| prost_list(black_box(l)))
        });
        g.bench_with_input(BenchmarkId::new("json_event", name), &e, |b, e| {
            b.iter(|| {
                let line = &e.json_event[..e.json_event.len() - 1];
                serde_json::from_slice::<WatchEvent<SlimPod>>(black_box(line)).expect("decodes")
            })
        });
        g.bench_with_input(BenchmarkId::new("protobuf_event", name), &e, |b, e| {
            b.iter(|| pb::watch_event::<SlimPod>(black_box(&e.pb_frame[4..])).expect("decodes"))
        });
    }
    g.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
