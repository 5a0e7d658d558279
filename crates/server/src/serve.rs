//! `podns serve`: watchers → index writer → DNS and admin servers, under
//! one cancellation token. SIGTERM turns `/readyz` to 503, answers go on for
//! `--shutdown-grace`, then everything stops (metrics last); a second signal
//! aborts at once.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::admin::{self, Health};
use crate::dns::Zone;
use crate::dns::answer::{AnswerConfig, Answerer, Forwarding};
use crate::dns::buffers::{self, Granted, UdpBuffers};
use crate::dns::rrl::Rrl;
use crate::dns::server;
use crate::dns::server::TcpLimits;
use crate::index::reverse::ReverseZones;
use crate::index::writer::explain::ExplainRequest;
use crate::index::{Arrival, Policy, SyncNeeds, Table, Writer};
use crate::k8s::updates::ToWriter;
use crate::k8s::watch::StreamingList;
use crate::k8s::watch::{self, WatchConfig};
use crate::k8s::wire::Wire;
use crate::metrics::{Metrics, ResultLabels};
use crate::node::NodeConfig;
use crate::relay::http::auth::Auth;
use crate::relay::{Relay, RelayConfig};

/// Everything `podns serve` needs; the CLI maps its flags into this.
/// `Default` is the CLI's defaults on loopback port 0 (for tests and demos).
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Served zones; the first is where PTR targets and reverse SOAs point.
    pub zones: Vec<Zone>,
    /// DNS address, UDP and TCP.
    pub dns_listen: SocketAddr,
    /// UDP sockets bound with SO_REUSEPORT, each with its own loop (0: one per core).
    pub udp_sockets: usize,
    /// Receive and send buffer sizes asked for each UDP socket.
    pub udp_buffers: UdpBuffers,
    /// Admin address: /metrics, /healthz, /readyz.
    pub admin_listen: SocketAddr,
    /// TTL of positive answers, in seconds.
    pub ttl: u32,
    /// TTL of negative answers (the SOA MINIMUM), in seconds.
    pub negative_ttl: u32,
    pub policy: Policy,
    /// The server's own addresses for `ns.dns.<zone>` (empty: `$POD_IP`).
    pub ns_addrs: Vec<IpAddr>,
    /// The reverse zones podns owns, exactly (`--reverse-cidr`). Empty:
    /// learn them from Nodes' `spec.podCIDRs` and ServiceCIDRs. Other
    /// reverse names are REFUSED either way.
    pub reverse_cidrs: Vec<ipnet::IpNet>,
    /// Watch pods only in these namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Watch only pods matching this label selector.
    pub label_selector: Option<String>,
    /// Watch user-managed EndpointSlices: headless Services without a
    /// selector answer from them.
    pub endpoint_slices: bool,
    /// Quorum reads instead of lists from the watch cache.
    pub consistent_list: bool,
    pub streaming_list: StreamingList,
    /// Reopen a watch with neither an event nor a bookmark for this long
    /// (`None`: never).
    pub watch_progress: Option<std::time::Duration>,
    /// Probe a watch that delivered nothing for this long: does the
    /// server hold a change it missed? (`None`: never; a node instance
    /// never does, its relay bookmarks every watch.)
    pub watch_probe: Option<std::time::Duration>,
    /// Protobuf or JSON from the API server (`auto`: Protobuf when offered).
    pub wire: Wire,
    /// A kubeconfig path (None: `$KUBECONFIG`, `~/.kube/config`, in-cluster).
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    pub context: Option<String>,
    /// How long to keep answering after SIGTERM while /readyz reports 503.
    pub shutdown_grace: std::time::Duration,
    pub tcp: TcpLimits,
    /// Response rate limit: UDP responses a second per client network.
    pub rrl: Option<u32>,
    /// Serve `/debug/explain` on the admin address. Off by default: it
    /// shows pods that DNS does not publish.
    pub admin_debug: bool,
    /// Also serve the relay (`--relay-listen`).
    pub relay: Option<RelayConfig>,
    /// Be a node instance (`--node-relay-kubeconfig`, `--node`): `kubeconfig`
    /// names a relay, and only this node's pods' namespaces are held.
    pub node: Option<NodeConfig>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        Self {
            zones: vec![Zone::cluster_local()],
            dns_listen: loopback,
            udp_sockets: 0,
            udp_buffers: UdpBuffers::default(),
            admin_listen: loopback,
            ttl: crate::dns::DEFAULT_TTL,
            negative_ttl: crate::dns::DEFAULT_NEGATIVE_TTL,
            policy: Policy {
                rank_view: true,
                ..Policy::default()
            },
            ns_addrs: vec![],
            reverse_cidrs: vec![],
            namespaces: vec![],
            label_selector: None,
            endpoint_slices: true,
            consistent_list: false,
            streaming_list: StreamingList::Auto,
            watch_progress: Some(WATCH_PROGRESS),
            watch_probe: Some(WATCH_PROBE),
            wire: Wire::Auto,
            kubeconfig: None,
            context: None,
            shutdown_grace: std::time::Duration::from_secs(5),
            tcp: TcpLimits::default(),
            rrl: None,
            admin_debug: false,
            relay: None,
            node: None,
        }
    }
}

