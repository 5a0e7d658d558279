//! A DaemonSet rollout of NODES node instances, before and after
//! `--state-dir`, in one run: `podns sim` (JOBS x RANKS pods) → one relay
//! (`podns serve --relay-listen`) → NODES node instances, each on a node
//! of its own, reading the relay through a loopback TCP proxy that counts
//! the bytes the relay sends. Each phase starts the node instances, waits
//! until each holds its scope, lets them save it, then restarts them in
//! waves of WAVE (SIGTERM, wait for the exit, start again, as a
//! DaemonSet's maxUnavailable does) and measures, for the rollout:
//! - the bytes the relay sent the node instances (through the proxy);
//! - the lists: watches that started by listing (`podns_watch_events_total
//!   {event="init"}` less those started from the saved scope,
//!   `podns_node_state_watches_total{result="saved"}`);
//! - per node instance, the time from its start to holding its scope and
//!   answering one of its node's ranks itself (`podns_node_scope_namespaces`
//!   ≥ 1 and the name answered), p50 / max.
//!
//! - the relay's memory per node instance with all its watches open: its
//!   RSS once every node instance serves, less its RSS before they
//!   started, over NODES; and its connections and watches then.
//!
//! The phases: a rollout that relists (one request per watch, as before
//! the multiplexed watch), then with `--state-dir` ROUNDS times each way,
//! alternated: one request per watch (`--no-watch-mux` on the node
//! instances), and every watch of a node instance in one multiplexed
//! request (`k8s::mux`). Last, what one bare TLS connection costs the
//! relay: BARE clients each holding one idle kept-alive connection (a
//! `GET /version` done), its RSS delta over BARE.
//!
//! Run: `cargo bench --bench rollout`. Knobs (env): JOBS (10), RANKS (500),
//! NODES (100), WAVE (10), ROUNDS (2), BARE (500). Loopback only; every
//! wait is bounded.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "common/procs.rs"]
mod procs;
use procs::*;

/// SIGTERM, then wait for the exit (bounded: SIGKILL after 20 s).
fn stop(mut p: Proc) {
    unsafe { libc::kill(p.0.id() as i32, libc::SIGTERM) };
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        if let Ok(Some(_)) = p.0.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A TCP proxy on loopback to `to`, counting the bytes `to` sends.
async fn counting_proxy(to: SocketAddr, sent: Arc<AtomicU64>) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = l.accept().await {
            let sent = sent.clone();
            tokio::spawn(async move {
                let Ok(out) = tokio::net::TcpStream::connect(to).await else {
                    return;
                };
                let (mut ir, mut iw) = inbound.into_split();
                let (mut or, mut ow) = out.into_split();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut ir, &mut ow).await;
                    let _ = ow.shutdown().await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match or.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            sent.fetch_add(n as u64, Ordering::Relaxed);
                            if iw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                up.abort();
            });
        }
    });
    addr
}

/// One node instance: its node, a rank name there, its state directory.
struct Node {
    node: String,
    rank: String,
    state: Option<PathBuf>,
    log: PathBuf,
    /// Its watches in one multiplexed request (else `--no-watch-mux`).
    mux: bool,
}

struct Up {
    proc: Proc,
    dns: SocketAddr,
    admin: SocketAddr,
}

