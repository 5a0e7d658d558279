//! Command line: one binary, a subcommand per job. Value types parse with
//! `FromStr` so a bad flag is reported by clap in one line.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand, ValueEnum};
use ipnet::IpNet;
use podns_server::dns::Zone;
use podns_server::dns::buffers::UdpBuffers;
use podns_server::dns::server::TcpLimits;
use podns_server::index::{Duplicates, Hostnames, Policy, Publish};
use podns_server::k8s::watch::StreamingList;
use podns_server::k8s::wire::Wire;
use podns_server::node::NodeConfig;
use podns_server::relay::RelayConfig;
use podns_server::serve::ServeConfig;
use podns_server::zonefile::ZonefileConfig;

use crate::explain::{ExplainConfig, Output, parse_admin};
use crate::wait::{Timeout, WaitConfig, parse_server, resolv_conf_servers};

#[derive(Parser, Debug)]
#[command(
    name = "podns",
    version = env!("PODNS_VERSION"),
    about = "Authoritative DNS for Kubernetes training jobs, answered from a direct pod watch",
    after_long_help = EXIT_CODES
)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "PODNS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// What `podns --help` says of exit codes, the same in every command.
const EXIT_CODES: &str = "\
Exit codes, the same in every command:
  0   success (serve, sim, demo: stopped by SIGTERM or SIGINT after draining)
  1   a failure at run time: `wait` timed out or no DNS server answered, `explain` could not
      reach podns's admin API, the API server failed a `zonefile` list
  64  usage or configuration: a bad flag (one line saying what is wrong), no kubeconfig, an
      address that cannot be bound, a `wait` server that does not serve --zone";

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve DNS for a cluster (kubeconfig or in-cluster config).
    Serve(Box<ServeArgs>),
    /// Run the Kubernetes API simulator on loopback (plain HTTP).
    #[cfg(feature = "sim")]
    Sim(podns_sim::SimArgs),
    /// Simulator and server together on loopback, with a sample training workload.
    #[cfg(feature = "sim")]
    Demo(DemoArgs),
    /// List Pods and Services once and print what podns would answer as RFC 1035 zone text.
    Zonefile(ZonefileArgs),
    /// Wait until every rank of a Job or JobSet is published (or Ready), asking DNS only.
    Wait(WaitArgs),
    /// Ask a running podns (started with --admin-debug) why a name answers what it does.
    Explain(ExplainArgs),
    /// Print a shell completion script.
    ///
    /// bash: `podns completion bash > /etc/bash_completion.d/podns` (or
    /// `source <(podns completion bash)`); zsh: save it as `_podns` in a
    /// directory of $fpath; fish: `podns completion fish >
    /// ~/.config/fish/completions/podns.fish`.
    Completion(CompletionArgs),
    /// Print a man page, or write them all to a directory.
    ///
    /// `podns man serve | man -l -` reads one; `podns man --out-dir
    /// /usr/local/share/man/man1` installs podns.1 and a page per command.
    Man(ManArgs),
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A duration in seconds (`5`, `5s`) or milliseconds (`500ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Secs(pub Duration);

impl FromStr for Secs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("invalid duration {s:?} (examples: 5, 5s, 500ms, 15m, 1h)");
        if let Some(ms) = s.strip_suffix("ms") {
            return ms
                .parse::<u64>()
                .map(|v| Secs(Duration::from_millis(v)))
                .map_err(|_| bad());
        }
        let (n, unit) = match s.as_bytes().last() {
            Some(b'm') => (&s[..s.len() - 1], 60),
            Some(b'h') => (&s[..s.len() - 1], 3600),
            Some(b's') => (&s[..s.len() - 1], 1),
            _ => (s, 1),
        };
        n.parse::<u64>()
            .ok()
            .and_then(|v| v.checked_mul(unit))
            .map(|v| Secs(Duration::from_secs(v)))
            .ok_or_else(bad)
    }
}

/// A size in bytes: `4194304`, `512KiB`, `4MiB`, `1GiB` (K, M, G mean the
/// same powers of 1024).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub usize);

impl FromStr for Bytes {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("invalid size {s:?} (examples: 4MiB, 512KiB, 4194304, 0)");
        let t = s.trim();
        let t = t
            .strip_suffix("iB")
            .or_else(|| t.strip_suffix('B'))
            .unwrap_or(t);
        let (n, shift) = match t.char_indices().last() {
            Some((i, 'K' | 'k')) => (&t[..i], 10),
            Some((i, 'M' | 'm')) => (&t[..i], 20),
            Some((i, 'G' | 'g')) => (&t[..i], 30),
            _ => (t, 0),
        };
        let n: usize = n.parse().map_err(|_| bad())?;
        n.checked_mul(1 << shift).map(Bytes).ok_or_else(bad)
    }
}

/// An IP network such as `10.244.0.0/16` or `fd00::/108`.
fn cidr(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .map_err(|_| format!("invalid CIDR {s:?} (example: 10.244.0.0/16)"))
}

/// A clap parser for one of the library's keyword enums (`Publish`, …):
/// `--help` lists the words, a wrong one is named in one line.
fn keyword<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: FromStr<Err = String> + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names).try_map(|s| s.parse::<T>())
}

/// The groups of `podns serve --help`, by role: what is answered, how
/// the API server is watched (forward targets and relays), the DNS
/// listeners, the admin port, then the flags of each DaemonSet-mode role.
mod heading {
    pub const RECORDS: &str = "Records (every role)";
    pub const API_SERVER: &str = "API server (forward target and relay)";
    pub const DNS: &str = "DNS tuning";
    pub const ADMIN: &str = "Admin";
    pub const RELAY: &str = "Relay (--relay-listen)";
    pub const NODE_INSTANCE: &str = "Node instance (--node)";
}

/// Flags `podns serve` and `podns zonefile` share: what is answered (or
/// exported) and where the cluster is.
#[derive(clap::Args, Clone, Debug)]
pub struct SharedArgs {
    /// Zone to serve (or export) authoritatively (repeatable).
    #[arg(
        long = "zone",
        env = "PODNS_ZONE",
        value_delimiter = ',',
        default_value = "cluster.local",
        help_heading = heading::RECORDS
    )]
    pub zones: Vec<Zone>,
    /// TTL of positive answers, in seconds.
    #[arg(long, env = "PODNS_TTL", default_value_t = podns_server::dns::DEFAULT_TTL, help_heading = heading::RECORDS)]
    pub ttl: u32,
    /// TTL of negative answers (the SOA MINIMUM), in seconds.
    #[arg(long, env = "PODNS_NEGATIVE_TTL", default_value_t = podns_server::dns::DEFAULT_NEGATIVE_TTL, help_heading = heading::RECORDS)]
    pub negative_ttl: u32,
    /// Which pods are published.
    #[arg(long, env = "PODNS_PUBLISH", default_value = "ip", value_parser = keyword::<Publish>(Publish::NAMES), help_heading = heading::RECORDS)]
    pub publish: Publish,
    /// Where hostname names come from.
    #[arg(long, env = "PODNS_HOSTNAMES", default_value = "pod", value_parser = keyword::<Hostnames>(Hostnames::NAMES), help_heading = heading::RECORDS)]
    pub hostnames: Hostnames,
    /// What to answer when several published pods share one hostname.
    #[arg(long, env = "PODNS_DUPLICATE_HOSTNAMES", default_value = "one", value_parser = keyword::<Duplicates>(Duplicates::NAMES), help_heading = heading::RECORDS)]
    pub duplicate_hostnames: Duplicates,
    /// The server's own address for `ns.dns.<zone>` (default: $POD_IP).
    #[arg(long, env = "PODNS_NS_ADDRESS", help_heading = heading::RECORDS)]
    pub ns_address: Vec<IpAddr>,
    /// Serve the rank view (`<i>.<job>.<ns>.rank.<zone>`, leader, TXT summary) and watch Jobs for it (the default).
    #[arg(long = "rank-view", overrides_with = "no_rank_view", help_heading = heading::RECORDS)]
    pub rank_view: bool,
    /// Turn the rank view and its Job watch off (no RBAC on jobs needed).
    #[arg(
        long = "no-rank-view",
        env = "PODNS_NO_RANK_VIEW",
        overrides_with = "rank_view",
        help_heading = heading::RECORDS
    )]
    pub no_rank_view: bool,
    /// Encoding asked of the API server: auto (Protobuf, else JSON, as
    /// client-go does for built-in types), protobuf, or json.
    #[arg(long, env = "PODNS_WIRE", default_value = "auto", value_parser = keyword::<Wire>(Wire::NAMES), help_heading = heading::API_SERVER)]
    pub wire: Wire,
    /// Path to a kubeconfig. Unset: the files $KUBECONFIG lists (merged as kubectl merges them; empty means unset), else ~/.kube/config, else in-cluster. A node instance never reads $KUBECONFIG.
    #[arg(long, help_heading = heading::API_SERVER)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, env = "PODNS_CONTEXT", help_heading = heading::API_SERVER)]
    pub context: Option<String>,
}

impl SharedArgs {
    /// Is the rank view on? (`--rank-view` is the default; `--no-rank-view` wins when last.)
    pub fn rank_view_enabled(&self) -> bool {
        !self.no_rank_view
    }

    /// The index policy from the flags.
    pub fn policy(&self) -> Policy {
        Policy {
            publish: self.publish,
            hostnames: self.hostnames,
            duplicates: self.duplicate_hostnames,
            rank_view: self.rank_view_enabled(),
        }
    }
}

/// Flags of `podns serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub shared: SharedArgs,
    /// DNS address, UDP and TCP.
    #[arg(long, env = "PODNS_DNS_LISTEN", default_value = "0.0.0.0:53", help_heading = heading::DNS)]
    pub dns_listen: SocketAddr,
    /// UDP sockets bound with SO_REUSEPORT, each with its own receive loop (0: one per core).
    #[arg(long, env = "PODNS_UDP_SOCKETS", default_value_t = 0, help_heading = heading::DNS)]
    pub udp_sockets: usize,
    /// Receive buffer asked for each UDP socket (0: the system default): queries wait there while a loop is busy, and are dropped when it is full. Past net.core.rmem_max only with CAP_NET_ADMIN; what the kernel granted is logged.
    #[arg(long, env = "PODNS_UDP_RECV_BUFFER", default_value = "4MiB", help_heading = heading::DNS)]
    pub udp_recv_buffer: Bytes,
    /// Send buffer asked for each UDP socket (0: the system default; net.core.wmem_max caps it without CAP_NET_ADMIN).
    #[arg(long, env = "PODNS_UDP_SEND_BUFFER", default_value = "1MiB", help_heading = heading::DNS)]
    pub udp_send_buffer: Bytes,
    /// Admin address: /metrics, /healthz, /readyz.
    #[arg(long, env = "PODNS_ADMIN_LISTEN", default_value = "0.0.0.0:9153", help_heading = heading::ADMIN)]
    pub admin_listen: SocketAddr,
    /// The reverse zones podns owns, exactly (repeatable). Unset: learned from Nodes' spec.podCIDRs and ServiceCIDRs (needs list/watch on both). Other reverse names get REFUSED either way, so resolvers ask their next server.
    #[arg(long, env = "PODNS_REVERSE_CIDR", value_delimiter = ',', value_parser = cidr, help_heading = heading::RECORDS)]
    pub reverse_cidr: Vec<IpNet>,
    /// Watch pods only in these namespaces (repeatable; default all).
    #[arg(long = "namespace", env = "PODNS_NAMESPACE", value_delimiter = ',', help_heading = heading::API_SERVER)]
    pub namespaces: Vec<String>,
    /// Watch only pods matching this label selector.
    #[arg(long, env = "PODNS_LABEL_SELECTOR", help_heading = heading::API_SERVER)]
    pub label_selector: Option<String>,
    /// Watch the EndpointSlices the EndpointSlice controller does not manage, so headless Services without a selector answer from them (the default).
    #[arg(long = "endpoint-slices", overrides_with = "no_endpoint_slices", help_heading = heading::API_SERVER)]
    pub endpoint_slices: bool,
    /// Turn the EndpointSlice watch off (no RBAC on endpointslices needed; Services without a selector then answer no addresses).
    #[arg(
        long = "no-endpoint-slices",
        env = "PODNS_NO_ENDPOINT_SLICES",
        overrides_with = "endpoint_slices",
        help_heading = heading::API_SERVER
    )]
    pub no_endpoint_slices: bool,
    /// Ask for quorum reads instead of lists from the API server's watch cache.
    #[arg(long, env = "PODNS_CONSISTENT_LIST", help_heading = heading::API_SERVER)]
    pub consistent_list: bool,
    /// No multiplexed watch: a relay does not serve it (as one from before it: 404), a node instance opens each watch as its own request. For tests and benchmarks.
    #[arg(long, env = "PODNS_NO_WATCH_MUX", hide = true, help_heading = heading::API_SERVER)]
    pub no_watch_mux: bool,
    /// Initial list by watch stream (sendInitialEvents).
    #[arg(long, env = "PODNS_STREAMING_LIST", default_value = "auto", value_parser = keyword::<StreamingList>(StreamingList::NAMES), help_heading = heading::API_SERVER)]
    pub streaming_list: StreamingList,
    /// Reopen, from its resourceVersion, a watch that had been moving (an event or a bookmark after its list) and then had neither for this long: it may be stuck. A watch whose kind has not changed since it began is left alone: the API server sends it no bookmark until its kind moves (0: never).
    #[arg(long, env = "PODNS_WATCH_PROGRESS_TIMEOUT", default_value = "90s", help_heading = heading::API_SERVER)]
    pub watch_progress_timeout: Secs,
    /// Probe a watch that delivered nothing (no event, no bookmark) for this long: a short watch from its resourceVersion asks the API server for any change it missed; one it still misses a second later is reopened from its resourceVersion. Bounds the silence of any watch, a fresh one too. A node instance never probes: its relay bookmarks every watch (0: never).
    #[arg(long, env = "PODNS_WATCH_PROBE_INTERVAL", default_value = "10s", help_heading = heading::API_SERVER)]
    pub watch_probe_interval: Secs,
    /// How long to keep answering after SIGTERM while /readyz reports 503.
    #[arg(long, env = "PODNS_SHUTDOWN_GRACE", default_value = "5s", help_heading = heading::ADMIN)]
    pub shutdown_grace: Secs,
    /// TCP connections served at once; more are accepted and closed at once.
    #[arg(long, env = "PODNS_TCP_MAX_CONNECTIONS", default_value_t = 1024, help_heading = heading::DNS)]
    pub tcp_max_connections: usize,
    /// Time a TCP connection gets to send its next whole query before it is closed.
    #[arg(long, env = "PODNS_TCP_IDLE_TIMEOUT", default_value = "10s", help_heading = heading::DNS)]
    pub tcp_idle_timeout: Secs,
    /// Queries answered on one TCP connection before it is closed.
    #[arg(long, env = "PODNS_TCP_MAX_QUERIES", default_value_t = 1000, help_heading = heading::DNS)]
    pub tcp_max_queries: usize,
    /// Response rate limiting: at most this many UDP responses a second per client /24 (IPv4) or /56 (IPv6); over it, half slip as TC=1, half are dropped (default: off).
    #[arg(long, env = "PODNS_RRL", help_heading = heading::DNS)]
    pub rrl: Option<u32>,
    /// Serve /debug/explain (`podns explain`) on the admin address. It shows pods that DNS does not publish: keep the admin port private.
    #[arg(long, env = "PODNS_ADMIN_DEBUG", help_heading = heading::ADMIN)]
    pub admin_debug: bool,
    /// Also serve a read-only Kubernetes API of slim Pods, Services, Jobs and EndpointSlices here (the relay node instances watch instead of the API server). Clients need a ServiceAccount token for --relay-audience (TokenReview) whose user may `get` `relays` in API group `dns.podns.io` (SubjectAccessReview); a token bound to a pod reads only that pod's node's scope. Served over TLS (--relay-tls-cert, or self-signed).
    #[arg(long, env = "PODNS_RELAY_LISTEN", help_heading = heading::RELAY)]
    pub relay_listen: Option<SocketAddr>,
    /// How long the relay keeps changes: a client that reconnects within it resumes without a relist; past it, 410.
    #[arg(
        long,
        env = "PODNS_RELAY_HISTORY",
        default_value = "15m",
        requires = "relay_listen",
        help_heading = heading::RELAY
    )]
    pub relay_history: Secs,
    /// Connections the relay serves at once (a watch holds one); more are accepted and closed at once.
    #[arg(
        long,
        env = "PODNS_RELAY_MAX_CONNECTIONS",
        default_value_t = 32_768,
        value_parser = clap::value_parser!(u32).range(1..),
        requires = "relay_listen",
        help_heading = heading::RELAY
    )]
    pub relay_max_connections: u32,
    /// The audience node instances' tokens must be issued for (their projected token volume's `audience`); a token for any other audience, such as the API server's own, is refused.
    #[arg(
        long,
        env = "PODNS_RELAY_AUDIENCE",
        default_value = podns_server::relay::http::auth::AUDIENCE,
        requires = "relay_listen",
        help_heading = heading::RELAY
    )]
    pub relay_audience: String,
    /// Write a kubeconfig for the relay here, with a token for --relay-kubeconfig-account and --relay-audience (TokenRequest), for node instances on this machine.
    #[arg(long, env = "PODNS_RELAY_KUBECONFIG_OUT", requires = "relay_listen", help_heading = heading::RELAY)]
    pub relay_kubeconfig_out: Option<std::path::PathBuf>,
    /// The relay's TLS certificate (PEM; with --relay-tls-key). Unset: a self-signed one, made at start.
    #[arg(long, env = "PODNS_RELAY_TLS_CERT", requires = "relay_tls_key", help_heading = heading::RELAY)]
    pub relay_tls_cert: Option<std::path::PathBuf>,
    /// The relay's TLS private key (PEM).
    #[arg(long, env = "PODNS_RELAY_TLS_KEY", requires = "relay_tls_cert", help_heading = heading::RELAY)]
    pub relay_tls_key: Option<std::path::PathBuf>,
    /// The CA that --relay-kubeconfig-out tells clients to trust (default: the certificate itself).
    #[arg(long, env = "PODNS_RELAY_TLS_CA", help_heading = heading::RELAY)]
    pub relay_tls_ca: Option<std::path::PathBuf>,
    /// Be a node instance: watch the relay this kubeconfig names (its CA, a ServiceAccount token), never the API server, holding only the namespaces of this node's pods; other names are forwarded to the relays' DNS.
    #[arg(
        long = "node-relay-kubeconfig",
        alias = "relay-kubeconfig",
        env = "PODNS_NODE_RELAY_KUBECONFIG",
        requires = "node",
        conflicts_with_all = ["relay_listen", "kubeconfig"],
        help_heading = heading::NODE_INSTANCE
    )]
    pub relay_kubeconfig: Option<std::path::PathBuf>,
    /// This node's name (a node instance; the DaemonSet passes spec.nodeName).
    #[arg(long, env = "PODNS_NODE", requires = "relay_kubeconfig", help_heading = heading::NODE_INSTANCE)]
    pub node: Option<String>,
    /// The relays' DNS addresses (repeatable; default: the address the relay kubeconfig names, which --relay-kubeconfig-out writes, else its server host, port 53).
    #[arg(
        long = "node-relay-dns",
        alias = "relay-dns",
        env = "PODNS_NODE_RELAY_DNS",
        value_delimiter = ',',
        requires = "relay_kubeconfig",
        help_heading = heading::NODE_INSTANCE
    )]
    pub relay_dns: Vec<SocketAddr>,
    /// How long a namespace stays in a node instance's scope after its last pod left the node (a gang restart recreates its pods); on a relay, how long a node instance may still read it (keep it at least the node instances').
    #[arg(long, env = "PODNS_SCOPE_LINGER", default_value = "5m", help_heading = heading::NODE_INSTANCE)]
    pub scope_linger: Secs,
    /// A node instance's saved scope: the directory (a hostPath) where it keeps what it holds and where each watch would resume, so a restart serves at once and resumes from the relays' history instead of relisting; a state that is corrupt, of another relay, CA, node or format, or older than 15 minutes is dropped with one line and the scope listed.
    #[arg(
        long = "node-state-dir",
        alias = "state-dir",
        env = "PODNS_NODE_STATE_DIR",
        requires = "node",
        help_heading = heading::NODE_INSTANCE
    )]
    pub state_dir: Option<std::path::PathBuf>,
    /// The ServiceAccount (NAMESPACE/NAME) whose token --relay-kubeconfig-out writes.
    #[arg(long, env = "PODNS_RELAY_KUBECONFIG_ACCOUNT", default_value = "default/podns-node", value_parser = account, help_heading = heading::RELAY)]
    pub relay_kubeconfig_account: (String, String),
}

