//! The Job and JobSet controllers: a training job's headless Service,
//! its batch/v1 Job and its ranks' pods, gang restarts, and a Job's
//! status counted from its pods.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::Workload;
use super::kubelet::{Placement, Step, Timer, container_id};
use super::scenario::ensure_namespace;
use super::templates::{JobInfo, PodTemplate, Tok, child_job_name, job_object, job_pod};
use podns_kapi::selector::LabelSelector;
use podns_kapi::watch::EvType;
use podns_kapi::{ApiError, Kind};

use podns_kapi::filter::Filter;

use crate::store::{Obj, new_uid, rand_suffix};

/// How long the Job controller gathers its pods' changes before it writes
/// a Job's status (kube-controller-manager's Job controller batches pod
/// updates for a second).
const JOB_SYNC_BATCH: Duration = Duration::from_secs(1);

/// A Job's pods as its controller counts them, by pod uid.
#[derive(Default)]
pub(super) struct JobPods {
    pods: HashMap<String, PodCount>,
    /// A status write is scheduled.
    pending: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PodCount {
    Active { ready: bool },
    Terminating,
    Finished,
}

/// A training job created through `/sim/jobs`.
#[derive(Clone, Debug, Deserialize)]
pub struct JobRequest {
    #[serde(default = "default_ns")]
    pub namespace: String,
    pub name: String,
    #[serde(default = "default_ranks")]
    pub ranks: usize,
    #[serde(default = "default_kind")]
    pub kind: String,
}

fn default_ns() -> String {
    "default".into()
}
fn default_ranks() -> usize {
    8
}
fn default_kind() -> String {
    "indexed-job".into()
}

impl Workload {
    /// The Job controller sees a pod of its Job change: the Job's status
    /// is written within [`JOB_SYNC_BATCH`] if its counts moved.
    pub(super) fn count_for_job(&self, obj: &Obj, ty: EvType) {
        let Some(job) = obj.labels.get("batch.kubernetes.io/job-name") else {
            return;
        };
        let now = match ty {
            EvType::Deleted => None,
            _ if obj.deleting => Some(PodCount::Terminating),
            _ if obj.phase == "Succeeded" || obj.phase == "Failed" => Some(PodCount::Finished),
            _ => Some(PodCount::Active { ready: obj.ready }),
        };
        let mut jobs = self.job_pods.lock().unwrap_or_else(|p| p.into_inner());
        let key = (obj.ns.clone(), job.clone());
        let j = jobs.entry(key).or_default();
        let before = match now {
            Some(c) => j.pods.insert(obj.uid.clone(), c),
            None => j.pods.remove(&obj.uid),
        };
        if before == now || j.pending {
            return;
        }
        j.pending = true;
        let _ = self.timers.send(Timer {
            at: Instant::now() + JOB_SYNC_BATCH,
            step: Step::SyncJob,
            ns: obj.ns.clone(),
            name: job.clone(),
            uid: String::new(),
        });
    }

    /// Write Job `ns/name`'s status from its pods' counts, if they moved.
    pub(super) fn sync_job(&self, ns: &str, name: &str) {
        let counts = {
            let mut jobs = self.job_pods.lock().unwrap_or_else(|p| p.into_inner());
            let key = (ns.to_owned(), name.to_owned());
            let Some(j) = jobs.get_mut(&key) else { return };
            j.pending = false;
            let (mut active, mut ready, mut terminating) = (0u64, 0u64, 0u64);
            for c in j.pods.values() {
                match c {
                    PodCount::Active { ready: r } => {
                        active += 1;
                        ready += u64::from(*r);
                    }
                    PodCount::Terminating => terminating += 1,
                    PodCount::Finished => {}
                }
            }
            if j.pods.is_empty() {
                jobs.remove(&key);
            }
            (active, ready, terminating)
        };
        let (active, ready, terminating) = counts;
        let _ = self.store.modify(Kind::Job, ns, name, None, |old| {
            let s = &old["status"];
            if s["active"] == active && s["ready"] == ready && s["terminating"] == terminating {
                return Err(ApiError::new(0, "Skip", ""));
            }
            let mut v = old.clone();
            v["status"]["active"] = active.into();
            v["status"]["ready"] = ready.into();
            v["status"]["terminating"] = terminating.into();
            Ok(v)
        });
    }

