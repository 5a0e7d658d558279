//! The bodies the simulator writes for a training job: a rank's pod as
//! the Job controller makes it (realistic, or `--lean-pods`), the same pod
//! as a template spliced per rank, and the Job that owns the pods.

use serde_json::{Value, json};

use super::kubelet::{
    GPU_NODE_ZONE, Placement, container_id, implied_node_topology, mark_ready, set_running,
};
use crate::store::{labels_of, new_uid, now_rfc3339, rand_suffix};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    Idx,
    Sfx,
    Uid,
    Rv,
    Node,
    HostIp,
    Ip4,
    Ip6,
    Cid,
}

const TOKENS: [(&str, Tok); 9] = [
    ("__IDX__", Tok::Idx),
    ("__SFX__", Tok::Sfx),
    ("__UID__", Tok::Uid),
    ("__RV__", Tok::Rv),
    ("__NODE__", Tok::Node),
    ("__HOSTIP__", Tok::HostIp),
    ("__IP4__", Tok::Ip4),
    ("__IP6__", Tok::Ip6),
    ("__CID__", Tok::Cid),
];

#[derive(Clone, Debug)]
pub(super) struct JobInfo {
    pub(super) kind: String,
    pub(super) ranks: usize,
    /// The uid of the batch/v1 Job that owns the pods (`controller-uid`).
    pub(super) uid: String,
    /// The name of that Job: the workload's name for an indexed-job, the
    /// JobSet's child `<name>-workers-0` for a jobset.
    pub(super) job_name: String,
    /// The JobSet's uid (jobset only).
    pub(super) set_uid: String,
    pub(super) key: String,
    pub(super) attempt: u32,
    /// `--lean-pods`: see [`lean`].
    pub(super) lean: bool,
}

impl JobInfo {
    pub(super) fn jobset(&self) -> bool {
        self.kind == "jobset"
    }
}

/// The replicated job every simulated JobSet has (one Job, index 0).
pub(super) const REPLICATED_JOB: &str = "workers";

/// The name of the Job that owns a workload's pods.
pub(super) fn child_job_name(kind: &str, name: &str) -> String {
    if kind == "jobset" {
        format!("{name}-{REPLICATED_JOB}-0")
    } else {
        name.to_string()
    }
}

/// The serialized pod of one job with placeholders, so that creating
/// 100,000 pods is string splicing, not building and serializing JSON
/// trees (which costs ~200 µs a pod on these machines).
pub(super) struct PodTemplate {
    pub(super) segs: Vec<(Vec<u8>, Option<Tok>)>,
    pub(super) labels: std::collections::BTreeMap<String, String>,
    pub(super) running: bool,
}

impl PodTemplate {
    /// `topology`: whether the API server copies the node's topology
    /// labels onto the pod it binds (see [`Placement::topology`]).
    pub(super) fn new(
        ns: &str,
        job: &str,
        info: &JobInfo,
        running: bool,
        v6: bool,
        topology: bool,
    ) -> PodTemplate {
        let mut v = job_pod_with(ns, job, "__IDX__", "__SFX__", info);
        v["metadata"]["uid"] = "__UID__".into();
        v["metadata"]["resourceVersion"] = "__RV__".into();
        v["metadata"]["creationTimestamp"] = now_rfc3339().into();
        v["metadata"]["generation"] = 1.into();
        v["status"] = json!({"phase": "Pending", "qosClass": "Burstable"});
        if running {
            let p = Placement {
                node: "__NODE__".into(),
                host_ip: "__HOSTIP__".into(),
                ip4: "__IP4__".into(),
                ip6: v6.then(|| "__IP6__".to_string()),
                topology: implied_node_topology(topology),
            };
            set_running(&mut v, &p, "__CID__");
            mark_ready(&mut v);
        }
        let labels = labels_of(&v);
        let bytes = serde_json::to_vec(&v).expect("a Value always serializes");
        let mut segs = Vec::new();
        let mut lit = Vec::new();
        let mut i = 0;
        'scan: while i < bytes.len() {
            if bytes[i] == b'_' {
                for (t, tok) in TOKENS {
                    if bytes[i..].starts_with(t.as_bytes()) {
                        segs.push((std::mem::take(&mut lit), Some(tok)));
                        i += t.len();
                        continue 'scan;
                    }
                }
            }
            lit.push(bytes[i]);
            i += 1;
        }
        segs.push((lit, None));
        PodTemplate {
            segs,
            labels,
            running,
        }
    }

    pub(super) fn render(&self, val: impl Fn(Tok) -> String) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.segs.iter().map(|(l, _)| l.len() + 40).sum());
        for (lit, tok) in &self.segs {
            out.extend_from_slice(lit);
            if let Some(t) = tok {
                out.extend_from_slice(val(*t).as_bytes());
            }
        }
        out
    }
}

