//! Workload: the kubelet stand-in (one timer task for every pod), pod IP
//! allocation, training jobs shaped like the Job and JobSet controllers
//! make them, gang restarts, churn and scenario files.
//!
//! Every training job has a batch/v1 Job owning its pods: `<name>` for an
//! indexed-job, the JobSet child `<name>-workers-0` for a jobset (whose
//! restart deletes and recreates that Job with `restart-attempt` + 1).
//! Pods are named as the real controllers name them: the Job controller
//! gives an Indexed Job's pod hostname `<job>-<i>` (the owning Job's name,
//! so `<name>-workers-0-<i>` in a jobset), and the subdomain is `<name>`
//! (the JobSet controller sets the child Job's template subdomain to the
//! JobSet's name, which is also its headless Service's).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::store::{
    ApiError, EvType, Filter, Hooks, Kind, Obj, Store, new_uid, now_rfc3339, rand_suffix,
};

/// A failure to build the start-up workload or to read a scenario.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("failed to parse CIDR {0:?}")]
    Cidr(String),
    #[error("failed to read scenario {path}: {source}")]
    ReadScenario {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse scenario: {0}")]
    ParseScenario(String),
    #[error("failed to create object: {0}")]
    Api(#[from] ApiError),
}

/// A range of addresses handed out in order, then reused oldest-freed first.
struct Pool {
    base: u128,
    size: u128,
    v6: bool,
    next: u128,
    free: VecDeque<u128>,
    warned: bool,
}

impl Pool {
    fn parse(cidr: &str) -> Result<Pool, WorkloadError> {
        let err = || WorkloadError::Cidr(cidr.to_string());
        let (ip, bits) = cidr.split_once('/').ok_or_else(err)?;
        let ip: IpAddr = ip.parse().map_err(|_| err())?;
        let bits: u32 = bits.parse().map_err(|_| err())?;
        let (base, width, v6) = match ip {
            IpAddr::V4(a) => (u32::from(a) as u128, 32, false),
            IpAddr::V6(a) => (u128::from(a), 128, true),
        };
        if bits > width || bits + 2 > width {
            return Err(err());
        }
        let host = width - bits;
        let size = if host >= 127 {
            1u128 << 126
        } else {
            1u128 << host
        };
        let mask = if host >= 128 {
            0
        } else {
            !((1u128 << host) - 1)
        };
        Ok(Pool {
            base: base & mask,
            size,
            v6,
            // Skip the network address (and .1, the gateway by habit).
            next: 2,
            free: VecDeque::new(),
            warned: false,
        })
    }

    fn addr(&self, off: u128) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.base + off))
        } else {
            IpAddr::V4(Ipv4Addr::from((self.base + off) as u32))
        }
    }

    fn alloc(&mut self) -> (u128, IpAddr) {
        // Fresh addresses first, so a restarted pod gets a new IP.
        let last = self.size - 1; // broadcast (v4)
        let off = if self.next < last {
            self.next += 1;
            self.next - 1
        } else if let Some(o) = self.free.pop_front() {
            o
        } else {
            if !self.warned {
                self.warned = true;
                tracing::warn!(
                    size = %self.size,
                    "pod CIDR exhausted: handing out duplicate IPs; pass a larger --pod-cidr"
                );
            }
            self.next = 2;
            self.next += 1;
            2
        };
        (off, self.addr(off))
    }

    fn release(&mut self, off: u128) {
        self.free.push_back(off);
    }
}

#[derive(Debug)]
enum Step {
    Run,
    Ready,
    FinishDelete,
    /// The Job controller writes a Job's status (`name`) from its pods.
    SyncJob,
}

/// How long the Job controller gathers its pods' changes before it writes
/// a Job's status (kube-controller-manager's Job controller batches pod
/// updates for a second).
const JOB_SYNC_BATCH: Duration = Duration::from_secs(1);

