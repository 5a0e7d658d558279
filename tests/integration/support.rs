//! Shared helpers: start the simulator and the server in-process on port 0,
//! make Kubernetes objects, ask DNS over real sockets, poll with a deadline.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use podns_server::serve::{Listeners, Running, ServeConfig};
use podns_sim::{SimArgs, SimHandle};

pub const ZONE: &str = "cluster.local";

#[derive(Parser)]
struct SimFlags {
    #[command(flatten)]
    args: SimArgs,
}

/// A simulator and a server, both on loopback port 0, stopped on drop.
pub struct Env {
    pub sim: SimHandle,
    pub server: Option<Running>,
    pub dns: SocketAddr,
    pub admin: SocketAddr,
    /// The relay's address, with `--relay-listen`.
    pub relay: Option<SocketAddr>,
    pub client: kube::Client,
    pub shutdown: CancellationToken,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Start a simulator with extra flags (e.g. `--kubelet`).
pub async fn start_sim(flags: &[&str], shutdown: &CancellationToken) -> SimHandle {
    let mut argv = vec!["sim", "--listen=127.0.0.1:0"];
    argv.extend_from_slice(flags);
    let args = SimFlags::parse_from(argv).args;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    podns_sim::spawn(args, listener, shutdown.clone())
        .await
        .expect("sim starts")
}

/// Serve flags with loopback listeners and the given extras, parsed by the
/// binary's own CLI into the server's configuration.
pub fn serve_args(extra: &[&str]) -> ServeConfig {
    let mut argv = vec![
        "serve",
        "--dns-listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
        "--udp-sockets=2",
    ];
    argv.extend_from_slice(extra);
    podns::cli::parse_serve(argv).unwrap_or_else(|e| panic!("{e}"))
}

/// Simulator plus server, waiting until the index is synced.
pub async fn env(sim_flags: &[&str], serve_flags: &[&str]) -> Env {
    env_with(sim_flags, serve_flags, true, &[]).await
}

/// Like [`env`], with these ServiceAccounts (namespace, name) granted the
/// relay's permission before the server starts (so before a relay's first
/// list: the grant moves the API server's resourceVersion).
pub async fn env_with_readers(
    sim_flags: &[&str],
    serve_flags: &[&str],
    readers: &[(&str, &str)],
) -> Env {
    env_with(sim_flags, serve_flags, true, readers).await
}

/// Like [`env`], but the server's client is built as the binary builds it:
/// without kube-client's own retry layer, which would hide an outage from
/// the watch loop's backoff (serve.rs `client`).
pub async fn env_like_binary(sim_flags: &[&str], serve_flags: &[&str]) -> Env {
    env_with(sim_flags, serve_flags, false, &[]).await
}

async fn env_with(
    sim_flags: &[&str],
    serve_flags: &[&str],
    default_retry: bool,
    readers: &[(&str, &str)],
) -> Env {
    let shutdown = CancellationToken::new();
    let sim = start_sim(sim_flags, &shutdown).await;
    let client = sim.client();
    for (namespace, name) in readers {
        grant_relay_reader(&client, namespace, name).await;
    }
    let mut config = kube::Config::new(sim.url().parse().unwrap());
    config.default_retry = default_retry;
    let serve_client = kube::Client::try_from(config).unwrap();
    let args = serve_args(serve_flags);
    let mut listeners =
        Listeners::bind(args.dns_listen, args.udp_sockets, args.admin_listen).unwrap();
    if let Some(relay) = &args.relay {
        listeners = listeners.bind_relay(relay).unwrap();
    }
    let server = podns_server::serve::start(&args, serve_client, listeners, shutdown.clone());
    let (dns, admin, relay) = (server.dns_addr, server.admin_addr, server.relay_addr);
    let table = server.table.clone();
    wait_for("index synced", Duration::from_secs(20), || {
        let t = table.clone();
        async move { t.is_synced() }
    })
    .await;
    Env {
        sim,
        server: Some(server),
        dns,
        admin,
        relay,
        client,
        shutdown,
    }
}

/// Wait until `name` answers with at least one record.
pub async fn wait_resolves(dns: SocketAddr, name: &str, limit: Duration) {
    wait_for(&format!("{name} to resolve"), limit, || async {
        !ask(dns, name, RecordType::A).await.answers.is_empty()
    })
    .await;
}

/// Create a training job through the simulator's `/sim/jobs`.
pub async fn create_job(client: &kube::Client, ns: &str, name: &str, ranks: usize, kind: &str) {
    sim_post(
        client,
        "/sim/jobs",
        json!({"namespace": ns, "name": name, "ranks": ranks, "kind": kind}),
    )
    .await;
}

/// What a [`wait_for`] check says: done (with the value waited for), or
/// not yet (maybe with what it saw, for the panic message).
pub trait Check {
    type Value;
    fn done(self) -> Result<Self::Value, Option<String>>;
}

impl Check for bool {
    type Value = ();
    fn done(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Check for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

/// `Err(last)`: not yet, and what was seen instead.
impl<T> Check for Result<T, String> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

/// Poll `check` every 10 ms until it is done (`true`, `Some(v)` or
/// `Ok(v)`) and return what it gave; panic with `what` (and the last
/// `Err`) after `limit`.
pub async fn wait_for<F, Fut>(
    what: &str,
    limit: Duration,
    mut check: F,
) -> <Fut::Output as Check>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Check,
{
    let deadline = Instant::now() + limit;
    loop {
        let last = match check().await.done() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if Instant::now() > deadline {
            match last {
                Some(last) => panic!("timed out after {limit:?} waiting for {what}; last: {last}"),
                None => panic!("timed out after {limit:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Poll until `child` exits (within `limit`) and return its status.
pub async fn wait_exit(
    child: &mut std::process::Child,
    what: &str,
    limit: Duration,
) -> std::process::ExitStatus {
    wait_for(what, limit, || {
        let status = child.try_wait().expect("try_wait");
        async move { status }
    })
    .await
}

// ---- DNS over real sockets ------------------------------------------------

pub fn query_msg(name: &str, qtype: RecordType, edns: Option<u16>) -> Message {
    let mut m = Message::new(rand_id(), MessageType::Query, OpCode::Query);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m
}

fn rand_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static N: AtomicU16 = AtomicU16::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

/// One UDP query, with retries on timeout (UDP may drop).
pub async fn udp(addr: SocketAddr, msg: &Message) -> Message {
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let bytes = msg.to_vec().unwrap();
    let mut buf = vec![0u8; 65535];
    for _ in 0..5 {
        sock.send_to(&bytes, addr).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(1), sock.recv_from(&mut buf)).await
        {
            let r = Message::from_vec(&buf[..n]).expect("server sends valid messages");
            assert_eq!(r.metadata.id, msg.metadata.id);
            return r;
        }
    }
    panic!("no UDP answer from {addr}");
}

/// One TCP query (2-byte length framing).
pub async fn tcp(addr: SocketAddr, msg: &Message) -> Message {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .expect("tcp connect in time")
        .unwrap();
    let bytes = msg.to_vec().unwrap();
    s.write_all(&(bytes.len() as u16).to_be_bytes())
        .await
        .unwrap();
    s.write_all(&bytes).await.unwrap();
    let mut len = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut len))
        .await
        .expect("tcp answer in time")
        .unwrap();
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

/// Ask for `name` (relative names get the zone appended) over UDP.
pub async fn ask(addr: SocketAddr, name: &str, qtype: RecordType) -> Message {
    udp(addr, &query_msg(&fqdn(name), qtype, Some(1232))).await
}

pub fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.{ZONE}.")
    }
}

/// The addresses in the answer section, sorted, as strings.
pub fn addrs(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

pub fn rcode(m: &Message) -> ResponseCode {
    m.metadata.response_code
}

// ---- Kubernetes objects through the real API --------------------------------

pub fn pod_json(ns: &str, name: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "trainer:latest",
                  "ports": [{"name": "nccl", "containerPort": 29500}]}]}
    })
}

