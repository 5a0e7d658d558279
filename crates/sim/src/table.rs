//! Server-side printing (`Accept: ...;as=Table;g=meta.k8s.io`): the columns
//! `kubectl get` shows, computed the way the apiserver's printers do.

use serde_json::{Value, json};

use podns_kapi::Kind;

use crate::store::Page;

fn age(created: &str) -> String {
    let Ok(t) = created.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let s = jiff::Timestamp::now().duration_since(t).as_secs().max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// A column definition; `Created At` is a date, the others strings.
fn col(name: &str, priority: u8) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    let ty = if name == "Created At" {
        "date"
    } else {
        "string"
    };
    json!({"name": name, "type": ty, "format": format, "description": name, "priority": priority})
}

/// A kind's columns: those `kubectl get` shows, then those only `-o
/// wide` shows (priority 1).
fn columns(kind: Kind) -> Vec<Value> {
    let (shown, wide): (&[&str], &[&str]) = match kind {
        Kind::Pod => (
            &["Name", "Ready", "Status", "Restarts", "Age"],
            &["IP", "Node", "Nominated Node", "Readiness Gates"],
        ),
        Kind::Service => (
            &[
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age",
            ],
            &["Selector"],
        ),
        Kind::Namespace => (&["Name", "Status", "Age"], &[]),
        Kind::EndpointSlice => (&["Name", "AddressType", "Ports", "Endpoints", "Age"], &[]),
        Kind::Job => (
            &["Name", "Status", "Completions", "Duration", "Age"],
            &["Containers", "Images", "Selector"],
        ),
        Kind::Node => (&["Name", "Status", "Age"], &["Pod CIDRs"]),
        Kind::ServiceCidr => (&["Name", "CIDRs", "Age"], &[]),
        Kind::ClusterRole | Kind::Role => (&["Name", "Created At"], &[]),
        Kind::ClusterRoleBinding | Kind::RoleBinding => (
            &["Name", "Role", "Age"],
            &["Users", "Groups", "ServiceAccounts"],
        ),
    };
    let shown = shown.iter().map(|n| col(n, 0));
    shown.chain(wide.iter().map(|n| col(n, 1))).collect()
}

/// Items as kubectl prints a list (`a,b`), `<none>` when there are none.
fn comma_list<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    let items: Vec<S> = items.collect();
    if items.is_empty() {
        return "<none>".into();
    }
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    items.join(",")
}

/// A list of strings (`a,b`).
fn joined(v: &Value) -> String {
    comma_list(v.as_array().into_iter().flatten().filter_map(Value::as_str))
}

/// A label map as kubectl prints a selector (`k=v,k2=v2`).
fn labels_text(v: &Value) -> String {
    let pairs = v.as_object().into_iter().flatten();
    comma_list(pairs.map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))))
}

fn or_none(v: &Value) -> String {
    match v.as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "<none>".into(),
    }
}

