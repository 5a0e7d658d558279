//! A node instance's saved scope (`--state-dir`): `podns sim` → a relay →
//! a node instance, stopped and started again as a DaemonSet rollout
//! does. The restart serves its ranks from the saved scope, resumes every
//! watch from its resourceVersion (a pod made while it was down arrives by
//! resume, nothing is listed again), and a state that is corrupt or of
//! another relay CA is dropped: the scope is listed and answered right.

use std::path::Path;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use podns_server::metrics::{Metrics, ResultLabels};
use podns_server::serve::Running;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::relay::{T, node_of_pods, relay_client, start_podns};
use crate::support::*;

/// The sim and one relay; the relay's kubeconfig; the node of gang
/// `train`'s 4 pods.
struct Tier {
    env: Env,
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    relay: kube::Client,
    node: String,
    relay_dns: std::net::SocketAddr,
    _relay: Running,
}

async fn tier(relay_flags: &[&str]) -> Tier {
    let env = env_with_readers(&["--kubelet"], &[], &[("default", "podns-node")]).await;
    create_job(&env.client, "ml", "train", 4, "indexed-job").await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("relay.yaml");
    let mut flags = vec![
        "--relay-listen=127.0.0.1:0".to_string(),
        format!("--relay-kubeconfig-out={}", kubeconfig.display()),
    ];
    flags.extend(relay_flags.iter().map(|s| s.to_string()));
    let r = start_podns(&flags, env.client.clone(), env.shutdown.child_token());
    wait_for("the relay kubeconfig", T, || {
        let p = kubeconfig.clone();
        async move { p.exists() }
    })
    .await;
    let relay = relay_client(&kubeconfig).await;
    let node = node_of_pods(&relay, "ml", 4).await;
    Tier {
        relay_dns: r.dns_addr,
        env,
        _dir: dir,
        kubeconfig,
        relay,
        node,
        _relay: r,
    }
}

