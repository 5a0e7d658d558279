//! `podns sim`: an in-memory Kubernetes API server on loopback.
//!
//! It speaks the real wire protocol for Pods, Services, Namespaces and
//! `batch/v1` Jobs (list, watch with bookmarks and streaming lists, resume
//! and 410, Status errors) so that kubectl and kube-rs work against it unchanged, and it
//! plays kubelet and job controllers to produce realistic workloads.
//!
//! - [`store`]: objects as JSON bytes, one global resourceVersion, history ring.
//! - [`service_net`]: Service cluster IPs and IP families, single- or
//!   dual-stack, as the apiserver's Service registry keeps them.
//! - [`field`]: field errors and the 422 `Invalid` Status built from them.
//! - [`selector`]: label and field selectors.
//! - [`http`]: the Kubernetes REST paths, lists and watches.
//! - [`workload`]: kubelet timers, pod IPs, training jobs, churn, scenarios.
//! - [`tokens`]: ServiceAccount tokens (TokenRequest, TokenReview).
//! - [`rbac`]: SubjectAccessReviews, decided by the stored RBAC objects.
//! - [`control`], [`faults`], [`stats`]: the `/sim/` endpoints.
//! - [`discovery`], [`table`], [`protobuf`]: what kubectl needs besides
//!   JSON objects (discovery documents, `as=Table` printing, and the
//!   protobuf bodies it sends, `create namespace` and `create service`).

pub mod control;
pub mod discovery;
pub mod faults;
pub mod field;
pub mod http;
pub mod protobuf;
pub mod rbac;
pub mod service_net;
pub mod stats;
pub mod store;
pub mod table;
pub mod tokens;
pub mod workload;

pub use podns_kapi::{pbenc, selector};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Flags of `podns sim`.
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// Address to serve the Kubernetes API on (plain HTTP).
    #[arg(long, env = "PODNS_SIM_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Write a kubeconfig pointing at the simulator to this path.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Behave like kubelets: schedule pods, give them IPs, Running, then Ready.
    #[arg(long)]
    pub kubelet: bool,
    /// IPv4 range pod IPs are taken from (data only, never a destination).
    #[arg(long, default_value = "10.244.0.0/16")]
    pub pod_cidr: String,
    /// Also give pods an IPv6 address from this range (dual stack).
    #[arg(long)]
    pub pod_cidr_v6: Option<String>,
    /// The Node's `spec.podCIDRs`: `pods`, the pod ranges (a node's pods
    /// take their IPs from its range, as with host-local IPAM); `none`, no
    /// podCIDR (kube-controller-manager `--allocate-node-cidrs=false`, as
    /// with the AWS VPC CNI and Azure CNI); or up to two CIDRs, one per
    /// family, while pods still take their IPs from `--pod-cidr` (Calico
    /// IPAM, Cilium's cluster-pool: pods outside every Node's range).
    #[arg(long, default_value = "pods")]
    pub node_pod_cidrs: NodePodCidrs,
    /// IPv4 range Service cluster IPs are taken from (kube-apiserver's
    /// `--service-cluster-ip-range`; data only, never a destination). Its
    /// first address is the `kubernetes` Service's.
    #[arg(long, default_value = "10.96.0.0/12", value_parser = parse_service_cidr_v4)]
    pub service_cidr: Ipv4Net,
    /// Also take cluster IPs from this IPv6 range: with it the cluster is
    /// dual-stack (IPv4 primary), and Services may ask for both families.
    #[arg(long, value_parser = parse_service_cidr_v6)]
    pub service_cidr_v6: Option<Ipv6Net>,
    /// Delay before a pod gets its IP and Running phase.
    #[arg(long, default_value_t = 0)]
    pub kubelet_delay_ms: u64,
    /// Further delay before a running pod turns Ready.
    #[arg(long, default_value_t = 0)]
    pub ready_delay_ms: u64,
    /// Grace period, in seconds, for pod deletions that give none.
    #[arg(long, default_value_t = 0)]
    pub default_grace: u64,
    /// Seconds between BOOKMARK events on watches that allow them.
    #[arg(long, default_value_t = 10)]
    pub bookmark_interval: u64,
    /// Watch events kept for resuming; older resourceVersions get 410 Expired.
    #[arg(long, default_value_t = 100_000)]
    pub history: usize,
    /// Training jobs to create at start.
    #[arg(long, default_value_t = 0)]
    pub jobs: usize,
    /// Ranks (pods) per job created at start.
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// Spread the start-up jobs over this many namespaces.
    #[arg(long, default_value_t = 1)]
    pub namespaces: usize,
    /// A YAML or JSON list of Kubernetes objects to create at start.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Kind of the start-up jobs: indexed-job, jobset, or mixed (alternate).
    #[arg(long, default_value = "indexed-job")]
    pub job_kind: String,
    /// Lean pod bodies (~2.5 KB instead of ~7.6 KB): only metadata and the
    /// spec fields DNS reads (hostname, subdomain, ports) plus status. For
    /// runs at a scale where realistic bodies do not fit in memory (1M
    /// pods); results from such runs must say so.
    #[arg(long)]
    pub lean_pods: bool,
    /// Refuse Protobuf (answer JSON when the client also accepts it, 406
    /// when it accepts only Protobuf), as a server without it would: tests
    /// a client's fallback.
    #[arg(long)]
    pub no_protobuf: bool,
}

