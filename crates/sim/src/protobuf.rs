//! Just enough of the Kubernetes Protobuf encoding to accept the typed
//! creates kubectl sends as Protobuf (`kubectl create namespace`,
//! `kubectl create service`). Other Protobuf bodies get 415; kubectl sends
//! JSON for everything else.
//!
//! The body is decoded with prost into the `k8s-pb` types generated from
//! Kubernetes' `generated.proto` files (as [`pbenc`](podns_kapi::pbenc)
//! encodes), so no field number is written here; the fields a typed create
//! sets are then carried into the stored JSON by name.

use std::collections::BTreeMap;

use k8s_pb::api::core::v1 as pcore;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pmeta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value, json};

/// A body that is not the Protobuf this module understands.
#[derive(Debug, thiserror::Error)]
#[error("failed to decode protobuf: {0}")]
pub struct ProtobufError(&'static str);

/// Sets `key` unless the value is empty (Go's JSON leaves empty values
/// out; so does this).
fn put(m: &mut Map<String, Value>, key: &str, v: impl Into<Value>) {
    let v = v.into();
    let empty = match &v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Bool(b) => !b,
    };
    if !empty {
        m.insert(key.into(), v);
    }
}

fn string_map(map: BTreeMap<String, String>) -> Map<String, Value> {
    map.into_iter().map(|(k, v)| (k, v.into())).collect()
}

/// The metadata a create sets: name, generateName, namespace, labels,
/// annotations.
fn object_meta(meta: Option<pmeta::ObjectMeta>) -> Value {
    let meta = meta.unwrap_or_default();
    let mut m = Map::new();
    put(&mut m, "name", meta.name);
    put(&mut m, "generateName", meta.generate_name);
    put(&mut m, "namespace", meta.namespace);
    put(&mut m, "labels", string_map(meta.labels));
    put(&mut m, "annotations", string_map(meta.annotations));
    Value::Object(m)
}

/// `type` 1 is a string, anything else the integer.
fn int_or_string(v: IntOrString) -> Value {
    if v.r#type == Some(1) {
        v.str_val.unwrap_or_default().into()
    } else {
        v.int_val.unwrap_or_default().into()
    }
}

fn service_port(p: pcore::ServicePort) -> Value {
    let mut m = Map::new();
    put(&mut m, "name", p.name);
    put(&mut m, "protocol", p.protocol);
    put(&mut m, "port", p.port);
    if let Some(t) = p.target_port {
        put(&mut m, "targetPort", int_or_string(t));
    }
    put(&mut m, "nodePort", p.node_port);
    put(&mut m, "appProtocol", p.app_protocol);
    Value::Object(m)
}

/// The ServiceSpec fields a typed create sets.
fn service_spec(s: pcore::ServiceSpec) -> Value {
    let mut m = Map::new();
    let ports: Vec<Value> = s.ports.into_iter().map(service_port).collect();
    put(&mut m, "ports", ports);
    put(&mut m, "selector", string_map(s.selector));
    put(&mut m, "clusterIP", s.cluster_ip);
    put(&mut m, "clusterIPs", s.cluster_ips);
    put(&mut m, "type", s.r#type);
    put(&mut m, "sessionAffinity", s.session_affinity);
    put(&mut m, "externalName", s.external_name);
    put(
        &mut m,
        "publishNotReadyAddresses",
        s.publish_not_ready_addresses,
    );
    put(&mut m, "ipFamilyPolicy", s.ip_family_policy);
    put(&mut m, "ipFamilies", s.ip_families);
    Value::Object(m)
}

/// Decodes a `k8s\0`-prefixed `runtime.Unknown` holding a v1 Namespace or
/// Service (a create's status is ignored anyway).
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let inner = body
        .strip_prefix(b"k8s\0")
        .ok_or(ProtobufError("missing k8s magic"))?;
    let envelope = Unknown::decode(inner).map_err(|_| ProtobufError("not a runtime.Unknown"))?;
    let type_meta = envelope.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = envelope.raw.unwrap_or_default();
    let mut obj = json!({"apiVersion": api_version, "kind": kind});
    match kind.as_str() {
        "Namespace" => {
            let ns =
                pcore::Namespace::decode(&raw[..]).map_err(|_| ProtobufError("not a Namespace"))?;
            obj["metadata"] = object_meta(ns.metadata);
        }
        "Service" => {
            let svc =
                pcore::Service::decode(&raw[..]).map_err(|_| ProtobufError("not a Service"))?;
            obj["metadata"] = object_meta(svc.metadata);
            if let Some(spec) = svc.spec {
                obj["spec"] = service_spec(spec);
            }
        }
        _ => {
            return Err(ProtobufError(
                "only Namespace and Service are accepted as protobuf",
            ));
        }
    }
    Ok(obj)
}

/// The group version of the reviews kubectl sends as Protobuf.
pub const AUTHENTICATION: &str = "authentication.k8s.io/v1";

