//! The kubelet stand-in: one timer task for every pod (Running, Ready,
//! the end of a grace period, a Job's status write), placement on nodes,
//! and the status a kubelet writes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Workload;
use podns_kapi::{ApiError, Kind};

use crate::store::{Obj, new_uid, now_rfc3339};

#[derive(Debug)]
pub(super) enum Step {
    Run,
    Ready,
    FinishDelete,
    /// The Job controller writes a Job's status (`name`) from its pods.
    SyncJob,
}

#[derive(Debug)]
pub(super) struct Timer {
    pub(super) at: Instant,
    pub(super) step: Step,
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) uid: String,
}

impl Workload {
    pub(super) fn schedule(&self, after: Duration, step: Step, obj: &Obj) {
        let _ = self.timers.send(Timer {
            at: Instant::now() + after,
            step,
            ns: obj.ns.clone(),
            name: obj.name.clone(),
            uid: obj.uid.clone(),
        });
    }

    /// Deletes a pod the way the apiserver and kubelet do together: with a
    /// grace period it is marked and removed when the period ends.
    pub fn delete_pod(
        &self,
        ns: &str,
        name: &str,
        grace: u64,
        uid: Option<&str>,
    ) -> Result<Arc<Obj>, ApiError> {
        let (obj, pending) = self.store.delete(Kind::Pod, ns, name, grace, uid)?;
        if pending {
            let g = Duration::from_secs(grace);
            self.schedule(g, Step::FinishDelete, &obj);
        }
        Ok(obj)
    }

    fn fire(&self, t: Timer) {
        let skip = || ApiError::new(0, "Skip", "");
        match t.step {
            Step::FinishDelete => self.store.finish_delete(&t.ns, &t.name, &t.uid),
            Step::SyncJob => self.sync_job(&t.ns, &t.name),
            Step::Run => {
                let res = self.store.modify(Kind::Pod, &t.ns, &t.name, None, |old| {
                    if old["metadata"]["uid"] != t.uid.as_str()
                        || !old["metadata"]["deletionTimestamp"].is_null()
                        || old["status"]["podIP"]
                            .as_str()
                            .is_some_and(|s| !s.is_empty())
                    {
                        return Err(skip());
                    }
                    Ok(self.run_pod(old))
                });
                if let Ok(obj) = res
                    && obj.has_ip
                {
                    self.schedule(self.ready_delay, Step::Ready, &obj);
                }
            }
            Step::Ready => {
                let _ = self.store.modify(Kind::Pod, &t.ns, &t.name, None, |old| {
                    if old["metadata"]["uid"] != t.uid.as_str()
                        || !old["metadata"]["deletionTimestamp"].is_null()
                    {
                        return Err(skip());
                    }
                    let mut v = old.clone();
                    mark_ready(&mut v);
                    Ok(v)
                });
            }
        }
    }

    /// Picks a node (eight GPUs per node, so eight ranks share one) and
    /// allocates the pod's IPs.
    pub(super) fn place(&self, uid: &str, node: Option<&str>) -> Placement {
        let (v4, v6) = self.ips.alloc(uid);
        let given = node.filter(|n| !n.is_empty());
        let node = match given {
            Some(n) => n.to_string(),
            None => format!(
                "gpu-node-{:05}",
                self.nodes.fetch_add(1, Ordering::Relaxed) / 8
            ),
        };
        let node_idx: u32 = node
            .rsplit('-')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let host_ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(172, 16, 0, 0)) + node_idx + 2);
        // The simulator binds the pod to its node: the binding carries
        // the node's topology labels. A pod that named its node got them
        // on create (`admit_pod`); starting it binds nothing.
        let topology = match given {
            Some(_) => vec![],
            None => implied_node_topology(self.topology_labels),
        };
        Placement {
            node,
            host_ip: host_ip.to_string(),
            ip4: v4.to_string(),
            ip6: v6.map(|a| a.to_string()),
            topology,
        }
    }

    /// PodTopologyLabels on a client's pod create: a pod that names its
    /// node gets that node's `topology.kubernetes.io/{zone,region}` labels
    /// over its own, if the node is stored (the plugin skips a node it
    /// does not find). A body that is not a pod's shape is left for the
    /// store to judge.
    pub fn admit_pod(&self, v: &mut Value) {
        if !self.topology_labels {
            return;
        }
        let Some(node) = v["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) else {
            return;
        };
        let Ok(node) = self.store.get(Kind::Node, "", node) else {
            return;
        };
        let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        let labels = meta.entry("labels").or_insert(Value::Null);
        if labels.is_null() {
            *labels = json!({});
        }
        let Some(labels) = labels.as_object_mut() else {
            return;
        };
        for k in TOPOLOGY_LABELS {
            if let Some(val) = node.labels.get(k) {
                labels.insert(k.to_string(), val.clone().into());
            }
        }
    }

    /// Schedules the pod, gives it IPs and starts its containers.
    fn run_pod(&self, old: &Value) -> Value {
        let mut v = old.clone();
        let uid = old["metadata"]["uid"].as_str().unwrap_or_default();
        let p = self.place(uid, old["spec"]["nodeName"].as_str());
        set_running(&mut v, &p, &container_id());
        v
    }
}