impl Default for SimArgs {
    /// The flag defaults, for in-process use (`podns demo`, tests).
    fn default() -> Self {
        SimArgs {
            listen: SocketAddr::from(([127, 0, 0, 1], 6443)),
            kubeconfig_out: None,
            kubelet: false,
            pod_cidr: "10.244.0.0/16".into(),
            pod_cidr_v6: None,
            node_pod_cidrs: NodePodCidrs::Pods,
            service_cidr: Ipv4Net::new(std::net::Ipv4Addr::new(10, 96, 0, 0), 12)
                .expect("a valid prefix length"),
            service_cidr_v6: None,
            kubelet_delay_ms: 0,
            ready_delay_ms: 0,
            default_grace: 0,
            bookmark_interval: 10,
            history: 100_000,
            jobs: 0,
            ranks: 8,
            namespaces: 1,
            scenario: None,
            job_kind: "indexed-job".into(),
            lean_pods: false,
            no_protobuf: false,
        }
    }
}

impl SimArgs {
    /// The service CIDRs in `--service-cluster-ip-range` order: IPv4, the
    /// primary family, then IPv6 when the cluster is dual-stack.
    pub fn service_cidrs(&self) -> Vec<IpNet> {
        let mut v = vec![IpNet::V4(self.service_cidr)];
        v.extend(self.service_cidr_v6.map(IpNet::V6));
        v
    }
}

/// What the simulated Node's `spec.podCIDRs` holds (`--node-pod-cidrs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodePodCidrs {
    /// The pod ranges, `--pod-cidr` and `--pod-cidr-v6`.
    Pods,
    /// No podCIDR at all.
    None,
    /// These ranges (at most one per family), apart from the pod ranges.
    Given(Vec<IpNet>),
}

impl std::str::FromStr for NodePodCidrs {
    type Err = String;

    /// `pods`, `none`, or one or two CIDRs separated by a comma, each a
    /// network address of its own family, as the API server validates
    /// `spec.podCIDRs`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pods" => return Ok(Self::Pods),
            "none" => return Ok(Self::None),
            _ => {}
        }
        let mut nets: Vec<IpNet> = Vec::new();
        for part in s.split(',') {
            let net: IpNet = part.trim().parse().map_err(|_| {
                format!("expected pods, none or CIDRs such as 10.250.0.0/16 (got {part:?})")
            })?;
            if net.trunc() != net {
                return Err(format!(
                    "{net} has host bits set (the network is {})",
                    net.trunc()
                ));
            }
            if nets
                .iter()
                .any(|n| n.addr().is_ipv4() == net.addr().is_ipv4())
            {
                return Err("at most one CIDR per IP family".into());
            }
            nets.push(net);
        }
        Ok(Self::Given(nets))
    }
}

