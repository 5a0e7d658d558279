//! Builders for index input, shared by unit tests and benches.

use std::net::IpAddr;

use super::types::*;

/// A running, ready pod with one IP.
pub fn pod(ns: &str, name: &str, ip: &str) -> PodInfo {
    PodInfo {
        key: ObjKey::new(ns, name),
        uid: format!("uid-{ns}-{name}"),
        hostname: None,
        subdomain: None,
        host_network: false,
        ips: if ip.is_empty() {
            vec![]
        } else {
            vec![ip.parse().expect("test IP")]
        },
        phase: Phase::Running,
        ready: true,
        deleting: false,
        created: 1_700_000_000,
        labels: vec![],
        annotations: vec![],
        ports: vec![],
    }
}

/// Chainable tweaks on a [`PodInfo`].
pub trait PodExt: Sized {
    fn host(self, hostname: &str, subdomain: &str) -> Self;
    fn label(self, k: &str, v: &str) -> Self;
    fn ready(self, ready: bool) -> Self;
    fn phase(self, phase: Phase) -> Self;
    fn created(self, secs: i64) -> Self;
    fn deleting(self) -> Self;
    fn host_network(self) -> Self;
    fn ip(self, ip: &str) -> Self;
    fn port(self, name: &str, port: u16) -> Self;
}

impl PodExt for PodInfo {
    fn host(mut self, hostname: &str, subdomain: &str) -> Self {
        self.hostname = Some(hostname.into());
        self.subdomain = Some(subdomain.into());
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.push((k.into(), v.into()));
        self
    }
    fn ready(mut self, ready: bool) -> Self {
        self.ready = ready;
        self
    }
    fn phase(mut self, phase: Phase) -> Self {
        self.phase = phase;
        self
    }
    fn created(mut self, secs: i64) -> Self {
        self.created = secs;
        self
    }
    fn deleting(mut self) -> Self {
        self.deleting = true;
        self
    }
    fn host_network(mut self) -> Self {
        self.host_network = true;
        self
    }
    fn ip(mut self, ip: &str) -> Self {
        self.ips.push(ip.parse::<IpAddr>().expect("test IP"));
        self
    }
    fn port(mut self, name: &str, port: u16) -> Self {
        self.ports.push(ContainerPort {
            name: Some(name.into()),
            port,
            protocol: Proto::Tcp,
        });
        self
    }
}

/// A headless Service selecting `app=<selector>`.
pub fn headless(ns: &str, name: &str, app: &str) -> ServiceInfo {
    ServiceInfo {
        key: ObjKey::new(ns, name),
        uid: format!("uid-svc-{ns}-{name}"),
        kind: ServiceKind::Headless,
        selector: Some(vec![("app".into(), app.into())]),
        publish_not_ready: false,
        ports: vec![],
    }
}

/// A ClusterIP Service.
pub fn cluster_ip(ns: &str, name: &str, ip: &str) -> ServiceInfo {
    ServiceInfo {
        key: ObjKey::new(ns, name),
        uid: format!("uid-svc-{ns}-{name}"),
        kind: ServiceKind::ClusterIp(vec![ip.parse().expect("test IP")]),
        selector: Some(vec![("app".into(), name.into())]),
        publish_not_ready: false,
        ports: vec![],
    }
}

/// Chainable tweaks on a [`ServiceInfo`].
pub trait SvcExt: Sized {
    fn port(self, name: Option<&str>, port: u16, target: TargetPort) -> Self;
    fn publish_not_ready(self) -> Self;
}

impl SvcExt for ServiceInfo {
    fn port(mut self, name: Option<&str>, port: u16, target: TargetPort) -> Self {
        self.ports.push(ServicePort {
            name: name.map(Into::into),
            port,
            protocol: Proto::Tcp,
            target,
        });
        self
    }
    fn publish_not_ready(mut self) -> Self {
        self.publish_not_ready = true;
        self
    }
}

/// A batch/v1 Job with `completions` ranks (optionally part of a JobSet).
pub fn job(ns: &str, name: &str, completions: u32, jobset: Option<&str>) -> JobInfo {
    let mut labels = vec![];
    if let Some(js) = jobset {
        labels.push(("jobset.sigs.k8s.io/jobset-name".to_string(), js.to_string()));
    }
    JobInfo {
        key: ObjKey::new(ns, name),
        uid: format!("uid-job-{ns}-{name}"),
        completions: Some(completions),
        parallelism: Some(completions),
        labels,
    }
}

/// A pod of rank `index` of Job `job`, shaped as the Job controller makes it.
pub fn rank_pod(ns: &str, job: &str, index: u32, ip: &str) -> PodInfo {
    pod(
        ns,
        &format!("{job}-{index}-x{}", ip.replace(['.', ':'], "")),
        ip,
    )
    .host(&format!("{job}-{index}"), job)
    .label("batch.kubernetes.io/job-name", job)
    .label("job-name", job)
    .label(
        "batch.kubernetes.io/job-completion-index",
        &index.to_string(),
    )
}

/// A writer over a fresh table, synced with nothing in it: each watch has
/// delivered an empty first list.
pub fn synced_writer(policy: super::Policy) -> super::Writer {
    let needs = super::SyncNeeds::one_list(policy.rank_view, false);
    let mut w = super::Writer::new(
        super::Table::new(),
        policy,
        crate::metrics::Metrics::new(),
        needs,
    );
    w.apply(Update::Pod(Change::all(vec![])));
    w.apply(Update::Service(Change::all(vec![])));
    if policy.rank_view {
        w.apply(Update::Job(Change::all(vec![])));
    }
    w
}

/// A user-managed EndpointSlice of Service `service`, with no endpoints
/// or ports yet (see [`SliceExt`]).
pub fn slice(ns: &str, name: &str, service: &str) -> SliceInfo {
    SliceInfo {
        key: ObjKey::new(ns, name),
        service: service.into(),
        ports: vec![],
        endpoints: vec![],
    }
}

/// A headless Service without a selector: its records come from its
/// EndpointSlices.
pub fn selectorless(ns: &str, name: &str) -> ServiceInfo {
    ServiceInfo {
        selector: None,
        ..headless(ns, name, "")
    }
}

pub trait SliceExt {
    /// An endpoint with `ip`, ready unless `ready` is false.
    fn endpoint(self, ip: &str, hostname: Option<&str>, ready: bool) -> Self;
    /// A terminating endpoint (not ready, as controllers write them).
    fn terminating(self, ip: &str) -> Self;
    fn port(self, name: Option<&str>, port: u16) -> Self;
}

impl SliceExt for SliceInfo {
    fn endpoint(mut self, ip: &str, hostname: Option<&str>, ready: bool) -> Self {
        self.endpoints.push(SliceEndpoint {
            ips: vec![ip.parse().expect("test IP")],
            hostname: hostname.map(Into::into),
            ready,
            terminating: false,
        });
        self
    }
    fn terminating(mut self, ip: &str) -> Self {
        self.endpoints.push(SliceEndpoint {
            ips: vec![ip.parse().expect("test IP")],
            hostname: None,
            ready: false,
            terminating: true,
        });
        self
    }
    fn port(mut self, name: Option<&str>, port: u16) -> Self {
        self.ports.push(SlicePort {
            name: name.map(Into::into),
            port,
            protocol: Proto::Tcp,
        });
        self
    }
}