pub async fn ensure_ns(client: &kube::Client, ns: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    let _ = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await;
}

pub async fn create_pod(client: &kube::Client, body: serde_json::Value) -> Pod {
    let ns = body["metadata"]["namespace"].as_str().unwrap().to_string();
    ensure_ns(client, &ns).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .unwrap()
}

/// Write a pod's status as a kubelet would: IPs, phase, Ready.
pub async fn set_status(client: &kube::Client, ns: &str, name: &str, ips: &[&str], ready: bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod_ips: Vec<_> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ips.first(),
        "podIPs": pod_ips,
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

pub async fn create_service(client: &kube::Client, body: serde_json::Value) -> Service {
    let ns = body["metadata"]["namespace"].as_str().unwrap().to_string();
    ensure_ns(client, &ns).await;
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .unwrap()
}

pub fn headless_json(ns: &str, name: &str, app: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterIP": "None", "selector": {"app": app},
                 "publishNotReadyAddresses": true,
                 "ports": [{"name": "nccl", "port": 29500, "targetPort": "nccl"}]}
    })
}

/// POST to a simulator endpoint under /sim/.
pub async fn sim_post(client: &kube::Client, path: &str, body: serde_json::Value) -> String {
    let req = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    client
        .request_text(req)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// GET a simulator endpoint as JSON.
pub async fn sim_get(client: &kube::Client, path: &str) -> serde_json::Value {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
}

/// GET an admin endpoint: (status, body).
pub async fn admin_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Whether a command (dig, kubectl) is on PATH.
pub fn has(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether a test that needs an external tool can run. In CI (`CI=true`)
/// a missing tool fails the test; elsewhere the test skips, saying why.
pub fn need(tool: &str, found: bool) -> bool {
    if found {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{tool} is required in CI (CI=true) but was not found");
    }
    eprintln!("skipping: {tool} not found (set CI=true to make this a failure)");
    false
}

/// [`need`] for a command on PATH.
pub fn need_cmd(cmd: &str) -> bool {
    need(cmd, has(cmd))
}

// ---- podns as a child process ------------------------------------------------

pub const PODNS_BIN: &str = env!("CARGO_BIN_EXE_podns");

/// A `podns serve` child process, killed on drop, with the addresses it
/// logged and its stderr lines so far.
pub struct Spawned {
    pub child: std::process::Child,
    pub dns: SocketAddr,
    pub tcp: SocketAddr,
    pub admin: SocketAddr,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Spawned {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `cmd` (a `podns serve` command line, maybe behind `setpriv`) with
/// stderr piped; wait (up to 60 s) until it logs its three listeners.
pub fn spawn_serve(mut cmd: std::process::Command) -> Spawned {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn podns");
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            keep.lock().unwrap().push(line);
        }
    });
    let (mut dns, mut tcp, mut admin) = (None, None, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    while dns.is_none() || tcp.is_none() || admin.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("podns did not log its listeners: {:?}", log.lock().unwrap());
            }
        };
        let after = |what: &str| -> Option<SocketAddr> {
            line.split(what)
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        dns = dns.or(after("listening dns udp "));
        tcp = tcp.or(after("listening dns tcp "));
        admin = admin.or(after("listening admin http "));
    }
    Spawned {
        child,
        dns: dns.unwrap(),
        tcp: tcp.unwrap(),
        admin: admin.unwrap(),
        log,
    }
}

