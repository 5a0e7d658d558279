//! What the compact stream was chosen over: bytes per in-scope pod event,
//! encode and decode CPU, for the events a relay serves of the simulator's
//! training-job pods (`podns_sim::workload::sample_job_pod`, 40 jobs of 250
//! ranks, through the relay's own feed and served labels). Prints a table:
//!
//! `cargo test --release -p podns-server --lib compact_compare -- --ignored --nocapture`

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::watcher::Event;
use podns_kapi::Kind;
use podns_kapi::watch::EvType;
use serde_json::json;

use super::Relay;
use super::store::cache::{self, Item, Wire};
use crate::k8s::compact::{self, Decoded, Decoder, Dict};
use crate::k8s::objects::{Relayed, SlimPod};

const JOBS: usize = 40;
const RANKS: usize = 250;

/// A training job's pods, as a relay serves them: `running` with a node
/// and an IP, else pending (created, not scheduled).
fn pods(relay: &Relay, running: bool, rv0: u64) -> Vec<Arc<Item>> {
    let mut feed = relay.feed(Kind::Pod, None).unwrap();
    let obj = |p: &SlimPod| p.served();
    feed.on_event(&Event::<SlimPod>::Init, obj);
    let mut rv = rv0;
    for j in 0..JOBS {
        let template = podns_sim::workload::sample_job_pod(true).to_string();
        let template = template.replace("llama-70b", &format!("llama-{j}"));
        for r in 0..RANKS {
            let mut v: serde_json::Value = serde_json::from_str(&template).unwrap();
            rv += 1;
            let m = &mut v["metadata"];
            m["name"] = json!(format!("llama-{j}-workers-0-{r}-x{:04}", rv % 9973));
            m["uid"] = json!(format!("9f1c2e4a-{j:04}-4b1e-8c3d-{rv:012}"));
            m["resourceVersion"] = json!(rv.to_string());
            m["labels"]["batch.kubernetes.io/job-completion-index"] = json!(r.to_string());
            m["annotations"]["batch.kubernetes.io/job-completion-index"] = json!(r.to_string());
            v["spec"]["hostname"] = json!(format!("llama-{j}-workers-0-{r}"));
            if running {
                let n = j * RANKS + r;
                v["spec"]["nodeName"] = json!(format!("gpu-node-{:05}", n / 8));
                v["status"]["podIP"] =
                    json!(format!("10.{}.{}.{}", n >> 16, (n >> 8) & 255, n & 255));
                v["status"]["podIPs"] = json!([{"ip": v["status"]["podIP"]}]);
                v["status"]["hostIP"] = json!(format!("10.128.{}.{}", (n / 8) >> 8, (n / 8) & 255));
            } else {
                v["spec"].as_object_mut().unwrap().remove("nodeName");
                v["status"] = json!({"phase": "Pending"});
            }
            let pod: SlimPod = serde_json::from_value(v).unwrap();
            feed.on_event(&Event::InitApply(pod), obj);
        }
    }
    feed.seen().store(rv, std::sync::atomic::Ordering::Release);
    feed.on_event(&Event::<SlimPod>::InitDone, obj);
    let snap = relay.cache(Kind::Pod).unwrap().snapshot(|_| true);
    snap.items
}

struct Row {
    name: String,
    bytes: f64,
    encode_ns: f64,
    decode_ns: f64,
    once: usize,
}

fn time<T>(n: usize, mut f: impl FnMut(usize) -> T) -> (f64, Vec<T>) {
    let t = Instant::now();
    let out: Vec<T> = (0..n).map(&mut f).collect();
    (t.elapsed().as_nanos() as f64 / n as f64, out)
}

/// zstd per event, with `dict` (a trained or raw dictionary) or none.
fn zstd_row(name: &str, items: &[Arc<Item>], dict: Option<Arc<Dict>>, once: usize) -> Row {
    let (encode_ns, frames) = time(items.len(), |i| {
        let p = compact::pack(items[i].raw(), dict.as_ref());
        let mut f = compact::event_head(EvType::Modified, &p).to_vec();
        f.extend_from_slice(&p.data);
        f
    });
    let bytes = frames.iter().map(Vec::len).sum::<usize>() as f64 / items.len() as f64;
    let mut dec = Decoder::default();
    if let Some(d) = &dict {
        dec.push(&d.frame());
    }
    let (decode_ns, _) = time(frames.len(), |i| {
        dec.push(&frames[i]);
        match dec.next_event() {
            Ok(Some(Decoded::Event(_, raw))) => assert_eq!(raw, items[i].raw()),
            other => panic!("{other:?}"),
        }
    });
    Row {
        name: name.into(),
        bytes,
        encode_ns,
        decode_ns,
        once,
    }
}

fn samples(items: &[Arc<Item>]) -> Vec<&[u8]> {
    items.iter().step_by(5).map(|i| i.raw()).collect()
}