/// A pod as the Job controller creates it for a GPU training rank: the
/// size and shape of `kubectl get pod -o json` on a real cluster.
pub(super) fn job_pod(ns: &str, job: &str, idx: usize, info: &JobInfo) -> Value {
    job_pod_with(ns, job, &idx.to_string(), &rand_suffix(), info)
}

fn job_pod_with(ns: &str, job: &str, idx: &str, sfx: &str, info: &JobInfo) -> Value {
    let mut v = full_job_pod(ns, job, idx, sfx, info);
    if info.lean {
        lean(&mut v);
    }
    v
}

/// The 1,000-rank JobSet `llama-70b` of [`sample_job_pod`], first attempt.
fn sample_job_info(lean: bool) -> JobInfo {
    JobInfo {
        kind: "jobset".into(),
        ranks: 1000,
        uid: new_uid(),
        job_name: child_job_name("jobset", "llama-70b"),
        set_uid: new_uid(),
        key: new_uid().replace('-', ""),
        attempt: 0,
        lean,
    }
}

/// One running rank of a 1,000-rank JobSet exactly as the simulator
/// stores it (realistic, or `--lean-pods`), for benches that measure
/// decoding and wire sizes.
pub fn sample_job_pod(lean: bool) -> Value {
    let info = sample_job_info(lean);
    let mut v = job_pod("team-a", "llama-70b", 17, &info);
    let p = Placement {
        node: "gpu-node-0042".into(),
        host_ip: "10.128.0.42".into(),
        ip4: "10.0.4.17".into(),
        ip6: None,
        topology: vec![],
    };
    set_running(&mut v, &p, &container_id());
    v
}

/// Strips a job pod to what a DNS server reads (`--lean-pods`): metadata
/// without managedFields, and a spec of hostname,
/// subdomain, scheduling fields and container names and ports.
fn lean(v: &mut Value) {
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    if let Some(spec) = v["spec"].as_object_mut() {
        spec.retain(|k, _| {
            matches!(
                k.as_str(),
                "hostname" | "subdomain" | "containers" | "restartPolicy" | "schedulerName"
            )
        });
        if let Some(cs) = spec.get_mut("containers").and_then(Value::as_array_mut) {
            for c in cs {
                if let Some(c) = c.as_object_mut() {
                    c.retain(|k, _| matches!(k.as_str(), "name" | "image" | "ports"));
                }
            }
        }
    }
}

/// `job` is the workload's name (the JobSet's, or the Indexed Job's); the
/// hostname is the owning Job's name and the index, as the Job controller
/// sets it, and the subdomain the workload's name.
fn full_job_pod(ns: &str, job: &str, idx: &str, sfx: &str, info: &JobInfo) -> Value {
    let host = format!("{}-{idx}", info.job_name);
    // Rank 0's name, as torchrun's rendezvous and the JobSet coordinator
    // spell it.
    let leader = format!("{}-0.{job}", info.job_name);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_metadata(ns, job, &host, idx, sfx, &leader, info),
        "spec": {
            "hostname": host,
            "subdomain": job,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 1000,
            "priorityClassName": "training-high",
            "securityContext": {},
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "containers": [trainer(ns, job, &leader, info)],
            "volumes": volumes(job),
            "tolerations": tolerations(),
            "affinity": affinity(info),
        },
    })
}

