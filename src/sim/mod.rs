//! `podns sim`: an in-memory Kubernetes API server on loopback.
//!
//! (Being built: see issue 2.)

use std::net::SocketAddr;
use std::path::PathBuf;

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
}

pub async fn run(_args: SimArgs) -> anyhow::Result<()> {
    anyhow::bail!("podns sim is not built yet")
}