/// A Job's pods as its controller counts them, by pod uid.
#[derive(Default)]
struct JobPods {
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

#[derive(Debug)]
struct Timer {
    at: Instant,
    step: Step,
    ns: String,
    name: String,
    uid: String,
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

#[derive(Clone, Debug)]
struct JobInfo {
    kind: String,
    ranks: usize,
    /// The uid of the batch/v1 Job that owns the pods (`controller-uid`).
    uid: String,
    /// The name of that Job: the workload's name for an indexed-job, the
    /// JobSet's child `<name>-workers-0` for a jobset.
    job_name: String,
    /// The JobSet's uid (jobset only).
    set_uid: String,
    key: String,
    attempt: u32,
    /// `--lean-pods`: see [`lean`].
    lean: bool,
}

impl JobInfo {
    fn jobset(&self) -> bool {
        self.kind == "jobset"
    }
}

/// The replicated job every simulated JobSet has (one Job, index 0).
const REPLICATED_JOB: &str = "workers";

/// The name of the Job that owns a workload's pods.
fn child_job_name(kind: &str, name: &str) -> String {
    if kind == "jobset" {
        format!("{name}-{REPLICATED_JOB}-0")
    } else {
        name.to_string()
    }
}

/// The kubelet, scheduler and job controllers, collapsed into one.
pub struct Workload {
    store: Arc<Store>,
    pub kubelet: bool,
    kubelet_delay: Duration,
    ready_delay: Duration,
    pub default_grace: u64,
    timers: mpsc::UnboundedSender<Timer>,
    ips: Mutex<IpState>,
    jobs: Mutex<HashMap<(String, String), JobInfo>>,
    /// Pods of each Job (namespace, Job name), for its status.
    job_pods: Mutex<HashMap<(String, String), JobPods>>,
    nodes: AtomicU64,
    pub churned: AtomicU64,
    /// Set while the start-up workload is created with `--kubelet` and no
    /// delays: pods are created Running and Ready.
    pub prerun: std::sync::atomic::AtomicBool,
    /// `--lean-pods`: job pods without the fields DNS never reads.
    lean: bool,
}

struct IpState {
    v4: Pool,
    v6: Option<Pool>,
    by_uid: HashMap<String, (u128, Option<u128>)>,
}

impl Hooks for Workload {
    fn pod_written(&self, obj: &Arc<Obj>, ty: EvType) {
        self.count_for_job(obj, ty);
        match ty {
            EvType::Added if self.kubelet && !obj.has_ip && !obj.deleting => {
                self.schedule(self.kubelet_delay, Step::Run, obj);
            }
            EvType::Deleted => {
                let mut ips = self.ips.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((a, b)) = ips.by_uid.remove(&obj.uid) {
                    ips.v4.release(a);
                    if let (Some(b), Some(p)) = (b, ips.v6.as_mut()) {
                        p.release(b);
                    }
                }
            }
            _ => {}
        }
    }
}

impl Workload {
    pub fn new(
        store: Arc<Store>,
        args: &super::SimArgs,
        shutdown: CancellationToken,
    ) -> Result<Arc<Workload>, WorkloadError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let v6 = args.pod_cidr_v6.as_deref().map(Pool::parse).transpose()?;
        let w = Arc::new(Workload {
            store: store.clone(),
            kubelet: args.kubelet,
            kubelet_delay: Duration::from_millis(args.kubelet_delay_ms),
            ready_delay: Duration::from_millis(args.ready_delay_ms),
            default_grace: args.default_grace,
            timers: tx,
            ips: Mutex::new(IpState {
                v4: Pool::parse(&args.pod_cidr)?,
                v6,
                by_uid: HashMap::new(),
            }),
            jobs: Mutex::new(HashMap::new()),
            job_pods: Mutex::new(HashMap::new()),
            nodes: AtomicU64::new(0),
            churned: AtomicU64::new(0),
            prerun: std::sync::atomic::AtomicBool::new(false),
            lean: args.lean_pods,
        });
        store.set_hooks(w.clone());
        tokio::spawn(timer_loop(Arc::downgrade(&w), rx, shutdown));
        Ok(w)
    }