/// The labels and annotations the JobSet controller puts on its child Job
/// and (through the Job's template) on every pod of it.
fn jobset_labels(name: &str, info: &JobInfo) -> [(&'static str, String); 8] {
    [
        ("jobset.sigs.k8s.io/jobset-name", name.to_string()),
        ("jobset.sigs.k8s.io/jobset-uid", info.set_uid.clone()),
        (
            "jobset.sigs.k8s.io/replicatedjob-name",
            REPLICATED_JOB.to_string(),
        ),
        ("jobset.sigs.k8s.io/replicatedjob-replicas", "1".to_string()),
        ("jobset.sigs.k8s.io/job-index", "0".to_string()),
        ("jobset.sigs.k8s.io/job-global-index", "0".to_string()),
        (
            "jobset.sigs.k8s.io/restart-attempt",
            info.attempt.to_string(),
        ),
        ("jobset.sigs.k8s.io/job-key", info.key.clone()),
    ]
}

/// A rank's pod metadata: the Job controller's labels, annotations,
/// finalizer, owner and managed fields (a JobSet's labels too).
fn pod_metadata(
    ns: &str,
    job: &str,
    host: &str,
    idx: &str,
    sfx: &str,
    leader: &str,
    info: &JobInfo,
) -> Value {
    let mut labels = json!({
        "batch.kubernetes.io/controller-uid": info.uid,
        "batch.kubernetes.io/job-name": info.job_name,
        "controller-uid": info.uid,
        "job-name": info.job_name,
        "batch.kubernetes.io/job-completion-index": idx,
        "app.kubernetes.io/name": "llm-pretrain",
        "app.kubernetes.io/component": "worker",
        "training.kubeflow.org/replica-type": "worker",
    });
    let mut annotations = json!({
        "batch.kubernetes.io/job-completion-index": idx,
        "kubectl.kubernetes.io/default-container": "trainer",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
    });
    if info.jobset() {
        let coordinator = ("jobset.sigs.k8s.io/coordinator", leader.to_string());
        for (k, v) in jobset_labels(job, info).into_iter().chain([coordinator]) {
            if matches!(
                k,
                "jobset.sigs.k8s.io/jobset-name" | "jobset.sigs.k8s.io/job-index"
            ) {
                annotations[k] = v.clone().into();
            }
            labels[k] = v.into();
        }
    }
    json!({
        "name": format!("{host}-{sfx}"),
        "generateName": format!("{host}-"),
        "namespace": ns,
        "labels": labels,
        "annotations": annotations,
        "finalizers": ["batch.kubernetes.io/job-tracking"],
        "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": info.job_name, "uid": info.uid,
            "controller": true, "blockOwnerDeletion": true
        }],
        "managedFields": [managed_fields(&info.uid)],
    })
}

/// What kube-controller-manager owns of a pod it created (server-side
/// apply's record), as `kubectl get -o json --show-managed-fields` shows.
fn managed_fields(job_uid: &str) -> Value {
    json!({
        "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
        "time": now_rfc3339(), "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {
                "f:annotations": {".": {}, "f:batch.kubernetes.io/job-completion-index": {}},
                "f:finalizers": {".": {}, "v:\"batch.kubernetes.io/job-tracking\"": {}},
                "f:generateName": {},
                "f:labels": {".": {}, "f:batch.kubernetes.io/controller-uid": {}, "f:batch.kubernetes.io/job-completion-index": {}, "f:batch.kubernetes.io/job-name": {}, "f:controller-uid": {}, "f:job-name": {}},
                "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{job_uid}\"}}"): {}}
            },
            "f:spec": {
                "f:affinity": {".": {}, "f:nodeAffinity": {".": {}, "f:requiredDuringSchedulingIgnoredDuringExecution": {}}},
                "f:containers": {"k:{\"name\":\"trainer\"}": {".": {}, "f:command": {}, "f:env": {".": {}}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {".": {}}, "f:resources": {".": {}, "f:limits": {}, "f:requests": {}}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {".": {}}}},
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:hostname": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:subdomain": {}, "f:terminationGracePeriodSeconds": {}, "f:tolerations": {}, "f:volumes": {".": {}}
            }
        }
    })
}

