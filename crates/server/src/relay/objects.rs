//! The slim objects the relay serves: exactly the fields podns decodes
//! (`k8s::slim`), written back as the API server spells them, so a node
//! instance decodes from the relay what it would have decoded from the API
//! server, and kubectl and kube-rs read them as ordinary objects. No
//! managedFields, no container images, no volumes: a training pod of a few
//! kilobytes becomes a few hundred bytes.

use podns_kapi::Kind;
use serde_json::{Map, Value, json};

use super::cache::Object;
use crate::k8s::pb::PbObject;
use crate::k8s::slim::{
    IntOrStr, Loose, LooseStr, LooseVec, SlimEndpointSlice, SlimJob, SlimMeta, SlimPod, SlimService,
};
use crate::labels::RANK_LABELS;

/// What the relay serves of an object it watches.
pub trait Relayed {
    const KIND: Kind;
    /// The object as the relay serves it, with all its labels (the relay
    /// chooses which it serves); `None` for an object podns itself skips
    /// as malformed (the watch logs it).
    fn relayed(&self) -> Option<Object>;
}

/// An object the relay holds in Protobuf (`raw`, the object's message),
/// decoded as podns decodes the API server's and served again: the relay
/// keeps no JSON, and makes it from this for a JSON client.
pub fn decoded(kind: Kind, raw: &[u8]) -> Option<Object> {
    match kind {
        Kind::Pod => SlimPod::decode_pb(raw).relayed(),
        Kind::Service => SlimService::decode_pb(raw).relayed(),
        Kind::Job => SlimJob::decode_pb(raw).relayed(),
        Kind::EndpointSlice => SlimEndpointSlice::decode_pb(raw).relayed(),
        _ => None,
    }
}

fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(k.to_owned(), v);
    }
}

fn s(l: &LooseStr) -> Option<Value> {
    l.get().map(|s| Value::String(s.clone()))
}

fn items<T>(l: &LooseVec<T>) -> impl Iterator<Item = &T> {
    l.get().into_iter().flatten().filter_map(Loose::get)
}

