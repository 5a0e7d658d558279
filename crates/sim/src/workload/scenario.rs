//! The cluster at start: its fixed objects (namespaces, the `kubernetes`
//! Service, the address ranges), a scenario file (a YAML or JSON list of
//! objects) and the start-up jobs.

use std::sync::atomic::Ordering;

use ipnet::IpNet;
use serde_json::{Value, json};

use super::{JobRequest, Workload, WorkloadError};
use crate::args::{NodePodCidrs, SimArgs};
use podns_kapi::{ApiError, Kind};

use crate::store::Store;

impl Workload {
    /// Creates each object of a scenario (namespaces made as needed).
    pub fn load_scenario(&self, text: &str) -> Result<usize, WorkloadError> {
        let mut objs = Vec::new();
        let docs: Vec<Value> = serde_saphyr::from_multiple(text)
            .map_err(|e| WorkloadError::ParseScenario(e.to_string()))?;
        for v in docs {
            collect_objects(v, &mut objs);
        }
        let mut n = 0;
        for mut o in objs {
            let kind = match o["kind"].as_str().and_then(Kind::from_name) {
                Some(k) => k,
                None => {
                    let other = o["kind"].as_str();
                    tracing::warn!(kind = ?other, "scenario object of an unserved kind skipped");
                    continue;
                }
            };
            let ns = o["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            if kind == Kind::Namespace {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                if self.store.get(Kind::Namespace, "", name).is_ok() {
                    continue;
                }
            } else {
                ensure_namespace(&self.store, &ns)?;
            }
            // A scenario's objects are a client's creates.
            if kind == Kind::Pod {
                self.admit_pod(&mut o);
            }
            self.store.create(kind, &ns, o)?;
            n += 1;
        }
        Ok(n)
    }
}

fn collect_objects(v: Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(xs) => xs.into_iter().for_each(|x| collect_objects(x, out)),
        Value::Object(mut m) if m.get("items").is_some_and(Value::is_array) => {
            if let Some(Value::Array(xs)) = m.remove("items") {
                xs.into_iter().for_each(|x| collect_objects(x, out));
            }
        }
        Value::Null => {}
        other => out.push(other),
    }
}

/// Creates a namespace unless it exists.
pub fn ensure_namespace(store: &Store, ns: &str) -> Result<(), ApiError> {
    if store.get(Kind::Namespace, "", ns).is_ok() {
        return Ok(());
    }
    match store.create(Kind::Namespace, "", json!({"metadata": {"name": ns}})) {
        Ok(_) => Ok(()),
        Err(e) if e.reason == "AlreadyExists" => Ok(()),
        Err(e) => Err(e),
    }
}

impl Workload {
    /// Creates the cluster's fixed objects (the system namespaces, the
    /// `kubernetes` Service, the address ranges), the `--scenario` file's
    /// objects and the start-up jobs.
    pub fn populate(&self, args: &SimArgs) -> Result<(), WorkloadError> {
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            ensure_namespace(&self.store, ns)?;
        }
        // Every cluster has it, single-stack on the first address of the
        // primary range; DNS serves it like any ClusterIP Service.
        let ip = self.store.first_service_ip().to_string();
        self.store.create(
            Kind::Service,
            "default",
            json!({"metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"clusterIP": ip, "ports": [{"name": "https", "port": 443, "targetPort": 6443, "protocol": "TCP"}]}}),
        )?;
        self.populate_ranges(args)?;
        if let Some(path) = &args.scenario {
            let text =
                std::fs::read_to_string(path).map_err(|source| WorkloadError::ReadScenario {
                    path: path.display().to_string(),
                    source,
                })?;
            let n = self.load_scenario(&text)?;
            tracing::info!(objects = n, path = %path.display(), "scenario loaded");
        }
        // The start-up workload is a cluster that has been running.
        let prerun = args.kubelet && args.kubelet_delay_ms == 0 && args.ready_delay_ms == 0;
        self.prerun.store(prerun, Ordering::Relaxed);
        let nss = args.namespaces.max(1);
        for j in 0..args.jobs {
            let namespace = if nss == 1 {
                "default".to_string()
            } else {
                format!("team-{}", j % nss)
            };
            let kind = match args.job_kind.as_str() {
                "mixed" if j % 2 == 0 => "indexed-job",
                "mixed" => "jobset",
                k => k,
            };
            let req = JobRequest {
                namespace,
                name: format!("train-{j}"),
                ranks: args.ranks,
                kind: kind.to_string(),
            };
            self.create_job(&req).map_err(|source| WorkloadError::Job {
                name: req.name.clone(),
                source,
            })?;
        }
        self.prerun.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// The objects that say where the cluster's addresses come from: the
    /// default ServiceCIDR `kubernetes` (kube-apiserver makes it from
    /// `--service-cluster-ip-range`) and one Node whose `spec.podCIDRs` is, by
    /// default, the pod range (the simulated kubelets take every pod IP from
    /// that one pool, whichever node a pod is placed on), else what
    /// `--node-pod-cidrs` says. Tests add and delete more.
    fn populate_ranges(&self, args: &SimArgs) -> Result<(), ApiError> {
        let service: Vec<String> = args.service_cidrs().iter().map(|n| n.to_string()).collect();
        self.store.create(
            Kind::ServiceCidr,
            "",
            json!({"metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-cidr": "kubernetes"}},
                   "spec": {"cidrs": service}}),
        )?;
        let pods: Vec<String> = match &args.node_pod_cidrs {
            NodePodCidrs::Pods => std::iter::once(&args.pod_cidr)
                .chain(args.pod_cidr_v6.as_ref())
                .filter_map(|range| range.parse::<IpNet>().ok())
                .map(|net| net.trunc().to_string())
                .collect(),
            NodePodCidrs::None => vec![],
            NodePodCidrs::Given(nets) => nets.iter().map(ToString::to_string).collect(),
        };
        // A Node without a range has neither field (the API server drops an
        // empty list on the wire), as the node controller leaves it.
        let spec = match pods.first() {
            Some(first) => json!({"podCIDR": first, "podCIDRs": pods}),
            None => json!({}),
        };
        self.store.create(
            Kind::Node,
            "",
            json!({"metadata": {"name": "sim-node-0", "labels": {"kubernetes.io/hostname": "sim-node-0"}},
                   "spec": spec,
                   "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                              "addresses": [{"type": "InternalIP", "address": "172.16.0.2"}]}}),
        )?;
        Ok(())
    }
}