/// `NAMESPACE/NAME`.
fn account(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("{s:?} is not NAMESPACE/NAME")),
    }
}

impl ServeArgs {
    /// The server's configuration from the flags.
    pub fn config(&self) -> ServeConfig {
        let shared = &self.shared;
        ServeConfig {
            zones: shared.zones.clone(),
            dns_listen: self.dns_listen,
            udp_sockets: self.udp_sockets,
            udp_buffers: UdpBuffers {
                recv: self.udp_recv_buffer.0,
                send: self.udp_send_buffer.0,
            },
            admin_listen: self.admin_listen,
            ttl: shared.ttl,
            negative_ttl: shared.negative_ttl,
            policy: shared.policy(),
            ns_addrs: shared.ns_address.clone(),
            reverse_cidrs: self.reverse_cidr.clone(),
            namespaces: self.namespaces.clone(),
            label_selector: self.label_selector.clone(),
            endpoint_slices: !self.no_endpoint_slices,
            consistent_list: self.consistent_list,
            streaming_list: self.streaming_list,
            watch_progress: Some(self.watch_progress_timeout.0).filter(|d| !d.is_zero()),
            watch_probe: Some(self.watch_probe_interval.0).filter(|d| !d.is_zero()),
            wire: shared.wire,
            kubeconfig: self
                .relay_kubeconfig
                .clone()
                .or_else(|| shared.kubeconfig.clone()),
            context: shared.context.clone(),
            shutdown_grace: self.shutdown_grace.0,
            tcp: TcpLimits {
                max_connections: self.tcp_max_connections,
                idle_timeout: self.tcp_idle_timeout.0,
                max_queries: self.tcp_max_queries,
            },
            rrl: self.rrl,
            admin_debug: self.admin_debug,
            node: self.node.clone().map(|node| NodeConfig {
                node,
                relay_dns: self.relay_dns.clone(),
                linger: self.scope_linger.0,
                relay_url: String::new(),
                relay_ca: String::new(),
                state_dir: self.state_dir.clone(),
                mux: !self.no_watch_mux,
            }),
            relay: self.relay_listen.map(|listen| RelayConfig {
                history: self.relay_history.0,
                max_connections: self.relay_max_connections as usize,
                kubeconfig_out: self.relay_kubeconfig_out.clone(),
                kubeconfig_account: self.relay_kubeconfig_account.clone(),
                tls_cert: self.relay_tls_cert.clone(),
                tls_key: self.relay_tls_key.clone(),
                tls_ca: self.relay_tls_ca.clone(),
                audience: self.relay_audience.clone(),
                scope_linger: self.scope_linger.0,
                mux: !self.no_watch_mux,
                ..RelayConfig::new(listen)
            }),
        }
    }
}