/// Where a pod runs: node and addresses (or template placeholders).
pub(super) struct Placement {
    pub(super) node: String,
    pub(super) host_ip: String,
    pub(super) ip4: String,
    pub(super) ip6: Option<String>,
    /// The node's `topology.kubernetes.io/{zone,region}` labels, which the
    /// API server copies onto a pod when it binds it there, overwriting
    /// the pod's own: the PodTopologyLabels admission plugin, on by
    /// default since Kubernetes 1.35 (feature gate
    /// PodTopologyLabelsAdmission), off before (`--pod-topology-labels`).
    /// The plugin also admits a pod's create that names its node
    /// ([`Workload::admit_pod`]); this is the binding's half.
    pub(super) topology: Vec<(String, String)>,
}

/// The labels PodTopologyLabels copies from a Node to its pods.
const TOPOLOGY_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// The zone of the GPU nodes the simulator places pods on (they are not
/// stored; its training pods' node affinity asks for this zone).
pub(super) const GPU_NODE_ZONE: &str = "zone-a";

/// The topology labels of the simulator's implied GPU nodes, when the
/// API server copies them (`on`).
pub(super) fn implied_node_topology(on: bool) -> Vec<(String, String)> {
    on.then(|| (TOPOLOGY_LABELS[0].to_string(), GPU_NODE_ZONE.to_string()))
        .into_iter()
        .collect()
}

pub(super) fn container_id() -> String {
    format!(
        "containerd://{}{}",
        new_uid().replace('-', ""),
        new_uid().replace('-', "")
    )
}

