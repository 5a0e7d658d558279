//! `podns explain` end to end: pods and Services made through the real
//! kube client against `podns sim`, `/debug/explain` over a real socket
//! (JSON: the reason code), and the built binary's `podns explain` (text:
//! the sentence). Each reason of issue 14, and the endpoint off without
//! `--admin-debug`.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// `/debug/explain` as JSON.
async fn explain_json(admin: SocketAddr, name: &str, qtype: &str) -> Value {
    let path = format!("/debug/explain?name={name}&type={qtype}&format=json");
    let (status, body) = admin_get(admin, &path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Poll until `name` is explained with `reason`; the explanation.
async fn wait_reason(admin: SocketAddr, name: &str, qtype: &str, reason: &str) -> Value {
    let what = format!("{name} {qtype} to be explained as {reason}");
    wait_for(&what, T, || async {
        let v = explain_json(admin, name, qtype).await;
        if v["reason"] == reason {
            Ok(v)
        } else {
            Err(format!("{v:#}"))
        }
    })
    .await
}

/// The built binary: `podns explain ARGS --admin IP:PORT` (no `http://`,
/// as `podns wait --server` is written); (exit code, stdout, stderr).
async fn cli(admin: SocketAddr, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(PODNS_BIN)
        .arg("explain")
        .args(args)
        .arg(format!("--admin={admin}"))
        .output()
        .await
        .expect("run podns explain");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `podns explain NAME [TYPE]` in text: it must succeed and say `sentence`.
async fn text_says(admin: SocketAddr, args: &[&str], sentence: &str) -> String {
    let (code, out, err) = cli(admin, args).await;
    assert_eq!(code, 0, "podns explain {args:?}: {err}");
    assert!(
        out.contains(sentence),
        "podns explain {args:?} does not say {sentence:?}:\n{out}"
    );
    out
}

fn host_pod(ns: &str, name: &str, host: &str, sub: &str, labels: Value) -> Value {
    let mut p = pod_json(ns, name, labels);
    p["spec"]["hostname"] = json!(host);
    p["spec"]["subdomain"] = json!(sub);
    p
}

async fn set_phase(client: &kube::Client, ns: &str, name: &str, phase: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"phase": phase}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_hostname_through_a_pods_life() {
    let env = env(&[], &["--admin-debug"]).await;
    let name = "w-0.w.ex.svc.cluster.local";

    let v = wait_reason(env.admin, name, "A", "no_pod").await;
    assert_eq!(v["rcode"], "NXDOMAIN");
    text_says(
        env.admin,
        &[name],
        "no pod in namespace ex has hostname w-0 and subdomain w",
    )
    .await;

    create_pod(&env.client, host_pod("ex", "w-0", "w-0", "w", json!({}))).await;
    let v = wait_reason(env.admin, name, "A", "pod_no_ip").await;
    assert_eq!(v["objects"][0]["name"], "w-0");
    assert_eq!(v["objects"][0]["published"], false);
    text_says(
        env.admin,
        &[name],
        "pod ex/w-0 has hostname w-0 but no IP yet",
    )
    .await;

    set_status(&env.client, "ex", "w-0", &["10.244.9.1"], true).await;
    let v = wait_reason(env.admin, name, "A", "hostname").await;
    assert_eq!(v["rcode"], "NOERROR");
    assert!(
        v["answer"][0]
            .as_str()
            .unwrap()
            .ends_with("IN A 10.244.9.1"),
        "{v:#}"
    );
    let pod = &v["objects"][0];
    assert_eq!(
        (&pod["kind"], &pod["namespace"], &pod["name"]),
        (&json!("pod"), &json!("ex"), &json!("w-0"))
    );
    assert_eq!(pod["ips"], json!(["10.244.9.1"]));
    assert_eq!(
        (&pod["phase"], &pod["ready"]),
        (&json!("Running"), &json!(true))
    );
    let out = text_says(
        env.admin,
        &[name],
        "pod ex/w-0 has spec.hostname w-0 and spec.subdomain w",
    )
    .await;
    assert!(
        out.contains("answers, ip 10.244.9.1, Running, Ready"),
        "{out}"
    );
    assert!(out.starts_with(&format!("{name}. A: NOERROR")), "{out}");

    // The name exists; AAAA is not among its records.
    let v = wait_reason(env.admin, name, "AAAA", "no_record_of_type").await;
    assert_eq!(v["rcode"], "NOERROR");
    text_says(env.admin, &[name, "AAAA"], "exists but has no AAAA records").await;

    // The CLI's JSON is the endpoint's.
    let (code, out, err) = cli(env.admin, &[name, "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["reason"], "hostname");

    set_phase(&env.client, "ex", "w-0", "Succeeded").await;
    let v = wait_reason(env.admin, name, "A", "pod_terminal").await;
    assert_eq!(v["rcode"], "NXDOMAIN");
    assert_eq!(v["objects"][0]["phase"], "Succeeded");
    text_says(
        env.admin,
        &[name],
        "pod ex/w-0 has hostname w-0 but is Succeeded, a terminal phase",
    )
    .await;

    // Terminating: a scheduled pod deleted with a grace period stays
    // listed, with a deletionTimestamp.
    let mut w1 = host_pod("ex", "w-1", "w-1", "w", json!({}));
    w1["spec"]["nodeName"] = json!("node-1");
    create_pod(&env.client, w1).await;
    set_status(&env.client, "ex", "w-1", &["10.244.9.2"], true).await;
    let other = "w-1.w.ex.svc.cluster.local";
    wait_reason(env.admin, other, "A", "hostname").await;
    let api: Api<Pod> = Api::namespaced(env.client.clone(), "ex");
    api.delete(
        "w-1",
        &DeleteParams {
            grace_period_seconds: Some(120),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let v = wait_reason(env.admin, other, "A", "pod_terminating").await;
    assert_eq!(v["objects"][0]["terminating"], true);
    text_says(
        env.admin,
        &[other],
        "pod ex/w-1 has hostname w-1 but is terminating",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_shared_hostname_names_the_chosen_pod_and_why() {
    let env = env(&[], &["--admin-debug"]).await;
    let name = "r-0.r.ex.svc.cluster.local";
    create_pod(
        &env.client,
        host_pod("ex", "r-0-old", "r-0", "r", json!({})),
    )
    .await;
    set_status(&env.client, "ex", "r-0-old", &["10.244.8.1"], false).await;
    create_pod(
        &env.client,
        host_pod("ex", "r-0-new", "r-0", "r", json!({})),
    )
    .await;
    set_status(&env.client, "ex", "r-0-new", &["10.244.8.2"], true).await;
    let v = wait_reason(env.admin, name, "A", "hostname_shared").await;
    assert_eq!(v["chosen_by"], "ready");
    assert_eq!(v["objects"][0]["name"], "r-0-new");
    assert_eq!(v["objects"][0]["role"], "answers");
    assert_eq!(v["objects"][1]["name"], "r-0-old");
    assert_eq!(v["objects"][1]["role"], "not chosen");
    assert!(
        v["answer"][0].as_str().unwrap().ends_with("10.244.8.2"),
        "{v:#}"
    );
    text_says(
        env.admin,
        &[name],
        "2 published pods share hostname r-0: ex/r-0-new answers, not ex/r-0-old, because it is Ready and r-0-old is not",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_publish_ready_and_a_pod_not_ready() {
    let env = env(&[], &["--admin-debug", "--publish=ready"]).await;
    let name = "n-0.n.ex.svc.cluster.local";
    create_pod(&env.client, host_pod("ex", "n-0", "n-0", "n", json!({}))).await;
    set_status(&env.client, "ex", "n-0", &["10.244.7.1"], false).await;
    let v = wait_reason(env.admin, name, "A", "pod_not_ready").await;
    assert_eq!(v["rcode"], "NXDOMAIN");
    assert_eq!(v["objects"][0]["ready"], false);
    text_says(
        env.admin,
        &[name],
        "pod ex/n-0 has hostname n-0 but is not Ready, and --publish ready publishes Ready pods only",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_headless_service_that_selects_no_published_pod() {
    let env = env(&[], &["--admin-debug"]).await;
    let name = "gang.ex.svc.cluster.local";
    create_service(&env.client, headless_json("ex", "gang", "gang")).await;
    let v = wait_reason(env.admin, name, "A", "service_no_published_pods").await;
    assert_eq!(v["rcode"], "NOERROR");
    assert_eq!(v["answer"], json!([]));
    assert_eq!(v["objects"][0]["kind"], "service");
    assert_eq!(v["objects"][0]["service_type"], "headless");
    text_says(
        env.admin,
        &[name],
        "headless Service ex/gang selects no pod (selector app=gang)",
    )
    .await;

    create_pod(
        &env.client,
        pod_json("ex", "gang-a", json!({"app": "gang"})),
    )
    .await;
    wait_reason(env.admin, name, "A", "service_no_published_pods").await;
    let v = wait_for("the member to show", T, || async {
        let v = explain_json(env.admin, name, "A").await;
        if v["objects"].as_array().unwrap().len() == 2 {
            Ok(v)
        } else {
            Err(format!("{v:#}"))
        }
    })
    .await;
    assert_eq!(v["objects"][1]["name"], "gang-a");
    assert_eq!(v["objects"][1]["not_published_because"], "pod_no_ip");
    text_says(
        env.admin,
        &[name],
        "headless Service ex/gang selects 1 pod(s) but publishes none",
    )
    .await;

    set_status(&env.client, "ex", "gang-a", &["10.244.6.1"], true).await;
    let v = wait_reason(env.admin, name, "A", "headless_service").await;
    assert_eq!(v["objects"][1]["published"], true);
    let v = wait_reason(
        env.admin,
        "10-244-6-1.gang.ex.svc.cluster.local",
        "A",
        "headless_member",
    )
    .await;
    assert_eq!(v["objects"][1]["name"], "gang-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_outside_the_watch_scope() {
    let env = env(
        &[],
        &["--admin-debug", "--namespace=ml", "--label-selector=team=a"],
    )
    .await;
    // A namespace podns does not watch: it cannot see anything there.
    let v = wait_reason(
        env.admin,
        "w-0.w.other.svc.cluster.local",
        "A",
        "namespace_not_watched",
    )
    .await;
    assert_eq!(v["rcode"], "NXDOMAIN");
    text_says(
        env.admin,
        &["w-0.w.other.svc.cluster.local"],
        "namespace other is not watched: podns runs with --namespace ml",
    )
    .await;

    // A pod outside the label selector is invisible; one inside it answers.
    create_pod(
        &env.client,
        host_pod("ml", "b-0", "b-0", "b", json!({"team": "b"})),
    )
    .await;
    set_status(&env.client, "ml", "b-0", &["10.244.5.1"], true).await;
    create_pod(
        &env.client,
        host_pod("ml", "a-0", "a-0", "b", json!({"team": "a"})),
    )
    .await;
    set_status(&env.client, "ml", "a-0", &["10.244.5.2"], true).await;
    wait_reason(env.admin, "a-0.b.ml.svc.cluster.local", "A", "hostname").await;
    let v = wait_reason(
        env.admin,
        "b-0.b.ml.svc.cluster.local",
        "A",
        "pod_outside_label_selector",
    )
    .await;
    assert_eq!(v["rcode"], "NXDOMAIN");
    text_says(
        env.admin,
        &["b-0.b.ml.svc.cluster.local"],
        "podns watches only pods matching --label-selector team=a",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_outside_every_zone() {
    let env = env(&[], &["--admin-debug"]).await;
    let v = wait_reason(env.admin, "www.example.com", "A", "outside_zones").await;
    assert_eq!(v["rcode"], "REFUSED");
    text_says(
        env.admin,
        &["www.example.com"],
        "is in none of the served zones (cluster.local.)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_which_reverse_case_decided() {
    // A Node without podCIDRs: only the Service range's zones are owned.
    let env = env(&["--node-pod-cidrs=none"], &["--admin-debug"]).await;
    create_pod(&env.client, pod_json("ex", "p", json!({}))).await;
    set_status(&env.client, "ex", "p", &["10.244.7.7"], true).await;
    // Outside every owned zone, held: answered, and explain says why.
    let held = "7.7.244.10.in-addr.arpa";
    let v = wait_reason(env.admin, held, "PTR", "ptr_pod").await;
    assert_eq!(v["rcode"], "NOERROR");
    let zone = v["reverse_zone"].as_str().unwrap();
    assert!(
        zone.contains("in none of the ranges learned") && zone.contains("as here"),
        "{zone}"
    );
    text_says(
        env.admin,
        &[held, "PTR"],
        "outside them podns answers the PTR of an address its index holds, as here",
    )
    .await;
    // Outside, not held: REFUSED, and why.
    let v = wait_reason(
        env.admin,
        "8.7.244.10.in-addr.arpa",
        "PTR",
        "reverse_refused",
    )
    .await;
    assert_eq!(v["rcode"], "REFUSED");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("no pod, Service or endpoint podns knows holds that address"),
        "{v:#}"
    );
    // Held, but not a PTR question: REFUSED too.
    let v = wait_reason(env.admin, held, "TXT", "reverse_refused").await;
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("only PTR questions there, not TXT"),
        "{v:#}"
    );
    // Inside the Service range's zone, no one's address: NXDOMAIN there.
    let v = wait_reason(
        env.admin,
        "200.0.96.10.in-addr.arpa",
        "PTR",
        "no_pod_with_ip",
    )
    .await;
    assert_eq!(v["rcode"], "NXDOMAIN");
    let zone = v["reverse_zone"].as_str().unwrap();
    assert!(
        zone.starts_with("in the reverse zone 96.10.in-addr.arpa of 10.96.0.0/16"),
        "{zone}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_before_the_index_is_synced() {
    // An API server that never answers: the index never syncs.
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let args = serve_args(&["--admin-debug"]);
    let listeners =
        podns_server::serve::Listeners::bind(args.dns_listen, args.udp_sockets, args.admin_listen)
            .unwrap();
    let server = podns_server::serve::start(&args, client, listeners, shutdown.clone());
    let name = "w-0.w.ex.svc.cluster.local";
    let v = wait_reason(server.admin_addr, name, "A", "not_synced").await;
    assert_eq!(v["rcode"], "SERVFAIL");
    text_says(server.admin_addr, &[name], "the index is not synced yet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_is_off_without_admin_debug() {
    let env = env(&[], &[]).await;
    let (status, _) = admin_get(
        env.admin,
        "/debug/explain?name=w-0.w.ex.svc.cluster.local&type=A",
    )
    .await;
    assert_eq!(status, 404);
    let (code, out, err) = cli(env.admin, &["w-0.w.ex.svc.cluster.local"]).await;
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("start podns serve with --admin-debug"),
        "{err}"
    );
    // Bad flags exit 64 with one line.
    let (code, _, err) = cli(env.admin, &["x.cluster.local", "NOTATYPE"]).await;
    assert_eq!(code, 64, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