impl ZonefileArgs {
    /// The export's configuration from the flags.
    pub fn config(&self) -> ZonefileConfig {
        let shared = &self.shared;
        ZonefileConfig {
            zones: shared.zones.clone(),
            reverse: self.reverse,
            reverse_only: self.reverse_only,
            out_dir: self.out_dir.clone(),
            serial: self.serial,
            ttl: shared.ttl,
            negative_ttl: shared.negative_ttl,
            ns_addrs: shared.ns_address.clone(),
            policy: shared.policy(),
            kubeconfig: shared.kubeconfig.clone(),
            context: shared.context.clone(),
            wire: shared.wire,
        }
    }
}

/// Parse `podns serve` flags (`argv[0]` is skipped) into the server's
/// configuration, exactly as the binary does: for tests and manifests.
pub fn parse_serve<I, T>(argv: I) -> Result<ServeConfig, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        args: ServeArgs,
    }
    Flags::try_parse_from(argv).map(|f| f.args.config())
}

/// Flags of `podns demo`.
#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// DNS address (UDP and TCP).
    #[arg(long, default_value = "127.0.0.1:1053")]
    pub dns_listen: SocketAddr,
    /// Admin address.
    #[arg(long, default_value = "127.0.0.1:9153")]
    pub admin_listen: SocketAddr,
    /// Simulated API server address.
    #[arg(long, default_value = "127.0.0.1:6443")]
    pub api_listen: SocketAddr,
    /// Write a kubeconfig for the simulated cluster here (for kubectl).
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Exit once the dig commands have been printed (for scripts and tests).
    #[arg(long)]
    pub exit_when_ready: bool,
}

