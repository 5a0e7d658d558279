//! Discovery documents: enough for kubectl and client-go to find pods,
//! services, namespaces and nodes in the core group, jobs in `batch/v1`
//! and ServiceCIDRs in `networking.k8s.io/v1`.

use std::net::SocketAddr;

use serde_json::{Value, json};

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-podns-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub fn api_versions(addr: SocketAddr) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr.to_string()}],
    })
}

pub fn api_v1() -> Value {
    let rw = json!([
        "create", "delete", "get", "list", "patch", "update", "watch"
    ]);
    let status = json!(["get", "patch", "update"]);
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace",
             "verbs": rw, "shortNames": ["ns"], "storageVersionHash": "Q3oi5N2YM8M="},
            {"name": "nodes", "singularName": "node", "namespaced": false, "kind": "Node",
             "verbs": rw, "shortNames": ["no"], "storageVersionHash": "XwShjMxG9Fs="},
            {"name": "nodes/status", "singularName": "", "namespaced": false, "kind": "Node", "verbs": status},
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
             "verbs": rw, "shortNames": ["po"], "categories": ["all"], "storageVersionHash": "xPOwRZ+Yhw8="},
            {"name": "pods/status", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": status},
            {"name": "services", "singularName": "service", "namespaced": true, "kind": "Service",
             "verbs": rw, "shortNames": ["svc"], "categories": ["all"], "storageVersionHash": "0/CO1lhkEBI="},
            {"name": "services/status", "singularName": "", "namespaced": true, "kind": "Service", "verbs": status},
        ],
    })
}

/// `/apis`: the named groups (the core group is at `/api`).
pub fn api_groups() -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [batch_group_entry(), networking_group_entry()],
    })
}

fn batch_group_entry() -> Value {
    let v1 = json!({"groupVersion": "batch/v1", "version": "v1"});
    json!({"name": "batch", "versions": [v1], "preferredVersion": v1})
}

/// `/apis/batch`.
pub fn batch_group() -> Value {
    let mut g = batch_group_entry();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    g
}

/// `/apis/batch/v1`.
pub fn batch_v1() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "batch/v1",
        "resources": [
            {"name": "jobs", "singularName": "job", "namespaced": true, "kind": "Job",
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
             "categories": ["all"], "storageVersionHash": "mudhfqk/qZY="},
            {"name": "jobs/status", "singularName": "", "namespaced": true, "kind": "Job",
             "verbs": ["get", "patch", "update"]},
        ],
    })
}

fn networking_group_entry() -> Value {
    let v1 = json!({"groupVersion": "networking.k8s.io/v1", "version": "v1"});
    json!({"name": "networking.k8s.io", "versions": [v1], "preferredVersion": v1})
}

/// `/apis/networking.k8s.io`.
pub fn networking_group() -> Value {
    let mut g = networking_group_entry();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    g
}

/// `/apis/networking.k8s.io/v1`: only ServiceCIDRs (GA in 1.33).
pub fn networking_v1() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "networking.k8s.io/v1",
        "resources": [
            {"name": "servicecidrs", "singularName": "servicecidr", "namespaced": false, "kind": "ServiceCIDR",
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
             "storageVersionHash": "3cDF5hqTkLY="},
            {"name": "servicecidrs/status", "singularName": "", "namespaced": false, "kind": "ServiceCIDR",
             "verbs": ["get", "patch", "update"]},
        ],
    })
}