/// `--watch-progress-timeout`'s default: one and a half times the minute
/// between the API server's bookmarks (and a relay's), so a bookmark a
/// little late is not taken for a stuck watch.
pub const WATCH_PROGRESS: std::time::Duration = std::time::Duration::from_secs(90);

/// `--watch-probe-interval`'s default: a watch that delivered nothing for
/// this long is probed (`k8s::wire::Deaf`), so a deaf one is found within
/// about this long plus a couple of seconds, at one short request per
/// interval per silent watch.
pub const WATCH_PROBE: std::time::Duration = std::time::Duration::from_secs(10);

/// serve's configuration errors are the shared ones (the binary matches on
/// this path for exit code 64).
pub use crate::config::ConfigError;

/// Sockets bound before anything starts, so a harness can use port 0.
pub struct Listeners {
    pub udp: Vec<UdpSocket>,
    /// The UDP socket buffers the kernel granted (the least of the sockets).
    pub udp_buffers: Granted,
    pub tcp: TcpListener,
    pub admin: TcpListener,
    /// The relay's, when it is served ([`Self::bind_relay`]), and its TLS.
    pub relay: Option<(TcpListener, crate::relay::http::tls::Tls)>,
}

impl Listeners {
    /// Bind DNS (UDP ×n and TCP on one port) and admin; log each address.
    pub fn bind(dns: SocketAddr, udp_sockets: usize, admin: SocketAddr) -> anyhow::Result<Self> {
        Self::bind_with(dns, udp_sockets, UdpBuffers::default(), admin)
    }

    /// [`Self::bind`] with the UDP socket buffers asked in `bufs`; logs
    /// what the kernel granted (a warning when it gave less).
    pub fn bind_with(
        dns: SocketAddr,
        udp_sockets: usize,
        bufs: UdpBuffers,
        admin: SocketAddr,
    ) -> anyhow::Result<Self> {
        let n = if udp_sockets == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            udp_sockets
        };
        // With port 0 the kernel picks the UDP port; that number may be
        // taken on TCP, so try a few picks before giving up.
        let tries = if dns.port() == 0 { 20 } else { 1 };
        let mut attempt = 0;
        let (udp, granted, tcp) = loop {
            attempt += 1;
            let (udp, granted) = server::bind_udp_with(dns, n, bufs)
                .with_context(|| format!("failed to bind dns udp {dns}"))?;
            let bound = udp[0].local_addr()?;
            match server::bind_tcp(bound) {
                Ok(tcp) => break (udp, granted, tcp),
                Err(e) if attempt < tries && e.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(e).with_context(|| format!("failed to bind dns tcp {bound}")),
            }
        };
        let dns = udp[0].local_addr()?;
        let admin = std::net::TcpListener::bind(admin)
            .and_then(|l| {
                l.set_nonblocking(true)?;
                TcpListener::from_std(l)
            })
            .with_context(|| format!("failed to bind admin {admin}"))?;
        tracing::info!("listening dns udp {dns} ({n} sockets)");
        match buffers::describe(bufs, granted) {
            (false, line) => tracing::info!("{line}"),
            (true, line) => tracing::warn!("{line}"),
        }
        tracing::info!("listening dns tcp {}", tcp.local_addr()?);
        tracing::info!("listening admin http {}", admin.local_addr()?);
        Ok(Self {
            udp,
            udp_buffers: granted,
            tcp,
            admin,
            relay: None,
        })
    }

    /// Bind the relay's address too, and load (or make) its certificate.
    pub fn bind_relay(self, cfg: &RelayConfig) -> anyhow::Result<Self> {
        let tls = relay_tls(cfg)?;
        self.bind_relay_with(cfg, tls)
    }

    /// Bind the relay's address, serving `tls` ([`relay_tls`]).
    pub fn bind_relay_with(
        mut self,
        cfg: &RelayConfig,
        tls: crate::relay::http::tls::Tls,
    ) -> anyhow::Result<Self> {
        let addr = cfg.listen;
        let files = cfg.tls_cert.is_some() && cfg.tls_key.is_some();
        let l = std::net::TcpListener::bind(addr)
            .and_then(|l| {
                l.set_nonblocking(true)?;
                TcpListener::from_std(l)
            })
            .with_context(|| format!("failed to bind relay {addr}"))?;
        let how = if files { "" } else { ", self-signed" };
        tracing::info!("listening relay https {}{how}", l.local_addr()?);
        self.relay = Some((l, tls));
        Ok(self)
    }

    pub fn dns_addr(&self) -> SocketAddr {
        self.udp[0].local_addr().expect("bound socket")
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.local_addr().expect("bound socket")
    }
}

