//! The relay (`--relay-listen`): kube-rs and kubectl read it as if it were
//! an API server; it resumes watches by the API server's own
//! resourceVersions, on any relay; 410 past its history; 401 without a
//! valid ServiceAccount token, 405 for writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use podns_server::k8s::objects::{Slim, SlimPod};
use podns_server::k8s::wire::{Wire, list_page};
use serde_json::json;

use crate::daemons::find_tool;
use crate::support::*;

pub(crate) const T: Duration = Duration::from_secs(30);

/// `--relay-listen` on loopback and a kubeconfig for node instances.
fn relay_flags(dir: &Path) -> Vec<String> {
    vec![
        "--relay-listen=127.0.0.1:0".into(),
        format!(
            "--relay-kubeconfig-out={}",
            dir.join("relay.yaml").display()
        ),
    ]
}

pub(crate) async fn env_with_relay(extra: &[&str]) -> (Env, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let mut flags = relay_flags(dir.path());
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // The permission the chart gives node instances, for the account the
    // kubeconfig's token is of.
    let env = env_with_readers(&["--kubelet"], &flags, &[("default", "podns-node")]).await;
    let path = dir.path().join("relay.yaml");
    wait_for("the relay kubeconfig", T, || {
        let p = path.clone();
        async move { p.exists() }
    })
    .await;
    (env, dir, path)
}

/// A client of the relay from the kubeconfig it wrote.
/// A relay over a simulator with indexed job `ml/<job>` of `ranks` pods, and
/// a client of the relay, once it lists every pod with its IP.
async fn relay_with_job(
    job: &str,
    ranks: usize,
) -> (Env, tempfile::TempDir, PathBuf, kube::Client) {
    let (env, dir, kubeconfig) = env_with_relay(&[]).await;
    create_job(&env.client, "ml", job, ranks, "indexed-job").await;
    let relay = relay_client(&kubeconfig).await;
    wait_for(
        &format!("{ranks} pods with IPs through the relay"),
        T,
        || async { pods_with_ip(&relay, "ml").await.len() == ranks },
    )
    .await;
    (env, dir, kubeconfig, relay)
}

/// The first event (or error) of a watch on the pods of `ns` from
/// resourceVersion `rv`, within [`T`].
async fn first_watch_event(
    client: kube::Client,
    ns: &str,
    rv: &str,
) -> Result<Option<WatchEvent<Pod>>, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client, ns);
    let mut events = api
        .watch(&WatchParams::default(), rv)
        .await
        .unwrap()
        .boxed();
    tokio::time::timeout(T, events.try_next())
        .await
        .expect("an event")
}

pub(crate) async fn relay_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A node instance of `node` on loopback: the relay's kubeconfig, the
/// relay's DNS (`env`'s), and `extra` flags; stopped with `env`.
pub(crate) async fn node_instance(
    env: &Env,
    kubeconfig: &Path,
    node: &str,
    extra: &[&str],
) -> podns_server::serve::Running {
    let mut flags = vec![
        format!("--relay-kubeconfig={}", kubeconfig.display()),
        format!("--node={node}"),
        format!("--relay-dns={}", env.dns),
    ];
    flags.extend(extra.iter().map(|f| f.to_string()));
    start_podns(&flags, relay_client(kubeconfig).await, env.shutdown.clone())
}

/// Another podns on loopback with these flags (a relay, a node instance),
/// reading the API through `client`, stopped with `stop`.
pub(crate) fn start_podns(
    flags: &[String],
    client: kube::Client,
    stop: tokio_util::sync::CancellationToken,
) -> podns_server::serve::Running {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let args = serve_args(&flags);
    let mut listeners =
        podns_server::serve::Listeners::bind(args.dns_listen, args.udp_sockets, args.admin_listen)
            .unwrap();
    if let Some(relay) = &args.relay {
        listeners = listeners.bind_relay(relay).unwrap();
    }
    podns_server::serve::start(&args, client, listeners, stop)
}

/// Wait until a node instance holds exactly `namespaces`.
pub(crate) async fn wait_held(
    table: &std::sync::Arc<podns_server::index::Table>,
    namespaces: &[&str],
) {
    let want: Vec<String> = namespaces.iter().map(|n| n.to_string()).collect();
    wait_for(&format!("{want:?} held by the node instance"), T, || {
        let (t, want) = (table.clone(), want.clone());
        async move { t.scope().namespaces() == want }
    })
    .await;
}

/// The pods of `ns` with an IP, through `client`.
pub(crate) async fn pods_with_ip(client: &kube::Client, ns: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
                .collect()
        })
        .unwrap_or_default()
}