    /// Creates a training job: its headless Service and `ranks` pods.
    pub fn create_job(&self, req: &JobRequest) -> Result<Value, ApiError> {
        if req.kind != "indexed-job" && req.kind != "jobset" {
            return Err(ApiError::bad_request(format!(
                "kind must be indexed-job or jobset, not {:?}",
                req.kind
            )));
        }
        ensure_namespace(&self.store, &req.namespace)?;
        let info = JobInfo {
            kind: req.kind.clone(),
            ranks: req.ranks,
            uid: new_uid(),
            job_name: child_job_name(&req.kind, &req.name),
            set_uid: new_uid(),
            key: new_uid().replace('-', ""),
            attempt: 0,
            lean: self.lean,
        };
        {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let k = (req.namespace.clone(), req.name.clone());
            if jobs.contains_key(&k) {
                return Err(ApiError::already_exists(Kind::Service, &req.name));
            }
            jobs.insert(k, info.clone());
        }
        let selector = if info.kind == "jobset" {
            json!({"jobset.sigs.k8s.io/jobset-name": req.name})
        } else {
            json!({"job-name": req.name})
        };
        let svc = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": req.name, "namespace": req.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "podns-sim"}},
            "spec": {"clusterIP": "None", "selector": selector,
                     "publishNotReadyAddresses": true,
                     "ports": [{"name": "nccl", "port": 29500, "targetPort": 29500, "protocol": "TCP"}]},
        });
        match self.store.create(Kind::Service, &req.namespace, svc) {
            Ok(_) => {}
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
        if let Err(e) = self.create_job_object(&req.namespace, &req.name, &info) {
            self.jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(req.namespace.clone(), req.name.clone()));
            return Err(e);
        }
        let prerun = self.prerun.load(Ordering::Relaxed);
        let v6 = self.ips.dual_stack();
        // The start-up workload is a cluster that has been running: with
        // the kubelet on, its pods exist already scheduled, running, Ready.
        let tpl = PodTemplate::new(
            &req.namespace,
            &req.name,
            &info,
            prerun,
            v6,
            self.topology_labels,
        );
        let mut names = Vec::with_capacity(req.ranks);
        for i in 0..req.ranks {
            let o = self.insert_from_template(&tpl, &req.namespace, &info.job_name, i)?;
            names.push(o.name.clone());
        }
        Ok(
            json!({"namespace": req.namespace, "name": req.name, "kind": req.kind,
                  "ranks": req.ranks, "service": req.name, "job": info.job_name,
                  "jobUID": info.uid, "pods": names}),
        )
    }

    /// Creates the batch/v1 Job that owns the pods, as the JobSet
    /// controller (jobset) or the user (indexed-job) would.
    fn create_job_object(
        &self,
        ns: &str,
        name: &str,
        info: &JobInfo,
    ) -> Result<Arc<Obj>, ApiError> {
        self.store
            .create_with(Kind::Job, ns, job_object(ns, name, info), true)
    }

    /// Rank `i`'s pod, named `<job>-<i>-<suffix>` after its owning Job
    /// `job`, as the Job controller names it.
    fn insert_from_template(
        &self,
        tpl: &PodTemplate,
        ns: &str,
        job: &str,
        i: usize,
    ) -> Result<Arc<Obj>, ApiError> {
        let idx = i.to_string();
        let sfx = rand_suffix();
        let uid = new_uid();
        let name = format!("{job}-{i}-{sfx}");
        let place = tpl.running.then(|| self.place(&uid, None));
        let cid = container_id();
        let mut labels = tpl.labels.clone();
        labels.insert(
            "batch.kubernetes.io/job-completion-index".into(),
            idx.clone(),
        );
        let get =
            |f: fn(&Placement) -> Option<String>| place.as_ref().and_then(f).unwrap_or_default();
        let node = get(|p| Some(p.node.clone()));
        let host_ip = get(|p| Some(p.host_ip.clone()));
        let ip4 = get(|p| Some(p.ip4.clone()));
        let ip6 = get(|p| p.ip6.clone());
        self.store.insert_raw(Kind::Pod, ns, &name, |rv| {
            let bytes = tpl.render(|t| match t {
                Tok::Idx => idx.clone(),
                Tok::Sfx => sfx.clone(),
                Tok::Uid => uid.clone(),
                Tok::Rv => rv.to_string(),
                Tok::Node => node.clone(),
                Tok::HostIp => host_ip.clone(),
                Tok::Ip4 => ip4.clone(),
                Tok::Ip6 => ip6.clone(),
                Tok::Cid => cid.clone(),
            });
            Obj {
                bytes: bytes.into(),
                rv,
                ns: ns.to_string(),
                name: name.clone(),
                uid: uid.clone(),
                labels,
                node_name: node.clone(),
                phase: if tpl.running { "Running" } else { "Pending" }.to_string(),
                has_ip: tpl.running,
                ready: tpl.running,
                deleting: false,
                pb: std::sync::OnceLock::new(),
            }
        })
    }

    /// A gang restart as JobSet's Recreate policy does it: every pod goes,
    /// and a pod with the same hostname (and a new IP) replaces it.
    pub fn restart_job(&self, ns: &str, name: &str, grace: Option<u64>) -> Result<Value, ApiError> {
        let info = {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let j = jobs
                .get_mut(&(ns.to_string(), name.to_string()))
                .ok_or_else(|| {
                    ApiError::new(404, "NotFound", format!("job \"{name}\" not found"))
                })?;
            j.attempt += 1;
            if j.jobset() {
                // Recreate makes a new Job object: a new uid.
                j.uid = new_uid();
            }
            j.clone()
        };
        let grace = grace.unwrap_or(self.default_grace);
        let mut job_deleted = false;
        if info.jobset() {
            // JobSet's Recreate deletes the child Jobs (and so their pods).
            job_deleted = self
                .store
                .delete(Kind::Job, ns, &info.job_name, 0, None)
                .is_ok();
        }
        let label = if info.kind == "jobset" {
            "jobset.sigs.k8s.io/jobset-name"
        } else {
            "job-name"
        };
        let f = Filter {
            ns: Some(ns.to_string()),
            labels: LabelSelector::parse(&format!("{label}={name}"))
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
            ..Default::default()
        };
        let (_, pods) = self.store.snapshot(Kind::Pod, &f);
        let mut deleted = 0;
        for p in &pods {
            if p.deleting {
                continue;
            }
            if self.delete_pod(ns, &p.name, grace, Some(&p.uid)).is_ok() {
                deleted += 1;
            }
        }
        if info.jobset() {
            match self.create_job_object(ns, name, &info) {
                Ok(_) => {}
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        let mut names = Vec::new();
        for i in 0..info.ranks {
            let o = self
                .store
                .create(Kind::Pod, ns, job_pod(ns, name, i, &info))?;
            names.push(o.name.clone());
        }
        Ok(
            json!({"namespace": ns, "name": name, "deleted": deleted, "attempt": info.attempt,
                   "job": info.job_name, "jobUID": info.uid, "jobRecreated": job_deleted,
                   "pods": names}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lean_pods_keep_what_dns_reads() {
        let (store, w) = crate::workload::with_kubelet(crate::SimArgs {
            lean_pods: true,
            ..Default::default()
        });
        for (running, name) in [(true, "run"), (false, "pend")] {
            w.create_test_job(name, running);
        }
        // Pods created one by one (churn, restarts) are lean too.
        let (_, pods) = store.snapshot(Kind::Pod, &Filter::default());
        assert_eq!(pods.len(), 4);
        for o in pods {
            assert!(o.bytes.len() < 3000, "lean pod is {} bytes", o.bytes.len());
            let v = o.value();
            let idx = &o.labels["batch.kubernetes.io/job-completion-index"];
            let job = &o.labels["job-name"];
            assert_eq!(v["spec"]["hostname"], format!("{job}-{idx}"));
            assert_eq!(v["spec"]["subdomain"], job.as_str());
            assert_eq!(
                v["spec"]["containers"][0]["ports"][0]["containerPort"],
                29500
            );
            assert!(v["spec"].get("volumes").is_none());
            assert!(v["metadata"].get("managedFields").is_none());
            assert_eq!(
                v["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
                idx.as_str()
            );
        }
    }

    #[tokio::test]
    async fn template_pods_are_complete_json() {
        let (store, w) = crate::workload::with_kubelet(crate::SimArgs {
            pod_cidr_v6: Some("fd00::/64".into()),
            ..Default::default()
        });
        for running in [true, false] {
            let name = if running { "run" } else { "pend" };
            w.create_test_job(name, running);
            let f = Filter {
                ns: Some("ml".into()),
                labels: LabelSelector::parse(&format!("job-name={name}")).unwrap(),
                ..Default::default()
            };
            let (_, pods) = store.snapshot(Kind::Pod, &f);
            assert_eq!(pods.len(), 2);
            for o in pods {
                let v = o.value();
                let idx = &o.labels["batch.kubernetes.io/job-completion-index"];
                assert_eq!(v["metadata"]["resourceVersion"], o.rv.to_string());
                assert_eq!(v["metadata"]["uid"], o.uid.as_str());
                assert_eq!(v["metadata"]["name"], o.name.as_str());
                assert_eq!(v["spec"]["hostname"], format!("{name}-{idx}"));
                assert_eq!(
                    v["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
                    idx.as_str()
                );
                assert_eq!(o.has_ip, running);
                if running {
                    assert_eq!(v["status"]["podIPs"].as_array().unwrap().len(), 2);
                    assert_eq!(v["status"]["podIP"], v["status"]["podIPs"][0]["ip"]);
                    assert_eq!(v["spec"]["nodeName"], o.node_name.as_str());
                    assert!(!o.node_name.is_empty());
                } else {
                    assert_eq!(v["status"]["phase"], "Pending");
                }
                assert!(!serde_json::to_string(&v).unwrap().contains("__"));
            }
        }
    }
}