fn string_map(entries: &[(String, String)]) -> Option<Value> {
    (!entries.is_empty()).then(|| {
        Value::Object(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    })
}

/// A Service's or an EndpointSlice's port: name, number, protocol.
fn named_port(name: &LooseStr, port: &Loose<i64>, protocol: &LooseStr) -> Map<String, Value> {
    let mut o = Map::new();
    put(&mut o, "name", s(name));
    put(&mut o, "port", port.get().map(|n| json!(n)));
    put(&mut o, "protocol", s(protocol));
    o
}

/// Metadata; a pod's without its uid (nothing reads it, and it is 40 of
/// the few hundred bytes of every event) and without annotations that
/// repeat a label the rank view reads (the Job controller writes the
/// completion index as both).
fn metadata(kind: Kind, m: &kube::api::ObjectMeta, sm: &SlimMeta) -> Value {
    let pod = kind == Kind::Pod;
    let mut o = Map::new();
    put(&mut o, "name", m.name.clone().map(Value::String));
    put(&mut o, "namespace", m.namespace.clone().map(Value::String));
    if !pod {
        put(&mut o, "uid", m.uid.clone().map(Value::String));
    }
    put(
        &mut o,
        "resourceVersion",
        m.resource_version.clone().map(Value::String),
    );
    put(
        &mut o,
        "creationTimestamp",
        sm.creation_timestamp.clone().map(Value::String),
    );
    put(
        &mut o,
        "deletionTimestamp",
        sm.deletion_timestamp.clone().map(Value::String),
    );
    put(&mut o, "labels", string_map(&sm.labels));
    let annotations: Vec<(String, String)> = sm
        .annotations
        .iter()
        .filter(|(k, v)| {
            !(pod
                && RANK_LABELS.contains(&k.as_str())
                && sm.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .cloned()
        .collect();
    put(&mut o, "annotations", string_map(&annotations));
    Value::Object(o)
}

/// The identity every kind shares.
fn object(m: &kube::api::ObjectMeta, value: Value) -> Option<Object> {
    Some(Object {
        ns: m.namespace.clone().unwrap_or_default(),
        name: m.name.clone()?,
        rv: m.resource_version.as_deref()?.parse().ok()?,
        value,
    })
}

impl Relayed for SlimPod {
    const KIND: Kind = Kind::Pod;
    fn relayed(&self) -> Option<Object> {
        if self.malformed.is_some() {
            return None;
        }
        let mut spec = Map::new();
        put(&mut spec, "hostname", s(&self.spec.hostname));
        put(&mut spec, "subdomain", s(&self.spec.subdomain));
        put(&mut spec, "nodeName", s(&self.spec.node_name));
        put(
            &mut spec,
            "hostNetwork",
            self.spec.host_network.get().map(|b| Value::Bool(*b)),
        );
        // Containers only for their named ports (SRV of a pod's ports);
        // `name` is required by the API's schema.
        let containers: Vec<Value> = items(&self.spec.containers)
            .map(|c| {
                let ports: Vec<Value> = items(&c.ports)
                    .map(|p| {
                        let mut o = Map::new();
                        put(&mut o, "name", s(&p.name));
                        put(
                            &mut o,
                            "containerPort",
                            p.container_port.get().map(|n| json!(n)),
                        );
                        // TCP is what an unset protocol means.
                        if p.protocol.get().is_some_and(|p| p != "TCP") {
                            put(&mut o, "protocol", s(&p.protocol));
                        }
                        Value::Object(o)
                    })
                    .collect();
                let mut o = Map::new();
                o.insert(
                    "name".into(),
                    s(&c.name).unwrap_or_else(|| Value::String(String::new())),
                );
                if !ports.is_empty() {
                    o.insert("ports".into(), Value::Array(ports));
                }
                Value::Object(o)
            })
            .collect();
        spec.insert("containers".into(), Value::Array(containers));
        let mut status = Map::new();
        put(&mut status, "phase", s(&self.status.phase));
        put(&mut status, "podIP", s(&self.status.pod_ip));
        let ips: Vec<Value> = items(&self.status.pod_ips)
            .filter_map(|p| s(&p.ip).map(|ip| json!({"ip": ip})))
            .collect();
        // `podIPs` only when it says more than `podIP` (dual-stack): the
        // API keeps `podIP == podIPs[0]`.
        let just_pod_ip =
            ips.len() == 1 && ips[0]["ip"].as_str() == self.status.pod_ip.get().map(String::as_str);
        if !ips.is_empty() && !just_pod_ip {
            status.insert("podIPs".into(), Value::Array(ips));
        }
        // Of the conditions, DNS reads Ready only.
        let conditions: Vec<Value> = items(&self.status.conditions)
            .filter(|c| c.type_.get().is_some_and(|t| t == "Ready"))
            .map(|c| {
                let mut o = Map::new();
                put(&mut o, "type", s(&c.type_));
                put(&mut o, "status", s(&c.status));
                Value::Object(o)
            })
            .collect();
        if !conditions.is_empty() {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        let v = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata(Self::KIND, &self.metadata, &self.meta),
            "spec": spec,
            "status": status,
        });
        object(&self.metadata, v)
    }
}

impl Relayed for SlimService {
    const KIND: Kind = Kind::Service;
    fn relayed(&self) -> Option<Object> {
        if self.malformed.is_some() {
            return None;
        }
        let sp = &self.spec;
        let mut spec = Map::new();
        put(&mut spec, "type", s(&sp.type_));
        put(&mut spec, "clusterIP", s(&sp.cluster_ip));
        let ips: Vec<Value> = items(&sp.cluster_ips).map(|ip| json!(ip)).collect();
        if !ips.is_empty() {
            spec.insert("clusterIPs".into(), Value::Array(ips));
        }
        put(
            &mut spec,
            "selector",
            sp.selector.get().and_then(|m| string_map(&m.entries)),
        );
        let ports: Vec<Value> = items(&sp.ports)
            .map(|p| {
                let mut o = named_port(&p.name, &p.port, &p.protocol);
                put(
                    &mut o,
                    "targetPort",
                    p.target_port.get().map(|t| match t {
                        IntOrStr::Int(n) => json!(n),
                        IntOrStr::Str(s) => json!(s),
                    }),
                );
                Value::Object(o)
            })
            .collect();
        if !ports.is_empty() {
            spec.insert("ports".into(), Value::Array(ports));
        }
        put(&mut spec, "externalName", s(&sp.external_name));
        put(
            &mut spec,
            "publishNotReadyAddresses",
            sp.publish_not_ready_addresses.get().map(|b| json!(b)),
        );
        let v = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(Self::KIND, &self.metadata, &self.meta),
            "spec": spec,
        });
        object(&self.metadata, v)
    }
}

impl Relayed for SlimJob {
    const KIND: Kind = Kind::Job;
    fn relayed(&self) -> Option<Object> {
        if self.malformed.is_some() {
            return None;
        }
        let mut spec = Map::new();
        put(
            &mut spec,
            "completions",
            self.spec.completions.get().map(|n| json!(n)),
        );
        put(
            &mut spec,
            "parallelism",
            self.spec.parallelism.get().map(|n| json!(n)),
        );
        // Required by the schema; the relay serves no pod template.
        spec.insert("template".into(), json!({}));
        let v = json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata(Self::KIND, &self.metadata, &self.meta),
            "spec": spec,
        });
        object(&self.metadata, v)
    }
}