/// `--service-cidr`: an IPv4 network with room for at least one Service.
fn parse_service_cidr_v4(s: &str) -> Result<Ipv4Net, String> {
    parse_service_cidr(s, "an IPv4 CIDR such as 10.96.0.0/12")
}

/// `--service-cidr-v6`: an IPv6 network with room for at least one Service.
fn parse_service_cidr_v6(s: &str) -> Result<Ipv6Net, String> {
    parse_service_cidr(s, "an IPv6 CIDR such as fd00:10:96::/112")
}

fn parse_service_cidr<N>(s: &str, want: &str) -> Result<N, String>
where
    N: std::str::FromStr + Into<IpNet> + Copy,
{
    let net: N = s.parse().map_err(|_| format!("expected {want}"))?;
    service_net::ServiceNet::new(&[net.into()]).map_err(|e| e.to_string())?;
    Ok(net)
}

/// State shared by every request.
pub struct Sim {
    pub store: Arc<store::Store>,
    pub workload: Arc<workload::Workload>,
    pub stats: Arc<stats::Stats>,
    /// The ServiceAccount tokens issued, for TokenReviews and tests.
    pub tokens: tokens::Tokens,
    pub faults: faults::Faults,
    pub shutdown: CancellationToken,
    pub addr: SocketAddr,
    pub bookmark_interval: u64,
    /// Pods, Services, Jobs and Namespaces may be answered in Protobuf.
    pub protobuf: bool,
}

/// A running simulator.
pub struct SimHandle {
    pub addr: SocketAddr,
    task: JoinHandle<anyhow::Result<()>>,
    sim: Arc<Sim>,
}

impl SimHandle {
    /// A kubeconfig whose server is this simulator.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(self.addr)
    }

    /// The base URL, `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client for this simulator.
    pub fn client(&self) -> kube::Client {
        let url = self.url().parse().expect("an http URL parses");
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        kube::Client::try_from(config).expect("a plain-http kube client builds")
    }

    /// The in-process state (store, stats), for tests.
    pub fn sim(&self) -> &Arc<Sim> {
        &self.sim
    }

    /// Waits until the server task ends (after the shutdown token fires).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("simulator task panicked")?
    }
}

/// A kubeconfig for `http://addr` with no credentials.
pub fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: podns-sim
  cluster:
    server: http://{addr}
contexts:
- name: podns-sim
  context:
    cluster: podns-sim
    user: podns-sim
    namespace: default
current-context: podns-sim
preferences: {{}}
users:
- name: podns-sim
  user: {{}}
"
    )
}