/// The training container: torchrun with its rendezvous at rank 0
/// (`leader`), NCCL's environment, eight GPUs and the RDMA devices.
fn trainer(ns: &str, job: &str, leader: &str, info: &JobInfo) -> Value {
    let env = |n: &str, v: String| json!({"name": n, "value": v});
    let world = info.ranks.to_string();
    json!({
        "name": "trainer",
        "image": "registry.example.com/ml/llm-pretrain:2025.06.1-cuda12.4",
        "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun", "--nnodes", world, "--nproc-per-node", "8",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", format!("{leader}:29500"),
                    "/workspace/train.py", "--config", "/etc/train/config.yaml"],
        "env": [
            env("MASTER_ADDR", leader.to_string()),
            env("MASTER_PORT", "29500".into()),
            env("WORLD_SIZE", world.clone()),
            {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            env("NCCL_DEBUG", "WARN".into()),
            env("NCCL_SOCKET_IFNAME", "eth0".into()),
            env("NCCL_IB_HCA", "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7".into()),
            env("NCCL_IB_GID_INDEX", "3".into()),
            env("NCCL_CROSS_NIC", "0".into()),
            env("NCCL_NVLS_ENABLE", "1".into()),
            env("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1".into()),
            env("CUDA_DEVICE_MAX_CONNECTIONS", "1".into()),
            env("PYTHONUNBUFFERED", "1".into()),
            env("HF_HOME", "/data/hf-cache".into()),
            env("CHECKPOINT_DIR", format!("/checkpoints/{ns}/{job}")),
        ],
        "ports": [{"name": "nccl", "containerPort": 29500, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
        "resources": {
            "limits": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1600Gi", "ephemeral-storage": "500Gi", "rdma/ib": "8"},
            "requests": {"nvidia.com/gpu": "8", "cpu": "90", "memory": "1500Gi", "ephemeral-storage": "400Gi", "rdma/ib": "8"}
        },
        "securityContext": {"capabilities": {"add": ["IPC_LOCK", "SYS_RESOURCE"]}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "data", "mountPath": "/data", "readOnly": true},
            {"name": "checkpoints", "mountPath": "/checkpoints"},
            {"name": "config", "mountPath": "/etc/train"},
            {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError"
    })
}

/// Shared memory, the data set, the job's checkpoints and config, and the
/// ServiceAccount token volume admission adds.
fn volumes(job: &str) -> Value {
    json!([
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "training-data", "readOnly": true}},
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": format!("{job}-checkpoints")}},
        {"name": "config", "configMap": {"name": format!("{job}-config"), "defaultMode": 420}},
        {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]}}
    ])
}

/// GPU and RDMA taints tolerated, and the two the DefaultTolerationSeconds
/// admission plugin adds.
fn tolerations() -> Value {
    json!([
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "rdma/ib", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ])
}

/// GPU nodes of one zone, the job's ranks packed in one topology block.
fn affinity(info: &JobInfo) -> Value {
    json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [GPU_NODE_ZONE]}
        ]}]}},
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "labelSelector": {"matchExpressions": [{"key": "job-name", "operator": "In", "values": [info.job_name]}]},
            "topologyKey": "cloud.provider.com/topology-block"
        }}]}
    })
}

/// The service-account token volume admission adds to every pod.
fn is_token_volume(name: &Value) -> bool {
    name.as_str()
        .is_some_and(|n| n.starts_with("kube-api-access-"))
}