impl Relayed for SlimEndpointSlice {
    const KIND: Kind = Kind::EndpointSlice;
    fn relayed(&self) -> Option<Object> {
        if self.malformed.is_some() {
            return None;
        }
        let endpoints: Vec<Value> = items(&self.endpoints)
            .map(|e| {
                let mut o = Map::new();
                let addresses: Vec<Value> = items(&e.addresses).map(|a| json!(a)).collect();
                o.insert("addresses".into(), Value::Array(addresses));
                if let Some(c) = e.conditions.get() {
                    let mut conditions = Map::new();
                    put(&mut conditions, "ready", c.ready.get().map(|b| json!(b)));
                    put(
                        &mut conditions,
                        "terminating",
                        c.terminating.get().map(|b| json!(b)),
                    );
                    o.insert("conditions".into(), Value::Object(conditions));
                }
                put(&mut o, "hostname", s(&e.hostname));
                Value::Object(o)
            })
            .collect();
        let ports: Vec<Value> = items(&self.ports)
            .map(|p| Value::Object(named_port(&p.name, &p.port, &p.protocol)))
            .collect();
        let mut v = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": metadata(Self::KIND, &self.metadata, &self.meta),
            "endpoints": endpoints,
        });
        put(v.as_object_mut()?, "addressType", s(&self.address_type));
        if !ports.is_empty() {
            v["ports"] = Value::Array(ports);
        }
        object(&self.metadata, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::slim::SlimEndpointSlice;
    use crate::relay::cache::Item;

    /// `v` as the relay serves it from the API server's JSON, then as it
    /// serves it from the Protobuf it keeps: the same JSON.
    fn round_trip<K: Relayed + serde::de::DeserializeOwned>(v: Value) {
        let slim: K = serde_json::from_value(v).unwrap();
        let served = slim.relayed().unwrap().value;
        let o = slim.relayed().unwrap();
        let item = Item::new(K::KIND, o, &|_| true).unwrap();
        let again: Value = serde_json::from_slice(&item.json(K::KIND)).unwrap();
        assert_eq!(again, served, "{:?}", K::KIND);
        // And once more from that: a fixed point.
        let o = decoded(K::KIND, item.raw()).unwrap();
        let item2 = Item::new(K::KIND, o, &|_| true).unwrap();
        assert_eq!(item2.pb_item, item.pb_item);
        assert!(item2.serves_as(&item));
    }

    #[test]
    fn the_json_made_from_the_protobuf_kept_is_the_json_served() {
        let mut pod = podns_sim::workload::sample_job_pod(false);
        pod["metadata"]["resourceVersion"] = json!("8");
        pod["metadata"]["creationTimestamp"] = json!("2026-12-04T09:00:00Z");
        round_trip::<SlimPod>(pod.clone());
        let mut dual = pod;
        dual["status"]["podIPs"] = json!([{"ip": "10.0.4.17"}, {"ip": "fd00::17"}]);
        dual["spec"]["hostNetwork"] = json!(false);
        dual["metadata"]["deletionTimestamp"] = json!("2026-12-04T10:00:00Z");
        round_trip::<SlimPod>(dual);
        round_trip::<SlimService>(json!({
            "metadata": {"name": "llm", "namespace": "ml", "uid": "u-1", "resourceVersion": "9",
                         "labels": {"app": "llm"}, "creationTimestamp": "2026-12-04T09:00:00Z"},
            "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                     "selector": {"job-name": "llm"}, "publishNotReadyAddresses": true,
                     "ports": [{"name": "nccl", "port": 29500, "protocol": "TCP", "targetPort": 29500},
                               {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web"}]},
        }));
        round_trip::<SlimService>(json!({
            "metadata": {"name": "db", "namespace": "ml", "resourceVersion": "10"},
            "spec": {"type": "ExternalName", "externalName": "db.example.com"},
        }));
        round_trip::<SlimJob>(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "llm", "namespace": "ml", "uid": "u-2", "resourceVersion": "11",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "llm"},
                         "annotations": {"jobset.sigs.k8s.io/replicatedjob-replicas": "1"}},
            "spec": {"completions": 4, "parallelism": 4, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": {"active": 4, "ready": 4},
        }));
        round_trip::<SlimEndpointSlice>(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "ext-abc", "namespace": "ml", "resourceVersion": "12",
                         "labels": {"kubernetes.io/service-name": "ext"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.5"], "hostname": "a",
                           "conditions": {"ready": true, "terminating": false}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }));
    }
}