    /// The Job controller sees a pod of its Job change: the Job's status
    /// is written within [`JOB_SYNC_BATCH`] if its counts moved.
    fn count_for_job(&self, obj: &Obj, ty: EvType) {
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
    fn sync_job(&self, ns: &str, name: &str) {
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

    fn schedule(&self, after: Duration, step: Step, obj: &Obj) {
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
    fn place(&self, uid: &str, node: Option<&str>) -> Placement {
        let (v4, v6) = {
            let mut ips = self.ips.lock().unwrap_or_else(|p| p.into_inner());
            let (o4, a4) = ips.v4.alloc();
            let b = ips.v6.as_mut().map(|p| p.alloc());
            ips.by_uid.insert(uid.to_string(), (o4, b.map(|x| x.0)));
            (a4, b.map(|x| x.1))
        };
        let node = match node {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!(
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
        Placement {
            node,
            host_ip: host_ip.to_string(),
            ip4: v4.to_string(),
            ip6: v6.map(|a| a.to_string()),
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
        let v6 = self
            .ips
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .v6
            .is_some();
        // The start-up workload is a cluster that has been running: with
        // the kubelet on, its pods exist already scheduled, running, Ready.
        let tpl = PodTemplate::new(&req.namespace, &req.name, &info, prerun, v6);
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
            labels: super::selector::LabelSelector::parse(&format!("{label}={name}"))
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

    /// Replaces one random pod; job pods come back under the same hostname.
    /// `keys` is kept current: a replaced pod's key is swapped for its
    /// successor's, a vanished one is dropped and another tried.
    fn churn_one(&self, keys: &mut Vec<(String, String)>) {
        loop {
            if keys.is_empty() {
                return;
            }
            let at = rand::random_range(0..keys.len());
            let (ns, name) = keys[at].clone();
            match self.store.get(Kind::Pod, &ns, &name) {
                Ok(old) if !old.deleting => {
                    if let Some(new) = self.replace_pod(&ns, &name, &old) {
                        keys[at] = (ns, new);
                    }
                    return;
                }
                _ => {
                    keys.swap_remove(at);
                }
            }
        }
    }

    /// Deletes a pod and creates its replacement; returns the new name.
    fn replace_pod(&self, ns: &str, name: &str, old: &Obj) -> Option<String> {
        let ns = &ns.to_string();
        let v = old.value();
        // The workload a pod belongs to: its JobSet, or its Job.
        let job = old
            .labels
            .get("jobset.sigs.k8s.io/jobset-name")
            .or_else(|| old.labels.get("job-name"))
            .cloned();
        let idx = old
            .labels
            .get("batch.kubernetes.io/job-completion-index")
            .and_then(|s| s.parse::<usize>().ok());
        if self
            .delete_pod(ns, name, self.default_grace, Some(&old.uid))
            .is_err()
        {
            return None;
        }
        let info = job.as_ref().and_then(|j| {
            self.jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(ns.clone(), j.clone()))
                .cloned()
        });
        let new = match (job, idx, info) {
            (Some(j), Some(i), Some(info)) => job_pod(ns, &j, i, &info),
            _ => {
                let mut n = v;
                if let Some(m) = n["metadata"].as_object_mut() {
                    for k in [
                        "uid",
                        "resourceVersion",
                        "creationTimestamp",
                        "deletionTimestamp",
                        "deletionGracePeriodSeconds",
                    ] {
                        m.remove(k);
                    }
                    if m.get("generateName")
                        .and_then(Value::as_str)
                        .is_some_and(|g| !g.is_empty())
                    {
                        m.remove("name");
                    }
                }
                if let Some(s) = n["spec"].as_object_mut() {
                    s.remove("nodeName");
                }
                n
            }
        };
        let o = self.store.create(Kind::Pod, ns, new).ok()?;
        self.churned.fetch_add(1, Ordering::Relaxed);
        Some(o.name.clone())
    }

    /// Replaces random pods at `rate` per second for `seconds`.
    pub fn start_churn(self: &Arc<Self>, rate: f64, seconds: f64, shutdown: CancellationToken) {
        let w = self.clone();
        tokio::spawn(async move {
            let total = (rate * seconds).round() as u64;
            if total == 0 || rate <= 0.0 {
                return;
            }
            let period = Duration::from_secs_f64(1.0 / rate);
            let start = Instant::now();
            let mut keys = w.store.pod_keys(&Filter::default());
            let mut keys_at = Instant::now();
            for n in 0..total {
                let at = start + period.mul_f64(n as f64);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep_until(at) => {}
                }
                if keys_at.elapsed() > Duration::from_secs(1) {
                    keys = w.store.pod_keys(&Filter::default());
                    keys_at = Instant::now();
                }
                w.churn_one(&mut keys);
            }
            tracing::info!(total, "churn finished");
        });
    }

    /// Creates each object of a scenario (namespaces made as needed).
    pub fn load_scenario(&self, text: &str) -> Result<usize, WorkloadError> {
        let mut objs = Vec::new();
        let docs: Vec<Value> = serde_saphyr::from_multiple(text)
            .map_err(|e| WorkloadError::ParseScenario(e.to_string()))?;
        for v in docs {
            collect_objects(v, &mut objs);
        }
        let mut n = 0;
        for o in objs {
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
            self.store.create(kind, &ns, o)?;
            n += 1;
        }
        Ok(n)
    }
}

/// Where a pod runs: node and addresses (or template placeholders).
struct Placement {
    node: String,
    host_ip: String,
    ip4: String,
    ip6: Option<String>,
}

fn container_id() -> String {
    format!(
        "containerd://{}{}",
        new_uid().replace('-', ""),
        new_uid().replace('-', "")
    )
}

/// The status a kubelet writes when the pod's containers start.
fn set_running(v: &mut Value, p: &Placement, cid: &str) {
    v["spec"]["nodeName"] = p.node.clone().into();
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
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

/// The serialized pod of one job with placeholders, so that creating
/// 100,000 pods is string splicing, not building and serializing JSON
/// trees (which costs ~200 µs a pod on these machines).
struct PodTemplate {
    segs: Vec<(Vec<u8>, Option<Tok>)>,
    labels: std::collections::BTreeMap<String, String>,
    running: bool,
}

impl PodTemplate {
    fn new(ns: &str, job: &str, info: &JobInfo, running: bool, v6: bool) -> PodTemplate {
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
            };
            set_running(&mut v, &p, "__CID__");
            mark_ready(&mut v);
        }
        let labels = v["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
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

    fn render(&self, val: impl Fn(Tok) -> String) -> Vec<u8> {
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

/// Sets the Ready and ContainersReady conditions and ready containers.
fn mark_ready(v: &mut Value) {
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

async fn timer_loop(
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

/// A pod as the Job controller creates it for a GPU training rank: the
/// size and shape of `kubectl get pod -o json` on a real cluster.
fn job_pod(ns: &str, job: &str, idx: usize, info: &JobInfo) -> Value {
    job_pod_with(ns, job, &idx.to_string(), &rand_suffix(), info)
}

fn job_pod_with(ns: &str, job: &str, idx: &str, sfx: &str, info: &JobInfo) -> Value {
    let mut v = full_job_pod(ns, job, idx, sfx, info);
    if info.lean {
        lean(&mut v);
    }
    v
}

/// One running rank of a 1,000-rank JobSet exactly as the simulator
/// stores it (realistic, or `--lean-pods`), for benches that measure
/// decoding and wire sizes.
pub fn sample_job_pod(lean: bool) -> Value {
    let info = JobInfo {
        kind: "jobset".into(),
        ranks: 1000,
        uid: new_uid(),
        job_name: child_job_name("jobset", "llama-70b"),
        set_uid: new_uid(),
        key: new_uid().replace('-', ""),
        attempt: 0,
        lean,
    };
    let mut v = job_pod("team-a", "llama-70b", 17, &info);
    let p = Placement {
        node: "gpu-node-0042".into(),
        host_ip: "10.128.0.42".into(),
        ip4: "10.0.4.17".into(),
        ip6: None,
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
    let name = format!("{host}-{sfx}");
    let now = now_rfc3339();
    let i = idx.to_string();
    let mut labels = json!({
        "batch.kubernetes.io/controller-uid": info.uid,
        "batch.kubernetes.io/job-name": info.job_name,
        "controller-uid": info.uid,
        "job-name": info.job_name,
        "batch.kubernetes.io/job-completion-index": i,
        "app.kubernetes.io/name": "llm-pretrain",
        "app.kubernetes.io/component": "worker",
        "training.kubeflow.org/replica-type": "worker",
    });
    let mut annotations = json!({
        "batch.kubernetes.io/job-completion-index": i,
        "kubectl.kubernetes.io/default-container": "trainer",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
    });
    if info.kind == "jobset" {
        for (k, v) in [
            ("jobset.sigs.k8s.io/jobset-name", job.to_string()),
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
            ("jobset.sigs.k8s.io/coordinator", leader.clone()),
        ] {
            if matches!(
                k,
                "jobset.sigs.k8s.io/jobset-name" | "jobset.sigs.k8s.io/job-index"
            ) {
                annotations[k] = v.clone().into();
            }
            labels[k] = v.into();
        }
    }
    let env = |n: &str, v: String| json!({"name": n, "value": v});
    let world = info.ranks.to_string();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": format!("{host}-"),
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": info.job_name, "uid": info.uid,
                "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": now, "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:annotations": {".": {}, "f:batch.kubernetes.io/job-completion-index": {}},
                        "f:finalizers": {".": {}, "v:\"batch.kubernetes.io/job-tracking\"": {}},
                        "f:generateName": {},
                        "f:labels": {".": {}, "f:batch.kubernetes.io/controller-uid": {}, "f:batch.kubernetes.io/job-completion-index": {}, "f:batch.kubernetes.io/job-name": {}, "f:controller-uid": {}, "f:job-name": {}},
                        "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{}\"}}", info.uid): {}}
                    },
                    "f:spec": {
                        "f:affinity": {".": {}, "f:nodeAffinity": {".": {}, "f:requiredDuringSchedulingIgnoredDuringExecution": {}}},
                        "f:containers": {"k:{\"name\":\"trainer\"}": {".": {}, "f:command": {}, "f:env": {".": {}}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {".": {}}, "f:resources": {".": {}, "f:limits": {}, "f:requests": {}}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {".": {}}}},
                        "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:hostname": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:subdomain": {}, "f:terminationGracePeriodSeconds": {}, "f:tolerations": {}, "f:volumes": {".": {}}
                    }
                }
            }]
        },
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
            "containers": [{
                "name": "trainer",
                "image": "registry.example.com/ml/llm-pretrain:2025.06.1-cuda12.4",
                "imagePullPolicy": "IfNotPresent",
                "command": ["torchrun", "--nnodes", world, "--nproc-per-node", "8",
                            "--rdzv-backend", "c10d", "--rdzv-endpoint", format!("{leader}:29500"),
                            "/workspace/train.py", "--config", "/etc/train/config.yaml"],
                "env": [
                    env("MASTER_ADDR", leader.clone()),
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
            }],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "training-data", "readOnly": true}},
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": format!("{job}-checkpoints")}},
                {"name": "config", "configMap": {"name": format!("{job}-config"), "defaultMode": 420}},
                {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}}
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "rdma/ib", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
                ]}]}},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
                    "labelSelector": {"matchExpressions": [{"key": "job-name", "operator": "In", "values": [info.job_name]}]},
                    "topologyKey": "cloud.provider.com/topology-block"
                }}]}
            }
        },
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
fn job_object(ns: &str, name: &str, info: &JobInfo) -> Value {
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
        for (k, v) in [
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
        ] {
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
    fn pool_hands_out_fresh_then_freed() {
        let mut p = Pool::parse("10.244.0.0/30").unwrap();
        let (o, a) = p.alloc();
        assert_eq!(a, "10.244.0.2".parse::<IpAddr>().unwrap());
        p.release(o);
        // The /30 has one usable fresh address; then the freed one.
        let (_, b) = p.alloc();
        assert_eq!(b, "10.244.0.2".parse::<IpAddr>().unwrap());
        let mut p6 = Pool::parse("fd00:10:244::/64").unwrap();
        assert_eq!(p6.alloc().1, "fd00:10:244::2".parse::<IpAddr>().unwrap());
        assert!(Pool::parse("10.0.0.0").is_err());
        assert!(Pool::parse("10.0.0.0/33").is_err());
    }

    #[tokio::test]
    async fn lean_pods_keep_what_dns_reads() {
        let store = Store::new(1000);
        let args = crate::SimArgs {
            kubelet: true,
            lean_pods: true,
            ..Default::default()
        };
        let w = Workload::new(store.clone(), &args, CancellationToken::new()).unwrap();
        for (running, name) in [(true, "run"), (false, "pend")] {
            w.prerun.store(running, Ordering::Relaxed);
            let req = JobRequest {
                namespace: "ml".into(),
                name: name.into(),
                ranks: 2,
                kind: "indexed-job".into(),
            };
            w.create_job(&req).unwrap();
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
        let store = Store::new(1000);
        let args = crate::SimArgs {
            kubelet: true,
            pod_cidr_v6: Some("fd00::/64".into()),
            ..Default::default()
        };
        let w = Workload::new(store.clone(), &args, CancellationToken::new()).unwrap();
        for running in [true, false] {
            w.prerun.store(running, Ordering::Relaxed);
            let name = if running { "run" } else { "pend" };
            let req = JobRequest {
                namespace: "ml".into(),
                name: name.into(),
                ranks: 2,
                kind: "indexed-job".into(),
            };
            w.create_job(&req).unwrap();
            let f = Filter {
                ns: Some("ml".into()),
                labels: crate::selector::LabelSelector::parse(&format!("job-name={name}")).unwrap(),
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

    #[test]
    fn job_pod_is_realistic_size() {
        let info = JobInfo {
            kind: "jobset".into(),
            ranks: 1000,
            uid: new_uid(),
            job_name: child_job_name("jobset", "llama-70b"),
            set_uid: new_uid(),
            key: "k".into(),
            attempt: 0,
            lean: false,
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
