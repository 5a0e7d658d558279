//! The training-cluster world the benches share: `jobs` Jobs of `ranks`
//! pods each, every pod with hostname `<job>-<i>`, subdomain `<job>` and
//! label `app=<job>`, one headless Service `<job>` per Job selecting it.
//! Not a bench target itself (cargo only discovers `benches/*.rs` and
//! `benches/*/main.rs`).

#![allow(dead_code)] // each bench uses a different part

use std::net::{IpAddr, Ipv4Addr};

use podns_server::index::testing::{PodExt, SvcExt, headless, pod};
use podns_server::index::{
    Change, PodInfo, Policy, Proto, ServiceInfo, ServicePort, SyncNeeds, Table, TargetPort, Update,
    Writer,
};
use podns_server::metrics::Metrics;

pub const NS: &str = "ml";

/// Which labels each pod carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Labels {
    /// `app=<job>` only.
    App,
    /// `app=<job>` plus the nine labels (and the five kept annotations) a
    /// JobSet / Indexed Job pod has.
    JobSet,
}

/// Job names sort and have a fixed width: `job-007`.
pub fn job_name(j: usize) -> String {
    format!("job-{j:03}")
}

/// The IP of the `n`th pod in the world: 10.(1 + n / 65536).(n / 256 % 256).(n % 256),
/// offset by one so no pod gets a `.0.0` address.
pub fn pod_ip(n: usize) -> Ipv4Addr {
    let n = n + 1;
    Ipv4Addr::new(10, 1 + (n >> 16) as u8, (n >> 8) as u8, n as u8)
}

/// Rank `i` of job `j`; `n` is the pod's world-wide number (decides its IP).
pub fn rank_pod(j: usize, i: usize, n: usize, labels: Labels) -> PodInfo {
    rank_pod_with_ip(j, i, pod_ip(n), labels)
}

pub fn rank_pod_with_ip(j: usize, i: usize, ip: Ipv4Addr, labels: Labels) -> PodInfo {
    let job = job_name(j);
    // Pod names as the Job controller spells them: <job>-<index>-<5 random>.
    let name = format!("{job}-{i}-{:05x}", (j * 7919 + i * 104_729) & 0xfffff);
    let mut p = pod(NS, &name, &ip.to_string())
        .host(&format!("{job}-{i}"), &job)
        .label("app", &job);
    p.uid = uuid_like(j, i);
    if labels == Labels::JobSet {
        let uid = uuid_like(j, usize::MAX);
        let idx = i.to_string();
        let jobset = format!("js-{j:03}");
        let child = format!("{jobset}-workers-0");
        let gidx = j.to_string();
        p = p
            .label("batch.kubernetes.io/job-completion-index", &idx)
            .label("batch.kubernetes.io/job-name", &child)
            .label("job-name", &child)
            .label("controller-uid", &uid)
            .label("batch.kubernetes.io/controller-uid", &uid)
            .label("jobset.sigs.k8s.io/jobset-name", &jobset)
            .label("jobset.sigs.k8s.io/replicatedjob-name", "workers")
            .label("jobset.sigs.k8s.io/job-index", "0")
            .label("jobset.sigs.k8s.io/job-global-index", &gidx);
        // The annotations `k8s::slim` keeps (batch.kubernetes.io/*, jobset.sigs.k8s.io/*).
        p.annotations = vec![
            ("batch.kubernetes.io/job-completion-index".into(), idx),
            ("jobset.sigs.k8s.io/jobset-name".into(), jobset),
            (
                "jobset.sigs.k8s.io/replicatedjob-name".into(),
                "workers".into(),
            ),
            ("jobset.sigs.k8s.io/job-index".into(), "0".into()),
            ("jobset.sigs.k8s.io/job-global-index".into(), gidx),
        ];
    }
    p
}

fn uuid_like(j: usize, i: usize) -> String {
    let x = (j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (x >> 32) as u32,
        (x >> 16) as u16,
        x & 0xfff,
        (x >> 20) & 0xfff,
        x & 0xffff_ffff_ffff
    )
}

/// The headless Service of job `j`, as JobSet creates it
/// (`publishNotReadyAddresses: true`, no ports).
pub fn job_service(j: usize) -> ServiceInfo {
    let job = job_name(j);
    headless(NS, &job, &job).publish_not_ready()
}

/// All pods of `jobs` × `ranks`, numbered job-major from `first_n`.
pub fn job_pods(jobs: usize, ranks: usize, labels: Labels) -> Vec<PodInfo> {
    let mut v = Vec::with_capacity(jobs * ranks);
    for j in 0..jobs {
        for i in 0..ranks {
            v.push(rank_pod(j, i, j * ranks + i, labels));
        }
    }
    v
}

pub fn job_services(jobs: usize) -> Vec<ServiceInfo> {
    (0..jobs).map(job_service).collect()
}

/// One named port, as Kubeflow's and the simulator's headless Services
/// have (`nccl`, 29500): an SRV record per member.
pub fn nccl_port() -> ServicePort {
    ServicePort {
        name: Some("nccl".into()),
        port: 29500,
        protocol: Proto::Tcp,
        target: TargetPort::Same,
    }
}

/// A writer over a fresh table, services listed (synced), pods not yet.
pub fn writer_with_services(services: Vec<ServiceInfo>) -> Writer {
    writer_with_services_and(services, Policy::default())
}

/// [`writer_with_services`] with a policy of the caller's.
pub fn writer_with_services_and(services: Vec<ServiceInfo>, policy: Policy) -> Writer {
    let mut w = Writer::new(
        Table::new(),
        policy,
        Metrics::new(),
        SyncNeeds {
            pod_scopes: 1,
            service_scopes: 1,
            job_scopes: 0,
            slice_scopes: 0,
        },
    );
    w.apply(Update::Service(Change::all(services)));
    w
}

/// A synced writer holding `pods` and `services`.
pub fn synced(services: Vec<ServiceInfo>, pods: Vec<PodInfo>) -> Writer {
    let mut w = writer_with_services(services);
    w.apply(Update::Pod(Change::all(pods)));
    assert!(w.table().is_synced());
    w
}

/// A small extra job (`mpi`, 64 ranks, 10.200.0.x) whose headless Service
/// has a named port, for SRV answers and a 64-address headless set.
pub const SMALL_JOB: &str = "mpi";
pub const SMALL_RANKS: usize = 64;

pub fn small_job() -> (ServiceInfo, Vec<PodInfo>) {
    let svc = headless(NS, SMALL_JOB, SMALL_JOB).publish_not_ready().port(
        Some("nccl"),
        29500,
        TargetPort::Same,
    );
    let pods = (0..SMALL_RANKS)
        .map(|i| {
            pod(
                NS,
                &format!("{SMALL_JOB}-{i}-x7k2q"),
                &IpAddr::V4(Ipv4Addr::new(10, 200, 0, i as u8 + 1)).to_string(),
            )
            .host(&format!("{SMALL_JOB}-{i}"), SMALL_JOB)
            .label("app", SMALL_JOB)
        })
        .collect();
    (svc, pods)
}
