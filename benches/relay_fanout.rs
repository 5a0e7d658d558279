//! The relay's fan-out: one relay (`podns serve --relay-listen`) over
//! `podns sim` with JOBS x RANKS pods, pod churn at CHURN replacements a
//! second, SUBS watch subscribers (this program: real watches over TLS
//! with a ServiceAccount token, each following one node's pods in Protobuf,
//! counting bytes and events) and NODES real node instances
//! (`podns serve --relay-kubeconfig --node`).
//!
//! Measured, one run:
//! - the API server's watches (the simulator's count): the relay's, however
//!   many node instances and subscribers;
//! - relay CPU (its process, utime + stime) per second of churn, and per
//!   1,000 pod mutations;
//! - relay memory per subscriber: RSS with the subscribers open, less RSS
//!   before, over SUBS; and what the second half of them added, over
//!   SUBS/2 (the cost of one more on a relay already serving, apart from
//!   what the allocator kept of the node instances' lists);
//! - bytes per in-scope pod event per subscriber (bytes received / events
//!   received, bookmarks apart), on each wire: half the subscribers ask
//!   for Kubernetes Protobuf, half for the compact stream first (as node
//!   instances do; a relay without it answers them in Protobuf), and the
//!   dictionaries they were sent apart; and events encoded by the relay
//!   against events delivered (each change encoded once);
//! - propagation: a pod created on a node instance's node until that node
//!   instance answers its name, p50/p99, without churn and with it;
//! - node instances' RSS;
//! - for the sizing table (deploy/README.md "Size"), in the same
//!   run: the RSS and peak of a forward target (`podns serve` without a
//!   relay) over the same simulator, of the relay and of the node
//!   instances.
//!
//! Run: `cargo bench --bench relay_fanout` (release build of `podns`).
//! Knobs (env): JOBS (100), RANKS (1000), SUBS (2000), NODES (20),
//! CHURN (250 replacements/s, each a delete, a create and the kubelet's
//! status writes), DUR (20 s), PROBES (100), NAMESPACES (JOBS: a namespace
//! per job; 1 puts every job in one namespace, where node instances hold
//! their gangs only), PODNS_BIN (another build of podns to run as relay and
//! node instances, for a before/after; the simulator is this build's). Loopback only; every loop is bounded in count and time.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;