/// The relay's certificate: loaded from `--relay-tls-cert`/`--relay-tls-key`,
/// or made (self-signed) for its address.
pub fn relay_tls(cfg: &RelayConfig) -> anyhow::Result<crate::relay::http::tls::Tls> {
    let files = cfg.tls_cert.as_deref().zip(cfg.tls_key.as_deref());
    crate::relay::http::tls::load(files, cfg.tls_ca.as_deref(), cfg.listen)
}

/// A running server: its parts, for the signal handler, the demo and tests.
pub struct Running {
    pub dns_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The relay's address, when it is served.
    pub relay_addr: Option<SocketAddr>,
    pub table: Arc<Table>,
    pub health: Arc<Health>,
    pub metrics: Metrics,
    /// DNS, writer and watcher tasks.
    pub tasks: JoinSet<()>,
    /// The admin server, stopped last.
    pub admin_task: tokio::task::JoinHandle<()>,
    pub admin_shutdown: CancellationToken,
}

/// Check what clap cannot.
pub fn validate(args: &ServeConfig) -> Result<(), ConfigError> {
    crate::dns::check_zones(
        &args.zones,
        "learned from the cluster's Nodes and ServiceCIDRs, or given with --reverse-cidr",
    )
    .map_err(ConfigError)?;
    if args.negative_ttl > args.ttl.max(1) * 3600 {
        return Err(ConfigError("--negative-ttl is unreasonably large".into()));
    }
    for ns in &args.namespaces {
        if ns.is_empty()
            || ns.len() > 63
            || !ns
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(ConfigError(format!(
                "--namespace {ns:?} is not a valid namespace name"
            )));
        }
    }
    if args.tcp.max_connections == 0 || args.tcp.max_queries == 0 {
        return Err(ConfigError(
            "--tcp-max-connections and --tcp-max-queries must be at least 1".into(),
        ));
    }
    if args.rrl == Some(0) {
        return Err(ConfigError(
            "--rrl must be at least 1 response a second".into(),
        ));
    }
    if let Some(dir) = args.node.as_ref().and_then(|n| n.state_dir.as_ref()) {
        // Made if missing (a hostPath the kubelet creates is there already).
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::metadata(dir))
            .map_err(|e| format!("{e}"))
            .and_then(|m| {
                if m.is_dir() {
                    Ok(())
                } else {
                    Err("not a directory".into())
                }
            })
            .map_err(|e| {
                ConfigError(format!(
                    "--node-state-dir {} is not usable: {e}",
                    dir.display()
                ))
            })?;
    }
    for (flag, size) in [
        ("--udp-recv-buffer", args.udp_buffers.recv),
        ("--udp-send-buffer", args.udp_buffers.send),
    ] {
        if size > buffers::MAX {
            return Err(ConfigError(format!(
                "{flag} {size} is larger than the most a socket can have, 1GiB"
            )));
        }
    }
    if args.tcp.idle_timeout.is_zero() {
        return Err(ConfigError("--tcp-idle-timeout must be more than 0".into()));
    }
    if let Some(sel) = &args.label_selector
        && sel.trim().is_empty()
    {
        return Err(ConfigError("--label-selector must not be empty".into()));
    }
    if let Some(node) = &args.node {
        if node.node.is_empty() {
            return Err(ConfigError(
                "--node must name this node (the DaemonSet passes spec.nodeName)".into(),
            ));
        }
        if node.relay_dns.is_empty() {
            return Err(ConfigError(
                "a node instance needs the relays' DNS address (--node-relay-dns)".into(),
            ));
        }
        if args.relay.is_some() {
            return Err(ConfigError(
                "--relay-listen and --node: a node instance reads a relay, it is not one".into(),
            ));
        }
    }
    if let Some(relay) = &args.relay {
        if relay.tls_cert.is_some() != relay.tls_key.is_some() {
            return Err(ConfigError(
                "--relay-tls-cert and --relay-tls-key go together".into(),
            ));
        }
        if args.label_selector.is_some() {
            return Err(ConfigError(
                "--relay-listen with --label-selector would relay only the selected pods; relay the whole set".into(),
            ));
        }
    }
    Ok(())
}