/// Wait for `n` pods of `ns` with IPs through `relay`; the node of the
/// first.
pub(crate) async fn node_of_pods(relay: &kube::Client, ns: &str, n: usize) -> String {
    wait_for(
        &format!("{n} pods of {ns} with IPs through the relay"),
        T,
        || async { pods_with_ip(relay, ns).await.len() == n },
    )
    .await;
    pods_with_ip(relay, ns).await[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("scheduled")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_lists_gets_and_watches_the_relay_as_an_api_server() {
    let (env, _dir, _kubeconfig, relay) = relay_with_job("train", 4).await;
    // The same objects as the API server's, slimmed: name, placement,
    // addresses and the labels a node reads kept; the rest gone. (A status
    // may change between the two lists: resourceVersions are compared,
    // once they settle, in the wires test below.)
    let from_sim: Vec<Pod> = Api::<Pod>::namespaced(env.client.clone(), "ml")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let relayed = pods_with_ip(&relay, "ml").await;
    for p in &relayed {
        let name = p.metadata.name.as_deref().unwrap();
        let s = from_sim
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .expect("the pod is the API server's");
        assert!(p.metadata.uid.is_none(), "{name}: no uid");
        let (pl, sl) = (p.labels(), s.labels());
        for (k, v) in pl {
            assert_eq!(sl.get(k), Some(v), "{name}: {k} is the pod's");
        }
        for k in podns_server::labels::RANK_LABELS {
            assert_eq!(pl.get(*k), sl.get(*k), "{name}: {k} is served");
        }
        assert!(sl.contains_key("controller-uid"));
        assert!(
            !pl.contains_key("controller-uid"),
            "{name}: nothing selects on it"
        );
        let (ps, ss) = (p.spec.as_ref().unwrap(), s.spec.as_ref().unwrap());
        assert_eq!(ps.hostname, ss.hostname);
        assert_eq!(ps.subdomain, ss.subdomain);
        assert_eq!(ps.node_name, ss.node_name);
        assert!(ps.node_name.is_some(), "scheduled");
        assert!(ps.containers.iter().all(|c| c.image.is_none()), "no images");
        assert!(p.metadata.managed_fields.is_none());
        let (pst, sst) = (p.status.as_ref().unwrap(), s.status.as_ref().unwrap());
        assert_eq!(pst.pod_ip, sst.pod_ip);
        assert_eq!(pst.phase, sst.phase);
    }
    // get, and the other kinds.
    let api: Api<Pod> = Api::namespaced(relay.clone(), "ml");
    let one = relayed[0].metadata.name.clone().unwrap();
    assert_eq!(
        api.get(&one).await.unwrap().metadata.name,
        Some(one.clone())
    );
    let e = api.get("nope").await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{e}");
    let svcs = Api::<Service>::namespaced(relay.clone(), "ml")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        svcs.items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some("train")),
        "the job's headless Service"
    );
    let jobs = Api::<Job>::all(relay.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        jobs.items
            .iter()
            .any(|j| j.spec.as_ref().and_then(|s| s.completions) == Some(4))
    );

    // A field selector on the node: exactly that node's pods.
    let node = relayed[0].spec.as_ref().unwrap().node_name.clone().unwrap();
    let on_node = Api::<Pod>::all(relay.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap();
    assert!(!on_node.items.is_empty());
    assert!(
        on_node
            .items
            .iter()
            .all(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some(node.as_str()))
    );

    // kube-runtime's watcher with a streaming list and a label selector:
    // a pod created afterwards arrives, and its deletion.
    for streaming in [false, true] {
        let mut cfg = watcher::Config::default().labels("app=extra");
        if streaming {
            cfg = cfg.streaming_lists();
        }
        let mut stream = watcher(Api::<Pod>::namespaced(relay.clone(), "ml"), cfg).boxed();
        let name = format!("extra-{streaming}");
        let mut created = false;
        let mut seen_apply = false;
        let deadline = tokio::time::Instant::now() + T;
        while let Ok(Some(ev)) = tokio::time::timeout_at(deadline, stream.next()).await {
            match ev.unwrap() {
                watcher::Event::InitDone if !created => {
                    created = true;
                    create_pod(&env.client, pod_json("ml", &name, json!({"app": "extra"}))).await;
                }
                watcher::Event::Apply(p)
                    if !seen_apply && p.metadata.name.as_deref() == Some(&name) =>
                {
                    seen_apply = true;
                    Api::<Pod>::namespaced(env.client.clone(), "ml")
                        .delete(&name, &DeleteParams::default().grace_period(0))
                        .await
                        .unwrap();
                }
                watcher::Event::Delete(p) if p.metadata.name.as_deref() == Some(&name) => break,
                _ => {}
            }
        }
        assert!(
            seen_apply,
            "the new pod arrived (streaming list: {streaming})"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "its deletion arrived"
        );
    }
}

/// A pod as the relay serves it where no Service selects on more than the
/// rank view's and the operators' labels: no uid, those labels only, no
/// annotation that repeats one.
fn as_served(mut p: podns_server::index::types::PodInfo) -> podns_server::index::types::PodInfo {
    use podns_server::labels::OPERATOR_SELECTORS;
    use podns_server::labels::RANK_LABELS;
    p.uid.clear();
    p.labels.retain(|(k, _)| {
        RANK_LABELS.contains(&k.as_str()) || OPERATOR_SELECTORS.contains(&k.as_str())
    });
    let labels = p.labels.clone();
    p.annotations.retain(|a| !labels.contains(a));
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_and_json_lists_of_the_relay_decode_to_the_same_pods() {
    let (env, _dir, _kubeconfig, relay) = relay_with_job("bert", 6).await;
    // Both wires, and the API server itself, agree once the pods settle
    // (a status may change between two lists).
    let lp = ListParams::default();
    let path = "/api/v1/namespaces/ml/pods";
    wait_for(
        "the relay's two wires and the API server to agree",
        T,
        || async {
            let pb = list_page::<SlimPod>(&relay, Wire::Protobuf, path, &lp).await;
            let js = list_page::<SlimPod>(&relay, Wire::Json, path, &lp).await;
            let direct = list_page::<SlimPod>(&env.client, Wire::Json, path, &lp).await;
            let (Ok((pb, _)), Ok((js, _)), Ok((direct, _))) = (pb, js, direct) else {
                return Err("a list failed".to_string());
            };
            if pb.len() != 6 || pb != js {
                return Err(format!(
                    "{} Protobuf pods, JSON equal: {}",
                    pb.len(),
                    pb == js
                ));
            }
            // What podns reads from the relay is what it reads from the API
            // server.
            for p in &pb {
                let Some(d) = direct.iter().find(|d| d.metadata.name == p.metadata.name) else {
                    return Err(format!("{:?} not in the API server", p.metadata.name));
                };
                // What DNS reads: the pod converted (of its labels, those
                // the relay serves), and its version.
                let (cp, cd) = (p.convert(), d.convert().map(as_served));
                if cp.is_err() || cp.as_ref().ok() != cd.as_ref().ok() {
                    return Err(format!("{cp:?}\n!= {cd:?}"));
                }
                let same = p.metadata.resource_version == d.metadata.resource_version
                    && p.spec.node_name == d.spec.node_name;
                if !same {
                    return Err(format!("{p:?}\n!= {d:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_or_a_bad_one_is_401_and_writes_are_405() {
    let (_env, _dir, kubeconfig) = env_with_relay(&[]).await;
    // The relay's own kubeconfig, without its token, then with a wrong one.
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let mut anonymous = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    anonymous.auth_info.token = None;
    let mut bad = anonymous.clone();
    let anonymous = kube::Client::try_from(anonymous).unwrap();
    let e = Api::<Pod>::all(anonymous)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 401), "{e}");
    bad.auth_info.token = Some("not-a-token".to_string().into());
    let e = Api::<Pod>::all(kube::Client::try_from(bad).unwrap())
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 401), "{e}");

    let relay = relay_client(&kubeconfig).await;
    let e = Api::<Pod>::namespaced(relay.clone(), "ml")
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod_json("ml", "w", json!({}))).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 405), "{e}");
    let e = Api::<Pod>::namespaced(relay, "ml")
        .delete("w", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 405), "{e}");
}