/// Flags of `podns zonefile`.
#[derive(clap::Args, Clone, Debug)]
pub struct ZonefileArgs {
    #[command(flatten)]
    pub shared: SharedArgs,
    /// Also export `in-addr.arpa.` and `ip6.arpa.` with PTR records, each as its own zone.
    #[arg(long)]
    pub reverse: bool,
    /// Export only the reverse zones (needs --reverse).
    #[arg(long)]
    pub reverse_only: bool,
    /// Write one file per zone (`DIR/cluster.local.zone`) instead of stdout.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// SOA serial (default: a hash of the records, stable for unchanged data).
    #[arg(long)]
    pub serial: Option<u32>,
}

/// Flags of `podns wait`.
#[derive(clap::Args, Clone, Debug)]
pub struct WaitArgs {
    /// Job or JobSet name (the `<job>` of `<job>.<ns>.rank.<zone>`).
    pub job: String,
    /// Namespace of the Job or JobSet.
    #[arg(long, short = 'n', env = "PODNS_WAIT_NAMESPACE")]
    pub namespace: String,
    /// Wait until every rank is Ready, not only published.
    #[arg(long)]
    pub ready: bool,
    /// Give up after this long and exit 1 (examples: 90s, 5m, 1h).
    #[arg(long, env = "PODNS_WAIT_TIMEOUT", default_value = "10m")]
    pub timeout: Timeout,
    /// Nameserver to ask, `IP[:PORT]` (repeatable; default: the nameservers of /etc/resolv.conf).
    #[arg(long, env = "PODNS_WAIT_SERVER", value_delimiter = ',', value_parser = parse_server)]
    pub server: Vec<SocketAddr>,
    /// Cluster zone.
    #[arg(long, env = "PODNS_ZONE", default_value = "cluster.local")]
    pub zone: Zone,
    /// Time one query may take (UDP, then TCP if truncated).
    #[arg(long, env = "PODNS_WAIT_QUERY_TIMEOUT", default_value = "2s")]
    pub query_timeout: Timeout,
}