/// The answer configuration from the flags (and `$POD_IP`).
pub fn answer_config(args: &ServeConfig) -> AnswerConfig {
    let ns_addrs = crate::config::ns_addrs_or_pod_ip(&args.ns_addrs);
    AnswerConfig {
        zones: args.zones.iter().map(|z| z.0.clone()).collect(),
        ttl: args.ttl,
        negative_ttl: args.negative_ttl,
        ns_addrs,
    }
}

/// Start everything on already-bound sockets. Returns once tasks are spawned.
///
/// In the order of the data flow: the relay (which the watches feed), the
/// index writer and what feeds it, the DNS servers that read its table,
/// and the admin server, which stops last.
pub fn start(
    args: &ServeConfig,
    client: kube::Client,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Running {
    let metrics = Metrics::for_role(match args.node {
        Some(_) => crate::metrics::Role::Node,
        None => crate::metrics::Role::Server,
    });
    count_udp_buffers(&metrics, listeners.udp_buffers);
    let table = Table::new();
    // A node instance says why it is not ready (its relay's failures).
    let (why_tx, why_rx) = tokio::sync::watch::channel(None);
    let health = Health::waiting_on(table.clone(), args.node.is_some().then_some(why_rx));
    let (dns_addr, admin_addr) = (listeners.dns_addr(), listeners.admin_addr());
    let mut spawn = Spawner {
        tasks: JoinSet::new(),
        metrics: metrics.clone(),
        shutdown,
    };
    let relay = args.relay.as_ref().map(|r| {
        let unseen = metrics.relay_unseen.clone();
        Relay::new(r.history, args.namespaces.clone(), r.scope_linger, unseen)
    });
    let relay_addr = match (&relay, &args.relay, listeners.relay) {
        (Some(relay), Some(cfg), Some(listening)) => {
            spawn.relay(relay, cfg, listening, &client, dns_addr)
        }
        _ => None,
    };

    let wcfg = watch_config(args);
    let (writer, explain) = index_writer(args, &table, &metrics, &wcfg);
    let (tx, rx) = mpsc::channel(4096);
    spawn.tasks.spawn_blocking(move || writer.run_blocking(rx));
    let answerer = Arc::new(answerer(args, &table, &metrics));
    if args.node.is_some() {
        spawn.node(args, client, wcfg, tx, &table, why_tx);
    } else {
        spawn.watches(client, &wcfg, relay.as_deref(), tx);
    }
    let explainer = explain.map(|writer| admin::explain::Explainer {
        answerer: answerer.clone(),
        writer,
        namespaces: args.namespaces.clone(),
        label_selector: args.label_selector.clone(),
    });
    spawn.dns(args, listeners.udp, listeners.tcp, answerer);

    let admin_shutdown = CancellationToken::new();
    let admin_task = tokio::spawn(admin::http::run(
        listeners.admin,
        metrics.clone(),
        health.clone(),
        explainer,
        admin_shutdown.clone(),
    ));
    Running {
        dns_addr,
        admin_addr,
        relay_addr,
        table,
        health,
        metrics,
        tasks: spawn.tasks,
        admin_task,
        admin_shutdown,
    }
}

/// The UDP socket buffers the kernel granted, as gauges.
fn count_udp_buffers(metrics: &Metrics, granted: Granted) {
    let as_gauge = |bytes: usize| i64::try_from(bytes).unwrap_or(i64::MAX);
    metrics.udp_receive_buffer.set(as_gauge(granted.recv));
    metrics.udp_send_buffer.set(as_gauge(granted.send));
}

/// What the watches list and how: the flags', on a node instance for each
/// namespace it holds (`node` narrows it further).
fn watch_config(args: &ServeConfig) -> WatchConfig {
    let node = args.node.is_some();
    WatchConfig {
        namespaces: args.namespaces.clone(),
        label_selector: args.label_selector.clone(),
        consistent_list: args.consistent_list,
        streaming: args.streaming_list,
        jobs: args.policy.rank_view,
        // A node instance watches EndpointSlices only if its relay serves
        // them (`node` asks it); reverse names it forwards.
        endpoint_slices: args.endpoint_slices,
        wire: args.wire,
        ranges: args.reverse_cidrs.is_empty() && !node,
        dicts: Default::default(),
        progress: args.watch_progress,
        // A node instance's relay bookmarks every watch every minute, so
        // the progress deadline bounds a fresh watch's silence there
        // without a probe; the relays' own watches of the API server
        // are probed.
        probe: args.watch_probe.filter(|_| !node),
        steady_bookmarks: node,
        // A node instance's (`node::run`).
        mux: None,
    }
}

/// The index writer: the complete lists it waits for before the table is
/// synced, where the reverse zones come from, and with `--admin-debug` the
/// channel explain requests reach it on (returned, for the admin server).
fn index_writer(
    args: &ServeConfig,
    table: &Arc<Table>,
    metrics: &Metrics,
    wcfg: &WatchConfig,
) -> (Writer, Option<mpsc::Sender<ExplainRequest>>) {
    let node = args.node.is_some();
    let needs = if node {
        // Scopes come and go; the node's own pod list makes it ready.
        table.scope().set_node();
        SyncNeeds::default()
    } else {
        SyncNeeds {
            pod_scopes: watch::pod_scopes(wcfg),
            service_scopes: watch::service_scopes(wcfg),
            job_scopes: watch::job_scopes(wcfg),
            slice_scopes: watch::slice_scopes(wcfg),
        }
    };
    let mut writer = Writer::new(table.clone(), args.policy, metrics.clone(), needs);
    if node {
        // Every reverse name is forwarded: none is owned here.
    } else if wcfg.ranges {
        writer = writer.with_ranges();
    } else {
        let given = ReverseZones::given(args.reverse_cidrs.iter().copied());
        tracing::info!(
            zones = given.zones().len(),
            "reverse zones from --reverse-cidr"
        );
        table.set_reverse_zones(given);
    }
    // Explain requests reach the writer on a channel of their own, and only
    // with --admin-debug.
    let (explain_tx, explain_rx) = mpsc::channel(16);
    if args.admin_debug {
        writer = writer.with_explain(explain_rx);
    }
    (writer, args.admin_debug.then_some(explain_tx))
}

/// The answerer over `table`; a node instance's also forwards what it does
/// not hold to the relays' DNS.
fn answerer(args: &ServeConfig, table: &Arc<Table>, metrics: &Metrics) -> Answerer {
    let answerer = Answerer::new(table.clone(), answer_config(args));
    let Some(cfg) = &args.node else {
        return answerer;
    };
    match crate::dns::forward::Forwarder::new(cfg.relay_dns.clone(), FORWARD_TIMEOUT) {
        Ok(forwarder) => {
            let result = |result| {
                metrics
                    .forwarded
                    .get_or_create(&ResultLabels { result })
                    .clone()
            };
            answerer.with_forwarding(Forwarding {
                forwarder,
                runtime: tokio::runtime::Handle::current(),
                answered: result("answered"),
                stale: result("stale"),
                failed: result("failed"),
            })
        }
        Err(error) => {
            tracing::error!(%error, "cannot forward to the relays: out-of-scope names get SERVFAIL");
            answerer
        }
    }
}

/// Where `start` puts what it spawns: the tasks `Running` joins (all but
/// the admin server), the metrics they count into, the token that stops
/// them.
struct Spawner {
    tasks: JoinSet<()>,
    metrics: Metrics,
    shutdown: CancellationToken,
}

impl Spawner {
    /// The relay's HTTPS server and, with `--relay-kubeconfig-out`, the
    /// writer of the kubeconfig node instances read. Returns its address.
    fn relay(
        &mut self,
        relay: &Arc<Relay>,
        cfg: &RelayConfig,
        (listener, tls): (TcpListener, crate::relay::http::tls::Tls),
        client: &kube::Client,
        dns_addr: SocketAddr,
    ) -> Option<SocketAddr> {
        let relay_addr = listener.local_addr().ok();
        let auth = Auth::new(client.clone(), cfg.audience.clone());
        let cfg = cfg.clone();
        if let (Some(path), Some(addr)) = (&cfg.kubeconfig_out, relay_addr) {
            self.tasks.spawn(write_relay_kubeconfig(
                client.clone(),
                path.clone(),
                (addr, dns_addr),
                (tls.ca_pem.clone(), tls.server_name.clone()),
                cfg.kubeconfig_account.clone(),
                cfg.audience.clone(),
            ));
        }
        let (relay, stop) = (relay.clone(), self.shutdown.clone());
        let m = self.metrics.clone();
        self.tasks.spawn(async move {
            crate::relay::http::run(listener, tls, relay, auth, &cfg, m, stop).await
        });
        relay_addr
    }

    /// The watches, which feed the writer on `tx` and, with
    /// `--relay-listen`, the relay: each event reaches the relay's feed,
    /// then the writer (whose channel may hold it back when full).
    fn watches(
        &mut self,
        client: kube::Client,
        wcfg: &WatchConfig,
        relay: Option<&Relay>,
        tx: mpsc::Sender<Arrival>,
    ) {
        let (metrics, shutdown) = (self.metrics.clone(), self.shutdown.clone());
        let taps = (relay, ToWriter::new(tx, metrics.clone(), shutdown.clone()));
        watch::spawn_watchers(client, wcfg, &taps, metrics, &mut self.tasks, shutdown);
    }

    /// A node instance (`--node`; nothing without it): its node's pods
    /// followed through the relay, and the watches of the namespaces they
    /// are in, which feed the writer on `tx` (it tells `why` when it
    /// cannot reach a relay).
    fn node(
        &mut self,
        args: &ServeConfig,
        client: kube::Client,
        wcfg: WatchConfig,
        tx: mpsc::Sender<Arrival>,
        table: &Arc<Table>,
        why: tokio::sync::watch::Sender<Option<String>>,
    ) {
        let Some(cfg) = &args.node else {
            return;
        };
        let span = tracing::info_span!("node", node = %cfg.node);
        // The URL `run` read from the kubeconfig; a caller of `start`
        // alone gets the kubeconfig's name.
        let url = match (&cfg.relay_url, &args.kubeconfig) {
            (u, _) if !u.is_empty() => u.clone(),
            (_, Some(path)) => format!("of {}", path.display()),
            (_, None) => "(no kubeconfig)".into(),
        };
        let reach = crate::node::Reach::new(&url, self.metrics.clone(), why);
        self.tasks.spawn(
            crate::node::run(
                client,
                cfg.clone(),
                wcfg,
                tx,
                table.clone(),
                (self.metrics.clone(), reach),
                self.shutdown.clone(),
            )
            .instrument(span),
        );
    }

    /// The DNS servers: a loop per UDP socket on a blocking thread (with
    /// `--rrl`, one limiter they share), and the TCP server.
    fn dns(
        &mut self,
        args: &ServeConfig,
        udp: Vec<UdpSocket>,
        tcp: TcpListener,
        answerer: Arc<Answerer>,
    ) {
        let rrl = args.rrl.map(|rate| Arc::new(Rrl::new(rate)));
        for sock in udp {
            let (a, m, stop) = (
                answerer.clone(),
                self.metrics.clone(),
                self.shutdown.clone(),
            );
            let rrl = rrl.clone();
            match sock.into_std() {
                Ok(sock) => {
                    self.tasks
                        .spawn_blocking(move || server::run_udp_blocking(sock, a, m, rrl, stop));
                }
                Err(error) => {
                    tracing::error!(%error, "udp socket could not be detached from the runtime")
                }
            }
        }
        self.tasks.spawn(server::run_tcp(
            tcp,
            answerer,
            self.metrics.clone(),
            args.tcp,
            self.shutdown.clone(),
        ));
    }
}

impl Running {
    /// Drain: readiness off, keep answering for `grace` (or until `abort`
    /// fires), then stop DNS and watchers, and the admin server last.
    pub async fn drain(
        mut self,
        grace: std::time::Duration,
        shutdown: CancellationToken,
        abort: impl std::future::Future<Output = ()>,
    ) {
        self.health.set_draining();
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "draining: /readyz is 503, still answering"
        );
        tokio::select! {
            _ = tokio::time::sleep(grace) => {}
            _ = abort => tracing::warn!("second signal: stopping now"),
        }
        shutdown.cancel();
        let stop = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(std::time::Duration::from_secs(5), stop)
            .await
            .is_err()
        {
            self.tasks.abort_all();
        }
        self.admin_shutdown.cancel();
        let _ = self.admin_task.await;
        tracing::info!("stopped");
    }
}

