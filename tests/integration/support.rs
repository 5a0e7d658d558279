//! Shared helpers: start the simulator and the server in-process on port 0,
//! make Kubernetes objects; DNS over real sockets, the wait with a
//! deadline and podns as a child process come from `podns-testkit`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use hickory_proto::rr::RecordType;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use podns_server::serve::{Listeners, Running, ServeConfig};
use podns_sim::{SimArgs, SimHandle};

// What every suite shares, from the test kit.
pub use podns_testkit::dns::query as query_msg;
pub use podns_testkit::http_get as admin_get;
pub use podns_testkit::{
    ZONE, addrs, ask, fqdn, has, need, need_cmd, output_ok, ptrs, rcode, spawn_serve, tcp, udp,
    wait_for,
};

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

/// [`start_sim`], with its kubeconfig written to a file of its own: the
/// simulator, the folder (removed on drop) and the file.
pub async fn sim_with_kubeconfig(
    flags: &[&str],
    shutdown: &CancellationToken,
) -> (SimHandle, tempfile::TempDir, std::path::PathBuf) {
    let sim = start_sim(flags, shutdown).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig_yaml()).unwrap();
    (sim, dir, kubeconfig)
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

/// Wait until every one of `names` answers A records; then each one's
/// addresses, in order.
pub async fn wait_all_resolve(
    dns: SocketAddr,
    names: &[String],
    limit: Duration,
) -> Vec<Vec<String>> {
    wait_for("every name to resolve", limit, || async {
        let mut all = Vec::new();
        for n in names {
            let found = addrs(&ask(dns, n, RecordType::A).await);
            if found.is_empty() {
                return Err(format!("{n} has no address"));
            }
            all.push(found);
        }
        Ok(all)
    })
    .await
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

/// Create `body` (an object of kind `K` that names its namespace) through
/// the API, making its namespace first when it is new.
pub async fn create<K>(client: &kube::Client, body: serde_json::Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let ns = body["metadata"]["namespace"].as_str().unwrap().to_string();
    ensure_ns(client, &ns).await;
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .unwrap()
}

pub async fn create_pod(client: &kube::Client, body: serde_json::Value) -> Pod {
    create(client, body).await
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
    create(client, body).await
}

/// An ExternalName Service `ns/name` that points at `target`.
pub async fn create_external_name(
    client: &kube::Client,
    ns: &str,
    name: &str,
    target: &str,
) -> Service {
    create_service(
        client,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
               "spec": {"type": "ExternalName", "externalName": target}}),
    )
    .await
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

// ---- podns as a child process ------------------------------------------------

pub const PODNS_BIN: &str = env!("CARGO_BIN_EXE_podns");

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

/// A pod list of one pod, `ml/a`, at resourceVersion 5 (JSON).
pub const ONE_POD_LIST: &str = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","namespace":"ml","resourceVersion":"5"}}]}"#;

/// An HTTP/1.1 server on loopback that reads each connection's request
/// head and answers it with `answer(head)` (a content type and a body),
/// then closes the connection: a relay or API server saying exactly one
/// thing, bad input included. Its URL.
pub async fn canned_server(
    answer: impl Fn(&str) -> (&'static str, Vec<u8>) + Send + Sync + 'static,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer = std::sync::Arc::new(answer);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let (ct, body) = answer(&String::from_utf8_lossy(&head));
                let out = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(out.as_bytes()).await;
                let _ = s.write_all(&body).await;
            });
        }
    });
    url
}

/// A list-then-watch of `ml`'s pods on `--wire auto`, as a node instance
/// opens one, holding dictionaries in `held` and through `mux` if given.
pub fn ml_pods_watch(
    held: Option<std::sync::Arc<podns_server::k8s::compact::Held>>,
    mux: Option<podns_server::k8s::mux::Mux>,
) -> podns_server::k8s::wire::RawConfig {
    podns_server::k8s::wire::RawConfig {
        url_path: "/api/v1/namespaces/ml/pods".into(),
        label_selector: None,
        list_semantic: kube::runtime::watcher::ListSemantic::Any,
        streaming: false,
        wire: podns_server::k8s::wire::Wire::Auto,
        seen: None,
        bookmarked: None,
        held,
        progress: None,
        mux,
        probe: None,
        steady_bookmarks: false,
        currency: None,
    }
}
