//! `podns sim`: an in-memory Kubernetes API server on loopback.
//!
//! It speaks the real wire protocol for Pods, Services, Namespaces and
//! `batch/v1` Jobs (list, watch with bookmarks and streaming lists, resume
//! and 410, Status errors) so that kubectl and kube-rs work against it unchanged, and it
//! plays kubelet and job controllers to produce realistic workloads.
//!
//! - [`state`]: the shared state every handler reads ([`Sim`]); [`args`]:
//!   the flags.
//! - [`store`]: objects as JSON bytes, one global resourceVersion, history ring.
//! - [`service_net`]: Service cluster IPs and IP families, single- or
//!   dual-stack, as the apiserver's Service registry keeps them.
//! - [`field`]: field errors and the 422 `Invalid` Status built from them.
//! - [`http`]: the Kubernetes REST paths, lists and watches, on kapi's
//!   paths, discovery documents and filters; [`rest`]: the responses and
//!   bodies every handler shares.
//! - [`workload`]: kubelet timers, pod IPs, training jobs, churn, scenarios.
//! - [`tokens`]: ServiceAccount tokens (TokenRequest, TokenReview).
//! - [`rbac`]: SubjectAccessReviews, decided by the stored RBAC objects.
//! - [`control`], [`faults`], [`stats`]: the `/sim/` endpoints.
//! - [`table`], [`protobuf`]: what kubectl needs besides JSON objects
//!   (`as=Table` printing, and the protobuf bodies it sends, `create
//!   namespace` and `create service`).

pub mod args;
pub mod control;
pub mod faults;
pub mod field;
pub mod http;
pub mod protobuf;
pub mod rbac;
pub mod rest;
pub mod service_net;
pub mod state;
pub mod stats;
pub mod store;
pub mod table;
pub mod tokens;
pub mod workload;

pub use args::{NodePodCidrs, SimArgs};
pub use podns_kapi::{pbenc, selector};
pub use state::Sim;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

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
        discovery: http::discovery(addr),
        bookmark_interval: args.bookmark_interval,
        protobuf: !args.no_protobuf,
    });
    {
        let (workload, args) = (sim.workload.clone(), args.clone());
        tokio::task::spawn_blocking(move || workload.populate(&args))
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