pub async fn run(mut args: ServeConfig) -> anyhow::Result<()> {
    if let Some(node) = &mut args.node
        && node.relay_dns.is_empty()
    {
        node.relay_dns = relay_dns_default(args.kubeconfig.as_deref()).await?;
    }
    // The whole configuration is checked before anything is bound: flags,
    // the kubeconfig or in-cluster credentials, the relay's certificate. A
    // server that logged `listening …` and then exited would send a
    // harness (or an operator reading the log) the wrong way.
    validate(&args)?;
    let config =
        crate::config::kube_config(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let url = config.cluster_url.clone();
    if let Some(node) = &mut args.node {
        node.relay_url = url.to_string();
        let certs = config.root_cert.iter().flatten().map(Vec::as_slice);
        node.relay_ca = crate::node::state::Identity::fingerprint(certs);
    }
    let client = crate::config::client_of(config)?;
    let tls = match &args.relay {
        Some(r) => Some(relay_tls(r).map_err(|e| ConfigError(format!("{e:#}")))?),
        None => None,
    };
    // A kubeconfig left by an earlier relay names its certificate and
    // token: gone until this relay writes its own, so a node instance
    // started beside it waits for the new one instead of reading the old.
    if let Some(path) = args.relay.as_ref().and_then(|r| r.kubeconfig_out.as_ref()) {
        match std::fs::remove_file(path) {
            Ok(()) => tracing::info!("removed the old relay kubeconfig {}", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ConfigError(format!(
                    "cannot replace --relay-kubeconfig-out {}: {e}",
                    path.display()
                ))
                .into());
            }
        }
    }
    let listeners = Listeners::bind_with(
        args.dns_listen,
        args.udp_sockets,
        args.udp_buffers,
        args.admin_listen,
    )
    .and_then(|l| match (&args.relay, tls) {
        (Some(r), Some(tls)) => l.bind_relay_with(r, tls),
        _ => Ok(l),
    })
    .map_err(|e| ConfigError(format!("{e:#}")))?;
    let what = match args.node {
        Some(_) => "the relay",
        None => "the Kubernetes API",
    };
    tokio::spawn(crate::config::probe_api(client.clone(), url, what));
    let shutdown = CancellationToken::new();
    let running = start(&args, client, listeners, shutdown.clone());
    wait_for_signal().await;
    running
        .drain(args.shutdown_grace, shutdown, wait_for_signal())
        .await;
    Ok(())
}

