//! The flags of `podns sim` (`SimArgs`), with their defaults for
//! in-process use.

use std::net::SocketAddr;
use std::path::PathBuf;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::service_net;

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
    /// Copy the node's `topology.kubernetes.io/{zone,region}` labels onto
    /// the pods bound to it, as kube-apiserver's PodTopologyLabels
    /// admission does from Kubernetes 1.35 on; `false` for 1.34 and older.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub pod_topology_labels: bool,
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
            pod_topology_labels: true,
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