fn cells(kind: Kind, v: &Value) -> Vec<Value> {
    let name = v["metadata"]["name"].clone();
    let created = age(v["metadata"]["creationTimestamp"].as_str().unwrap_or(""));
    match kind {
        Kind::Pod => {
            let total = v["spec"]["containers"].as_array().map_or(0, Vec::len);
            let statuses = v["status"]["containerStatuses"].as_array();
            let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            let restarts: u64 = statuses.map_or(0, |s| {
                s.iter().filter_map(|c| c["restartCount"].as_u64()).sum()
            });
            let status = if !v["metadata"]["deletionTimestamp"].is_null() {
                "Terminating".to_string()
            } else {
                v["status"]["phase"]
                    .as_str()
                    .unwrap_or("Unknown")
                    .to_string()
            };
            vec![
                name,
                format!("{ready}/{total}").into(),
                status.into(),
                restarts.to_string().into(),
                created.into(),
                or_none(&v["status"]["podIP"]).into(),
                or_none(&v["spec"]["nodeName"]).into(),
                "<none>".into(),
                "<none>".into(),
            ]
        }
        Kind::Service => {
            let spec = &v["spec"];
            let ports: Vec<String> = spec["ports"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let ports = if ports.is_empty() {
                "<none>".into()
            } else {
                ports.join(",")
            };
            let cluster_ip = if spec["type"] == "ExternalName" {
                "<none>".to_string()
            } else {
                or_none(&spec["clusterIP"])
            };
            let external = if spec["type"] == "ExternalName" {
                or_none(&spec["externalName"])
            } else {
                "<none>".to_string()
            };
            let selector = labels_text(&spec["selector"]);
            vec![
                name,
                spec["type"].as_str().unwrap_or("ClusterIP").into(),
                cluster_ip.into(),
                external.into(),
                ports.into(),
                created.into(),
                selector.into(),
            ]
        }
        Kind::Namespace => vec![name, or_none(&v["status"]["phase"]).into(), created.into()],
        Kind::Job => job_cells(name, created, v),
        Kind::EndpointSlice => slice_cells(name, created, v),
        Kind::Node => {
            let ready = v["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let status = if ready { "Ready" } else { "NotReady" };
            vec![
                name,
                status.into(),
                created.into(),
                joined(&v["spec"]["podCIDRs"]).into(),
            ]
        }
        Kind::ServiceCidr => vec![name, joined(&v["spec"]["cidrs"]).into(), created.into()],
        Kind::ClusterRole | Kind::Role => vec![name, v["metadata"]["creationTimestamp"].clone()],
        Kind::ClusterRoleBinding | Kind::RoleBinding => binding_cells(name, created, v),
    }
}

/// The RoleBinding printer's columns: `Kind/name` of the role, then the
/// subjects by kind (service accounts as `namespace/name`).
fn binding_cells(name: Value, created: String, v: &Value) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        v["roleRef"]["kind"].as_str().unwrap_or(""),
        v["roleRef"]["name"].as_str().unwrap_or("")
    );
    let subjects = |kind: &str| {
        let names: Vec<String> = v["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["kind"] == kind)
            .map(|s| match s["namespace"].as_str() {
                Some(ns) if kind == "ServiceAccount" => {
                    format!("{ns}/{}", s["name"].as_str().unwrap_or(""))
                }
                _ => s["name"].as_str().unwrap_or("").to_string(),
            })
            .collect();
        Value::from(names.join(", "))
    };
    vec![
        name,
        role.into(),
        created.into(),
        subjects("User"),
        subjects("Group"),
        subjects("ServiceAccount"),
    ]
}

/// The EndpointSlice printer's columns: ports and the first addresses.
fn slice_cells(name: Value, created: String, v: &Value) -> Vec<Value> {
    let join = |items: Vec<String>| {
        if items.is_empty() {
            "<unset>".to_string()
        } else {
            items.join(",")
        }
    };
    let ports = v["ports"]
        .as_array()
        .map(|ps| ps.iter().map(|p| p["port"].to_string()).collect())
        .unwrap_or_default();
    let addresses: Vec<String> = v["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let mut shown = join(addresses.iter().take(3).cloned().collect());
    if addresses.len() > 3 {
        shown.push_str(&format!(" + {} more...", addresses.len() - 3));
    }
    vec![
        name,
        or_none(&v["addressType"]).into(),
        join(ports).into(),
        shown.into(),
        created.into(),
    ]
}

/// The Job printer's columns: the condition that ended it (or Running,
/// Suspended), `succeeded/completions`, and the run time.
fn job_cells(name: Value, created: String, v: &Value) -> Vec<Value> {
    let spec = &v["spec"];
    let st = &v["status"];
    let cond = |t: &str| {
        st["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    let status = if cond("Complete") {
        "Complete"
    } else if cond("Failed") {
        "Failed"
    } else if cond("FailureTarget") {
        "FailureTarget"
    } else if cond("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if spec["suspend"] == true {
        "Suspended"
    } else {
        "Running"
    };
    let succeeded = st["succeeded"].as_u64().unwrap_or(0);
    let completions = match spec["completions"].as_u64() {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let p = spec["parallelism"].as_u64().unwrap_or(1);
            if p > 1 {
                format!("{succeeded}/1 of {p}")
            } else {
                format!("{succeeded}/1")
            }
        }
    };
    let ts = |x: &Value| x.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok());
    let duration = match ts(&st["startTime"]) {
        Some(start) => {
            let end = ts(&st["completionTime"]).unwrap_or_else(jiff::Timestamp::now);
            let s = end.duration_since(start).as_secs().max(0);
            match s {
                0..120 => format!("{s}s"),
                120..7200 => format!("{}m", s / 60),
                7200..172800 => format!("{}h", s / 3600),
                _ => format!("{}d", s / 86400),
            }
        }
        None => String::new(),
    };
    let containers = spec["template"]["spec"]["containers"].as_array();
    let join = |k: &str| {
        containers
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c[k].as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let selector = labels_text(&spec["selector"]["matchLabels"]);
    vec![
        name,
        status.into(),
        completions.into(),
        duration.into(),
        created.into(),
        join("name").into(),
        join("image").into(),
        selector.into(),
    ]
}

/// A `meta.k8s.io/v1` Table of a page, rows carrying object metadata
/// (`includeObject=Metadata`, what kubectl asks for).
pub fn table(kind: Kind, page: &Page) -> Value {
    let rows: Vec<Value> = page
        .items
        .iter()
        .map(|o| {
            let v = o.value();
            json!({
                "cells": cells(kind, &v),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": v["metadata"],
                },
            })
        })
        .collect();
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(c) = &page.cont {
        meta["continue"] = c.clone().into();
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns(kind),
        "rows": rows,
    })
}