/// The relays' DNS when `--node-relay-dns` is not given: the address the relay
/// kubeconfig's cluster names in its extension (`--relay-kubeconfig-out`
/// writes it), else the kubeconfig's server host (the relay Service), port
/// 53.
async fn relay_dns_default(
    kubeconfig: Option<&std::path::Path>,
) -> Result<Vec<SocketAddr>, ConfigError> {
    if let Some(path) = kubeconfig
        && let Ok(kc) = kube::config::Kubeconfig::read_from(path)
    {
        let current = kc.current_context.clone().unwrap_or_default();
        let cluster = kc
            .contexts
            .iter()
            .find(|c| c.name == current)
            .and_then(|c| c.context.as_ref())
            .map(|c| c.cluster.clone());
        let named = kc
            .clusters
            .iter()
            .filter(|c| cluster.as_ref().is_none_or(|name| *name == c.name))
            .filter_map(|c| c.cluster.as_ref()?.extensions.as_ref())
            .flatten()
            .find(|e| e.name == crate::relay::http::auth::DNS_EXTENSION)
            .and_then(|e| e.extension.as_str()?.parse::<SocketAddr>().ok());
        if let Some(addr) = named {
            return Ok(vec![addr]);
        }
    }
    let config = crate::config::kube_config(kubeconfig, None).await?;
    let host = config
        .cluster_url
        .host()
        .unwrap_or("")
        .trim_matches(['[', ']'])
        .to_owned();
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 53))
        .await
        .map(|a| a.collect())
        .unwrap_or_default();
    if found.is_empty() {
        return Err(ConfigError(format!(
            "cannot find the relays' DNS from the relay kubeconfig's server {host:?}: pass --node-relay-dns"
        )));
    }
    Ok(found)
}