#[path = "common/procs.rs"]
mod procs;
use procs::*;

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/PID/status` figure in KiB (`VmRSS:`, `VmHWM:` the peak RSS).
fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What the subscribers of one wire received.
#[derive(Default)]
struct Received {
    bytes: AtomicU64,
    events: AtomicU64,
    bookmarks: AtomicU64,
    /// Compact stream: dictionaries (bytes, counted in `bytes` too).
    dict_bytes: AtomicU64,
    open: AtomicU64,
}

/// The media type of the compact stream.
const COMPACT: &str = "application/vnd.podns.compact.v1";

/// One subscriber: a watch of `node`'s pods from `rv`, asking for the
/// compact stream first or for Protobuf, counting the frames until
/// `until` into `pb` or `compact` by the type the relay answered with.
async fn subscribe(
    client: kube::Client,
    node: String,
    rv: String,
    compact_first: bool,
    got: [Arc<Received>; 2],
    until: Instant,
) {
    let uri = format!(
        "/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&fieldSelector=spec.nodeName%3D{node}"
    );
    let accept = if compact_first {
        "application/vnd.podns.compact.v1, application/vnd.kubernetes.protobuf;stream=watch"
    } else {
        "application/vnd.kubernetes.protobuf;stream=watch"
    };
    let req = http::Request::builder()
        .uri(uri)
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    let Ok(res) = client.send(req.map(kube::client::Body::from)).await else {
        return;
    };
    let compact = res
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(COMPACT.as_bytes()));
    let got = got[usize::from(compact)].clone();
    got.open.fetch_add(1, Ordering::Relaxed);
    let mut body = res.into_body();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let frame = tokio::select! {
            f = body.frame() => f,
            () = tokio::time::sleep_until(until.into()) => break,
        };
        let Some(Ok(frame)) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        got.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        buf.extend_from_slice(&data);
        if compact {
            // LEB128 length, then the tag: 1 dictionary, 2 event, 3 a
            // Protobuf event (bookmarks).
            loop {
                let (mut n, mut used) = (0usize, 0usize);
                while let Some(b) = buf.get(used) {
                    n |= usize::from(b & 0x7f) << (7 * used);
                    used += 1;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
                if used == 0 || buf[used - 1] & 0x80 != 0 || buf.len() < used + n {
                    break;
                }
                match buf.get(used) {
                    Some(1) => {
                        got.dict_bytes
                            .fetch_add((used + n) as u64, Ordering::Relaxed);
                    }
                    Some(2) => {
                        got.events.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        got.bookmarks.fetch_add(1, Ordering::Relaxed);
                    }
                }
                buf.drain(..used + n);
            }
            continue;
        }
        while buf.len() >= 4 {
            let n = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + n {
                break;
            }
            // The event type is the first field of the WatchEvent.
            let ev = &buf[4..4 + n];
            if ev.windows(8).take(16).any(|w| w == b"BOOKMARK") {
                got.bookmarks.fetch_add(1, Ordering::Relaxed);
            } else {
                got.events.fetch_add(1, Ordering::Relaxed);
            }
            buf.drain(..4 + n);
        }
    }
}

/// Create `probes` pods on `node` (under the headless Service `svc` of
/// `ns`) one after another, each timed from its create to `dns` answering
/// its name; the p50 and p99 in ms.
async fn propagation(
    sim: &kube::Client,
    dns: SocketAddr,
    node: &str,
    ns: &str,
    svc: &str,
    tag: &str,
    probes: u64,
) -> (f64, f64) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut ms = Vec::new();
    for i in 0..probes {
        let host = format!("probe-{tag}-{i}");
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            // Of gang `svc` (the Job's labels): the node's gangs stay.
            "metadata": {"name": host, "namespace": ns,
                         "labels": {"batch.kubernetes.io/job-name": svc, "job-name": svc}},
            "spec": {"nodeName": node, "hostname": host, "subdomain": svc,
                     "containers": [{"name": "main", "image": "probe"}]},
        });
        let name = format!("{host}.{svc}.{ns}.svc.cluster.local.");
        let start = Instant::now();
        sim_json(
            sim,
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods"),
            &body.to_string(),
        )
        .await;
        let deadline = start + Duration::from_secs(10);
        while !answers(&sock, dns, &name) && Instant::now() < deadline {}
        ms.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (jobs, ranks) = (knob("JOBS", 100), knob("RANKS", 1000));
    let (subs, nodes) = (knob("SUBS", 2000), knob("NODES", 20));
    let (churn, dur, probes) = (knob("CHURN", 250), knob("DUR", 20), knob("PROBES", 100));
    let dir = tempfile::tempdir().unwrap();
    let d = |f: &str| -> PathBuf { dir.path().join(f) };
    println!(
        "relay fan-out: {jobs} x {ranks} pods, {subs} subscribers, {nodes} node instances, churn {churn}/s for {dur} s"
    );

    let namespaces = knob("NAMESPACES", jobs).to_string();
    let extra = ["--namespaces", &namespaces, "--history", "2000000"];
    let (_sim, sim) = start_sim(dir.path(), jobs, ranks, &extra).await;
    let relay = start_relay(dir.path()).await;
    let (relay_pid, relay_dns, relay_admin) = (relay.proc.0.id(), relay.dns, relay.admin);
    let relay_client = relay.client.clone();
    let rk = d("rk.yaml");
    let stats = sim_json(&sim, "GET", "/sim/stats", "").await;
    println!(
        "API server watches with the relay alone: {}",
        stats["open_watches"]
    );
    let rss_before = rss_kib(relay_pid);

    // A forward target over the same simulator: podns without a relay.
    let plain_log = d("plain.log");
    let plain = serve(&["--kubeconfig", d("k.yaml").to_str().unwrap()], &plain_log);
    let plain_pid = plain.0.id();
    wait_for_line(&plain_log, "index synced", Duration::from_secs(600));
    let plain_synced = rss_kib(plain_pid);

    // Node instances, each on a node of its own.
    let mut node_procs = Vec::new();
    let mut node_dns = Vec::new();
    for i in 0..nodes {
        let log = d(&format!("node-{i}.log"));
        let node = format!("gpu-node-{i:05}");
        let p = serve(
            &[
                "--relay-kubeconfig",
                rk.to_str().unwrap(),
                "--node",
                &node,
                "--relay-dns",
                &relay_dns.to_string(),
            ],
            &log,
        );
        node_dns.push((node, log, p.0.id()));
        node_procs.push(p);
    }
    let mut node_addrs = Vec::new();
    for (node, log, pid) in &node_dns {
        let dns = listening(log, "listening dns udp ");
        wait_for_line(log, "namespace in scope", Duration::from_secs(120));
        node_addrs.push((node.clone(), dns, *pid));
    }

    // The subscribers, from the relay's current version.
    let rv = sim_json(
        &relay_client,
        "GET",
        "/api/v1/namespaces/team-0/services",
        "",
    )
    .await["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let got: [Arc<Received>; 2] = Default::default();
    let until = Instant::now() + Duration::from_secs(dur + 30);
    let per_node = 8;
    let node_count = (jobs * ranks).div_ceil(per_node).max(1);
    let mut tasks = Vec::new();
    // Opened in two halves: the RSS the second half adds is the cost of a
    // subscriber on a relay already serving watches, apart from what the
    // allocator kept of the node instances' lists.
    let half = subs / 2;
    let rss_nodes = rss_kib(relay_pid);
    let mut rss_half = rss_nodes;
    for (from, to) in [(0, half), (half, subs)] {
        for i in from..to {
            let node = format!("gpu-node-{:05}", (nodes + i) % node_count);
            tasks.push(tokio::spawn(subscribe(
                relay_client.clone(),
                node,
                rv.clone(),
                i % 2 == 1,
                got.clone(),
                until,
            )));
        }
        let t0 = Instant::now();
        let open = |g: &[Arc<Received>; 2]| {
            g.iter()
                .map(|r| r.open.load(Ordering::Relaxed))
                .sum::<u64>()
        };
        while open(&got) < to && t0.elapsed() < Duration::from_secs(60) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        if to == half {
            rss_half = rss_kib(relay_pid);
        }
    }
    let rss_subs = rss_kib(relay_pid);
    let stats = sim_json(&sim, "GET", "/sim/stats", "").await;
    println!(
        "subscribers open: {} in Protobuf and {} in the compact stream, of {subs}; API server watches: {} (with {nodes} node instances and {subs} subscribers on the relay)",
        got[0].open.load(Ordering::Relaxed),
        got[1].open.load(Ordering::Relaxed),
        stats["open_watches"]
    );
    println!(
        "relay RSS: {} KiB before, {} KiB with the subscribers: {:.1} KiB per subscriber",
        rss_before,
        rss_subs,
        (rss_subs.saturating_sub(rss_before)) as f64 / subs as f64
    );
    println!(
        "relay RSS with the node instances {} KiB, with {half} subscribers {} KiB, with {subs} {} KiB: {:.1} KiB per subscriber of the second half",
        rss_nodes,
        rss_half,
        rss_subs,
        (rss_subs.saturating_sub(rss_half)) as f64 / (subs - half).max(1) as f64
    );

    // Propagation without churn.
    let (node, dns, _) = node_addrs[0].clone();
    let (p50, p99) = propagation(&sim, dns, &node, "team-0", "train-0", "idle", probes).await;
    println!(
        "propagation to a node instance, no churn: p50 {p50:.1} ms, p99 {p99:.1} ms ({probes} pods)"
    );

    // Churn.
    let m0 = sim_json(&sim, "GET", "/sim/stats", "").await["pod_mutations"]
        .as_u64()
        .unwrap_or(0);
    let load = |g: &[Arc<Received>; 2]| {
        g.each_ref().map(|r| {
            (
                r.bytes.load(Ordering::Relaxed),
                r.events.load(Ordering::Relaxed),
                r.dict_bytes.load(Ordering::Relaxed),
            )
        })
    };
    let before = load(&got);
    let enc0 = metric(relay_admin, "podns_relay_events_encoded_total");
    let sent0 = metric(relay_admin, "podns_relay_events_sent_total");
    let c0 = cpu_seconds(relay_pid);
    let w0 = Instant::now();
    sim_json(
        &sim,
        "POST",
        "/sim/churn",
        &format!("{{\"rate\": {churn}, \"seconds\": {dur}}}"),
    )
    .await;
    let (p50c, p99c) = propagation(&sim, dns, &node, "team-0", "train-0", "churn", probes).await;
    let left = Duration::from_secs(dur).saturating_sub(w0.elapsed());
    tokio::time::sleep(left + Duration::from_secs(2)).await;
    let secs = w0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(relay_pid) - c0;
    let m1 = sim_json(&sim, "GET", "/sim/stats", "").await["pod_mutations"]
        .as_u64()
        .unwrap_or(0);
    let after = load(&got);
    let enc1 = metric(relay_admin, "podns_relay_events_encoded_total");
    let sent1 = metric(relay_admin, "podns_relay_events_sent_total");
    let mutations = m1 - m0;
    println!(
        "propagation to a node instance under churn: p50 {p50c:.1} ms, p99 {p99c:.1} ms ({probes} pods)"
    );
    println!(
        "churn: {mutations} pod mutations in {secs:.1} s ({:.0}/s); relay CPU {:.2} s = {:.0}% of a core, {:.1} CPU-ms per 1,000 mutations",
        mutations as f64 / secs,
        cpu,
        100.0 * cpu / secs,
        1000.0 * cpu / (mutations.max(1) as f64 / 1000.0)
    );
    for (i, wire) in ["Protobuf", "compact stream"].into_iter().enumerate() {
        let ((b0, e0, d0), (b1, e1, d1)) = (before[i], after[i]);
        println!(
            "{wire} subscribers got {} events, {} bytes: {:.0} B per in-scope pod event, {:.0} B without the dictionaries ({} B of them, each sent once per stream; {} B before the churn)",
            e1 - e0,
            b1 - b0,
            (b1 - b0) as f64 / (e1 - e0).max(1) as f64,
            (b1 - b0 - (d1 - d0)) as f64 / (e1 - e0).max(1) as f64,
            d1 - d0,
            d0
        );
    }
    println!(
        "the relay encoded {} events and sent {} to all its watches ({:.1} sends per encoding)",
        enc1 - enc0,
        sent1 - sent0,
        (sent1 - sent0) / (enc1 - enc0).max(1.0)
    );
    println!(
        "bookmarks: {}",
        got.iter()
            .map(|r| r.bookmarks.load(Ordering::Relaxed))
            .sum::<u64>()
    );
    let mut rss: HashMap<String, u64> = HashMap::new();
    for (node, _, pid) in &node_addrs {
        rss.insert(node.clone(), rss_kib(*pid));
    }
    let mut v: Vec<u64> = rss.values().copied().collect();
    v.sort();
    println!(
        "node instances' RSS: min {} KiB, median {} KiB, max {} KiB; relay RSS at the end {} KiB",
        v[0],
        v[v.len() / 2],
        v[v.len() - 1],
        rss_kib(relay_pid)
    );
    println!(
        "sizing: forward target RSS {} KiB after sync, {} KiB at the end, peak {} KiB; relay RSS {} KiB after sync, {} KiB at the end, peak {} KiB; node instances' peak max {} KiB",
        plain_synced,
        rss_kib(plain_pid),
        status_kib(plain_pid, "VmHWM:"),
        rss_before,
        rss_kib(relay_pid),
        status_kib(relay_pid, "VmHWM:"),
        node_addrs
            .iter()
            .map(|(_, _, pid)| status_kib(*pid, "VmHWM:"))
            .max()
            .unwrap_or(0)
    );
    for t in tasks {
        t.abort();
    }
    drop(plain);
    drop(node_procs);
}