/// The batch/v1 Job that owns a workload's pods: Indexed, completions
/// and parallelism = ranks, its template the pods' (without the per-index
/// parts, and without what admission adds to each pod, so a real API
/// server takes it as a user's or the JobSet controller's Job). For a jobset, the JobSet controller's child Job
/// `<name>-workers-0` with the JobSet's labels and owner reference.
pub(super) fn job_object(ns: &str, name: &str, info: &JobInfo) -> Value {
    let pod = job_pod_with(ns, name, "0", "x", info);
    let mut tlabels = pod["metadata"]["labels"].clone();
    let mut tannotations = pod["metadata"]["annotations"].clone();
    for m in [&mut tlabels, &mut tannotations] {
        if let Some(m) = m.as_object_mut() {
            m.remove("batch.kubernetes.io/job-completion-index");
        }
    }
    let mut tspec = pod["spec"].clone();
    if let Some(s) = tspec.as_object_mut() {
        s.remove("hostname");
        // Set on each pod by the Priority admission plugin (from
        // priorityClassName), never on a Job's template.
        s.remove("priority");
        s.remove("preemptionPolicy");
    }
    // The ServiceAccount admission plugin's token volume and the
    // DefaultTolerationSeconds plugin's tolerations are pod-only too.
    if let Some(v) = tspec["volumes"].as_array_mut() {
        v.retain(|v| !is_token_volume(&v["name"]));
    }
    if let Some(m) = tspec["containers"][0]["volumeMounts"].as_array_mut() {
        m.retain(|m| !is_token_volume(&m["name"]));
    }
    if let Some(t) = tspec["tolerations"].as_array_mut() {
        t.retain(|t| t.get("tolerationSeconds").is_none());
    }
    let mut labels = json!({
        "app.kubernetes.io/name": "llm-pretrain",
        "app.kubernetes.io/component": "worker",
    });
    let mut annotations = json!({});
    let mut owners = json!([]);
    if info.jobset() {
        for (k, v) in jobset_labels(name, info) {
            labels[k] = v.clone().into();
            annotations[k] = v.into();
        }
        owners = json!([{
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name,
            "uid": info.set_uid, "controller": true, "blockOwnerDeletion": true
        }]);
    }
    let mut metadata = json!({
        "name": info.job_name,
        "namespace": ns,
        "uid": info.uid,
        "labels": labels,
    });
    // As the API server writes them: empty maps and lists left out.
    if annotations.as_object().is_some_and(|m| !m.is_empty()) {
        metadata["annotations"] = annotations;
    }
    if owners.as_array().is_some_and(|o| !o.is_empty()) {
        metadata["ownerReferences"] = owners;
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completions": info.ranks,
            "parallelism": info.ranks,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "manualSelector": false,
            "suspend": false,
            "podReplacementPolicy": "TerminatingOrFailed",
            "template": {
                "metadata": {"labels": tlabels, "annotations": tannotations},
                "spec": tspec,
            },
        },
        "status": {
            "active": info.ranks,
            "startTime": now_rfc3339(),
            "terminating": 0,
            "uncountedTerminatedPods": {},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_pod_is_realistic_size() {
        let info = JobInfo {
            key: "k".into(),
            ..sample_job_info(false)
        };
        let p = job_pod("team-a", "llama-70b", 17, &info);
        let n = serde_json::to_vec(&p).unwrap().len();
        assert!((4000..8192).contains(&n), "pod body is {n} bytes");
        // The Job controller's hostname (the child Job's name and the
        // index), the JobSet controller's subdomain (the JobSet's name).
        assert_eq!(p["spec"]["hostname"], "llama-70b-workers-0-17");
        assert_eq!(p["spec"]["subdomain"], "llama-70b");
        assert_eq!(p["metadata"]["generateName"], "llama-70b-workers-0-17-");
        assert_eq!(
            p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"],
            "llama-70b"
        );
        assert_eq!(p["metadata"]["labels"]["job-name"], "llama-70b-workers-0");
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["name"],
            "llama-70b-workers-0"
        );
        let j = job_object("team-a", "llama-70b", &info);
        assert_eq!(j["metadata"]["name"], "llama-70b-workers-0");
        assert_eq!(j["spec"]["completions"], 1000);
        let t = &j["spec"]["template"]["spec"];
        assert!(t.get("hostname").is_none());
        // What admission adds to pods is on the pod, not the template.
        assert_eq!(p["spec"]["priority"], 1000);
        assert!(t.get("priority").is_none() && t.get("preemptionPolicy").is_none());
        assert_eq!(t["priorityClassName"], "training-high");
        let text = t.to_string();
        assert!(
            p["spec"].to_string().contains("kube-api-access-")
                && !text.contains("kube-api-access-"),
            "{text}"
        );
        assert_eq!(t["tolerations"].as_array().unwrap().len(), 2);
    }
}
