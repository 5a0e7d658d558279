//! Index memory per pod: live heap bytes, counted by a global allocator,
//! before and after building a synced index of 10k and 100k pods.
//!
//! World: Jobs of 1,000 ranks in one namespace, one headless Service each
//! (`publishNotReadyAddresses`, no ports, as JobSet makes it); every pod
//! has hostname `<job>-<i>`, subdomain `<job>`, `app=<job>` and the nine
//! labels of a JobSet / Indexed Job pod, plus the five Job/JobSet
//! annotations `k8s::objects` keeps. Reported per pod:
//! - input: the `Vec<PodInfo>` the watcher hands over (freed by the relist);
//! - writer+table: everything the index holds once synced, input dropped;
//! - table: the name table alone (what DNS reads), after dropping the writer;
//! - peak: the most live bytes at any moment of the build (input included).
//!
//! Rows with the rank view off (`serve --no-rank-view`, the policy of the
//! other benches) and on (the `serve` default), and one whose Services
//! have a named port (`nccl`: an SRV record per member, as Kubeflow's and
//! the simulator's Services have).
//!
//! Then churn at a constant pod count, as the soak runs it: 100k pods
//! (rank view on), each replacement deletes a pod and creates its rank
//! again under a new name and a new IP. Live bytes per pod after each
//! step show what a long run's RSS does: a step as each map keyed by pod
//! names and IPs doubles once (a hash table whose deleted slots use up its
//! spare room grows when it is more than half full, and rehashes in place
//! after that), then flat.
//!
//! Run: `cargo bench --bench memory` (a plain `main`, no criterion; under a
//! minute). The target is ≤ 256 bytes per pod (BENCHMARKS.md, headline table).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use podns_server::index::{Change, Policy, Update};

use common::*;

/// `System`, counting live bytes and their high-water mark.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn add(n: usize) {
    let now = LIVE.fetch_add(n as isize, Ordering::Relaxed) + n as isize;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn sub(n: usize) {
    LIVE.fetch_sub(n as isize, Ordering::Relaxed);
}

// SAFETY: every call forwards to `System` with the caller's arguments; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        sub(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size);
            sub(layout.size());
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

struct Row {
    pods: usize,
    names: usize,
    input: isize,
    total: isize,
    table: isize,
    peak: isize,
    secs: f64,
}

/// `rank_view`: as `podns serve` runs by default (rank names, leader and
/// summary per Job, no Job objects listed), or as `--no-rank-view`.
/// `port`: each Job's Service has one named port (an SRV record per
/// member, as Kubeflow's and the simulator's Services have).
fn measure(jobs: usize, ranks: usize, rank_view: bool, port: bool) -> Row {
    let pods = jobs * ranks;
    let base = live();
    let items = job_pods(jobs, ranks, Labels::JobSet);
    let input = live() - base;
    let mut services = job_services(jobs);
    if port {
        for s in &mut services {
            s.ports = vec![nccl_port()];
        }
    }

    PEAK.store(live(), Ordering::Relaxed);
    let t = Instant::now();
    let mut w = writer_with_services_and(services, rank_policy(rank_view));
    w.apply(Update::Pod(Change::Reset {
        namespace: None,
        items, // moved: the relist consumes (and frees) the input Vec
    }));
    let secs = t.elapsed().as_secs_f64();
    assert!(w.table().is_synced());
    assert_eq!(w.pod_count(), pods);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let total = live() - base;

    let table = w.table().clone();
    let names = table.len();
    drop(w);
    let table_only = live() - base;
    drop(table);
    Row {
        pods,
        names,
        input,
        total,
        table: table_only,
        peak,
        secs,
    }
}