/// The status a kubelet writes when the pod's containers start.
pub(super) fn set_running(v: &mut Value, p: &Placement, cid: &str) {
    v["spec"]["nodeName"] = p.node.clone().into();
    for (k, val) in &p.topology {
        v["metadata"]["labels"][k] = val.clone().into();
    }
    let now = now_rfc3339();
    let mut pod_ips = vec![json!({"ip": p.ip4})];
    if let Some(a) = &p.ip6 {
        pod_ips.push(json!({"ip": a}));
    }
    let cond = |t: &str, s: &str| json!({"type": t, "status": s, "lastProbeTime": null, "lastTransitionTime": now});
    let statuses: Vec<Value> = v["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let image = c["image"].as_str().unwrap_or("busybox");
                    json!({
                        "name": c["name"],
                        "state": {"running": {"startedAt": now}},
                        "lastState": {},
                        "ready": false,
                        "restartCount": 0,
                        "image": image,
                        "imageID": format!("{image}@sha256:9b2f1e0c7d4a8e6b5f3c2a1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f"),
                        "containerID": cid,
                        "started": true,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let qos = match &v["status"]["qosClass"] {
        Value::String(q) => q.clone(),
        _ => "Burstable".to_string(),
    };
    v["status"] = json!({
        "phase": "Running",
        "conditions": [
            cond("PodReadyToStartContainers", "True"),
            cond("Initialized", "True"),
            cond("Ready", "False"),
            cond("ContainersReady", "False"),
            cond("PodScheduled", "True"),
        ],
        "hostIP": p.host_ip,
        "hostIPs": [{"ip": p.host_ip}],
        "podIP": p.ip4,
        "podIPs": pod_ips,
        "startTime": now,
        "containerStatuses": statuses,
        "qosClass": qos,
    });
}

/// Sets the Ready and ContainersReady conditions and ready containers.
pub(super) fn mark_ready(v: &mut Value) {
    let now = now_rfc3339();
    if let Some(conds) = v["status"]["conditions"].as_array_mut() {
        for c in conds {
            if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                c["status"] = "True".into();
                c["lastTransitionTime"] = now.clone().into();
            }
        }
    }
    if let Some(cs) = v["status"]["containerStatuses"].as_array_mut() {
        for c in cs {
            c["ready"] = true.into();
        }
    }
}

pub(super) async fn timer_loop(
    w: std::sync::Weak<Workload>,
    mut rx: mpsc::UnboundedReceiver<Timer>,
    shutdown: CancellationToken,
) {
    // One task and one heap for every pod: 100k pods are 100k heap entries,
    // not 100k tasks.
    let mut heap: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut pending: HashMap<u64, Timer> = HashMap::new();
    let mut seq = 0u64;
    loop {
        let next = heap.peek().map(|Reverse((at, _))| *at);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            t = rx.recv() => {
                let Some(t) = t else { return };
                seq += 1;
                heap.push(Reverse((t.at, seq)));
                pending.insert(seq, t);
                // Take whatever else is queued before sleeping again.
                while let Ok(t) = rx.try_recv() {
                    seq += 1;
                    heap.push(Reverse((t.at, seq)));
                    pending.insert(seq, t);
                }
            }
            _ = async { tokio::time::sleep_until(next.unwrap_or_else(Instant::now)).await },
                if next.is_some() => {}
        }
        let now = Instant::now();
        let mut fired = 0u32;
        while let Some(Reverse((at, id))) = heap.peek().copied() {
            if at > now {
                break;
            }
            heap.pop();
            let Some(t) = pending.remove(&id) else {
                continue;
            };
            let Some(w) = w.upgrade() else { return };
            w.fire(t);
            fired += 1;
            if fired.is_multiple_of(256) {
                // Let API requests in between long bursts.
                tokio::task::yield_now().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podns_kapi::filter::Filter;

    /// Kubernetes 1.35 and later copy the node's zone and region labels
    /// onto each pod bound to it or created on it (PodTopologyLabels
    /// admission), over the pod's own; 1.34 and older do not
    /// (`--pod-topology-labels=false`).
    #[tokio::test]
    async fn pods_carry_their_nodes_topology_labels() {
        const ZONE: &str = "topology.kubernetes.io/zone";
        const REGION: &str = "topology.kubernetes.io/region";
        for on in [true, false] {
            let (store, w) = crate::workload::with_kubelet(crate::SimArgs {
                pod_topology_labels: on,
                ..Default::default()
            });
            store
                .create(
                    Kind::Node,
                    "",
                    json!({"metadata": {"name": "n1", "labels": {ZONE: "z1", REGION: "r1", "rack": "7"}}}),
                )
                .unwrap();
            let pod = |node: &str| {
                json!({"metadata": {"name": "p", "namespace": "ml", "uid": new_uid(),
                                    "labels": {"app": "x", ZONE: "mine"}},
                       "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
            };
            let labels = |v: &Value| v["metadata"]["labels"].clone();
            let own = json!({"app": "x", ZONE: "mine"});
            // Placed by the simulator, which binds it: its GPU nodes are
            // in zone-a.
            let want = if on {
                json!({"app": "x", ZONE: GPU_NODE_ZONE})
            } else {
                own.clone()
            };
            assert_eq!(labels(&w.run_pod(&pod(""))), want, "on={on}");
            // Created on a stored node: its zone and region, nothing else,
            // on create; starting it (no binding) copies nothing more.
            let mut v = pod("n1");
            w.admit_pod(&mut v);
            let want = if on {
                json!({"app": "x", ZONE: "z1", REGION: "r1"})
            } else {
                own.clone()
            };
            assert_eq!(labels(&v), want, "on={on}");
            let mut v = pod("n1");
            v["metadata"]["labels"] = Value::Null;
            w.admit_pod(&mut v);
            let want = if on {
                json!({ZONE: "z1", REGION: "r1"})
            } else {
                Value::Null
            };
            assert_eq!(labels(&v), want, "on={on}");
            assert_eq!(labels(&w.run_pod(&pod("n1"))), own, "on={on}");
            // A node that is not stored: nothing copied.
            let mut v = pod("gone");
            w.admit_pod(&mut v);
            assert_eq!(labels(&v), own, "on={on}");
            // Not a pod's shape: left for the store to refuse or read.
            for mut bad in [
                json!({"metadata": "x", "spec": {"nodeName": "n1"}}),
                json!({"metadata": {"labels": [1]}, "spec": {"nodeName": "n1"}}),
                json!({"spec": {"nodeName": 7}}),
                json!([1]),
            ] {
                let before = bad.clone();
                w.admit_pod(&mut bad);
                assert_eq!(bad, before);
            }
            // The start-up workload's pods, made from a template.
            w.create_test_job("j", true);
            let (_, pods) = store.snapshot(Kind::Pod, &Filter::default());
            assert_eq!(pods.len(), 2);
            for o in pods {
                let zone = o.value()["metadata"]["labels"][ZONE].clone();
                assert_eq!(
                    zone,
                    if on {
                        json!(GPU_NODE_ZONE)
                    } else {
                        Value::Null
                    }
                );
                assert_eq!(o.labels.contains_key(ZONE), on);
            }
        }
    }
}