/// A `k8s\0`-prefixed `runtime.Unknown` holding a TokenRequest or a
/// TokenReview (kubectl sends Protobuf), as the JSON body it stands for.
pub fn decode_authentication(body: &[u8], kind: &str) -> Result<Map<String, Value>, &'static str> {
    use k8s_pb::api::authentication::v1 as pauth;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_pb::apimachinery::pkg::runtime::Unknown;
    use prost::Message;

    fn meta(m: Option<ObjectMeta>) -> Value {
        let m = m.unwrap_or_default();
        let mut o = Map::new();
        for (k, v) in [
            ("name", m.name),
            ("generateName", m.generate_name),
            ("namespace", m.namespace),
        ] {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                o.insert(k.into(), v.into());
            }
        }
        if !m.labels.is_empty() {
            o.insert("labels".into(), json!(m.labels));
        }
        if !m.annotations.is_empty() {
            o.insert("annotations".into(), json!(m.annotations));
        }
        Value::Object(o)
    }

    let inner = body.strip_prefix(b"k8s\0").ok_or("missing k8s magic")?;
    let envelope = Unknown::decode(inner).map_err(|_| "not a runtime.Unknown")?;
    let type_meta = envelope.type_meta.unwrap_or_default();
    if type_meta
        .kind
        .as_deref()
        .is_some_and(|k| !k.is_empty() && k != kind)
    {
        return Err("the protobuf body is of another kind");
    }
    let raw = envelope.raw.unwrap_or_default();
    let mut o = Map::new();
    match kind {
        "TokenRequest" => {
            let tr = pauth::TokenRequest::decode(&raw[..]).map_err(|_| "not a TokenRequest")?;
            o.insert("metadata".into(), meta(tr.metadata));
            let spec = tr.spec.unwrap_or_default();
            let bound = spec.bound_object_ref.map(|r| {
                json!({"kind": r.kind, "apiVersion": r.api_version, "name": r.name, "uid": r.u_id})
            });
            o.insert(
                "spec".into(),
                json!({"audiences": spec.audiences, "expirationSeconds": spec.expiration_seconds,
                       "boundObjectRef": bound}),
            );
        }
        _ => {
            let tr = pauth::TokenReview::decode(&raw[..]).map_err(|_| "not a TokenReview")?;
            o.insert("metadata".into(), meta(tr.metadata));
            let spec = tr.spec.unwrap_or_default();
            o.insert(
                "spec".into(),
                json!({"token": spec.token, "audiences": spec.audiences}),
            );
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use podns_kapi::pbenc::envelope;

    fn meta(name: &str, labels: &[(&str, &str)]) -> Option<pmeta::ObjectMeta> {
        Some(pmeta::ObjectMeta {
            name: Some(name.into()),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        })
    }

    #[test]
    fn decodes_a_namespace() {
        let ns = pcore::Namespace {
            metadata: meta("foo", &[("team", "a")]),
            ..Default::default()
        };
        let v = decode(&envelope("v1", "Namespace", ns.encode_to_vec())).unwrap();
        assert_eq!(v["metadata"]["name"], "foo");
        assert_eq!(v["metadata"]["labels"]["team"], "a");
        assert_eq!(v["kind"], "Namespace");
        // A truncated envelope, no magic, a kind not accepted.
        assert!(decode(b"k8s\0\x0a\x05").is_err());
        assert!(decode(b"nope").is_err());
        let pod = envelope("v1", "Pod", pcore::Pod::default().encode_to_vec());
        assert!(decode(&pod).is_err());
    }

    #[test]
    fn decodes_a_service() {
        let port = pcore::ServicePort {
            name: Some("web".into()),
            protocol: Some("TCP".into()),
            port: Some(80),
            target_port: Some(IntOrString {
                r#type: Some(1),
                int_val: None,
                str_val: Some("http".into()),
            }),
            ..Default::default()
        };
        let svc = pcore::Service {
            metadata: meta("web", &[]),
            spec: Some(pcore::ServiceSpec {
                ports: vec![port],
                selector: [("app".to_string(), "web".to_string())].into(),
                cluster_ip: Some(String::new()),
                r#type: Some("ClusterIP".into()),
                publish_not_ready_addresses: Some(false),
                ip_family_policy: Some("RequireDualStack".into()),
                ip_families: vec!["IPv4".into(), "IPv6".into()],
                ..Default::default()
            }),
            status: None,
        };
        let v = decode(&envelope("v1", "Service", svc.encode_to_vec())).unwrap();
        assert_eq!(v["metadata"], json!({"name": "web"}));
        assert_eq!(
            v["spec"],
            json!({"ports": [{"name": "web", "protocol": "TCP", "port": 80, "targetPort": "http"}],
                   "selector": {"app": "web"}, "type": "ClusterIP",
                   "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]})
        );
    }

    fn auth_envelope(kind: &str, raw: Vec<u8>) -> Vec<u8> {
        use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
        use prost::Message;
        let u = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(AUTHENTICATION.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            ..Default::default()
        };
        [&b"k8s\0"[..], &u.encode_to_vec()].concat()
    }

    #[test]
    fn reads_protobuf_bodies() {
        use k8s_pb::api::authentication::v1 as pauth;
        use prost::Message;
        let tr = pauth::TokenRequest {
            spec: Some(pauth::TokenRequestSpec {
                audiences: vec!["a".into()],
                expiration_seconds: Some(1200),
                bound_object_ref: None,
            }),
            ..Default::default()
        };
        let o = decode_authentication(
            &auth_envelope("TokenRequest", tr.encode_to_vec()),
            "TokenRequest",
        )
        .unwrap();
        assert_eq!(
            Value::Object(o),
            json!({"metadata": {}, "spec": {"audiences": ["a"], "expirationSeconds": 1200, "boundObjectRef": null}})
        );
        let rv = pauth::TokenReview {
            spec: Some(pauth::TokenReviewSpec {
                token: Some("t".into()),
                audiences: vec![],
            }),
            ..Default::default()
        };
        let body = auth_envelope("TokenReview", rv.encode_to_vec());
        let o = decode_authentication(&body, "TokenReview").unwrap();
        assert_eq!(o["spec"], json!({"token": "t", "audiences": []}));
        // Another kind, no magic, a truncated envelope.
        assert!(decode_authentication(&body, "TokenRequest").is_err());
        assert!(decode_authentication(b"{}", "TokenReview").is_err());
        assert!(decode_authentication(&body[..body.len() - 3], "TokenReview").is_err());
    }
}