fn start(n: &Node, kubeconfig: &Path, relay_dns: SocketAddr) -> Up {
    let mut args = vec![
        format!("--relay-kubeconfig={}", kubeconfig.display()),
        format!("--node={}", n.node),
        format!("--relay-dns={relay_dns}"),
        "--shutdown-grace=0s".into(),
    ];
    if let Some(s) = &n.state {
        args.push(format!("--state-dir={}", s.display()));
    }
    if !n.mux {
        args.push("--no-watch-mux".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let proc = serve(&args, &n.log);
    let dns = listening(&n.log, "listening dns udp ");
    let admin = listening(&n.log, "listening admin http ");
    Up { proc, dns, admin }
}

/// From now until `up` holds its scope and answers its rank itself.
fn serving(up: &Up, rank: &str, since: Instant) -> Duration {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let end = Instant::now() + Duration::from_secs(120);
    while Instant::now() < end {
        if metric(up.admin, "podns_node_scope_namespaces") >= 1.0 && answers(&sock, up.dns, rank) {
            return since.elapsed();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("{rank} not served in 120 s");
}

/// Watches that listed: list starts less those from the saved scope.
fn lists(up: &Up) -> f64 {
    metric(
        up.admin,
        "podns_watch_events_total{resource=\"pods\",event=\"init\"}",
    ) + metric(
        up.admin,
        "podns_watch_events_total{resource=\"services\",event=\"init\"}",
    ) + metric(
        up.admin,
        "podns_watch_events_total{resource=\"jobs\",event=\"init\"}",
    ) + metric(
        up.admin,
        "podns_watch_events_total{resource=\"endpointslices\",event=\"init\"}",
    ) - metric(up.admin, "podns_node_state_watches_total{result=\"saved\"}")
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The relay with every node instance up: its RSS over theirs (KiB per
/// node instance), its connections and watches.
struct Held {
    kib_per_node: f64,
    connections: f64,
    watches: f64,
}

/// One phase: start every node instance, let them settle and save, roll
/// them out in waves; (bytes sent during the rollout, lists, times, the
/// relay with them all up).
async fn phase(
    nodes: &[Node],
    kubeconfig: &Path,
    relay: &Relay,
    sent: &AtomicU64,
    wave: usize,
) -> (u64, f64, Vec<Duration>, Held) {
    let relay_dns = relay.dns;
    let pid = relay.proc.0.id();
    let rss_before = rss_kib(pid);
    let mut ups = Vec::new();
    for n in nodes {
        let t = Instant::now();
        let up = start(n, kubeconfig, relay_dns);
        serving(&up, &n.rank, t);
        ups.push(Some(up));
    }
    // Every saved scope written at least once (every 5 s) before the rollout.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let held = Held {
        kib_per_node: rss_kib(pid).saturating_sub(rss_before) as f64 / nodes.len() as f64,
        connections: metric(relay.admin, "podns_relay_connections "),
        watches: metric(relay.admin, "podns_relay_watches "),
    };
    let before = sent.load(Ordering::Relaxed);
    let (mut listed, mut times) = (0.0, Vec::new());
    for chunk in (0..nodes.len()).collect::<Vec<_>>().chunks(wave) {
        for &i in chunk {
            stop(ups[i].take().unwrap().proc);
        }
        let mut restarted = Vec::new();
        for &i in chunk {
            let t = Instant::now();
            restarted.push((i, t, start(&nodes[i], kubeconfig, relay_dns)));
        }
        for (i, t, up) in restarted {
            times.push(serving(&up, &nodes[i].rank, t));
            ups[i] = Some(up);
        }
    }
    // The restarted instances' watches settle (a 410 relist would show).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for up in ups.iter().flatten() {
        listed += lists(up);
    }
    let bytes = sent.load(Ordering::Relaxed) - before;
    for up in ups.into_iter().flatten() {
        stop(up.proc);
    }
    times.sort();
    // The node instances' connections closed on the relay.
    tokio::time::sleep(Duration::from_secs(2)).await;
    (bytes, listed, times, held)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (jobs, ranks) = (knob("JOBS", 10), knob("RANKS", 500));
    let (count, wave) = (knob("NODES", 100) as usize, knob("WAVE", 10) as usize);
    let dir = tempfile::tempdir().unwrap();
    let d = |f: &str| -> PathBuf { dir.path().join(f) };
    println!("rollout: {jobs} x {ranks} pods, {count} node instances in waves of {wave}");
    let (_sim, _api) = start_sim(dir.path(), jobs, ranks, &[]).await;
    let relay = start_relay(dir.path()).await;
    let relay_client = relay.client.clone();
    let rk = d("rk.yaml");
    // The node instances read the relay through the counting proxy.
    let text = std::fs::read_to_string(&rk).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    let relay_addr: SocketAddr = server.trim_start_matches("https://").parse().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let front = counting_proxy(relay_addr, sent.clone()).await;
    let nk = d("node.yaml");
    std::fs::write(
        &nk,
        text.replace(&relay_addr.to_string(), &front.to_string()),
    )
    .unwrap();

    // NODES nodes, each with a rank name (hostname.subdomain.ns) on it.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(relay_client);
    let list = pods.list(&Default::default()).await.unwrap();
    let mut by_node: Vec<(String, String)> = Vec::new();
    for p in list.items {
        let (Some(spec), Some(ns)) = (p.spec, p.metadata.namespace) else {
            continue;
        };
        let (Some(node), Some(h), Some(sub)) = (spec.node_name, spec.hostname, spec.subdomain)
        else {
            continue;
        };
        if !by_node.iter().any(|(n, _)| *n == node) {
            by_node.push((node, format!("{h}.{sub}.{ns}.svc.cluster.local.")));
        }
    }
    by_node.truncate(count);
    assert_eq!(by_node.len(), count, "not enough nodes with pods");

    // (state, multiplexed): a relist first, then alternated rounds.
    let mut phases = vec![(false, false)];
    for _ in 0..knob("ROUNDS", 2) {
        phases.extend([(true, false), (true, true)]);
    }
    let mut relist = 0;
    let mut results: Vec<(bool, u64, f64)> = Vec::new();
    for (p, &(with_state, mux)) in phases.iter().enumerate() {
        let nodes: Vec<Node> = by_node
            .iter()
            .enumerate()
            .map(|(i, (node, rank))| Node {
                node: node.clone(),
                rank: rank.clone(),
                state: with_state.then(|| d(&format!("state-{p}-{i}"))),
                log: d(&format!("node-{i}-{p}.log")),
                mux,
            })
            .collect();
        let (bytes, listed, times, held) = phase(&nodes, &nk, &relay, &sent, wave).await;
        let p50 = times[times.len() / 2];
        let max = *times.last().unwrap();
        let label = match (with_state, mux) {
            (false, _) => "relist (one request per watch)",
            (true, false) => "--state-dir, one request per watch",
            (true, true) => "--state-dir, multiplexed",
        };
        println!(
            "{label}: relay sent {bytes} B for the rollout ({} B per node instance), {listed} lists, start to serving p50 {p50:?} max {max:?}; relay with all up: {:.1} KiB RSS per node instance, {} connections, {} watches",
            bytes / count as u64,
            held.kib_per_node,
            held.connections,
            held.watches,
        );
        if with_state {
            results.push((mux, bytes, held.kib_per_node));
        } else {
            relist = bytes;
        }
    }
    for mux in [false, true] {
        let way = if mux {
            "multiplexed"
        } else {
            "one request per watch"
        };
        let egress: Vec<String> = results
            .iter()
            .filter(|r| r.0 == mux)
            .map(|r| format!("{:.2}%", r.1 as f64 * 100.0 / relist.max(1) as f64))
            .collect();
        let kib: Vec<String> = results
            .iter()
            .filter(|r| r.0 == mux)
            .map(|r| format!("{:.1}", r.2))
            .collect();
        println!(
            "{way}: relay egress with --state-dir / relist {}; relay KiB per node instance {}",
            egress.join(", "),
            kib.join(", ")
        );
    }

    // One bare TLS connection: kept alive, idle, after a `GET /version`.
    let bare = knob("BARE", 500) as usize;
    let pid = relay.proc.0.id();
    let (rss_before, conns_before) = (
        rss_kib(pid),
        metric(relay.admin, "podns_relay_connections "),
    );
    let mut clients = Vec::new();
    for _ in 0..bare {
        let c = client_from(&rk).await;
        c.apiserver_version().await.unwrap();
        clients.push(c);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "bare TLS connections: {} more on the relay, {:.1} KiB RSS each",
        metric(relay.admin, "podns_relay_connections ") - conns_before,
        rss_kib(pid).saturating_sub(rss_before) as f64 / bare as f64
    );
    drop(clients);
}