/// The relay serves at most `--relay-max-connections` connections at once:
/// one more is closed at once, before any TLS, and counted; a slot freed
/// serves again.
#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once() {
    use tokio::io::AsyncReadExt;
    let (env, _dir, kubeconfig) = env_with_relay(&["--relay-max-connections=2"]).await;
    let addr = env.relay.unwrap();
    let metrics = env.server.as_ref().unwrap().metrics.clone();
    let open = || metrics.relay_connections.get();
    // Two clients that never finish their TLS handshake hold both slots.
    let a = tokio::net::TcpStream::connect(addr).await.unwrap();
    let b = tokio::net::TcpStream::connect(addr).await.unwrap();
    wait_for("both slots held", T, || async { open() == 2 }).await;
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(T, c.read(&mut buf))
        .await
        .expect("closed at once, not left to wait");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(metrics.relay_refused.get(), 1);
    assert_eq!(open(), 2);
    let (_, text) = admin_get(env.admin, "/metrics").await;
    assert!(
        text.contains("podns_relay_connections_refused_total 1"),
        "{text}"
    );

    // Gone, they free their slots: a client lists through the relay.
    drop((a, b));
    wait_for("the slots freed", T, || async { open() == 0 }).await;
    let pods = Api::<Pod>::all(relay_client(&kubeconfig).await)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pods.metadata.resource_version.is_some());
    assert_eq!(metrics.relay_refused.get(), 1);
}

