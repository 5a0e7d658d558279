//! Who may read the relay, against `podns sim`'s TokenReviews (audiences,
//! tokens bound to pods) and SubjectAccessReviews (RBAC): a token for the
//! relay's audience whose account holds the relay's permission, and with a
//! token bound to a pod, only that pod's node's scope. And a node instance
//! that cannot read its relay says why: its log, its metrics, `/readyz`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use podns_server::k8s::mux;
use podns_server::relay::http::auth::AUDIENCE;
use serde_json::json;

use crate::relay::{T, env_with_relay, pods_with_ip, relay_client, start_podns, wait_held};
use crate::support::*;

/// The relay's kubeconfig at `kubeconfig`, written anew beside it as
/// `name` with `edit` applied to its text.
fn kubeconfig_with(kubeconfig: &Path, name: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let path = kubeconfig.with_file_name(name);
    std::fs::write(&path, edit(&text)).unwrap();
    path
}

/// The kubeconfig with another token.
fn with_token(kubeconfig: &Path, name: &str, token: &str) -> PathBuf {
    kubeconfig_with(kubeconfig, name, |text| {
        text.lines()
            .map(|l| match l.split_once("token: ") {
                Some((indent, _)) => format!("{indent}token: {token}"),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// The HTTP status of a failed kube call.
fn code<T>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(kube::Error::Api(s)) => s.code,
        Err(e) => panic!("not an API error: {e}"),
    }
}

/// `podns_relay_requests_denied_total{reason}` on the relay.
async fn denied(admin: std::net::SocketAddr, reason: &str) -> u64 {
    let (_, text) = admin_get(admin, "/metrics").await;
    let key = format!("podns_relay_requests_denied_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in the metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_lets_in_its_audience_and_its_permission_only() {
    let (env, dir, kubeconfig) = env_with_relay(&[]).await;
    let list = |kc: PathBuf| async move {
        code(
            Api::<Pod>::all(relay_client(&kc).await)
                .list(&ListParams::default())
                .await,
        )
    };
    // The kubeconfig the relay wrote: podns-node's token for its audience.
    assert_eq!(list(kubeconfig.clone()).await, 200);
    // The same account's token for the API server (what every pod has
    // mounted): not for the relay.
    let api_token = request_token(&env.client, "default", "podns-node", "", None).await;
    let kc = with_token(&kubeconfig, "api-audience.yaml", &api_token);
    assert_eq!(list(kc).await, 401);
    // Another account's token for the relay's audience: it lacks the
    // relay's permission.
    let intruder = request_token(&env.client, "default", "intruder", AUDIENCE, None).await;
    let kc = with_token(&kubeconfig, "intruder.yaml", &intruder);
    let e = Api::<Service>::all(relay_client(&kc).await)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("not an API error: {e}")
    };
    assert_eq!(s.code, 403, "{s:?}");
    assert!(
        s.message.contains("system:serviceaccount:default:intruder"),
        "{}",
        s.message
    );
    // Granted the permission, the same account gets in (its refusal was
    // cached for seconds, not for good).
    grant_relay_reader(&env.client, "default", "intruder").await;
    let kc = with_token(&kubeconfig, "intruder.yaml", &intruder);
    wait_for("the granted account let in", T, || {
        let kc = kc.clone();
        async move { list(kc).await == 200 }
    })
    .await;
    assert!(denied(env.admin, "unauthenticated").await >= 1);
    assert!(denied(env.admin, "forbidden").await >= 1);
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_bound_to_a_pod_reads_only_its_nodes_scope() {
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    // Eight pods fill a node: `train` on one, `far` on the next.
    create_job(&env.client, "ml", "train", 8, "indexed-job").await;
    create_job(&env.client, "other", "far", 8, "indexed-job").await;
    let admin = relay_client(&kubeconfig).await;
    wait_for("16 pods with IPs", T, || async {
        pods_with_ip(&admin, "ml").await.len() == 8
            && pods_with_ip(&admin, "other").await.len() == 8
    })
    .await;
    let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
    let (here, there) = (
        node_of(&pods_with_ip(&admin, "ml").await[0]),
        node_of(&pods_with_ip(&admin, "other").await[0]),
    );
    assert_ne!(here, there);
    // The node instance's own pod on that node, and the token its
    // projected volume holds: bound to it, so naming its node.
    ensure_ns(&env.client, "podns").await;
    let mut me = pod_json("podns", "podns-node-x", json!({"app": "podns"}));
    me["spec"]["nodeName"] = here.clone().into();
    me["spec"]["serviceAccountName"] = "podns-node".into();
    let me = create_pod(&env.client, me).await;
    grant_relay_reader(&env.client, "podns", "podns-node").await;
    let token = request_token(&env.client, "podns", "podns-node", AUDIENCE, Some(&me)).await;
    let kc = with_token(&kubeconfig, "bound.yaml", &token);
    let bound = relay_client(&kc).await;
    let pods = |ns: Option<&str>| match ns {
        Some(ns) => Api::<Pod>::namespaced(bound.clone(), ns),
        None => Api::<Pod>::all(bound.clone()),
    };
    // Its node's pods, cluster-wide; not another node's, not everyone's.
    let on_here = ListParams::default().fields(&format!("spec.nodeName={here}"));
    wait_for(
        "the 8 ranks and the node instance's pod on its node",
        T,
        || async {
            match pods(None).list(&on_here).await {
                Ok(l) if l.items.len() == 9 => Ok(()),
                Ok(l) => Err(format!("{} pods", l.items.len())),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    let theirs = ListParams::default().fields(&format!("spec.nodeName={there}"));
    assert_eq!(code(pods(None).list(&theirs).await), 403);
    assert_eq!(code(pods(None).list(&ListParams::default()).await), 403);
    // Its pods' namespace: the Services, and the pods of its gang only.
    let services = |ns: &str| Api::<Service>::namespaced(bound.clone(), ns);
    assert_eq!(code(services("ml").list(&ListParams::default()).await), 200);
    assert_eq!(
        code(services("other").list(&ListParams::default()).await),
        403
    );
    let gang = ListParams::default().labels("batch.kubernetes.io/job-name in (train)");
    assert_eq!(pods(Some("ml")).list(&gang).await.unwrap().items.len(), 8);
    let wider = ListParams::default().labels("batch.kubernetes.io/job-name in (train,x)");
    assert_eq!(code(pods(Some("ml")).list(&wider).await), 403);
    assert_eq!(
        code(pods(Some("ml")).list(&ListParams::default()).await),
        403
    );
    assert_eq!(code(pods(Some("other")).list(&gang).await), 403);
    assert!(denied(env.admin, "out_of_scope").await >= 5);

    // Multiplexed, each inner watch is authorized as its own request
    // would be: the one in the node's scope streams, the one outside it
    // is refused alone (its ending frame carries the 403), the request
    // itself is 200.
    let refused_before = denied(env.admin, "out_of_scope").await;
    let watch = |ns: &str| {
        format!(
            "/api/v1/namespaces/{ns}/services?watch=true&allowWatchBookmarks=true\
             &sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion="
        )
    };
    let req = http::Request::get(mux::request_uri(&[watch("ml"), watch("other")]))
        .header("accept", podns_server::k8s::compact::COMPACT)
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let res = bound.send(req).await.unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let mut frames = mux::Decoder::default();
    let (mut data, mut refusal) = (0, None);
    tokio::time::timeout(T, async {
        while data == 0 || refusal.is_none() {
            use http_body_util::BodyExt;
            let chunk = body.frame().await.expect("more").expect("a frame");
            frames.push(&chunk.into_data().unwrap_or_default());
            while let Some(f) = frames.next_frame().unwrap() {
                match f {
                    mux::Outer::Data(0, b) => data += b.len(),
                    mux::Outer::End(1, Some(status)) => refusal = Some(status),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    })
    .await
    .expect("the in-scope watch's events and the other's refusal");
    let status: serde_json::Value = serde_json::from_slice(&refusal.unwrap()).unwrap();
    assert_eq!(status["code"], 403, "{status}");
    assert_eq!(denied(env.admin, "out_of_scope").await, refused_before + 1);

    // A node instance with that token holds its scope: every request it
    // makes is in it.
    let flags = [
        format!("--relay-kubeconfig={}", kc.display()),
        format!("--node={here}"),
        format!("--relay-dns={}", env.dns),
    ];
    let n = start_podns(&flags, bound.clone(), env.shutdown.clone());
    wait_held(&n.table, &["ml", "podns"]).await;
    wait_for("the node instance ready", T, || async {
        admin_get(n.admin_addr, "/readyz").await.0 == 200
    })
    .await;
    // Another node's instance with this token is refused its own pods.
    let flags = [
        format!("--relay-kubeconfig={}", kc.display()),
        format!("--node={there}"),
        format!("--relay-dns={}", env.dns),
    ];
    let other = start_podns(&flags, bound, env.shutdown.clone());
    wait_for(
        "the other node's instance to say it is forbidden",
        T,
        || async {
            let (status, body) = admin_get(other.admin_addr, "/readyz").await;
            if status == 503 && body.contains("403 Forbidden") {
                Ok(())
            } else {
                Err(format!("{status} {body}"))
            }
        },
    )
    .await;
    assert!(other.table.scope().namespaces().is_empty());
}

/// `podns_node_relay_failures_total{reason}` and the reachable gauge.
async fn node_metrics(admin: std::net::SocketAddr, reason: &str) -> (u64, i64) {
    let (_, text) = admin_get(admin, "/metrics").await;
    let key = format!("podns_node_relay_failures_total{{reason=\"{reason}\"}} ");
    let failures = text
        .lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
        .unwrap_or(0);
    let reachable = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("podns_node_relay_reachable ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(-1);
    (failures, reachable)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_that_cannot_read_its_relay_says_why() {
    use base64::Engine;
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    // A CA that did not sign the relay's certificate.
    let stranger = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let stranger = base64::engine::general_purpose::STANDARD.encode(stranger.cert.pem());
    let wrong_ca = kubeconfig_with(&kubeconfig, "wrong-ca.yaml", |text| {
        text.lines()
            .map(|l| match l.split_once("certificate-authority-data: ") {
                Some((indent, _)) => format!("{indent}certificate-authority-data: {stranger}"),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let api_token = request_token(&env.client, "default", "podns-node", "", None).await;
    let intruder = request_token(&env.client, "default", "intruder", AUDIENCE, None).await;
    let cases = [
        (wrong_ca, "tls", "TLS verify failed"),
        (
            with_token(&kubeconfig, "api.yaml", &api_token),
            "unauthorized",
            "401 Unauthorized",
        ),
        (
            with_token(&kubeconfig, "intruder.yaml", &intruder),
            "forbidden",
            "403 Forbidden",
        ),
    ];
    for (kc, reason, says) in cases {
        let flags = [
            format!("--relay-kubeconfig={}", kc.display()),
            "--node=gpu-node-00000".to_string(),
            format!("--relay-dns={}", env.dns),
        ];
        let n = start_podns(&flags, relay_client(&kc).await, env.shutdown.clone());
        wait_for(&format!("/readyz to say {says:?}"), T, || async {
            let (status, body) = admin_get(n.admin_addr, "/readyz").await;
            if status == 503 && body.contains(says) && body.contains("cannot read the relay") {
                Ok(())
            } else {
                Err(format!("{status} {body}"))
            }
        })
        .await;
        let (failures, reachable) = node_metrics(n.admin_addr, reason).await;
        assert!(failures >= 1, "{reason}: {failures}");
        assert_eq!(reachable, 0, "{reason}");
    }
}

/// The same as a process: each failure a WARN line naming the relay and
/// the reason in words, and not a `Status {…}` dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_instance_logs_why_it_cannot_read_its_relay() {
    let (env, _dir, kubeconfig) = env_with_relay(&[]).await;
    let api_token = request_token(&env.client, "default", "podns-node", "", None).await;
    let kc = with_token(&kubeconfig, "api.yaml", &api_token);
    let mut cmd = std::process::Command::new(PODNS_BIN);
    cmd.args([
        "serve",
        "--dns-listen=127.0.0.1:0",
        "--admin-listen=127.0.0.1:0",
        "--node=gpu-node-00000",
    ])
    .arg(format!("--relay-kubeconfig={}", kc.display()))
    .arg(format!("--relay-dns={}", env.dns));
    let p = spawn_serve(cmd);
    let relay = format!("https://{}", env.relay.unwrap());
    wait_for("a WARN line naming the relay and the 401", T, || async {
        p.log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("WARN") && l.contains(&relay) && l.contains("401 Unauthorized"))
    })
    .await;
    let log = p.log.lock().unwrap().clone();
    assert!(
        !log.iter().any(|l| l.contains("Status {")),
        "a Status dump: {log:#?}"
    );
}
