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
//!
//! - `kubelet`: the timers (Running, Ready, the end of a grace period, a
//!   Job's status write), placement on nodes, the status a kubelet writes.
//! - `pool`: the pod IP pools.
//! - `jobs`: the Job and JobSet controllers (create, gang restart, status).
//! - `templates`: the pod and Job bodies, and the per-rank pod template.
//! - `churn`: pods replaced at a steady rate.
//! - `scenario`: the cluster at start, objects from a file.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use podns_kapi::ApiError;
use podns_kapi::watch::EvType;

use crate::args::SimArgs;
use crate::store::{Hooks, Obj, Store};
use jobs::JobPods;
use kubelet::{Step, Timer, timer_loop};
use pool::PodIps;
use templates::JobInfo;

mod churn;
mod jobs;
mod kubelet;
mod pool;
mod scenario;
mod templates;

pub use jobs::JobRequest;
pub use scenario::ensure_namespace;
pub use templates::sample_job_pod;

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
    #[error("failed to create job {name}: {source}")]
    Job {
        name: String,
        #[source]
        source: ApiError,
    },
}

/// The kubelet, scheduler and job controllers, collapsed into one.
pub struct Workload {
    store: Arc<Store>,
    pub kubelet: bool,
    kubelet_delay: Duration,
    ready_delay: Duration,
    pub default_grace: u64,
    timers: mpsc::UnboundedSender<Timer>,
    ips: PodIps,
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
    /// `--pod-topology-labels`: see [`kubelet::Placement::topology`].
    topology_labels: bool,
}

impl Hooks for Workload {
    fn pod_written(&self, obj: &Arc<Obj>, ty: EvType) {
        self.count_for_job(obj, ty);
        match ty {
            EvType::Added if self.kubelet && !obj.has_ip && !obj.deleting => {
                self.schedule(self.kubelet_delay, Step::Run, obj);
            }
            EvType::Deleted => self.ips.release(&obj.uid),
            _ => {}
        }
    }
}

impl Workload {
    pub fn new(
        store: Arc<Store>,
        args: &SimArgs,
        shutdown: CancellationToken,
    ) -> Result<Arc<Workload>, WorkloadError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let w = Arc::new(Workload {
            store: store.clone(),
            kubelet: args.kubelet,
            kubelet_delay: Duration::from_millis(args.kubelet_delay_ms),
            ready_delay: Duration::from_millis(args.ready_delay_ms),
            default_grace: args.default_grace,
            timers: tx,
            ips: PodIps::new(&args.pod_cidr, args.pod_cidr_v6.as_deref())?,
            jobs: Mutex::new(HashMap::new()),
            job_pods: Mutex::new(HashMap::new()),
            nodes: AtomicU64::new(0),
            churned: AtomicU64::new(0),
            prerun: std::sync::atomic::AtomicBool::new(false),
            lean: args.lean_pods,
            topology_labels: args.pod_topology_labels,
        });
        store.set_hooks(w.clone());
        tokio::spawn(timer_loop(Arc::downgrade(&w), rx, shutdown));
        Ok(w)
    }
}

/// A workload with its kubelet on a fresh store, for the tests: `args`
/// sets what else the test needs.
#[cfg(test)]
pub(crate) fn with_kubelet(args: SimArgs) -> (Arc<Store>, Arc<Workload>) {
    let store = Store::new(1000);
    let args = SimArgs {
        kubelet: true,
        ..args
    };
    let w = Workload::new(store.clone(), &args, CancellationToken::new()).unwrap();
    (store, w)
}

#[cfg(test)]
impl Workload {
    /// An indexed Job `ml/name` of 2 ranks, its pods made as the start-up
    /// workload makes them (already running, from the template) when
    /// `prerun`, else as a Job created later (pending).
    pub(crate) fn create_test_job(&self, name: &str, prerun: bool) {
        self.prerun
            .store(prerun, std::sync::atomic::Ordering::Relaxed);
        let req = JobRequest {
            namespace: "ml".into(),
            name: name.into(),
            ranks: 2,
            kind: "indexed-job".into(),
        };
        self.create_job(&req).unwrap();
    }
}