/// The benches' policy with the rank view on or off (on is how `podns
/// serve` runs by default; no Job objects are listed here).
fn rank_policy(rank_view: bool) -> Policy {
    Policy {
        rank_view,
        ..Policy::default()
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    println!("index memory per pod (live heap bytes; JobSet-shaped pods)");
    println!(
        "{:>6} {:>9} {:>5} {:>8} {:>8} {:>10} {:>14} {:>10} {:>10} {:>8}",
        "gang",
        "rank view",
        "port",
        "pods",
        "names",
        "input/pod",
        "writer+table",
        "table",
        "peak/pod",
        "build s"
    );
    // Gangs of 1,000 (a training job's ranks), and of three (a small
    // StatefulSet's replicas: what a gang's fixed costs weigh).
    for (ranks, rank_view, port, jobs) in [
        (1_000, false, false, 10),
        (1_000, false, false, 100),
        (1_000, true, false, 100),
        (1_000, true, true, 100),
        (3, true, false, 33_334),
    ] {
        let r = measure(jobs, ranks, rank_view, port);
        let per = |b: isize| b as f64 / r.pods as f64;
        println!(
            "{:>6} {:>9} {:>5} {:>8} {:>8} {:>10.0} {:>14.0} {:>10.0} {:>10.0} {:>8.2}",
            ranks,
            if rank_view { "on" } else { "off" },
            if port { "nccl" } else { "none" },
            r.pods,
            r.names,
            per(r.input),
            per(r.total),
            per(r.table),
            per(r.peak),
            r.secs
        );
    }
    println!("(writer+table: the index once synced, input dropped; table: the name table alone)");
    churn();
    relay_history();
}

/// The relay's memory for Pods: live bytes per object of its cache after a
/// list, and per change of its history (the new version, the change, and
/// its Protobuf event as subscribers are sent it), for the simulator's
/// training pod. Each change is one a node sees (the pod's IP and
/// readiness move), so none is skipped as unseen.
fn relay_history() {
    use podns_kapi::Kind;
    use podns_server::k8s::objects::{Relayed, SlimPod};
    use podns_server::relay::store::cache::{After, Cache, Item, Wire};
    use podns_server::relay::store::labels::ServedLabels;
    use prometheus_client::metrics::counter::Counter;
    use std::time::Duration;

    let (pods, versions) = (10_000usize, 10usize);
    let template = podns_sim::workload::sample_job_pod(false);
    let served = ServedLabels::default();
    let item = |i: usize, v: usize, rv: u64| {
        let mut p = template.clone();
        p["metadata"]["name"] = format!("llama-70b-workers-0-{i}-x7k2p").into();
        p["metadata"]["resourceVersion"] = rv.to_string().into();
        let ip = format!("10.{}.{}.{}", v, i / 256, i % 256);
        p["status"]["podIP"] = ip.clone().into();
        p["status"]["podIPs"] = serde_json::json!([{ "ip": ip }]);
        for c in p["status"]["conditions"].as_array_mut().unwrap() {
            if c["type"] == "Ready" {
                c["status"] = if v.is_multiple_of(2) { "True" } else { "False" }.into();
            }
        }
        serde_json::from_value::<SlimPod>(p).expect("the sample pod decodes")
    };
    let encode = |slim: &SlimPod| {
        let o = slim.served().expect("the sample pod is relayed");
        let r = served.read();
        Item::new(o, &|k: &str| r.serves("team-a", k)).expect("encodes")
    };

    let base = live();
    let cache = Cache::new(Kind::Pod, Duration::from_secs(3600), Counter::default());
    let mut rv = 1u64;
    let list: Vec<Item> = (0..pods)
        .map(|i| {
            rv += 1;
            encode(&item(i, 0, rv))
        })
        .collect();
    cache.relisted(None, list, rv);
    let listed = live();
    let from = rv;
    let encoded = Counter::default();
    // What serving a version costs (the slim object, as the watch decoded
    // it, to its Protobuf item), apart from what decoding it cost.
    let mut made = std::time::Duration::ZERO;
    for v in 1..=versions {
        for i in 0..pods {
            rv += 1;
            let slim = item(i, v, rv);
            let t = Instant::now();
            let it = encode(&slim);
            made += t.elapsed();
            cache.apply(it);
        }
    }
    let item_us = made.as_secs_f64() * 1e6 / (pods * versions) as f64;
    let After::Changes(changes, _) = cache.after(from, usize::MAX) else {
        panic!("the history reaches back to the list");
    };
    let event: usize = changes
        .iter()
        .map(|c| c.frame(&cache, Wire::Protobuf, c.ty, &encoded).len())
        .sum::<usize>()
        / changes.len();
    // What a JSON client costs now that only the Protobuf is kept: its
    // JSON made on demand (a list, a get, an initial event).
    let t = Instant::now();
    let json: usize = changes
        .iter()
        .take(pods)
        .map(|c| c.obj.json(Kind::Pod).len())
        .sum();
    let json_us = t.elapsed().as_secs_f64() * 1e6 / pods as f64;
    let n = changes.len();
    drop(changes);
    assert_eq!(n, pods * versions, "every change is one a node sees");
    println!(
        "relay, Pods ({pods} objects, {n} changes, Protobuf events of {event} B): \
         {:.0} live bytes per object listed, {:.0} per change of history; \
         an item made in {item_us:.2} µs a pod; \
         JSON made from the Protobuf in {json_us:.1} µs a pod ({} B)",
        (listed - base) as f64 / pods as f64,
        (live() - listed) as f64 / n as f64,
        json / pods
    );
}

/// Live bytes per pod of a synced 100k-pod index (rank view on) while
/// its pods are replaced one by one: the pod count stays 100k.
fn churn() {
    let (jobs, ranks) = (100, 1_000);
    let pods = jobs * ranks;
    // The bench's own list of the live pods' keys, counted before the base.
    let mut keys: Vec<_> = job_pods(jobs, ranks, Labels::JobSet)
        .into_iter()
        .map(|p| p.key)
        .collect();
    let base = live();
    let mut w = writer_with_services_and(job_services(jobs), rank_policy(true));
    w.apply(Update::Pod(Change::all(job_pods(
        jobs,
        ranks,
        Labels::JobSet,
    ))));
    let per = |b: isize| b as f64 / pods as f64;
    println!("churn at {pods} pods (rank view on): live bytes per pod after N replacements");
    println!("{:>12} {:>14}", "replacements", "writer+table");
    println!("{:>12} {:>14.0}", 0, per(live() - base));
    let t = Instant::now();
    let mut done = 0;
    for step in [25_000, 50_000, 75_000, 100_000, 150_000, 200_000, 300_000] {
        while done < step {
            let slot = done % pods;
            let (j, i) = (slot / ranks, slot % ranks);
            let mut p = rank_pod_with_ip(j, i, pod_ip(pods + done), Labels::JobSet);
            // A new pod name of the same length, as the Job controller's.
            p.key.name = format!("{}-{i}-{:05x}", job_name(j), (done * 0x9e37_79b1) & 0xfffff);
            w.apply(Update::Pod(Change::Delete(keys[slot].clone())));
            keys[slot] = p.key.clone();
            w.apply(Update::Pod(Change::Apply(p)));
            done += 1;
        }
        assert_eq!(w.pod_count(), pods);
        println!("{:>12} {:>14.0}", done, per(live() - base));
    }
    println!(
        "({done} replacements in {:.1} s, {:.1} µs each)",
        t.elapsed().as_secs_f64(),
        t.elapsed().as_secs_f64() * 1e6 / done as f64
    );
}
