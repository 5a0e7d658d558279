//! Discovery documents: enough for kubectl and client-go to find pods,
//! services, namespaces and nodes in the core group (and the
//! `serviceaccounts/token` subresource), tokenreviews in
//! `authentication.k8s.io/v1`, jobs in `batch/v1`,
//! endpointslices in `discovery.k8s.io/v1` and ServiceCIDRs in
//! `networking.k8s.io/v1`; and `/openapi/v3`, enough for kubectl to leave
//! field validation to the server (so `kubectl apply` works without
//! `--validate=false`).

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
            {"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
             "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]},
        ],
    })
}

/// `/apis`: the named groups (the core group is at `/api`).
pub fn api_groups() -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            authentication_group_entry(),
            authorization_group_entry(),
            batch_group_entry(),
            discovery_group_entry(),
            networking_group_entry(),
            rbac_group_entry(),
        ],
    })
}

fn authentication_group_entry() -> Value {
    let v1 = json!({"groupVersion": "authentication.k8s.io/v1", "version": "v1"});
    json!({"name": "authentication.k8s.io", "versions": [v1], "preferredVersion": v1})
}

/// `/apis/authentication.k8s.io`.
pub fn authentication_group() -> Value {
    let mut g = authentication_group_entry();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    g
}

/// `/apis/authentication.k8s.io/v1`: TokenReviews (see [`tokens`](crate::tokens)).
pub fn authentication_v1() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "authentication.k8s.io/v1",
        "resources": [
            {"name": "tokenreviews", "singularName": "tokenreview", "namespaced": false,
             "kind": "TokenReview", "verbs": ["create"]},
        ],
    })
}

fn authorization_group_entry() -> Value {
    let v1 = json!({"groupVersion": "authorization.k8s.io/v1", "version": "v1"});
    json!({"name": "authorization.k8s.io", "versions": [v1], "preferredVersion": v1})
}

/// `/apis/authorization.k8s.io`.
pub fn authorization_group() -> Value {
    let mut g = authorization_group_entry();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    g
}

/// `/apis/authorization.k8s.io/v1`: SubjectAccessReviews (see [`rbac`](crate::rbac)).
pub fn authorization_v1() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "authorization.k8s.io/v1",
        "resources": [
            {"name": "subjectaccessreviews", "singularName": "subjectaccessreview",
             "namespaced": false, "kind": "SubjectAccessReview", "verbs": ["create"]},
        ],
    })
}

fn rbac_group_entry() -> Value {
    let v1 = json!({"groupVersion": "rbac.authorization.k8s.io/v1", "version": "v1"});
    json!({"name": "rbac.authorization.k8s.io", "versions": [v1], "preferredVersion": v1})
}

/// `/apis/rbac.authorization.k8s.io`.
pub fn rbac_group() -> Value {
    let mut g = rbac_group_entry();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    g
}

/// `/apis/rbac.authorization.k8s.io/v1`: the objects RBAC decides by.
pub fn rbac_v1() -> Value {
    let rw = json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ]);
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "rbac.authorization.k8s.io/v1",
        "resources": [
            {"name": "clusterrolebindings", "singularName": "clusterrolebinding", "namespaced": false,
             "kind": "ClusterRoleBinding", "verbs": rw, "storageVersionHash": "48tpQ8gZHFc="},
            {"name": "clusterroles", "singularName": "clusterrole", "namespaced": false,
             "kind": "ClusterRole", "verbs": rw, "storageVersionHash": "bYE5ZWDrJ44="},
            {"name": "rolebindings", "singularName": "rolebinding", "namespaced": true,
             "kind": "RoleBinding", "verbs": rw, "storageVersionHash": "eGsCzGH6b1g="},
            {"name": "roles", "singularName": "role", "namespaced": true,
             "kind": "Role", "verbs": rw, "storageVersionHash": "7FuwZcIIItM="},
        ],
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

fn discovery_group_entry() -> Value {
    let v1 = json!({"groupVersion": "discovery.k8s.io/v1", "version": "v1"});
    json!({"name": "discovery.k8s.io", "versions": [v1], "preferredVersion": v1})
}

/// `/apis/discovery.k8s.io`.
pub fn discovery_group() -> Value {
    let mut g = discovery_group_entry();
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    g
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

/// `/apis/discovery.k8s.io/v1`.
pub fn discovery_v1() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "discovery.k8s.io/v1",
        "resources": [
            {"name": "endpointslices", "singularName": "endpointslice", "namespaced": true,
             "kind": "EndpointSlice",
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
             "storageVersionHash": "Nx3SIv6I0mE="},
        ],
    })
}

/// A group version `/openapi/v3` lists: its path, its group, and the
/// kinds it serves as (kind, resource, namespaced).
struct OpenApiGv {
    path: &'static str,
    group: &'static str,
    kinds: &'static [(&'static str, &'static str, bool)],
}

const OPENAPI_V3: [OpenApiGv; 4] = [
    OpenApiGv {
        path: "api/v1",
        group: "",
        kinds: &[
            ("Namespace", "namespaces", false),
            ("Pod", "pods", true),
            ("Service", "services", true),
        ],
    },
    OpenApiGv {
        path: "apis/batch/v1",
        group: "batch",
        kinds: &[("Job", "jobs", true)],
    },
    OpenApiGv {
        path: "apis/discovery.k8s.io/v1",
        group: "discovery.k8s.io",
        kinds: &[("EndpointSlice", "endpointslices", true)],
    },
    OpenApiGv {
        path: "apis/rbac.authorization.k8s.io/v1",
        group: "rbac.authorization.k8s.io",
        kinds: &[
            ("ClusterRole", "clusterroles", false),
            ("ClusterRoleBinding", "clusterrolebindings", false),
            ("Role", "roles", true),
            ("RoleBinding", "rolebindings", true),
        ],
    },
];

/// `/openapi/v3`: the index of the per-group-version documents.
pub fn openapi_v3_index() -> Value {
    let mut paths = serde_json::Map::new();
    for gv in OPENAPI_V3 {
        paths.insert(
            gv.path.to_string(),
            json!({"serverRelativeURL": format!("/openapi/v3/{}?hash=podns-sim", gv.path)}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/<gv>`: for each kind, the PATCH operation of its item
/// path with its group-version-kind and the `fieldValidation` parameter.
/// That is what kubectl reads before `create`/`apply` to learn that the
/// server validates fields itself (it then sends `fieldValidation=Strict`
/// and needs no schema of its own, so `--validate=false` is not needed).
/// No schemas: the simulator takes the parameter and checks no fields.
pub fn openapi_v3(gv: &str) -> Option<Value> {
    let OpenApiGv {
        path: gv,
        group,
        kinds,
    } = OPENAPI_V3.iter().find(|g| g.path == gv)?;
    let version = gv.rsplit('/').next().unwrap_or("v1");
    let mut paths = serde_json::Map::new();
    for (kind, resource, namespaced) in kinds.iter() {
        let path = if *namespaced {
            format!("/{gv}/namespaces/{{namespace}}/{resource}/{{name}}")
        } else {
            format!("/{gv}/{resource}/{{name}}")
        };
        paths.insert(
            path,
            json!({"patch": {
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
                "parameters": [{"name": "fieldValidation", "in": "query",
                                "schema": {"type": "string", "uniqueItems": true}}],
                "responses": {"200": {"description": "OK"}},
            }}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": self::version()["gitVersion"]},
        "paths": paths,
    }))
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