/// `podns serve` on loopback port 0 against `kubeconfig`, plus `extra` flags.
pub fn serve_command(kubeconfig: &std::path::Path, extra: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(PODNS_BIN);
    cmd.args([
        "serve",
        "--dns-listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
    ])
    .arg(format!("--kubeconfig={}", kubeconfig.display()))
    .args(extra);
    cmd
}

/// Resident set size (kB) and open file descriptors of a process, from /proc.
pub fn rss_kb_and_fds(pid: u32) -> Option<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((rss, fds))
}

/// Let ServiceAccount `namespace/name` read a relay, as the chart grants
/// it to node instances: a ClusterRole with the relay's permission
/// (`podns_server::relay::http::auth::PERMISSION`) bound to the account.
pub async fn grant_relay_reader(client: &kube::Client, namespace: &str, name: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let perm = podns_server::relay::http::auth::PERMISSION;
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "podns-relay-reader"},
        "rules": [{"apiGroups": [perm.group], "resources": [perm.resource], "verbs": [perm.verb]}],
    }))
    .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("podns-relay-reader-{namespace}-{name}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "podns-relay-reader"},
        "subjects": [{"kind": "ServiceAccount", "namespace": namespace, "name": name}],
    }))
    .unwrap();
    let ok = |r: Result<(), kube::Error>| match r {
        Ok(()) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("cannot grant the relay's permission: {e}"),
    };
    ok(Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .map(drop));
    ok(Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .map(drop));
}

/// A token of ServiceAccount `namespace/name` for `audience`, bound to
/// pod `pod` of that namespace when given (TokenRequest), as a projected
/// token volume gets it.
pub async fn request_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    audience: &str,
    pod: Option<&Pod>,
) -> String {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: if audience.is_empty() {
                vec![]
            } else {
                vec![audience.to_owned()]
            },
            expiration_seconds: Some(3600),
            bound_object_ref: pod.map(|p| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: p.metadata.name.clone(),
                uid: p.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
        .status
        .expect("a token")
        .token
}
