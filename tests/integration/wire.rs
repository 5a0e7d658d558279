//! `--wire`: Protobuf and JSON feed the same index. One simulator, one
//! server per wire, the same questions to both.

use std::time::Duration;

use hickory_proto::rr::RecordType;
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// Every record kind podns serves (the rules: crates/server/src/dns/resolve.rs), as (name, type).
/// Names are absolute (trailing dot): `ask` appends the zone to a relative
/// name, and the reverse names are not under it.
fn questions(pod_ip: &str, svc_ip: &str) -> Vec<(String, RecordType)> {
    let dashed = pod_ip.replace('.', "-");
    let rev = pod_ip.split('.').rev().collect::<Vec<_>>().join(".");
    let svc_rev = svc_ip.split('.').rev().collect::<Vec<_>>().join(".");
    let z = "cluster.local";
    [
        (z.to_string(), RecordType::SOA),
        (z.to_string(), RecordType::NS),
        (format!("dns-version.{z}"), RecordType::TXT),
        (format!("train-0.train.ml.svc.{z}"), RecordType::A),
        (format!("train-1.train.ml.svc.{z}"), RecordType::AAAA),
        (format!("train.ml.svc.{z}"), RecordType::A),
        (format!("{dashed}.train.ml.svc.{z}"), RecordType::A),
        (format!("api.ml.svc.{z}"), RecordType::A),
        (format!("out.ml.svc.{z}"), RecordType::CNAME),
        (format!("_http._tcp.api.ml.svc.{z}"), RecordType::SRV),
        (format!("api.ml.svc.{z}"), RecordType::SRV),
        (format!("{dashed}.ml.pod.{z}"), RecordType::A),
        (format!("{rev}.in-addr.arpa"), RecordType::PTR),
        (format!("{svc_rev}.in-addr.arpa"), RecordType::PTR),
        (format!("2.train.ml.rank.{z}"), RecordType::A),
        (format!("leader.train.ml.rank.{z}"), RecordType::A),
        (format!("train.ml.rank.{z}"), RecordType::TXT),
        (format!("nope.ml.svc.{z}"), RecordType::A),
        (format!("ml.svc.{z}"), RecordType::A),
    ]
    .into_iter()
    .map(|(name, ty)| (format!("{name}."), ty))
    .collect()
}

/// An answer reduced to what must not depend on the wire.
async fn answer(dns: std::net::SocketAddr, name: &str, ty: RecordType) -> String {
    let m = ask(dns, name, ty).await;
    let mut rrs: Vec<String> = m
        .answers
        .iter()
        .chain(m.additionals.iter())
        .map(|r| {
            let mut data = r.data.to_string();
            if r.record_type() == RecordType::SOA {
                // The serial counts each server's index publishes, which
                // depends on how events were batched, not on the wire.
                let mut f: Vec<&str> = data.split_whitespace().collect();
                f[2] = "serial";
                data = f.join(" ");
            }
            format!("{} {} {data}", r.name, r.record_type())
        })
        .collect();
    rrs.sort();
    format!("{:?} {}", m.metadata.response_code, rrs.join(" | "))
}

fn content_types(stats: &serde_json::Value) -> Vec<String> {
    stats["responses_by_content_type"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn server(env: &Env, wire: &str) -> podns_server::serve::Running {
    let args = serve_args(&["--wire", wire]);
    let listeners =
        podns_server::serve::Listeners::bind(args.dns_listen, args.udp_sockets, args.admin_listen)
            .unwrap();
    podns_server::serve::start(&args, env.client.clone(), listeners, env.shutdown.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_and_json_answer_the_same() {
    // The first server (env's) reads Protobuf and lists before it
    // watches, so a Protobuf List is decoded too; the auto server gets its
    // initial list as a Protobuf watch stream (streaming list).
    let env = env(
        &["--kubelet"],
        &["--wire", "protobuf", "--streaming-list", "off"],
    )
    .await;
    let c = &env.client;
    create_job(c, "ml", "train", 4, "indexed-job").await;
    create_service(
        c,
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "api", "namespace": "ml"},
            "spec": {"clusterIP": "10.96.0.10", "selector": {"app": "api"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await;
    create_external_name(c, "ml", "out", "example.com").await;
    let json_server = server(&env, "json");
    let auto_server = server(&env, "auto");
    for dns in [env.dns, json_server.dns_addr, auto_server.dns_addr] {
        wait_for("all ranks and services", T, || async move {
            let ranks = addrs(&ask(dns, "train.ml.svc", RecordType::A).await);
            let api = addrs(&ask(dns, "api.ml.svc", RecordType::A).await);
            ranks.len() == 4 && api.len() == 1
        })
        .await;
    }
    let pod_ip = addrs(&ask(env.dns, "train-0.train.ml.svc", RecordType::A).await)
        .pop()
        .unwrap();
    let mut positive = 0;
    for (name, ty) in questions(&pod_ip, "10.96.0.10") {
        let pb = answer(env.dns, &name, ty).await;
        let js = answer(json_server.dns_addr, &name, ty).await;
        let auto = answer(auto_server.dns_addr, &name, ty).await;
        assert_eq!(pb, js, "{name} {ty}");
        assert_eq!(auto, js, "{name} {ty}");
        if pb.contains(" | ") || pb.starts_with("NoError") && pb.len() > 10 {
            positive += 1;
        }
    }
    assert!(
        positive >= 14,
        "too few answers carried records: {positive}"
    );
    let stats = sim_get(c, "/sim/stats").await;
    let types = content_types(&stats);
    assert!(
        types
            .iter()
            .any(|t| t == "application/vnd.kubernetes.protobuf"),
        "{types:?}"
    );
    assert!(
        types
            .iter()
            .any(|t| t == "application/vnd.kubernetes.protobuf;stream=watch"),
        "{types:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_falls_back_to_json_when_protobuf_is_refused() {
    let env = env(&["--kubelet", "--no-protobuf"], &["--wire", "auto"]).await;
    create_job(&env.client, "ml", "train", 2, "indexed-job").await;
    wait_resolves(env.dns, "train-1.train.ml.svc", T).await;
    let stats = sim_get(&env.client, "/sim/stats").await;
    let types = content_types(&stats);
    assert!(!types.iter().any(|t| t.contains("protobuf")), "{types:?}");
    assert!(types.iter().any(|t| t == "application/json"), "{types:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_objects_over_protobuf_are_skipped_and_counted() {
    let env = env(&[], &["--wire", "protobuf"]).await;
    let c = &env.client;
    for (name, ip) in [("good", "10.1.0.1"), ("bad", "10.1.0.300")] {
        let mut p = pod_json("ml", name, json!({"app": "x"}));
        p["spec"]["hostname"] = json!(name);
        p["spec"]["subdomain"] = json!("x");
        create_pod(c, p).await;
        set_status(c, "ml", name, &[ip], true).await;
    }
    wait_resolves(env.dns, "good.x.ml.svc", T).await;
    wait_for("the bad pod counted", T, || async {
        let (_, m) = admin_get(env.admin, "/metrics").await;
        m.lines().any(|l| {
            l.starts_with("podns_watch_skipped_objects_total{resource=\"pods\"}")
                && !l.ends_with(" 0")
        })
    })
    .await;
    assert!(
        ask(env.dns, "bad.x.ml.svc", RecordType::A)
            .await
            .answers
            .is_empty()
    );
}