/// How long a node instance waits for one relay before asking the next.
const FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(700);

/// Write the kubeconfig node instances on this machine use to reach the
/// relay: its address, the name its certificate is verified for, and a
/// token for `account` and the relay's `audience` from a TokenRequest.
async fn write_relay_kubeconfig(
    client: kube::Client,
    path: std::path::PathBuf,
    (addr, dns): (SocketAddr, SocketAddr),
    (ca_pem, server_name): (String, Option<String>),
    (namespace, account): (String, String),
    audience: String,
) {
    // The token lives as long as the API server allows (it caps it).
    let ttl = std::time::Duration::from_secs(24 * 3600);
    let mut backoff = std::time::Duration::from_millis(200);
    let token = loop {
        match crate::relay::http::auth::request_token(
            client.clone(),
            &namespace,
            &account,
            &audience,
            ttl,
        )
        .await
        {
            Ok(token) => break token,
            Err(error) => {
                let error = crate::relay::http::auth::one_line(&error);
                tracing::warn!(%error, "cannot get a token for {namespace}/{account} for --relay-kubeconfig-out; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(30));
            }
        }
    };
    let text = crate::relay::http::auth::kubeconfig(
        &format!("https://{addr}"),
        &ca_pem,
        server_name.as_deref(),
        &token,
        dns,
    );
    // Written whole, then renamed: a reader never sees half of it.
    let tmp = path.with_extension("tmp");
    match std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &path)) {
        Ok(()) => tracing::info!("relay kubeconfig written to {}", path.display()),
        Err(error) => tracing::error!(%error, "cannot write {}", path.display()),
    }
}

/// SIGTERM or SIGINT.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A node instance finds the relays' DNS in the kubeconfig the relay
    /// wrote, with no `--node-relay-dns`.
    #[tokio::test]
    async fn the_relay_kubeconfig_names_the_relays_dns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.yaml");
        let dns: SocketAddr = "127.0.0.1:1053".parse().unwrap();
        let text = crate::relay::http::auth::kubeconfig(
            "https://127.0.0.1:6444",
            "ca",
            Some("podns.podns.svc"),
            "tok",
            dns,
        );
        std::fs::write(&path, text).unwrap();
        assert_eq!(relay_dns_default(Some(&path)).await.unwrap(), vec![dns]);
        // kube reads the name the certificate is verified for.
        let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.tls_server_name.as_deref(), Some("podns.podns.svc"));
    }
}