/// A node instance of `t` with `--state-dir=state`, trusting a relay CA
/// whose fingerprint is `ca` (as `podns serve` reads it from the
/// kubeconfig).
fn node_instance(t: &Tier, state: &Path, ca: &str, stop: CancellationToken) -> Running {
    let flags = [
        format!("--relay-kubeconfig={}", t.kubeconfig.display()),
        format!("--node={}", t.node),
        format!("--relay-dns={}", t.relay_dns),
        format!("--state-dir={}", state.display()),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut args = serve_args(&flags);
    let n = args.node.as_mut().unwrap();
    n.relay_url = "https://relay.test".into();
    n.relay_ca = ca.into();
    let listeners =
        podns_server::serve::Listeners::bind(args.dns_listen, args.udp_sockets, args.admin_listen)
            .unwrap();
    podns_server::serve::start(&args, t.relay.clone(), listeners, stop)
}

/// Stop a node instance as SIGTERM does once its grace is over: its
/// tasks end (the last state is written as its watches stop).
async fn stop(mut n: Running, token: CancellationToken) {
    token.cancel();
    let all = async { while n.tasks.join_next().await.is_some() {} };
    tokio::time::timeout(T, all).await.expect("stops");
    n.admin_shutdown.cancel();
    let _ = n.admin_task.await;
}

fn count(
    family: &prometheus_client::metrics::family::Family<
        ResultLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    result: &'static str,
) -> u64 {
    family.get_or_create(&ResultLabels { result }).get()
}

/// Wait until the node instance has read its state, and check how.
async fn wait_loaded(m: &Metrics, result: &'static str) {
    let all = podns_server::node::state::LOAD_RESULTS;
    wait_for("the saved scope read", T, || async {
        all.iter()
            .map(|r| count(&m.node_state_loads, r))
            .sum::<u64>()
            == 1
    })
    .await;
    assert_eq!(count(&m.node_state_loads, result), 1, "{result}");
}

fn relists(m: &Metrics) -> u64 {
    ["pods", "services", "jobs", "endpointslices"]
        .into_iter()
        .map(|resource| {
            [
                "expired_410",
                "list_failed",
                "no_resource_version",
                "watch_failed",
                "unavailable",
            ]
            .into_iter()
            .map(|reason| {
                m.watch_restarts
                    .get_or_create(&podns_server::metrics::RestartLabels {
                        resource,
                        reason,
                        retry: "relist",
                    })
                    .get()
            })
            .sum::<u64>()
        })
        .sum()
}

/// The IP the relay has for the pod of ml whose hostname (else name)
/// is `host`.
async fn ip_of(relay: &kube::Client, host: &str) -> String {
    crate::relay::pods_with_ip(relay, "ml")
        .await
        .into_iter()
        .find(|p| {
            let h = p.spec.as_ref().and_then(|s| s.hostname.as_deref());
            h.or(p.metadata.name.as_deref()) == Some(host)
        })
        .and_then(|p| p.status?.pod_ip)
        .unwrap_or_else(|| panic!("no pod {host} with an IP"))
}

/// Wait until `name` answers `ip` from `dns`.
async fn wait_answers(dns: std::net::SocketAddr, name: &str, ip: &str) {
    wait_for(&format!("{name} answering {ip}"), T, || async {
        addrs(&ask(dns, name, RecordType::A).await) == [ip.to_string()]
    })
    .await;
}

/// Run a node instance until it has written a state holding its scope,
/// then stop it.
async fn run_and_save(t: &Tier, state: &Path, ca: &str) {
    let token = t.env.shutdown.child_token();
    let n = node_instance(t, state, ca, token.clone());
    crate::relay::wait_held(&n.table, &["ml"]).await;
    let ip = ip_of(&t.relay, "train-0").await;
    wait_answers(n.dns_addr, "train-0.train.ml.svc", &ip).await;
    stop(n, token).await;
    assert!(state.join(podns_server::node::state::FILE).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_instance_serves_its_saved_scope_at_once_and_resumes_without_relisting() {
    let t = tier(&[]).await;
    let state = tempfile::tempdir().unwrap();
    run_and_save(&t, state.path(), "ca-1").await;

    // While it is down, a pod of the gang comes to the node.
    let mut late = pod_json(
        "ml",
        "late",
        json!({"batch.kubernetes.io/job-name": "train", "job-name": "train"}),
    );
    late["spec"]["nodeName"] = json!(t.node);
    late["spec"]["hostname"] = json!("late");
    late["spec"]["subdomain"] = json!("train");
    create_pod(&t.env.client, late).await;
    wait_for("the late pod's IP through the relay", T, || async {
        pods_with_ip(&t.relay).await.iter().any(|p| p == "late")
    })
    .await;

    // The answers, read (listed) through the relay before the restart.
    let ip = ip_of(&t.relay, "train-1").await;
    let late_ip = ip_of(&t.relay, "late").await;
    let lists = t._relay.metrics.relay_lists.get();
    let token = t.env.shutdown.child_token();
    let started = Instant::now();
    let n = node_instance(&t, state.path(), "ca-1", token.clone());
    let m = n.metrics.clone();
    wait_loaded(&m, "loaded").await;
    // Ready from the saved scope, and a rank answers from it.
    wait_for("ready", T, || async {
        admin_get(n.admin_addr, "/readyz").await.0 == 200
    })
    .await;
    wait_answers(n.dns_addr, "train-1.train.ml.svc", &ip).await;
    let serving = started.elapsed();
    eprintln!("restart: ready and answering a rank from the saved scope in {serving:?}");
    assert!(serving < Duration::from_secs(5), "{serving:?}");
    // The pod made during the downtime arrives by resume.
    wait_answers(n.dns_addr, "late.train.ml.svc", &late_ip).await;
    // Every watch started from the saved scope; none listed.
    let saved = count(&m.node_state_watches, "saved");
    assert!(saved >= 2, "pods and services at least: {saved}");
    assert_eq!(count(&m.node_state_watches, "listed"), 0);
    assert_eq!(relists(&m), 0, "resumed from the relay's history");
    // Nor did its node's pods' watch: the relay served no list since.
    assert_eq!(
        t._relay.metrics.relay_lists.get(),
        lists,
        "no list of any kind"
    );
    stop(n, token).await;
}

/// A node instance on `state` under `ca` drops the saved scope as
/// `reason`, serves nothing from it, lists its scope and answers from that.
async fn dropped_and_listed(t: &Tier, state: &Path, ca: &str, reason: &'static str, ip: &str) {
    let token = t.env.shutdown.child_token();
    let n = node_instance(t, state, ca, token.clone());
    let m = n.metrics.clone();
    wait_loaded(&m, reason).await;
    assert_eq!(count(&m.node_state_loads, "loaded"), 0);
    wait_answers(n.dns_addr, "train-2.train.ml.svc", ip).await;
    crate::relay::wait_held(&n.table, &["ml"]).await;
    assert_eq!(count(&m.node_state_watches, "saved"), 0);
    assert!(count(&m.node_state_watches, "listed") >= 2, "listed");
    stop(n, token).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_or_foreign_saved_scope_is_dropped_and_the_scope_listed() {
    let t = tier(&[]).await;
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join(podns_server::node::state::FILE);
    run_and_save(&t, state.path(), "ca-1").await;

    // One byte flipped: corrupt.
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x55;
    std::fs::write(&file, &bytes).unwrap();
    let ip = ip_of(&t.relay, "train-2").await;
    dropped_and_listed(&t, state.path(), "ca-1", "corrupt", &ip).await;
    // The state it wrote since, read under another relay CA: foreign.
    dropped_and_listed(&t, state.path(), "ca-2", "foreign", &ip).await;

    // And the one it wrote under ca-2 is its own again.
    let token = t.env.shutdown.child_token();
    let n = node_instance(&t, state.path(), "ca-2", token.clone());
    wait_loaded(&n.metrics, "loaded").await;
    wait_answers(n.dns_addr, "train-2.train.ml.svc", &ip).await;
    stop(n, token).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_relays_history_a_saved_watch_relists_once() {
    // A relay that keeps 1 s of history.
    let t = tier(&["--relay-history=1s"]).await;
    let state = tempfile::tempdir().unwrap();
    run_and_save(&t, state.path(), "ca-1").await;
    // Changes past the history while the node instance is down.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut i = 0;
    while Instant::now() < deadline {
        let name = format!("churn-{i}");
        let mut p = pod_json(
            "ml",
            &name,
            json!({"batch.kubernetes.io/job-name": "train", "job-name": "train"}),
        );
        p["spec"]["nodeName"] = json!(t.node);
        p["spec"]["hostname"] = json!(name);
        p["spec"]["subdomain"] = json!("train");
        create_pod(&t.env.client, p).await;
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let token = t.env.shutdown.child_token();
    let n = node_instance(&t, state.path(), "ca-1", token.clone());
    let m = n.metrics.clone();
    wait_loaded(&m, "loaded").await;
    let ip = ip_of(&t.relay, "train-3").await;
    wait_answers(n.dns_addr, "train-3.train.ml.svc", &ip).await;
    let expired = || {
        m.watch_restarts
            .get_or_create(&podns_server::metrics::RestartLabels {
                resource: "pods",
                reason: "expired_410",
                retry: "relist",
            })
            .get()
    };
    wait_for("the pods' watch told 410", T, || async { expired() >= 1 }).await;
    // Its one relist is in: every pod made while it was down answers.
    let last = format!("churn-{}", i - 1);
    wait_for("the last pod through the relay", T, || async {
        pods_with_ip(&t.relay).await.contains(&last)
    })
    .await;
    let last_ip = ip_of(&t.relay, &last).await;
    wait_answers(n.dns_addr, &format!("{last}.train.ml.svc"), &last_ip).await;
    assert_eq!(expired(), 1, "one relist of the pods' watch");
    stop(n, token).await;
}

/// The names of ml's pods with an IP, through the relay.
async fn pods_with_ip(relay: &kube::Client) -> Vec<String> {
    crate::relay::pods_with_ip(relay, "ml")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}