/// The resourceVersion of a list of `ns`'s pods through `client`.
async fn list_rv(client: &kube::Client, ns: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_relay_without_a_relist() {
    let (env, dir, kubeconfig) = env_with_relay(&[]).await;
    // A second podns with a relay, on the same API server.
    let mut flags = vec!["--relay-listen=127.0.0.1:0".to_string()];
    flags.push(format!(
        "--relay-kubeconfig-out={}",
        dir.path().join("second.yaml").display()
    ));
    let _b = start_podns(&flags, env.client.clone(), env.shutdown.clone());
    let second = dir.path().join("second.yaml");
    wait_for("the second relay's kubeconfig", T, || {
        let p = second.clone();
        async move { p.exists() }
    })
    .await;

    let a = relay_client(&kubeconfig).await;
    let bc = relay_client(&second).await;
    ensure_ns(&env.client, "ml").await;
    // Relay B has listed (its history starts there) before A's version is
    // taken: a version older than B's start is 410 on B, as on an API
    // server whose watch cache starts later.
    wait_for("relay B to list", T, || async {
        Api::<Pod>::all(bc.clone())
            .list(&ListParams::default())
            .await
            .is_ok()
    })
    .await;
    // And relay A has seen at least what B has (its watch of the API
    // server may lag B's by an event): A's version is then within B's
    // history, as a relay's version is within another's once both run.
    let b_rv: u64 = list_rv(&bc, "ml").await.parse().unwrap();
    let a_rv = std::sync::Mutex::new(String::new());
    wait_for("relay A to catch up with B", T, || async {
        let rv = list_rv(&a, "ml").await;
        let caught_up = rv.parse::<u64>().unwrap() >= b_rv;
        *a_rv.lock().unwrap() = rv;
        caught_up
    })
    .await;
    let rv = a_rv.into_inner().unwrap();
    create_pod(&env.client, pod_json("ml", "late", json!({"app": "late"}))).await;
    // Relay B has never seen this client: it resumes from A's version.
    let first = first_watch_event(bc, "ml", &rv)
        .await
        .unwrap()
        .expect("the stream is open");
    match first {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("late")),
        other => panic!("expected the pod created after {rv}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_the_relay_does_not_serve_is_not_sent_but_its_version_is_listed() {
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    let relay = relay_client(&kubeconfig).await;
    ensure_ns(&env.client, "ml").await;
    create_pod(&env.client, pod_json("ml", "w", json!({}))).await;
    set_status(&env.client, "ml", "w", &["10.9.0.1"], true).await;
    let api: Api<Pod> = Api::namespaced(relay.clone(), "ml");
    wait_for("the pod with its IP through the relay", T, || async {
        pods_with_ip(&relay, "ml").await.len() == 1
    })
    .await;
    let rv = list_rv(&relay, "ml").await;
    let mut events = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    // A kubelet writes a container's restart: the API server has a new
    // version; the relay's pod (no container statuses) is the same.
    let upstream: Api<Pod> = Api::namespaced(env.client.clone(), "ml");
    let restart = json!({"status": {"containerStatuses": [{
        "name": "main", "image": "trainer", "imageID": "", "ready": true,
        "restartCount": 1, "started": true, "state": {"running": {}}}]}});
    let hidden = upstream
        .patch_status(
            "w",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&restart),
        )
        .await
        .unwrap()
        .resource_version()
        .unwrap();
    wait_for("the relay at the unseen version", T, || async {
        api.get("w").await.ok().and_then(|p| p.resource_version()) == Some(hidden.clone())
    })
    .await;
    let (_, text) = admin_get(env.admin, "/metrics").await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("podns_relay_changes_unseen_total ") && !l.ends_with(" 0")),
        "counted: {text}"
    );
    // Then one it serves: the watch's next event is that one.
    set_status(&env.client, "ml", "w", &["10.9.0.1"], false).await;
    let next = tokio::time::timeout(T, events.try_next())
        .await
        .expect("an event")
        .unwrap();
    let Some(WatchEvent::Modified(p)) = next else {
        panic!("expected the Ready change, got {next:?}");
    };
    assert_ne!(p.resource_version(), Some(hidden));
    let ready = p.status.unwrap().conditions.unwrap_or_default();
    assert!(
        ready
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False"),
        "{ready:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_history_a_watch_gets_410() {
    let (env, _dir, kubeconfig) = env_with_relay(&["--relay-history=0s"]).await;
    let relay = relay_client(&kubeconfig).await;
    ensure_ns(&env.client, "ml").await;
    let rv = list_rv(&relay, "ml").await;
    for name in ["a", "b"] {
        create_pod(&env.client, pod_json("ml", name, json!({}))).await;
    }
    wait_for("both pods through the relay", T, || async {
        Api::<Pod>::namespaced(relay.clone(), "ml")
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len() == 2)
            .unwrap_or(false)
    })
    .await;
    let first = first_watch_event(relay, "ml", &rv).await;
    match first {
        Ok(Some(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 410, "{s:?}"),
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_and_watches_the_relay() {
    let Some(kubectl) = find_tool("kubectl") else {
        need("kubectl", false);
        return;
    };
    let (env, _dir, kubeconfig, _relay) = relay_with_job("gpt", 2).await;
    let kc = kubeconfig.display().to_string();
    let get_pods = ["--kubeconfig", &kc, "get", "pods", "-n", "ml"];
    let out = output_ok(
        std::process::Command::new(&kubectl)
            .args(get_pods)
            .args(["-o", "yaml"]),
        "kubectl get pods",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("gpt-0") && text.contains("gpt-1"), "{text}");
    assert!(text.contains("podIP:"), "{text}");

    // `get --watch`: a pod created while it watches shows up.
    let mut child = std::process::Command::new(&kubectl)
        .args(get_pods)
        .args(["--watch", "-o", "name"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = tokio::time::Instant::now() + T;
    let mut created = false;
    let mut found = false;
    while let Ok(Some(line)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        lines.push(line.clone());
        if !created && line.contains("gpt-1") {
            created = true;
            create_pod(&env.client, pod_json("ml", "watched", json!({}))).await;
        }
        if line.contains("pod/watched") {
            found = true;
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(found, "kubectl get --watch saw the new pod: {lines:?}");
}

/// Ask `addr` the same question (the same bytes, the same ID) over UDP.
async fn same_question(addr: std::net::SocketAddr, msg: &hickory_proto::op::Message) -> Vec<u8> {
    udp(addr, msg).await.to_vec().unwrap()
}

fn forwarded(m: &podns_server::metrics::Metrics, result: &'static str) -> u64 {
    m.forwarded
        .get_or_create(&podns_server::metrics::ResultLabels { result })
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_answers_its_scope_itself_and_forwards_the_rest_unchanged() {
    use hickory_proto::rr::RecordType;
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    // The simulator fills nodes 8 pods at a time: `far` takes the first
    // node, `train` the next, `eval` (another gang of the same namespace)
    // the one after.
    create_job(&env.client, "other", "far", 8, "indexed-job").await;
    create_job(&env.client, "ml", "train", 8, "indexed-job").await;
    create_job(&env.client, "ml", "eval", 4, "indexed-job").await;
    let relay = relay_client(&kubeconfig).await;
    wait_for("20 pods with IPs through the relay", T, || async {
        pods_with_ip(&relay, "ml").await.len() == 12
            && pods_with_ip(&relay, "other").await.len() == 8
    })
    .await;
    let node_of = |pods: &[Pod]| -> Vec<String> {
        pods.iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect()
    };
    let ml = pods_with_ip(&relay, "ml").await;
    let gang = |g: &str| -> Vec<Pod> {
        ml.iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("batch.kubernetes.io/job-name"))
                    .is_some_and(|n| n == g)
            })
            .cloned()
            .collect()
    };
    let node = node_of(&gang("train"))[0].clone();
    assert!(
        !node_of(&pods_with_ip(&relay, "other").await).contains(&node),
        "no pod of `other` on {node}"
    );
    assert!(
        !node_of(&gang("eval")).contains(&node),
        "no pod of `eval` on {node}"
    );

    // The node instance: the relay's kubeconfig, its node, the relay's DNS.
    let n = node_instance(&env, &kubeconfig, &node, &["--scope-linger=0s"]).await;
    let (table, metrics, dns) = (n.table.clone(), n.metrics.clone(), n.dns_addr);
    wait_held(&table, &["ml"]).await;
    // Every pod here is of gang `train`: `ml` is held in part.
    assert!(table.scope().is_partial("ml"));

    // In scope: answered from the node's own index, byte for byte the
    // relay's answer.
    let q = |name: &str, t| query_msg(&fqdn(name), t, Some(1232));
    for (name, t) in [
        ("train-0.train.ml.svc", RecordType::A),
        ("train.ml.svc", RecordType::A),
        ("3.train.ml.rank", RecordType::A),
    ] {
        let msg = q(name, t);
        let before = forwarded(&metrics, "answered");
        let here = same_question(dns, &msg).await;
        assert_eq!(
            forwarded(&metrics, "answered"),
            before,
            "{name}: answered here"
        );
        assert_eq!(
            here,
            same_question(env.dns, &msg).await,
            "{name}: the relay's answer"
        );
        assert!(!udp(dns, &msg).await.answers.is_empty(), "{name}");
    }
    // Out of scope, and reverse names: the relays' answers, unchanged.
    let far_ip = pods_with_ip(&relay, "other").await[0]
        .status
        .as_ref()
        .unwrap()
        .pod_ip
        .clone()
        .unwrap();
    let rev = far_ip.split('.').rev().collect::<Vec<_>>().join(".") + ".in-addr.arpa.";
    for msg in [
        q("far-0.far.other.svc", RecordType::A),
        q("nope.other.svc", RecordType::A),
        q("far.other.rank", RecordType::TXT),
        query_msg(&rev, RecordType::PTR, None),
        // Another gang of the held namespace: its pods are not here.
        q("eval-0.eval.ml.svc", RecordType::A),
        q("eval.ml.svc", RecordType::A),
        q("2.eval.ml.rank", RecordType::A),
    ] {
        let before = forwarded(&metrics, "answered");
        let here = same_question(dns, &msg).await;
        assert_eq!(
            forwarded(&metrics, "answered"),
            before + 1,
            "forwarded: {msg}"
        );
        assert_eq!(here, same_question(env.dns, &msg).await, "unchanged: {msg}");
    }
    // A headless Service without a selector in the held namespace: its
    // addresses are in an EndpointSlice, which the relay serves too, so the
    // node instance answers its names itself.
    create_service(
        &env.client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "db", "namespace": "ml"},
               "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}),
    )
    .await;
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "db-1", "namespace": "ml",
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.9.9.9"], "hostname": "db-0"}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
    });
    Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(env.client.clone(), "ml")
        .create(
            &PostParams::default(),
            &serde_json::from_value(slice).unwrap(),
        )
        .await
        .unwrap();
    wait_resolves(env.dns, "db.ml.svc", T).await;
    for msg in [
        q("db.ml.svc", RecordType::A),
        q("db-0.db.ml.svc", RecordType::A),
    ] {
        let m = msg.clone();
        wait_for(
            "the node instance to answer the Service without a selector",
            T,
            || {
                let m = m.clone();
                async move { !udp(dns, &m).await.answers.is_empty() }
            },
        )
        .await;
        let before = forwarded(&metrics, "answered");
        let here = same_question(dns, &msg).await;
        assert_eq!(forwarded(&metrics, "answered"), before, "held: {msg}");
        assert_eq!(
            here,
            same_question(env.dns, &msg).await,
            "the relay's: {msg}"
        );
    }
    // The relay serves the slice as the API server's discovery group.
    let slices: Vec<_> =
        Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(relay.clone(), "ml")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
    assert_eq!(
        slices.len(),
        1,
        "only slices of Services without a selector"
    );
    assert_eq!(slices[0].endpoints[0].addresses, ["10.9.9.9"]);

    // Over TCP too.
    let msg = q("far-1.far.other.svc", RecordType::A);
    assert_eq!(
        tcp(dns, &msg).await.to_vec().unwrap(),
        tcp(env.dns, &msg).await.to_vec().unwrap()
    );

    // A pod of gang `eval` lands on the node: `eval` is held too, and its
    // names are answered here.
    let mut guest = pod_json(
        "ml",
        "eval-guest",
        json!({"batch.kubernetes.io/job-name": "eval", "job-name": "eval"}),
    );
    guest["spec"]["nodeName"] = json!(node);
    create_pod(&env.client, guest).await;
    wait_for("gang eval held on the node", T, || async {
        table.scope().contains("ml")
            && table.scope().is_partial("ml")
            && !table.scope().is_unheld("ml", "eval")
    })
    .await;
    for msg in [
        q("eval.ml.svc", RecordType::A),
        q("2.eval.ml.rank", RecordType::A),
    ] {
        let m = msg.clone();
        wait_for("the node instance to answer gang eval itself", T, || {
            let m = m.clone();
            let metrics = metrics.clone();
            async move {
                let before = forwarded(&metrics, "answered");
                let answered = !udp(dns, &m).await.answers.is_empty();
                answered && forwarded(&metrics, "answered") == before
            }
        })
        .await;
        assert_eq!(
            same_question(dns, &msg).await,
            same_question(env.dns, &msg).await,
            "the relay's: {msg}"
        );
    }

    // A pod of a new namespace lands on the node: its namespace comes into
    // scope; when it leaves, out again, and its names are forwarded.
    let mut late = pod_json("late", "solo", json!({"app": "solo"}));
    late["spec"]["nodeName"] = json!(node);
    late["spec"]["hostname"] = json!("solo");
    late["spec"]["subdomain"] = json!("solo");
    create_pod(&env.client, late).await;
    wait_held(&table, &["late", "ml"]).await;
    let msg = q("late.pod", RecordType::SOA);
    let before = forwarded(&metrics, "answered");
    same_question(dns, &msg).await;
    assert_eq!(forwarded(&metrics, "answered"), before, "late is held");
    Api::<Pod>::namespaced(env.client.clone(), "late")
        .delete("solo", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_held(&table, &["ml"]).await;
    let msg = q("solo.solo.late.svc", RecordType::A);
    let before = forwarded(&metrics, "answered");
    let here = same_question(dns, &msg).await;
    assert_eq!(forwarded(&metrics, "answered"), before + 1);
    assert_eq!(here, same_question(env.dns, &msg).await);
}

/// A relay over `podns sim` with these Jobs (namespace, name, ranks), each
/// waited for through the relay: the relay's kubeconfig, a client of it,
/// and each Job's node (of its first pod).
pub(crate) async fn relay_with_jobs(
    jobs: &[(&str, &str, usize)],
) -> (Env, tempfile::TempDir, PathBuf, kube::Client, Vec<String>) {
    let (env, dir, kubeconfig) = env_with_relay(&[]).await;
    for (ns, name, ranks) in jobs {
        create_job(&env.client, ns, name, *ranks, "indexed-job").await;
    }
    let relay = relay_client(&kubeconfig).await;
    let mut nodes = Vec::new();
    for (ns, _, ranks) in jobs {
        nodes.push(node_of_pods(&relay, ns, *ranks).await);
    }
    (env, dir, kubeconfig, relay, nodes)
}

/// A headless Service `ml/gpus` selecting on `tier: gpu`.
async fn create_gpus_service(client: &kube::Client) {
    create_service(
        client,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "gpus", "namespace": "ml"},
               "spec": {"clusterIP": "None", "selector": {"tier": "gpu"}}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_selecting_on_a_label_not_served_yet_has_its_pods_served_anew() {
    use hickory_proto::rr::RecordType;
    let (env, _dir, kubeconfig, relay, nodes) = relay_with_jobs(&[("ml", "train", 2)]).await;
    let node = nodes[0].clone();
    // Two pods labelled `tier: gpu`, which no Service selects on yet.
    for name in ["g0", "g1"] {
        let mut p = pod_json("ml", name, json!({"tier": "gpu", "team": "a"}));
        p["spec"]["nodeName"] = json!(node);
        create_pod(&env.client, p).await;
    }
    wait_for("both tier pods with IPs through the relay", T, || async {
        pods_with_ip(&relay, "ml").await.len() == 4
    })
    .await;
    let tier = |pods: Vec<Pod>| -> Vec<Option<String>> {
        let mut t: Vec<_> = pods
            .iter()
            .filter(|p| p.name_any().starts_with('g'))
            .map(|p| p.labels().get("tier").cloned())
            .collect();
        t.sort();
        t
    };
    assert_eq!(
        tier(pods_with_ip(&relay, "ml").await),
        [None, None],
        "not served"
    );

    // A node instance holding `ml`, and a plain watch of `ml` through the
    // relay from where it is now.
    let n = node_instance(&env, &kubeconfig, &node, &[]).await;
    let (table, metrics, dns) = (n.table.clone(), n.metrics.clone(), n.dns_addr);
    wait_held(&table, &["ml"]).await;
    let rv = list_rv(&relay, "ml").await;
    let mut events = Api::<Pod>::namespaced(relay.clone(), "ml")
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    // A headless Service selecting on `tier`.
    create_gpus_service(&env.client).await;
    // The watch that holds the pods as served before is told to relist
    // (after any status write still in flight)...
    let gone = tokio::time::timeout(T, async {
        loop {
            match events
                .try_next()
                .await
                .unwrap()
                .expect("the stream is open")
            {
                WatchEvent::Error(e) => break e,
                WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_) => {}
                WatchEvent::Bookmark(_) => {}
            }
        }
    })
    .await
    .expect("410 within the deadline");
    assert_eq!(gone.code, 410, "{gone:?}");
    // ...and a list now has `tier` (and still not `team`).
    let pods = pods_with_ip(&relay, "ml").await;
    assert_eq!(
        tier(pods.clone()),
        [Some("gpu".to_string()), Some("gpu".to_string())]
    );
    assert!(pods.iter().all(|p| !p.labels().contains_key("team")));
    // The node instance relisted and answers the new Service itself, as
    // the relay does (while it relists, it forwards the namespace's names:
    // the relay's answer, counted as forwarded).
    let msg = query_msg(&fqdn("gpus.ml.svc"), RecordType::A, Some(1232));
    let m = msg.clone();
    wait_for("the node instance to answer gpus.ml.svc itself", T, || {
        let (m, metrics) = (m.clone(), metrics.clone());
        async move {
            let before = forwarded(&metrics, "answered");
            udp(dns, &m).await.answers.len() == 2 && forwarded(&metrics, "answered") == before
        }
    })
    .await;
    let before = forwarded(&metrics, "answered");
    assert_eq!(
        same_question(dns, &msg).await,
        same_question(env.dns, &msg).await
    );
    assert_eq!(
        forwarded(&metrics, "answered"),
        before,
        "answered on the node"
    );
}

/// After a Service widens the labels served in a namespace, the relay ends
/// for a while (its rekey grace) every watch resumed there, since another
/// relay may have served the old labels at a later position. A node
/// instance that starts in that while must not be sent back to list its
/// node's pods again and again: it lists and watches them in one request
/// (a streaming list), whose start reflects the widening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_started_right_after_a_widening_lists_its_pods_once() {
    use podns_server::metrics::{NODE_RELAY_FAILURE_REASONS, ReasonLabels};
    let (env, _dir, kubeconfig, relay, nodes) = relay_with_jobs(&[("ml", "train", 2)]).await;
    let node = nodes[0].clone();
    let mut p = pod_json("ml", "g0", json!({"tier": "gpu"}));
    p["spec"]["nodeName"] = json!(node);
    create_pod(&env.client, p).await;
    wait_for("g0 with an IP through the relay", T, || async {
        pods_with_ip(&relay, "ml").await.len() == 3
    })
    .await;
    create_gpus_service(&env.client).await;
    wait_for("the relay serving g0's tier label", T, || async {
        pods_with_ip(&relay, "ml")
            .await
            .iter()
            .any(|p| p.labels().get("tier").is_some())
    })
    .await;

    // Within the grace: a node instance of that node starts, one request
    // per watch. (Multiplexed, each reopening of its one connection in
    // the grace resumes every watch, and those covering `ml` or the node
    // are sent back to list once per reopening: bounded, not a loop.)
    let n = node_instance(&env, &kubeconfig, &node, &["--no-watch-mux"]).await;
    wait_held(&n.table, &["ml"]).await;
    // Its node's pods watch carries what comes next: a pod of another
    // namespace on the node brings that namespace into its scope.
    ensure_ns(&env.client, "ml2").await;
    let mut p = pod_json("ml2", "h0", json!({}));
    p["spec"]["nodeName"] = json!(node);
    create_pod(&env.client, p).await;
    wait_held(&n.table, &["ml", "ml2"]).await;
    let failures: Vec<(&str, u64)> = NODE_RELAY_FAILURE_REASONS
        .into_iter()
        .map(|reason| {
            let c = n
                .metrics
                .node_relay_failures
                .get_or_create(&ReasonLabels { reason });
            (reason, c.get())
        })
        .filter(|(_, c)| *c > 0)
        .collect();
    assert!(
        failures.is_empty(),
        "the node instance failed to read the relay: {failures:?}"
    );
}

/// A TCP proxy on loopback to whichever relay `target` names now, as the
/// relay Service would be; connections to a relay that stopped end with it.
async fn proxy(
    target: std::sync::Arc<std::sync::Mutex<std::net::SocketAddr>>,
) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = l.accept().await {
            let to = *target.lock().unwrap();
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    addr
}

/// The watches of `resources` the node instance started by listing
/// (`init`).
pub(crate) fn inits(m: &podns_server::metrics::Metrics, resources: &[&'static str]) -> u64 {
    resources
        .iter()
        .map(|&resource| {
            m.watch_events
                .get_or_create(&podns_server::metrics::EventLabels {
                    resource,
                    event: "init",
                })
                .get()
        })
        .sum()
}

fn relists(m: &podns_server::metrics::Metrics) -> u64 {
    inits(m, &["pods", "services", "jobs"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_fails_over_to_another_relay_without_a_relist() {
    let env = env_with_readers(&["--kubelet"], &[], &[("default", "podns-node")]).await;
    create_job(&env.client, "ml", "train", 4, "indexed-job").await;
    // Two relays with one certificate, as replicas behind a Service.
    let dir = tempfile::tempdir().unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let mut relays = Vec::new();
    for name in ["a", "b"] {
        let flags = [
            "--relay-listen=127.0.0.1:0".to_string(),
            format!("--relay-tls-cert={}", cert.display()),
            format!("--relay-tls-key={}", key.display()),
            format!(
                "--relay-kubeconfig-out={}",
                dir.path().join(format!("{name}.yaml")).display()
            ),
        ];
        let stop = env.shutdown.child_token();
        let r = start_podns(&flags, env.client.clone(), stop.clone());
        relays.push((r, stop));
    }
    let a_yaml = dir.path().join("a.yaml");
    wait_for("the relays' kubeconfigs", T, || {
        let (a, b) = (a_yaml.clone(), dir.path().join("b.yaml"));
        async move { a.exists() && b.exists() }
    })
    .await;
    let target = std::sync::Arc::new(std::sync::Mutex::new(relays[0].0.relay_addr.unwrap()));
    let front = proxy(target.clone()).await;
    // The node instance's kubeconfig names the "Service" (the proxy).
    let text = std::fs::read_to_string(&a_yaml).unwrap();
    let kc = dir.path().join("node.yaml");
    std::fs::write(
        &kc,
        text.replace(
            &relays[0].0.relay_addr.unwrap().to_string(),
            &front.to_string(),
        ),
    )
    .unwrap();
    let relay = relay_client(&kc).await;
    let node = node_of_pods(&relay, "ml", 4).await;
    let dns = format!(
        "--relay-dns={},{}",
        relays[0].0.dns_addr, relays[1].0.dns_addr
    );
    let flags = [
        format!("--relay-kubeconfig={}", kc.display()),
        format!("--node={node}"),
        dns,
    ];
    let n = start_podns(&flags, relay.clone(), env.shutdown.clone());
    let (table, metrics, dns) = (n.table.clone(), n.metrics.clone(), n.dns_addr);
    wait_held(&table, &["ml"]).await;
    let listed = relists(&metrics);

    // Relay a goes; the "Service" sends new connections to b.
    *target.lock().unwrap() = relays[1].0.relay_addr.unwrap();
    relays[0].1.cancel();
    let gone = std::time::Instant::now();
    // A pod created after the failover, on the node: answered by the node
    // instance itself, through relay b.
    // (Of gang `train`, whose pods are here already: the node's gangs,
    // and so its watches, stay as they are.)
    let mut late = pod_json(
        "ml",
        "late",
        json!({"batch.kubernetes.io/job-name": "train", "job-name": "train"}),
    );
    late["spec"]["nodeName"] = json!(node);
    late["spec"]["hostname"] = json!("late");
    late["spec"]["subdomain"] = json!("train");
    create_pod(&env.client, late).await;
    let name = "late.train.ml.svc";
    // Until the node has the pod, its name is forwarded (the namespace is
    // held in part: a name not found may be another gang's); the wait is
    // for the node's own answer.
    wait_for("the new pod answered by the node instance", T, || async {
        let before = forwarded(&metrics, "answered");
        let found = !ask(dns, name, hickory_proto::rr::RecordType::A)
            .await
            .answers
            .is_empty();
        found && forwarded(&metrics, "answered") == before
    })
    .await;
    let back = gone.elapsed();
    eprintln!("failover: a pod created after relay a stopped answered in {back:?}");
    assert!(back < Duration::from_secs(2), "back in {back:?}");
    assert_eq!(
        relists(&metrics),
        listed,
        "resumed by resourceVersion, no relist"
    );
    assert_eq!(table.scope().namespaces(), vec!["ml".to_string()]);
    let forwarded_before = forwarded(&metrics, "answered");
    // Every rank still answers right.
    for i in 0..4 {
        let name = format!("train-{i}.train.ml.svc");
        assert!(
            !ask(dns, &name, hickory_proto::rr::RecordType::A)
                .await
                .answers
                .is_empty(),
            "{name}"
        );
    }
    assert_eq!(
        forwarded(&metrics, "answered"),
        forwarded_before,
        "answered from the node's own index, not forwarded"
    );
}

/// docs/relay.md's walkthrough, `docs/relay-walkthrough.sh`, run twice in
/// a row as a user would run it: both runs pass (so the first left no
/// server or port behind, and each waited for /readyz before it dug),
/// each saw its "held" name answered by the node instance with nothing
/// forwarded, and nothing listens and no file of theirs is left after.
/// It uses the doc's fixed ports, so it runs in a network namespace of its
/// own (`unshare`: root, or a user namespace) with a private loopback.
#[test]
fn the_relay_walkthrough_runs_twice_and_leaves_nothing_behind() {
    for tool in ["dig", "curl", "ss"] {
        if !need_cmd(tool) {
            return;
        }
    }
    let Some(kubectl) = find_tool("kubectl") else {
        need("kubectl", false);
        return;
    };
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let unshare = if root { "-n" } else { "-rn" };
    let netns = std::process::Command::new("unshare")
        .args([unshare, "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !need(
        "a network namespace of the test's own (unshare; root)",
        netns,
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/relay-walkthrough.sh");
    // Each run's output, then its exit code, then what listens and what
    // is left in its TMPDIR, each after a `=== ` line.
    let text = format!(
        "ip link set lo up || exit 90
for run in 1 2; do
  echo \"=== run $run\"
  timeout 120 bash {script} 2>&1
  echo \"=== run $run exited $?\"
done
echo \"=== listening\"
ss -Hltun
echo \"=== left\"
ls -A \"$TMPDIR\"
"
    );
    let out = std::process::Command::new("unshare")
        .args([unshare, "sh", "-c", &text])
        .env("PODNS", PODNS_BIN)
        .env("KUBECTL", &kubectl)
        .env("TMPDIR", tmp.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let context = format!("{stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    let mut sections: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    let mut at = "";
    for line in stdout.lines() {
        match line.strip_prefix("=== ") {
            Some(head) => {
                at = head;
                sections.entry(at).or_default();
            }
            None => sections.entry(at).or_default().push(line),
        }
    }
    for run in ["run 1", "run 2"] {
        assert!(
            sections.contains_key(format!("{run} exited 0").as_str()),
            "{run} failed: {context}"
        );
        let said = &sections[run];
        for line in [
            "# held: answered by the node instance; nothing forwarded, nothing asked of the relay",
            "# forwarded: the node instance asked the relay's DNS once and passed its answer on",
        ] {
            assert!(
                said.contains(&line),
                "{run} did not say {line:?}: {context}"
            );
        }
        assert_eq!(said.last(), Some(&"relay walkthrough: ok"), "{context}");
    }
    assert_eq!(
        sections.get("listening"),
        Some(&vec![]),
        "a server outlived the walkthrough: {context}"
    );
    assert_eq!(
        sections.get("left"),
        Some(&vec![]),
        "files left behind: {context}"
    );
}