#[test]
#[ignore]
fn compact_compare() {
    let relay = Relay::new(
        Duration::from_secs(600),
        vec![],
        Duration::from_secs(60),
        Default::default(),
    );
    let running = pods(&relay, true, 1_000_000);
    let n = running.len();
    let cache = relay.cache(Kind::Pod).unwrap();
    let mut rows = Vec::new();

    // Today: Kubernetes Protobuf, the relay's frame.
    let encoded = prometheus_client::metrics::counter::Counter::default();
    let (encode_ns, frames) = time(n, |i| {
        cache::frame(
            cache,
            Wire::Protobuf,
            EvType::Modified,
            &running[i],
            &encoded,
        )
        .parts()
        .map(|b| b.len())
        .sum::<usize>()
    });
    let (decode_ns, _) = time(n, |i| {
        let f =
            podns_kapi::pbenc::watch_frame("MODIFIED", running[i].pb_object(Kind::Pod).to_vec());
        crate::k8s::pb::watch_event::<SlimPod>(&f[4..]).unwrap()
    });
    let pb = frames.iter().sum::<usize>() as f64 / n as f64;
    rows.push(Row {
        name: "Kubernetes Protobuf (today)".into(),
        bytes: pb,
        encode_ns,
        decode_ns,
        once: 0,
    });

    // (b) label keys as indices into a table sent once: what the keys of
    // each event weigh, less a byte per key (an estimate from the bytes;
    // not built).
    let keys: f64 = running
        .iter()
        .map(|i| {
            let v: serde_json::Value = serde_json::from_slice(&i.json(Kind::Pod)).unwrap();
            v["metadata"]["labels"]
                .as_object()
                .map_or(0, |m| m.keys().map(|k| k.len() - 1).sum::<usize>())
        })
        .sum::<usize>() as f64
        / n as f64;
    rows.push(Row {
        name: "(b) label keys as table indices (estimate)".into(),
        bytes: pb - keys,
        encode_ns: f64::NAN,
        decode_ns: f64::NAN,
        once: 0,
    });

    rows.push(zstd_row(
        "(a0) zstd per event, no dictionary",
        &running,
        None,
        0,
    ));
    let s = samples(&running);
    for size in [512, 1024, 2048, 4096, 8192] {
        let t = Instant::now();
        let d = Arc::new(Dict::train(1, &s, size).unwrap());
        let train_ms = t.elapsed().as_millis();
        let once = d.frame().len();
        let mut r = zstd_row(
            &format!(
                "(a) zstd, dictionary of {size} B trained on {} objects in {train_ms} ms",
                s.len()
            ),
            &running,
            Some(d),
            once,
        );
        r.once = once;
        rows.push(r);
    }
    // A raw dictionary: 8 objects' bytes, no training.
    let raw: Vec<u8> = s.iter().take(8).flat_map(|b| b.to_vec()).collect();
    let d = Arc::new(Dict::new(1, &raw).unwrap());
    let once = d.frame().len();
    rows.push(zstd_row(
        "(a') zstd, raw dictionary of 8 objects",
        &running,
        Some(d),
        once,
    ));

    // (c) a delta against the previous version: a pod pending, then
    // running (a MODIFIED the relay serves), as zstd with the previous
    // version as its dictionary; and with the trained dictionary for the
    // pending one (an ADDED has no previous version).
    let relay2 = Relay::new(
        Duration::from_secs(600),
        vec![],
        Duration::from_secs(60),
        Default::default(),
    );
    let pending = pods(&relay2, false, 1_000_000);
    let by_name: std::collections::HashMap<&str, &Arc<Item>> =
        pending.iter().map(|i| (i.name.as_str(), i)).collect();
    let pairs: Vec<(&[u8], &[u8])> = running
        .iter()
        .filter_map(|i| Some((by_name.get(i.name.as_str())?.raw(), i.raw())))
        .collect();
    let (encode_ns, frames) = time(pairs.len(), |i| {
        let mut c = zstd::bulk::Compressor::with_dictionary(3, pairs[i].0).unwrap();
        c.compress(pairs[i].1).unwrap().len() + 6
    });
    let (decode_ns, _) = time(pairs.len(), |i| {
        let mut c = zstd::bulk::Compressor::with_dictionary(3, pairs[i].0).unwrap();
        let z = c.compress(pairs[i].1).unwrap();
        let mut d = zstd::bulk::Decompressor::with_dictionary(pairs[i].0).unwrap();
        d.decompress(&z, 1 << 20).unwrap()
    });
    rows.push(Row {
        name: format!(
            "(c) delta: zstd against the previous version ({} MODIFIED pending→running; decode includes an encode)",
            pairs.len()
        ),
        bytes: frames.iter().sum::<usize>() as f64 / pairs.len() as f64,
        encode_ns,
        decode_ns,
        once: 0,
    });
    let d = Arc::new(Dict::train(1, &s, 4096).unwrap());
    let once = d.frame().len();
    let pending_rows = zstd_row(
        "(a) 4096 B dictionary, the same MODIFIED events",
        &running,
        Some(d.clone()),
        once,
    );
    rows.push(pending_rows);
    rows.push(zstd_row(
        "(a) 4096 B dictionary, pending pods (ADDED)",
        &pending,
        Some(d),
        once,
    ));

    println!(
        "\n{n} running pods of {JOBS} jobs x {RANKS} ranks, as the relay serves them; per event:\n"
    );
    println!("| encoding | bytes per event | sent once per stream | encode ns | decode ns |");
    println!("|---|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.0} | {} | {:.0} | {:.0} |",
            r.name, r.bytes, r.once, r.encode_ns, r.decode_ns
        );
    }
}