/// The objects that say where the cluster's addresses come from: the
/// default ServiceCIDR `kubernetes` (kube-apiserver makes it from
/// `--service-cluster-ip-range`) and one Node whose `spec.podCIDRs` is, by
/// default, the pod range (the simulated kubelets take every pod IP from
/// that one pool, whichever node a pod is placed on), else what
/// `--node-pod-cidrs` says. Tests add and delete more.
fn populate_ranges(sim: &Sim, args: &SimArgs) -> anyhow::Result<()> {
    use serde_json::json;
    let service: Vec<String> = args.service_cidrs().iter().map(|n| n.to_string()).collect();
    sim.store.create(
        store::Kind::ServiceCidr,
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
    sim.store.create(
        store::Kind::Node,
        "",
        json!({"metadata": {"name": "sim-node-0", "labels": {"kubernetes.io/hostname": "sim-node-0"}},
               "spec": spec,
               "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                          "addresses": [{"type": "InternalIP", "address": "172.16.0.2"}]}}),
    )?;
    Ok(())
}

/// Creates the cluster's fixed objects and the start-up workload.
fn populate(sim: &Sim, args: &SimArgs) -> anyhow::Result<()> {
    use serde_json::json;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        workload::ensure_namespace(&sim.store, ns)?;
    }
    // Every cluster has it, single-stack on the first address of the
    // primary range; DNS serves it like any ClusterIP Service.
    let ip = sim.store.first_service_ip().to_string();
    sim.store.create(
        store::Kind::Service,
        "default",
        json!({"metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
               "spec": {"clusterIP": ip, "ports": [{"name": "https", "port": 443, "targetPort": 6443, "protocol": "TCP"}]}}),
    )?;
    populate_ranges(sim, args)?;
    if let Some(path) = &args.scenario {
        let text = std::fs::read_to_string(path).map_err(|source| {
            workload::WorkloadError::ReadScenario {
                path: path.display().to_string(),
                source,
            }
        })?;
        let n = sim.workload.load_scenario(&text)?;
        tracing::info!(objects = n, path = %path.display(), "scenario loaded");
    }
    let prerun = args.kubelet && args.kubelet_delay_ms == 0 && args.ready_delay_ms == 0;
    sim.workload
        .prerun
        .store(prerun, std::sync::atomic::Ordering::Relaxed);
    let nss = args.namespaces.max(1);
    for j in 0..args.jobs {
        let namespace = if nss == 1 {
            "default".to_string()
        } else {
            format!("team-{}", j % nss)
        };
        let kind = match args.job_kind.as_str() {
            "mixed" => {
                if j % 2 == 0 {
                    "indexed-job"
                } else {
                    "jobset"
                }
            }
            k => k,
        };
        let req = workload::JobRequest {
            namespace,
            name: format!("train-{j}"),
            ranks: args.ranks,
            kind: kind.to_string(),
        };
        sim.workload
            .create_job(&req)
            .map_err(|e| anyhow::anyhow!("failed to create job {}: {e}", req.name))?;
    }
    sim.workload
        .prerun
        .store(false, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// Starts the simulator on an already-bound listener. The start-up
/// workload exists when this returns (with `--kubelet`, pods may still be
/// turning Running).
pub async fn spawn(
    args: SimArgs,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<SimHandle> {
    let addr = listener
        .local_addr()
        .context("failed to read the listener address")?;
    let services = service_net::ServiceNet::new(&args.service_cidrs())
        .context("failed to set up the service CIDRs")?;
    let store = store::Store::with_services(args.history, services);
    let workload = workload::Workload::new(store.clone(), &args, shutdown.clone())?;
    let sim = Arc::new(Sim {
        tokens: tokens::Tokens::new(store.clone()),
        store,
        workload,
        stats: Arc::new(stats::Stats::default()),
        faults: faults::Faults::default(),
        shutdown: shutdown.clone(),
        addr,
        bookmark_interval: args.bookmark_interval,
        protobuf: !args.no_protobuf,
    });
    {
        let (sim, args) = (sim.clone(), args.clone());
        tokio::task::spawn_blocking(move || populate(&sim, &args))
            .await
            .context("start-up workload panicked")??;
    }
    let router = axum::Router::new()
        .fallback(http::handle)
        .with_state(sim.clone());
    let listener = listener.tap_io(|tcp| {
        // Watch events are small writes that must leave at once.
        let _ = tcp.set_nodelay(true);
    });
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await
            .context("simulator server failed")
    });
    Ok(SimHandle { addr, task, sim })
}

/// `podns sim`: bind, announce, serve until SIGINT/SIGTERM.
pub async fn run(args: SimArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("failed to bind {}", args.listen))?;
    let addr = listener.local_addr()?;
    // Connections queue in the backlog until the workload exists, so a
    // harness may connect as soon as it reads this line.
    tracing::info!("listening api http {addr}");
    if let Some(path) = &args.kubeconfig_out {
        std::fs::write(path, kubeconfig_yaml(addr))
            .with_context(|| format!("failed to write kubeconfig {}", path.display()))?;
    }
    let shutdown = CancellationToken::new();
    let started = std::time::Instant::now();
    let handle = spawn(args, listener, shutdown.clone()).await?;
    let counts = handle.sim.store.counts();
    tracing::info!(
        pods = counts[0],
        services = counts[1],
        namespaces = counts[2],
        jobs = counts[3],
        elapsed_ms = started.elapsed().as_millis() as u64,
        "simulator ready"
    );
    let signal = {
        let token = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            token.cancel();
        })
    };
    let r = handle.wait().await;
    signal.abort();
    r
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