impl WaitArgs {
    /// The waiter's configuration; nameservers come from `resolv_conf`
    /// (the text of /etc/resolv.conf) when `--server` is not given.
    pub fn config(&self, resolv_conf: impl FnOnce() -> String) -> WaitConfig {
        let servers = if self.server.is_empty() {
            resolv_conf_servers(&resolv_conf())
        } else {
            self.server.clone()
        };
        WaitConfig {
            job: self.job.clone(),
            namespace: self.namespace.clone(),
            ready: self.ready,
            timeout: self.timeout.0,
            servers,
            zone: self.zone.0.clone(),
            query_timeout: self.query_timeout.0,
        }
    }
}

/// Flags of `podns explain`.
#[derive(clap::Args, Clone, Debug)]
pub struct ExplainArgs {
    /// The name to explain (`web-0.web.ml.svc.cluster.local`, a reverse name, ...).
    pub name: String,
    /// Record type.
    #[arg(default_value = "A", value_parser = record_type)]
    pub qtype: String,
    /// The admin address of a podns serve started with --admin-debug (e.g. through kubectl port-forward).
    #[arg(long, env = "PODNS_EXPLAIN_ADMIN", default_value = "http://127.0.0.1:9153", value_parser = parse_admin)]
    pub admin: String,
    /// Text for a person, or JSON with stable reason codes.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// Flags of `podns completion`.
#[derive(clap::Args, Clone, Debug)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Flags of `podns man`.
#[derive(clap::Args, Clone, Debug)]
pub struct ManArgs {
    /// The command whose page to print (default: the page of podns itself); or a directory (a path with a `/`, or one that exists) to write every page to, as --out-dir.
    #[arg(value_name = "COMMAND|DIR", conflicts_with = "out_dir")]
    pub command: Option<String>,
    /// Write every page (podns.1, podns-serve.1, ...) to this directory instead.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

impl ManArgs {
    /// The directory `podns man DIR` names: a command's name is a page;
    /// a path (with a `/`, or a directory that exists) is where every
    /// page goes, as `--out-dir` (how clap_mangen's and cargo's own man
    /// commands take it). Anything else is a command that does not exist.
    pub fn dir(&self) -> Option<&std::path::Path> {
        let arg = self.command.as_deref()?;
        let known = <Cli as clap::CommandFactory>::command()
            .find_subcommand(arg)
            .is_some();
        let path = std::path::Path::new(arg);
        (!known && (arg.contains(std::path::MAIN_SEPARATOR) || arg.contains('/') || path.is_dir()))
            .then_some(path)
    }
}

/// A record type by name (`A`, `aaaa`, `SRV`) or number, upper-cased.
fn record_type(s: &str) -> Result<String, String> {
    podns_server::admin::explain::parse_type(s)
        .map(|t| t.to_string())
        .map_err(|e| e.to_string())
}

impl ExplainArgs {
    pub fn config(&self) -> ExplainConfig {
        ExplainConfig {
            name: self.name.clone(),
            qtype: self.qtype.clone(),
            admin: self.admin.clone(),
            output: self.output,
        }
    }
}

/// A clap error in one line that keeps what helps: the missing argument's
/// name, the possible values, clap's "a similar … exists" tip. clap spreads
/// these over several lines and then a usage block; the usage and the
/// `--help` hint are left out (`podns <command> --help` says more).
pub fn error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut line = String::new();
    for part in text.lines().map(str::trim) {
        if part.starts_with("Usage:") || part.starts_with("For more information") {
            break;
        }
        if part.is_empty() {
            continue;
        }
        let sep = if line.is_empty() {
            ""
        } else if part.starts_with("tip:") {
            "; "
        } else if line.ends_with(':') || part.starts_with('[') {
            " "
        } else {
            ", "
        };
        line.push_str(sep);
        line.push_str(part);
    }
    if line.is_empty() {
        "error: invalid arguments".into()
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(argv: &[&str]) -> String {
        error_line(&Cli::try_parse_from(argv).unwrap_err())
    }

    #[test]
    fn error_lines_keep_what_helps() {
        assert_eq!(
            line(&[
                "podns",
                "wait",
                "llama-pretrain",
                "--server",
                "127.0.0.1:1053"
            ]),
            "error: the following required arguments were not provided: --namespace <NAMESPACE>"
        );
        let publish = line(&["podns", "serve", "--publish", "readyy"]);
        assert!(
            publish.starts_with(
                "error: invalid value 'readyy' for '--publish <PUBLISH>' [possible values: "
            ) && publish.ends_with("]; tip: a similar value exists: 'ready'"),
            "{publish}"
        );
        assert_eq!(
            line(&["podns", "serve", "--dns-listn", "x"]),
            "error: unexpected argument '--dns-listn' found; tip: a similar argument exists: '--dns-listen'"
        );
        assert_eq!(
            line(&["podns", "serv"]),
            "error: unrecognized subcommand 'serv'; tip: a similar subcommand exists: 'serve'"
        );
    }

    /// The node instance's flags by their role's name, and the old
    /// spellings as hidden aliases (one release).
    #[test]
    fn node_instance_flags_say_their_role_and_keep_the_old_spellings() {
        let new = parse_serve([
            "serve",
            "--node=n1",
            "--node-relay-kubeconfig=/k",
            "--node-relay-dns=127.0.0.1:53",
            "--node-state-dir=/s",
        ])
        .unwrap();
        let old = parse_serve([
            "serve",
            "--node=n1",
            "--relay-kubeconfig=/k",
            "--relay-dns=127.0.0.1:53",
            "--state-dir=/s",
        ])
        .unwrap();
        assert_eq!(format!("{new:?}"), format!("{old:?}"));
        let node = new.node.expect("a node instance");
        assert_eq!(node.state_dir.as_deref(), Some(std::path::Path::new("/s")));
        assert_eq!(new.kubeconfig.as_deref(), Some(std::path::Path::new("/k")));

        let mut cmd = <Cli as clap::CommandFactory>::command();
        let help = cmd
            .find_subcommand_mut("serve")
            .unwrap()
            .render_long_help()
            .to_string();
        for heading in [
            heading::RECORDS,
            heading::API_SERVER,
            heading::DNS,
            heading::ADMIN,
            heading::RELAY,
            heading::NODE_INSTANCE,
        ] {
            assert!(help.contains(&format!("{heading}:")), "{heading}: {help}");
        }
        assert!(help.contains("--node-relay-kubeconfig"), "{help}");
        assert!(!help.contains("--relay-kubeconfig <"), "{help}");
        assert!(!help.contains("--state-dir <"), "{help}");
        // Every flag of serve sits under a role's heading.
        let serve = cmd.find_subcommand("serve").unwrap();
        let bare: Vec<_> = serve
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_long().is_some())
            .filter(|a| a.get_help_heading().is_none())
            .filter(|a| !matches!(a.get_long(), Some("help" | "log-format")))
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(bare.is_empty(), "flags without a heading: {bare:?}");
    }
}
