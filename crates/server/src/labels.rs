//! The label and annotation keys podns reads, each spelled once: the rank
//! view's (Job and JobSet bookkeeping), the labels that name a pod's gang,
//! those the Services of training operators select on, and the label that
//! ties an EndpointSlice to its Service.
//!
//! Every layer reads some of them (the index writer, the slim decoders,
//! the relay), so this module sits at the bottom with `metrics` and
//! imports nothing of ours.

/// The Job controller's name label (Kubernetes 1.27+).
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The name label older Job controllers set (and newer ones still do).
pub const LEGACY_JOB_NAME: &str = "job-name";
/// An Indexed Job's completion index (a label since 1.28, an annotation
/// before).
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// Which of a JobSet's Jobs, across its replicated jobs.
pub const GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";
pub const RESTART_ATTEMPT: &str = "jobset.sigs.k8s.io/restart-attempt";
/// The pod a JobSet names its coordinator (an annotation or a label).
pub const COORDINATOR: &str = "jobset.sigs.k8s.io/coordinator";

/// Every pod label the rank view reads (a relay serves these whatever its
/// Services select on).
pub const RANK_LABELS: &[&str] = &[
    JOB_NAME,
    LEGACY_JOB_NAME,
    COMPLETION_INDEX,
    JOBSET_NAME,
    GLOBAL_INDEX,
    RESTART_ATTEMPT,
    COORDINATOR,
];

/// The annotations the index keeps (the rank view reads these): every
/// other annotation would cost index memory for nothing (a JobSet pod
/// carries five).
pub const INDEX_ANNOTATIONS: &[&str] = &[COMPLETION_INDEX, COORDINATOR];

/// The gang labels of the training operators that are not the rank view's.
pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
pub const KUBEFLOW_JOB_NAME: &str = "training.kubeflow.org/job-name";
pub const VOLCANO_JOB_NAME: &str = "volcano.sh/job-name";
pub const RAY_CLUSTER: &str = "ray.io/cluster";

/// The labels that name a pod's gang, most encompassing first: a JobSet's
/// pods also carry their child Job's name, and the JobSet is the gang.
pub const GANG_KEYS: &[&str] = &[
    JOBSET_NAME,
    LWS_NAME,
    KUBEFLOW_JOB_NAME,
    VOLCANO_JOB_NAME,
    RAY_CLUSTER,
    JOB_NAME,
    LEGACY_JOB_NAME,
];

/// A pod's gang: its first label of [`GANG_KEYS`], as (key, value);
/// `label` looks a label of the pod up.
pub fn gang_of<'a>(label: impl Fn(&str) -> Option<&'a str>) -> Option<(&'static str, String)> {
    GANG_KEYS
        .iter()
        .find_map(|k| Some((*k, label(k)?.to_owned())))
}

/// Label keys the Services of training operators select on (Kubeflow's
/// training operator and MPI operator, JobSet, LeaderWorkerSet, Volcano,
/// KubeRay): a relay serves them whatever its Services select on, so that
/// a gang whose Service is created after its pods costs nothing.
pub const OPERATOR_SELECTORS: &[&str] = &[
    KUBEFLOW_JOB_NAME,
    "training.kubeflow.org/operator-name",
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
    "training.kubeflow.org/job-role",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/job-index",
    LWS_NAME,
    "leaderworkerset.sigs.k8s.io/group-index",
    "leaderworkerset.sigs.k8s.io/worker-index",
    VOLCANO_JOB_NAME,
    "volcano.sh/job-namespace",
    "volcano.sh/task-spec",
    "volcano.sh/task-index",
    RAY_CLUSTER,
    "ray.io/node-type",
    "ray.io/identifier",
];

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
