//! Services without a selector, answered from their user-managed
//! EndpointSlices: slices written through the real kube-rs client to
//! `podns sim`, watched by `podns serve` over both wires, asked over UDP
//! (and with dig where it is installed).

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

const T: Duration = Duration::from_secs(20);

/// An external database behind a Service without a selector.
fn database_service(ns: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": ns},
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}
    })
}

/// A slice of Service `db`, managed by `manager` (None: no label at all,
/// as hand-written slices often are).
fn slice_json(
    ns: &str,
    name: &str,
    manager: Option<&str>,
    endpoints: serde_json::Value,
) -> serde_json::Value {
    let mut labels = json!({"kubernetes.io/service-name": "db"});
    if let Some(m) = manager {
        labels["endpointslice.kubernetes.io/managed-by"] = json!(m);
    }
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
    })
}

async fn create_slice(client: &kube::Client, body: serde_json::Value) {
    let ns = body["metadata"]["namespace"].as_str().unwrap().to_string();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .unwrap();
}

/// Did podns list or watch EndpointSlices (the simulator's counts)?
fn read_slices(stats: &serde_json::Value) -> bool {
    ["list", "watch"]
        .iter()
        .any(|verb| stats["requests"][verb]["endpointslices"].as_u64() > Some(0))
}

async fn a_records(env: &Env, name: &str) -> Vec<String> {
    let mut v = addrs(&ask(env.dns, name, RecordType::A).await);
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_without_selector_answers_from_user_managed_slices_on_both_wires() {
    for wire in ["json", "protobuf"] {
        let env = env(&[], &[&format!("--wire={wire}"), "--publish=ready"]).await;
        let ns = "ext";
        create_service(&env.client, database_service(ns)).await;
        // Hand-written (no managed-by), and mirrored from hand-written
        // Endpoints: both count.
        create_slice(
            &env.client,
            slice_json(
                ns,
                "db-manual",
                None,
                json!([
                    {"addresses": ["10.9.0.1"], "hostname": "db-0", "conditions": {"ready": true}},
                    {"addresses": ["10.9.0.2"], "conditions": {"ready": false}}
                ]),
            ),
        )
        .await;
        create_slice(
            &env.client,
            slice_json(
                ns,
                "db-mirrored",
                Some("endpointslicemirroring-controller.k8s.io"),
                json!([{"addresses": ["10.9.0.3"]}]),
            ),
        )
        .await;
        // The EndpointSlice controller's own: podns never lists it, so
        // its address stays out even though the Service has no selector.
        create_slice(
            &env.client,
            slice_json(
                ns,
                "db-controller",
                Some("endpointslice-controller.k8s.io"),
                json!([{"addresses": ["10.9.0.99"]}]),
            ),
        )
        .await;

        let set = "db.ext.svc";
        wait_for(&format!("{wire}: the set from the slices"), T, || async {
            a_records(&env, set).await == ["10.9.0.1", "10.9.0.3"]
        })
        .await;
        assert_eq!(a_records(&env, "db-0.db.ext.svc").await, ["10.9.0.1"]);
        assert_eq!(a_records(&env, "10-9-0-3.db.ext.svc").await, ["10.9.0.3"]);
        assert_eq!(
            rcode(&ask(env.dns, "10-9-0-2.db.ext.svc", RecordType::A).await),
            ResponseCode::NXDomain,
            "{wire}: not ready under --publish ready"
        );
        let srv = ask(env.dns, "_pg._tcp.db.ext.svc", RecordType::SRV).await;
        let mut targets: Vec<String> = srv
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::SRV(s) => Some(format!("{} {}", s.port, s.target)),
                _ => None,
            })
            .collect();
        targets.sort();
        assert_eq!(
            targets,
            [
                "5432 10-9-0-3.db.ext.svc.cluster.local.",
                "5432 db-0.db.ext.svc.cluster.local."
            ],
            "{wire}"
        );
        let ptr = ask(env.dns, "1.0.9.10.in-addr.arpa", RecordType::PTR).await;
        assert!(
            ptr.answers.iter().any(|r| matches!(&r.data,
                RData::PTR(p) if p.0.to_ascii() == "db-0.db.ext.svc.cluster.local.")),
            "{wire}: {ptr:?}"
        );

        // The endpoint becomes ready: it joins; then the slice goes.
        let api: Api<EndpointSlice> = Api::namespaced(env.client.clone(), ns);
        let patch = json!({"endpoints": [
            {"addresses": ["10.9.0.1"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.9.0.2"], "conditions": {"ready": true}}
        ]});
        api.patch("db-manual", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        wait_for(&format!("{wire}: the ready endpoint joins"), T, || async {
            a_records(&env, set).await == ["10.9.0.1", "10.9.0.2", "10.9.0.3"]
        })
        .await;
        api.delete("db-manual", &DeleteParams::default())
            .await
            .unwrap();
        wait_for(&format!("{wire}: the deleted slice leaves"), T, || async {
            a_records(&env, set).await == ["10.9.0.3"]
        })
        .await;
        assert_eq!(
            rcode(&ask(env.dns, "db-0.db.ext.svc", RecordType::A).await),
            ResponseCode::NXDomain
        );

        // The watch reports its sync, and asked the server for the slices
        // with the label selector.
        let (_, metrics) = admin_get(env.admin, "/metrics").await;
        assert!(
            metrics.contains("podns_watch_synced{resource=\"endpointslices\"} 1"),
            "{wire}"
        );
        let stats = sim_get(&env.client, "/sim/stats").await;
        assert!(read_slices(&stats), "{stats}");
    }
}

/// dig sees what the resolver library sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dig_resolves_a_service_without_selector() {
    if !need_cmd("dig") {
        return;
    }
    let env = env(&[], &[]).await;
    create_service(&env.client, database_service("ext")).await;
    create_slice(
        &env.client,
        slice_json(
            "ext",
            "db-1",
            None,
            json!([{"addresses": ["10.9.1.1"], "hostname": "primary"}]),
        ),
    )
    .await;
    wait_resolves(env.dns, "db.ext.svc", T).await;
    let out = std::process::Command::new("dig")
        .args([
            &format!("@{}", env.dns.ip()),
            "-p",
            &env.dns.port().to_string(),
            "+short",
            "primary.db.ext.svc.cluster.local",
            "A",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "10.9.1.1");
}

/// `--no-endpoint-slices`: no slice is ever asked for, and a Service
/// without a selector answers no addresses (as before the watch existed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_endpoint_slices_turns_the_watch_off() {
    let env = env(&[], &["--no-endpoint-slices"]).await;
    create_service(&env.client, database_service("ext")).await;
    create_slice(
        &env.client,
        slice_json("ext", "db-1", None, json!([{"addresses": ["10.9.2.1"]}])),
    )
    .await;
    wait_for("the Service", T, || async {
        rcode(&ask(env.dns, "db.ext.svc", RecordType::A).await) == ResponseCode::NoError
    })
    .await;
    assert!(a_records(&env, "db.ext.svc").await.is_empty());
    let stats = sim_get(&env.client, "/sim/stats").await;
    assert!(!read_slices(&stats), "{stats}");
}
