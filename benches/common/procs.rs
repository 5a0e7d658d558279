//! What the process benches (`relay_fanout`, `rollout`) share: podns
//! processes on loopback, their logs, the simulator's API, and a node
//! instance's view of DNS and metrics. A bench includes it with
//! `#[path = "common/procs.rs"] mod procs;`.
#![allow(dead_code)] // each bench uses its own part

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use podns_testkit::blocking::{http_get, wait_for};
use podns_testkit::dns::query;
use podns_testkit::process::addr_after;

/// The podns to run: this build, or `PODNS_BIN`.
pub fn podns() -> String {
    std::env::var("PODNS_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_podns").to_string())
}

/// A knob from the environment (`JOBS=10`), or its default.
pub fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A child process killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `podns ARGS`, its stderr to `log`. The simulator is always this
/// build's: a before/after varies the relay and node instances only,
/// against the same API server.
pub fn spawn(args: &[&str], log: &Path) -> Proc {
    let bin = if args.first() == Some(&"sim") {
        env!("CARGO_BIN_EXE_podns").to_string()
    } else {
        podns()
    };
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .expect("podns starts");
    Proc(child)
}

/// `podns serve` on loopback port 0 (one UDP socket) with `flags`, its
/// stderr to `log`.
pub fn serve(flags: &[&str], log: &Path) -> Proc {
    let mut args = vec![
        "serve",
        "--dns-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--udp-sockets",
        "1",
    ];
    args.extend_from_slice(flags);
    spawn(&args, log)
}

/// The first line of `log` that holds `needle`, once there is one.
pub fn wait_for_line(log: &Path, needle: &str, limit: Duration) -> String {
    let what = format!("{needle:?} in {}", log.display());
    wait_for(&what, limit, || {
        let text = std::fs::read_to_string(log).ok()?;
        Some(text.lines().find(|l| l.contains(needle))?.to_string())
    })
}

/// The address a process logged after `needle` (`listening dns udp 127.0.0.1:1234 ...`).
pub fn listening(log: &Path, needle: &str) -> SocketAddr {
    let line = wait_for_line(log, needle, Duration::from_secs(60));
    addr_after(&line, needle).unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// A kube client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A JSON request to the simulator; its answer (null if none).
pub async fn sim_json(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: &str,
) -> serde_json::Value {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.as_bytes().to_vec())
        .unwrap();
    let text = client.request_text(req).await.unwrap();
    serde_json::from_str(&text).unwrap_or_default()
}

/// The relay's permission for the account of the kubeconfig it writes
/// (`default/podns-node`), as the chart grants it to node instances.
pub async fn grant_node_reader(sim: &kube::Client) {
    let perm = podns_server::relay::http::auth::PERMISSION;
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let role = serde_json::json!({"metadata": {"name": "podns-node"},
        "rules": [{"apiGroups": [perm.group], "resources": [perm.resource], "verbs": [perm.verb]}]});
    sim_json(
        sim,
        "POST",
        &format!("{rbac}/clusterroles"),
        &role.to_string(),
    )
    .await;
    let binding = serde_json::json!({"metadata": {"name": "podns-node"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "podns-node"},
        "subjects": [{"kind": "ServiceAccount", "namespace": "default", "name": "podns-node"}]});
    sim_json(
        sim,
        "POST",
        &format!("{rbac}/clusterrolebindings"),
        &binding.to_string(),
    )
    .await;
}

/// `podns sim --kubelet --lean-pods` with `jobs` × `ranks` pods and
/// `extra` flags, its kubeconfig at `dir/k.yaml` and its log at
/// `dir/sim.log`, once ready; a client of it, with the node instances'
/// reader role granted.
pub async fn start_sim(dir: &Path, jobs: u64, ranks: u64, extra: &[&str]) -> (Proc, kube::Client) {
    let (log, kc) = (dir.join("sim.log"), dir.join("k.yaml"));
    let (jobs, ranks) = (jobs.to_string(), ranks.to_string());
    let mut args = vec![
        "sim",
        "--listen",
        "127.0.0.1:0",
        "--kubelet",
        "--lean-pods",
        "--jobs",
        &jobs,
        "--ranks",
        &ranks,
        "--kubeconfig-out",
        kc.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let sim = spawn(&args, &log);
    wait_for_line(&log, "simulator ready", Duration::from_secs(600));
    let client = client_from(&kc).await;
    grant_node_reader(&client).await;
    (sim, client)
}

/// A relay of `start_sim`'s simulator, synced and its node instances'
/// kubeconfig written.
pub struct Relay {
    pub proc: Proc,
    pub dns: SocketAddr,
    pub admin: SocketAddr,
    /// A client of the relay's API, as a node instance reads it.
    pub client: kube::Client,
}

/// `podns serve --relay-listen` of `start_sim`'s simulator: the node
/// instances' kubeconfig written to `dir/rk.yaml`, its log at
/// `dir/relay.log`; once its index is synced.
pub async fn start_relay(dir: &Path) -> Relay {
    let (kc, rk, log) = (
        dir.join("k.yaml"),
        dir.join("rk.yaml"),
        dir.join("relay.log"),
    );
    let proc = serve(
        &[
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--relay-listen",
            "127.0.0.1:0",
            "--relay-kubeconfig-out",
            rk.to_str().unwrap(),
        ],
        &log,
    );
    let dns = listening(&log, "listening dns udp ");
    let admin = listening(&log, "listening admin http ");
    wait_for_line(&log, "index synced", Duration::from_secs(600));
    wait_for_line(&log, "relay kubeconfig written", Duration::from_secs(60));
    let client = client_from(&rk).await;
    Relay {
        proc,
        dns,
        admin,
        client,
    }
}

/// Whether `dns` answers `name` with an address.
pub fn answers(sock: &UdpSocket, dns: SocketAddr, name: &str) -> bool {
    let q = query(name, RecordType::A, None).to_vec().unwrap();
    if sock.send_to(&q, dns).is_err() {
        return false;
    }
    let mut buf = [0u8; 1500];
    match sock.recv(&mut buf) {
        Ok(n) => Message::from_vec(&buf[..n]).is_ok_and(|m| !m.answers.is_empty()),
        Err(_) => false,
    }
}

/// The sum of a metric's lines that start with `name` (labels included).
pub fn metric(admin: SocketAddr, name: &str) -> f64 {
    http_get(admin, "/metrics")
        .1
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
