//! Prometheus metrics. Names are constants so dashboards and tests agree;
//! histogram buckets are explicit.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

mod staleness;
pub use staleness::{Fresh, INDEX_STALENESS, PROBE_RESULTS, ProbeLabels, Staleness, WATCH_PROBES};

/// How often a sync in progress (the watchers' lists, the writer's
/// first sync) logs how far it got.
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Queries received, by query type and transport.
pub const DNS_REQUESTS: &str = "podns_dns_requests";
/// Responses sent, by response code.
pub const DNS_RESPONSES: &str = "podns_dns_responses";
/// Time from a query's arrival to its answer being built, in seconds.
pub const DNS_REQUEST_DURATION: &str = "podns_dns_request_duration_seconds";
/// UDP answers truncated (TC=1) because they exceeded the client's payload size.
pub const DNS_TRUNCATED: &str = "podns_dns_truncated";
/// TCP connections closed at accept because `--tcp-max-connections` were open.
pub const DNS_TCP_REFUSED: &str = "podns_dns_tcp_connections_refused";
/// UDP responses withheld by `--rrl`, by action (`drop`, or `slip`: sent as TC=1).
pub const DNS_RATE_LIMITED: &str = "podns_dns_rate_limited";
/// UDP datagrams the kernel dropped on podns's sockets (a receive buffer
/// full: queries lost before podns saw them), from each socket's own count
/// (`SO_RXQ_OVFL`, Linux). The sockets' sizes are the next two.
pub const UDP_RECEIVE_DROPPED: &str = "podns_udp_receive_dropped";
/// Receive buffer the kernel granted each UDP socket, in bytes (the least
/// of the sockets; `--udp-recv-buffer` asks, `net.core.rmem_max` caps
/// without CAP_NET_ADMIN).
pub const UDP_RECEIVE_BUFFER: &str = "podns_udp_receive_buffer_bytes";
/// Send buffer the kernel granted each UDP socket, in bytes (`--udp-send-buffer`).
pub const UDP_SEND_BUFFER: &str = "podns_udp_send_buffer_bytes";
/// Pods, Services and DNS names in the index.
pub const INDEX_PODS: &str = "podns_index_pods";
/// 1 when `/readyz` answers 200 (synced and not draining), else 0; set at scrape time.
pub const READY: &str = "podns_ready";
pub const INDEX_SERVICES: &str = "podns_index_services";
pub const INDEX_NAMES: &str = "podns_index_names";
/// Watch events applied, by resource and event type.
pub const WATCH_EVENTS: &str = "podns_watch_events";
/// Watch restarts (errors the watcher backed off from), by resource and reason.
pub const WATCH_RESTARTS: &str = "podns_watch_restarts";
/// Objects skipped because they could not be converted, by resource.
pub const WATCH_SKIPPED: &str = "podns_watch_skipped_objects";
/// 1 once the resource's initial list has been applied.
pub const WATCH_SYNCED: &str = "podns_watch_synced";
/// Time from a watch event's arrival to the index answering it, in seconds.
pub const PROPAGATION: &str = "podns_propagation_seconds";
/// A node instance's questions sent to the relays, by result (`answered`,
/// or `failed`: no relay answered, SERVFAIL sent).
pub const DNS_FORWARDED: &str = "podns_dns_forwarded";
/// The namespaces a node instance holds whole (its pods' namespaces).
pub const NODE_SCOPE_NAMESPACES: &str = "podns_node_scope_namespaces";
/// Watches served by the relay now.
pub const RELAY_WATCHES: &str = "podns_relay_watches";
/// Watches the relay started, by wire (`json`, `protobuf`, `compact`).
pub const RELAY_WATCHES_STARTED: &str = "podns_relay_watches_started";
/// Compact watch streams a node instance could not decode (each ends the
/// watch and relists its scope), by resource and error.
pub const WATCH_DECODE_ERRORS: &str = "podns_watch_decode_errors";
/// Connections the relay holds now (TLS handshakes included).
pub const RELAY_CONNECTIONS: &str = "podns_relay_connections";
/// Connections the relay closed at once: it held --relay-max-connections.
pub const RELAY_REFUSED: &str = "podns_relay_connections_refused";
/// Lists the relay served (a watch that started by listing; gets apart).
pub const RELAY_LISTS: &str = "podns_relay_lists";
/// Bytes of watch events the relay sent.
pub const RELAY_SENT_BYTES: &str = "podns_relay_watch_sent_bytes";
/// Bytes of compact stream dictionaries the relay sent (in those above).
pub const RELAY_DICT_BYTES: &str = "podns_relay_dict_bytes_sent";
/// Compact stream dictionaries the relay did not send: the node instance
/// said it held them.
pub const RELAY_DICTS_HELD: &str = "podns_relay_dicts_held";
/// Watch events the relay encoded (once per change, wire and event type,
/// whatever the number of watches it goes to).
pub const RELAY_ENCODED: &str = "podns_relay_events_encoded";
/// Watch events the relay sent (changes; initial events and bookmarks apart).
pub const RELAY_SENT: &str = "podns_relay_events_sent";
pub const RELAY_UNSEEN: &str = "podns_relay_changes_unseen";
/// Requests the relay refused, by reason (`no_token`, `unauthenticated`,
/// `forbidden`, `out_of_scope`, `unavailable`: see `relay::http::auth`).
pub const RELAY_DENIED: &str = "podns_relay_requests_denied";
/// 1 while a node instance's last attempt to read its relay worked, else 0.
pub const NODE_RELAY_REACHABLE: &str = "podns_node_relay_reachable";
/// When a node instance last read its relay (Unix seconds; 0: never).
pub const NODE_RELAY_LAST_SUCCESS: &str = "podns_node_relay_last_success_timestamp_seconds";
/// A node instance's failed attempts to read its relay, by reason (`tls`,
/// `unauthorized`, `forbidden`, `connect`, `other`).
pub const NODE_RELAY_FAILURES: &str = "podns_node_relay_failures";
/// A node instance's saved scope (`--state-dir`) at start, by result
/// (`loaded`, `missing`, or why it was dropped: `unreadable`, `corrupt`,
/// `version`, `foreign`, `too_old`, `too_large`).
pub const NODE_STATE_LOADS: &str = "podns_node_state_loads";
/// Writes of a node instance's saved scope, by result (`written`,
/// `failed`, `too_large`).
pub const NODE_STATE_WRITES: &str = "podns_node_state_writes";
/// A node instance's watches as they start, by how (`saved`: from the
/// saved scope, resuming; `listed`: none saved for it, so it lists).
pub const NODE_STATE_WATCHES: &str = "podns_node_state_watches";
/// Size of the last saved scope written, in bytes.
pub const NODE_STATE_BYTES: &str = "podns_node_state_bytes";
/// Gangs (Jobs and JobSets) in the rank view.
pub const RANK_JOBS: &str = "podns_rank_jobs";
/// From the earliest creation of a generation's pods to every rank of it published, in seconds.
pub const GANG_COMPLETE: &str = "podns_rank_gang_complete_seconds";

/// Upper bounds of [`DNS_REQUEST_DURATION`], in seconds: 5 µs … 80 ms. The
/// answer path is microseconds; a slow one is news.
pub const REQUEST_DURATION_BUCKETS: [f64; 11] = [
    5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 2.5e-2, 8e-2,
];
/// [`DNS_REQUEST_DURATION`]'s buckets on a node instance: one of
/// thousands, answering its own pods from memory (what it forwards is not
/// timed here), it says whether its answers take microseconds, not which.
pub const NODE_REQUEST_DURATION_BUCKETS: [f64; 2] = [1e-4, 1e-3];
/// [`PROPAGATION`]'s buckets on a node instance: the relay tier's target
/// (20 ms) and the budget `PodnsPropagationSlow` holds (100 ms).
pub const NODE_PROPAGATION_BUCKETS: [f64; 2] = [2e-2, 0.1];

/// What a podns process is, which decides what it exports. A DaemonSet
/// runs thousands of node instances, each scraped: a series a node
/// instance exports is paid for thousands of times, so it exports only
/// what it can move, with fewer buckets, and creates at 0 only the label
/// sets an alert reads from it with `increase()` or `rate()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// `podns serve` watching the API server: a forward target, a relay
    /// (`--relay-listen`). Every label set known in advance exists at 0.
    #[default]
    Server,
    /// `podns serve --relay-kubeconfig F --node N`: no relay's or gang's
    /// metrics; the node's own (`podns_node_*`, forwarded questions) only
    /// here.
    Node,
}

/// Every value [`rcode_label`] gives.
pub const RCODES: [&str; 8] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "other",
];
/// Every `action` of [`DNS_RATE_LIMITED`].
pub const RATE_LIMIT_ACTIONS: [&str; 2] = ["drop", "slip"];
/// The resources whose `podns_watch_synced` gates readiness.
pub const SYNCED_RESOURCES: [&str; 2] = ["pods", "services"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub qtype: &'static str,
    pub proto: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Every `reason` of [`RELAY_DENIED`].
pub const RELAY_DENIED_REASONS: [&str; 5] = [
    "no_token",
    "unauthenticated",
    "forbidden",
    "out_of_scope",
    "unavailable",
];

/// Every `reason` of [`NODE_RELAY_FAILURES`].
pub const NODE_RELAY_FAILURE_REASONS: [&str; 5] =
    ["tls", "unauthorized", "forbidden", "connect", "other"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RcodeLabels {
    pub rcode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub resource: &'static str,
    pub event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WireLabels {
    pub wire: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecodeErrorLabels {
    pub resource: &'static str,
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestartLabels {
    pub resource: &'static str,
    pub reason: &'static str,
    /// `resume` (a watch from the last resourceVersion, cheap for the API
    /// server) or `relist` (a full list).
    pub retry: &'static str,
}

/// Every metric podns exports. Cheap to clone (all handles are `Arc`s).
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub responses: Family<RcodeLabels, Counter>,
    pub request_duration: ShardedHistogram,
    pub truncated: Counter,
    pub tcp_refused: Counter,
    pub rate_limited: Family<ActionLabels, Counter>,
    pub udp_receive_dropped: Counter,
    pub udp_receive_buffer: Gauge<i64, AtomicI64>,
    pub udp_send_buffer: Gauge<i64, AtomicI64>,
    pub index_pods: Gauge<i64, AtomicI64>,
    pub ready: Gauge<i64, AtomicI64>,
    pub index_services: Gauge<i64, AtomicI64>,
    pub index_names: Gauge<i64, AtomicI64>,
    pub watch_events: Family<EventLabels, Counter>,
    pub watch_restarts: Family<RestartLabels, Counter>,
    pub watch_skipped: Family<ResourceLabels, Counter<u64, AtomicU64>>,
    pub watch_synced: Family<ResourceLabels, Gauge>,
    pub propagation: Histogram,
    pub rank_jobs: Gauge<i64, AtomicI64>,
    pub gang_complete: Histogram,
    pub forwarded: Family<ResultLabels, Counter>,
    pub node_scope_namespaces: Gauge<i64, AtomicI64>,
    pub relay_watches: Gauge<i64, AtomicI64>,
    pub relay_watches_started: Family<WireLabels, Counter>,
    pub watch_decode_errors: Family<DecodeErrorLabels, Counter>,
    pub relay_connections: Gauge<i64, AtomicI64>,
    pub relay_refused: Counter,
    pub relay_lists: Counter,
    pub relay_sent_bytes: Counter,
    pub relay_dict_bytes_sent: Counter,
    pub relay_dicts_held: Counter,
    pub relay_encoded: Counter,
    pub relay_sent: Counter,
    pub relay_unseen: Counter,
    pub relay_denied: Family<ReasonLabels, Counter>,
    pub node_relay_reachable: Gauge<i64, AtomicI64>,
    pub node_relay_last_success: Gauge<i64, AtomicI64>,
    pub node_relay_failures: Family<ReasonLabels, Counter>,
    pub node_state_loads: Family<ResultLabels, Counter>,
    pub node_state_writes: Family<ResultLabels, Counter>,
    pub node_state_bytes: Gauge<i64, AtomicI64>,
    pub node_state_watches: Family<ResultLabels, Counter>,
    /// Each watch's proof of currency ([`INDEX_STALENESS`]).
    pub staleness: Staleness,
    pub watch_probes: Family<ProbeLabels, Counter>,
    role: Role,
    registry: Arc<Registry>,
}

/// Register `metric` only in the role that exports it: `(role, only)`.
fn register_for(
    registry: &mut Registry,
    (role, only): (Role, Role),
    name: &str,
    help: &str,
    metric: impl prometheus_client::registry::Metric,
) {
    if role == only {
        registry.register(name, help, metric);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A forward target's or a relay's metrics ([`Role::Server`]).
    pub fn new() -> Self {
        Self::for_role(Role::Server)
    }

    /// The metrics `role` exports.
    pub fn for_role(role: Role) -> Self {
        let node = role == Role::Node;
        let requests = Family::<RequestLabels, Counter>::default();
        let responses = Family::<RcodeLabels, Counter>::default();
        let request_duration = if node {
            ShardedHistogram::new(NODE_REQUEST_DURATION_BUCKETS)
        } else {
            ShardedHistogram::new(REQUEST_DURATION_BUCKETS)
        };
        let truncated = Counter::default();
        let tcp_refused = Counter::default();
        let rate_limited = Family::<ActionLabels, Counter>::default();
        let udp_receive_dropped = Counter::default();
        let udp_receive_buffer = Gauge::<i64, AtomicI64>::default();
        let udp_send_buffer = Gauge::<i64, AtomicI64>::default();
        let index_pods = Gauge::<i64, AtomicI64>::default();
        let ready = Gauge::<i64, AtomicI64>::default();
        let index_services = Gauge::<i64, AtomicI64>::default();
        let index_names = Gauge::<i64, AtomicI64>::default();
        let watch_events = Family::<EventLabels, Counter>::default();
        let watch_restarts = Family::<RestartLabels, Counter>::default();
        let watch_skipped = Family::<ResourceLabels, Counter>::default();
        let watch_synced = Family::<ResourceLabels, Gauge>::default();
        // 10 µs … 10 s. The target is a p99 ≤ 1 ms, so the buckets are
        // 100 µs apart up to 1 ms (a quantile estimate is only as fine as
        // its bucket); tens of ms under churn are what BENCHMARKS.md has to
        // tell apart; seconds mean a backlog.
        let propagation = if node {
            Histogram::new(NODE_PROPAGATION_BUCKETS)
        } else {
            Histogram::new([
                1e-5, 2.5e-5, 5e-5, 1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4, 9e-4, 1e-3,
                1.25e-3, 1.5e-3, 2e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5,
                10.0,
            ])
        };

        let rank_jobs = Gauge::<i64, AtomicI64>::default();
        let forwarded = Family::<ResultLabels, Counter>::default();
        for result in ["answered", "failed"] {
            let _ = forwarded.get_or_create(&ResultLabels { result });
        }
        let node_scope_namespaces = Gauge::<i64, AtomicI64>::default();
        let relay_watches = Gauge::<i64, AtomicI64>::default();
        let relay_watches_started = Family::<WireLabels, Counter>::default();
        let watch_decode_errors = Family::<DecodeErrorLabels, Counter>::default();
        let relay_connections = Gauge::<i64, AtomicI64>::default();
        let relay_refused = Counter::default();
        let relay_lists = Counter::default();
        let relay_sent_bytes = Counter::default();
        let relay_dict_bytes_sent = Counter::default();
        let relay_dicts_held = Counter::default();
        let relay_encoded = Counter::default();
        let relay_sent = Counter::default();
        let relay_unseen = Counter::default();
        let relay_denied = Family::<ReasonLabels, Counter>::default();
        for reason in RELAY_DENIED_REASONS {
            let _ = relay_denied.get_or_create(&ReasonLabels { reason });
        }
        let node_relay_reachable = Gauge::<i64, AtomicI64>::default();
        let node_relay_last_success = Gauge::<i64, AtomicI64>::default();
        let node_relay_failures = Family::<ReasonLabels, Counter>::default();
        let node_state_loads = Family::<ResultLabels, Counter>::default();
        let node_state_writes = Family::<ResultLabels, Counter>::default();
        let node_state_bytes = Gauge::<i64, AtomicI64>::default();
        let node_state_watches = Family::<ResultLabels, Counter>::default();
        let staleness = Staleness::default();
        let watch_probes = Family::<ProbeLabels, Counter>::default();
        for reason in NODE_RELAY_FAILURE_REASONS {
            let _ = node_relay_failures.get_or_create(&ReasonLabels { reason });
        }
        // 0.5 s … 30 min: pod start-up to a whole gang resolvable.
        let gang_complete = Histogram::new([
            0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
        ]);

        // Label sets known in advance exist at 0 from the start. A counter
        // born at 1 has no earlier sample, so Prometheus's rate() and
        // increase() never see its first events (the first SERVFAILs, the
        // first drops), and a missing series reads as "no data", not 0. A
        // podns that never syncs must export `watch_synced 0`, or the alert
        // on it has nothing to fire on. A node instance creates at 0 only
        // what its alerts read (see [`Role`]): SERVFAIL for the share
        // answered SERVFAIL, its relay failures, its forwarded results.
        // Its other label sets appear with their first event, and
        // `--rrl`'s actions only with `--rrl`.
        let rcodes: &[&str] = if node { &["SERVFAIL"] } else { &RCODES };
        for &rcode in rcodes {
            let _ = responses.get_or_create(&RcodeLabels { rcode });
        }
        if !node {
            for action in RATE_LIMIT_ACTIONS {
                let _ = rate_limited.get_or_create(&ActionLabels { action });
            }
        }
        for resource in SYNCED_RESOURCES {
            let _ = watch_synced.get_or_create(&ResourceLabels { resource });
        }

        let mut registry = Registry::default();
        registry.register(DNS_REQUESTS, "DNS queries received", requests.clone());
        registry.register(DNS_RESPONSES, "DNS responses sent", responses.clone());
        registry.register(
            DNS_REQUEST_DURATION,
            "Time to answer a DNS query",
            request_duration.clone(),
        );
        registry.register(
            DNS_TRUNCATED,
            "UDP answers sent with TC=1",
            truncated.clone(),
        );
        registry.register(
            DNS_TCP_REFUSED,
            "TCP connections closed at the connection cap",
            tcp_refused.clone(),
        );
        registry.register(
            DNS_RATE_LIMITED,
            "UDP responses withheld by response rate limiting",
            rate_limited.clone(),
        );
        registry.register(
            UDP_RECEIVE_DROPPED,
            "UDP datagrams the kernel dropped on podns's sockets (receive buffer full)",
            udp_receive_dropped.clone(),
        );
        registry.register(
            UDP_RECEIVE_BUFFER,
            "Receive buffer granted each UDP socket, bytes",
            udp_receive_buffer.clone(),
        );
        registry.register(
            UDP_SEND_BUFFER,
            "Send buffer granted each UDP socket, bytes",
            udp_send_buffer.clone(),
        );
        registry.register(INDEX_PODS, "Pods in the index", index_pods.clone());
        registry.register(
            READY,
            "1 when /readyz answers 200 (index synced, not draining)",
            ready.clone(),
        );
        registry.register(
            INDEX_SERVICES,
            "Services in the index",
            index_services.clone(),
        );
        registry.register(INDEX_NAMES, "DNS names in the index", index_names.clone());
        registry.register(WATCH_EVENTS, "Watch events applied", watch_events.clone());
        registry.register(
            WATCH_RESTARTS,
            "Watch errors backed off from",
            watch_restarts.clone(),
        );
        registry.register(
            WATCH_SKIPPED,
            "Objects skipped as malformed",
            watch_skipped.clone(),
        );
        registry.register(
            WATCH_SYNCED,
            "Initial list applied (1) or not (0)",
            watch_synced.clone(),
        );
        registry.register(
            PROPAGATION,
            "Watch event arrival to index answering it",
            propagation.clone(),
        );
        registry.register(
            RANK_JOBS,
            "Jobs and JobSets in the rank view",
            rank_jobs.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            GANG_COMPLETE,
            "Earliest pod creation of a generation to every rank published",
            gang_complete.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            DNS_FORWARDED,
            "Questions a node instance sent to the relays, by result",
            forwarded.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_SCOPE_NAMESPACES,
            "Namespaces a node instance holds whole",
            node_scope_namespaces.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_WATCHES,
            "Watches the relay serves now",
            relay_watches.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_WATCHES_STARTED,
            "Watches the relay started, by wire",
            relay_watches_started.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            WATCH_DECODE_ERRORS,
            "Compact watch streams that could not be decoded (each relists its scope)",
            watch_decode_errors.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_CONNECTIONS,
            "Connections the relay holds now, TLS handshakes included",
            relay_connections.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_REFUSED,
            "Connections the relay closed at once because it held --relay-max-connections",
            relay_refused.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_LISTS,
            "Lists the relay served (gets of one object apart)",
            relay_lists.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_SENT_BYTES,
            "Bytes of watch events the relay sent",
            relay_sent_bytes.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_DICT_BYTES,
            "Bytes of compact stream dictionaries the relay sent",
            relay_dict_bytes_sent.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_DICTS_HELD,
            "Compact stream dictionaries the relay did not send: the node instance held them",
            relay_dicts_held.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_ENCODED,
            "Watch events the relay encoded (once per change, wire and type)",
            relay_encoded.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_SENT,
            "Watch events the relay sent (changes only)",
            relay_sent.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_UNSEEN,
            "Changes the relay did not send: its object was the same but for the resourceVersion",
            relay_unseen.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Server),
            RELAY_DENIED,
            "Requests the relay refused, by reason",
            relay_denied.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_RELAY_REACHABLE,
            "1 while a node instance's last attempt to read its relay worked",
            node_relay_reachable.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_RELAY_LAST_SUCCESS,
            "When a node instance last read its relay, Unix seconds (0: never)",
            node_relay_last_success.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_RELAY_FAILURES,
            "A node instance's failed attempts to read its relay, by reason",
            node_relay_failures.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_STATE_LOADS,
            "A node instance's saved scope at start, by result (loaded, missing, or why it was dropped)",
            node_state_loads.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_STATE_WRITES,
            "Writes of a node instance's saved scope, by result",
            node_state_writes.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_STATE_BYTES,
            "Size of the last saved scope a node instance wrote, in bytes",
            node_state_bytes.clone(),
        );
        register_for(
            &mut registry,
            (role, Role::Node),
            NODE_STATE_WATCHES,
            "A node instance's watches as they start with --state-dir, by how (saved: resumed from the saved scope; listed)",
            node_state_watches.clone(),
        );
        registry.register(
            INDEX_STALENESS,
            "Time since the least current watch of each resource proved it was current (an event, a bookmark, a probe, its list)",
            staleness.clone(),
        );
        registry.register(
            WATCH_PROBES,
            "Probes of silent watches, by result",
            watch_probes.clone(),
        );
        Self {
            staleness,
            watch_probes,
            node_state_watches,
            node_state_loads,
            node_state_writes,
            node_state_bytes,
            relay_denied,
            node_relay_reachable,
            node_relay_last_success,
            node_relay_failures,
            relay_encoded,
            relay_sent,
            relay_unseen,
            rank_jobs,
            gang_complete,
            forwarded,
            node_scope_namespaces,
            relay_watches,
            relay_watches_started,
            watch_decode_errors,
            relay_connections,
            relay_refused,
            relay_lists,
            relay_sent_bytes,
            relay_dict_bytes_sent,
            relay_dicts_held,
            requests,
            responses,
            request_duration,
            truncated,
            tcp_refused,
            rate_limited,
            udp_receive_dropped,
            udp_receive_buffer,
            udp_send_buffer,
            index_pods,
            ready,
            index_services,
            index_names,
            watch_events,
            watch_restarts,
            watch_skipped,
            watch_synced,
            propagation,
            role,
            registry: Arc::new(registry),
        }
    }

    /// What this process is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// A watch of `resource` starts: its skipped objects and its restarts
    /// by every `reason` and `retry` exist at 0, so `PodnsWatchesRestarting`'s
    /// increase() counts the first restart too. Not on a node instance:
    /// no alert reads its restarts (they follow its relay's, which
    /// `PodnsNodesRelayUnreachable` says once for the fleet; its relists
    /// are the relay's `podns_relay_lists_total`), and these would be
    /// most of its series.
    pub fn watch_from_zero(
        &self,
        resource: &'static str,
        reasons: &[&'static str],
        retries: &[&'static str],
    ) {
        if self.role == Role::Node {
            return;
        }
        let _ = self
            .watch_skipped
            .get_or_create(&ResourceLabels { resource });
        for &reason in reasons {
            for &retry in retries {
                let _ = self.watch_restarts.get_or_create(&RestartLabels {
                    resource,
                    reason,
                    retry,
                });
            }
        }
    }

    /// OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A histogram recorded through shards, one per serving loop, and summed
/// at scrape time. prometheus-client's [`Histogram`] takes a lock per
/// observation, and every UDP loop observing into one of them means a lock
/// (and its cache line) shared by all loops, per query. A shard is owned by
/// one loop and records with plain atomic stores on counters no other loop
/// writes; a scrape adds the shards up and encodes them exactly as a
/// [`Histogram`] with the same buckets and observations would.
///
/// A shard given back (its loop or TCP connection ended) keeps its counts
/// in the total and is handed to the next loop that asks, so the number of
/// shards is the most loops ever served at once, not the number of TCP
/// connections ever accepted.
#[derive(Clone, Debug)]
pub struct ShardedHistogram {
    inner: Arc<ShardedInner>,
}

#[derive(Debug)]
struct ShardedInner {
    /// Upper bounds as [`Histogram::new`] keeps them: the finite ones in
    /// the order given, then +Inf.
    bounds: Box<[f64]>,
    /// Locked when a shard is handed out or given back, and per scrape;
    /// never per observation.
    shards: Mutex<Shards>,
}

#[derive(Debug, Default)]
struct Shards {
    /// Every shard ever handed out: a histogram never goes down.
    all: Vec<Arc<Cells>>,
    /// Shards given back, for the next loop.
    free: Vec<Arc<Cells>>,
}

/// One cache line of counters, so two shards never share a line (a store
/// by one loop would otherwise evict the other loop's copy).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Line([AtomicU64; 16]);

/// A shard's counters: one per bucket (not cumulative), then the sum as
/// `f64` bits. The count is the buckets' total, so `_count` and the +Inf
/// bucket always agree in an exposition.
#[derive(Debug)]
struct Cells {
    lines: Box<[Line]>,
}

impl Cells {
    fn new(slots: usize) -> Self {
        Self {
            lines: (0..slots.div_ceil(16)).map(|_| Line::default()).collect(),
        }
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        &self.lines[i / 16].0[i % 16]
    }
}

impl ShardedHistogram {
    /// Buckets as for [`Histogram::new`]: non-finite bounds are dropped and
    /// +Inf is added last.
    pub fn new(buckets: impl IntoIterator<Item = f64>) -> Self {
        let bounds = buckets
            .into_iter()
            .filter(|b| b.is_finite())
            .chain(std::iter::once(f64::INFINITY))
            .collect();
        Self {
            inner: Arc::new(ShardedInner {
                bounds,
                shards: Mutex::new(Shards::default()),
            }),
        }
    }

    /// A shard for one serving loop to record into.
    pub fn shard(&self) -> HistogramShard {
        let mut shards = self.inner.lock();
        let cells = match shards.free.pop() {
            Some(cells) => cells,
            None => {
                let cells = Arc::new(Cells::new(self.inner.bounds.len() + 1));
                shards.all.push(cells.clone());
                cells
            }
        };
        HistogramShard {
            cells,
            owner: self.inner.clone(),
        }
    }

    /// Sum, count and per-bucket (not cumulative) counts over all shards,
    /// in the form `MetricEncoder::encode_histogram` takes.
    fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let bounds = &self.inner.bounds;
        let mut buckets: Vec<(f64, u64)> = bounds.iter().map(|&b| (b, 0)).collect();
        let mut sum = 0.0;
        for cells in &self.inner.lock().all {
            for (i, (_, n)) in buckets.iter_mut().enumerate() {
                *n += cells.slot(i).load(Ordering::Relaxed);
            }
            sum += f64::from_bits(cells.slot(bounds.len()).load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|(_, n)| n).sum();
        (sum, count, buckets)
    }
}

impl ShardedInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shards> {
        // The lists stay valid whatever a panicking holder was doing.
        self.shards.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TypedMetric for ShardedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ShardedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// One loop's part of a [`ShardedHistogram`]. Not `Clone`, and recording
/// takes `&mut self`: one writer per shard, which is what lets an
/// observation be a load and a store instead of a locked read-modify-write.
/// Dropping it gives it back, counts included.
#[derive(Debug)]
pub struct HistogramShard {
    cells: Arc<Cells>,
    owner: Arc<ShardedInner>,
}

impl HistogramShard {
    /// Record one observation, in the bucket [`Histogram::observe`] would
    /// pick: the first whose bound is ≥ `v`, +Inf for NaN.
    pub fn observe(&mut self, v: f64) {
        let bounds = &self.owner.bounds;
        let i = bounds
            .iter()
            .position(|&b| b >= v)
            .unwrap_or(bounds.len() - 1);
        // Relaxed: a scrape needs each counter's own latest value, not an
        // order between counters. Only this shard writes these cells (the
        // hand-over of a shard between loops goes through the mutex), so a
        // load and a store add without losing a count.
        let n = self.cells.slot(i);
        n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let sum = self.cells.slot(bounds.len());
        sum.store(
            (f64::from_bits(sum.load(Ordering::Relaxed)) + v).to_bits(),
            Ordering::Relaxed,
        );
    }
}

impl Drop for HistogramShard {
    fn drop(&mut self) {
        self.owner.lock().free.push(self.cells.clone());
    }
}

/// A query type as a metric label without allocating: the common types by
/// name, the rest as "other" (label values must stay few).
pub fn qtype_label(t: Option<hickory_proto::rr::RecordType>) -> &'static str {
    use hickory_proto::rr::RecordType as T;
    match t {
        Some(T::A) => "A",
        Some(T::AAAA) => "AAAA",
        Some(T::SRV) => "SRV",
        Some(T::PTR) => "PTR",
        Some(T::TXT) => "TXT",
        Some(T::CNAME) => "CNAME",
        Some(T::SOA) => "SOA",
        Some(T::NS) => "NS",
        Some(T::ANY) => "ANY",
        Some(T::AXFR) => "AXFR",
        Some(T::IXFR) => "IXFR",
        Some(_) => "other",
        None => "none",
    }
}

/// A response code as a metric label.
pub fn rcode_label(r: hickory_proto::op::ResponseCode) -> &'static str {
    use hickory_proto::op::ResponseCode as R;
    match r {
        R::NoError => "NOERROR",
        R::FormErr => "FORMERR",
        R::ServFail => "SERVFAIL",
        R::NXDomain => "NXDOMAIN",
        R::NotImp => "NOTIMP",
        R::Refused => "REFUSED",
        R::BADVERS => "BADVERS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The OpenMetrics text of one metric registered under the request
    /// duration's name and help.
    fn text(metric: impl prometheus_client::registry::Metric) -> String {
        let mut registry = Registry::default();
        registry.register(DNS_REQUEST_DURATION, "Time to answer a DNS query", metric);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    fn cumulative_inf(h: &ShardedHistogram) -> u64 {
        h.snapshot().2.iter().map(|(_, n)| n).sum()
    }

    #[test]
    fn concurrent_shards_merge_into_the_right_buckets() {
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 20_000;
        let h = ShardedHistogram::new([1.0, 2.0, 4.0]);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let h = h.clone();
                    s.spawn(move || {
                        let mut shard = h.shard();
                        for _ in 0..ROUNDS {
                            // One on a bound (belongs to it: le is ≤), one
                            // between, one past the last finite bound, and
                            // one per thread number into bucket ≤ 1.
                            shard.observe(2.0);
                            shard.observe(3.0);
                            shard.observe(8.0);
                            for _ in 0..=t {
                                shard.observe(0.5);
                            }
                        }
                    })
                })
                .collect();
            // A scrape meanwhile sees a total that only grows and a count
            // equal to its +Inf bucket.
            let scraper = s.spawn(|| {
                let mut last = 0;
                let mut scrapes = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let (_, count, buckets) = h.snapshot();
                    assert_eq!(count, buckets.iter().map(|(_, n)| n).sum::<u64>());
                    assert!(count >= last, "count went down: {last} -> {count}");
                    last = count;
                    scrapes += 1;
                }
                scrapes
            });
            for w in workers {
                w.join().unwrap();
            }
            done.store(true, Ordering::Relaxed);
            assert!(scraper.join().unwrap() > 0);
        });
        let (sum, count, buckets) = h.snapshot();
        let halves = ROUNDS * (1..=THREADS).sum::<u64>();
        assert_eq!(
            buckets,
            vec![
                (1.0, halves),
                (2.0, THREADS * ROUNDS),
                (4.0, THREADS * ROUNDS),
                (f64::INFINITY, THREADS * ROUNDS),
            ]
        );
        assert_eq!(count, 3 * THREADS * ROUNDS + halves);
        // Every value is a multiple of 0.5 well inside f64's exact range, so
        // the sum is exact whatever the order of additions.
        assert_eq!(sum, (THREADS * ROUNDS) as f64 * 13.0 + halves as f64 * 0.5);
    }

    #[test]
    fn a_shard_given_back_keeps_its_counts_and_is_reused() {
        let h = ShardedHistogram::new(REQUEST_DURATION_BUCKETS);
        let mut a = h.shard();
        let mut b = h.shard();
        a.observe(1e-6);
        b.observe(1.0);
        drop(a);
        assert_eq!(h.snapshot().1, 2, "a ended loop still counts");
        // The next loop gets the shard back rather than a new one.
        let mut c = h.shard();
        c.observe(3e-5);
        assert_eq!(h.inner.lock().all.len(), 2);
        drop((b, c));
        let (_, count, buckets) = h.snapshot();
        assert_eq!(count, 3);
        assert_eq!(buckets[0].1, 1); // ≤ 5 µs
        assert_eq!(buckets[3].1, 1); // ≤ 50 µs
        assert_eq!(buckets[11], (f64::INFINITY, 1)); // 1 s is past 80 ms
        assert_eq!(cumulative_inf(&h), count);
    }

    /// What the request path observes: microseconds, values on bounds, a
    /// slow outlier, and the edge cases a `Histogram` has rules for.
    const SAMPLES: [f64; 12] = [
        3.1e-6, 5e-6, 7.7e-6, 1e-5, 2.2e-5, 9.9e-5, 1e-3, 0.0, 4.2e-3, 0.08, 0.5, 12.0,
    ];

    #[test]
    fn one_shard_encodes_byte_for_byte_like_a_histogram() {
        let plain = Histogram::new(REQUEST_DURATION_BUCKETS);
        let sharded = ShardedHistogram::new(REQUEST_DURATION_BUCKETS);
        assert_eq!(text(sharded.clone()), text(plain.clone()), "empty");
        let mut shard = sharded.shard();
        for v in SAMPLES.iter().cycle().take(1000) {
            plain.observe(*v);
            shard.observe(*v);
        }
        let want = text(plain.clone());
        assert!(want.contains("_bucket{le=\"+Inf\"} 1000\n"), "{want}");
        assert_eq!(text(sharded.clone()), want);
        // Oddities a duration never is, handled as Histogram handles them:
        // -inf in the first bucket, +inf and NaN in the last, NaN sum.
        for v in [f64::NEG_INFINITY, f64::INFINITY, f64::NAN] {
            plain.observe(v);
            shard.observe(v);
        }
        assert_eq!(text(sharded), text(plain));
    }

    #[test]
    fn many_shards_encode_like_one_histogram() {
        // Dyadic values add exactly in any order, so even the sum is equal
        // bit for bit; with other values the merged sum can differ from a
        // single running sum in its last bits (addition order), nothing else.
        let values: Vec<f64> = (0..64).map(|i| f64::from(i) / 65536.0).collect();
        let plain = Histogram::new(REQUEST_DURATION_BUCKETS);
        let sharded = ShardedHistogram::new(REQUEST_DURATION_BUCKETS);
        let mut shards: Vec<_> = (0..5).map(|_| sharded.shard()).collect();
        for (i, v) in values.iter().cycle().take(640).enumerate() {
            plain.observe(*v);
            shards[i % 5].observe(*v);
        }
        // Two loops end before the scrape; their counts stay.
        shards.truncate(3);
        assert_eq!(text(sharded), text(plain));
    }

    #[test]
    fn metrics_registers_the_request_duration_as_a_histogram() {
        let m = Metrics::new();
        let mut shard = m.request_duration.shard();
        shard.observe(7e-6);
        let out = m.encode();
        for line in [
            "# HELP podns_dns_request_duration_seconds Time to answer a DNS query.\n",
            "# TYPE podns_dns_request_duration_seconds histogram\n",
            "podns_dns_request_duration_seconds_count 1\n",
            "podns_dns_request_duration_seconds_bucket{le=\"+Inf\"} 1\n",
        ] {
            assert!(out.contains(line), "{line:?} missing in\n{out}");
        }
    }

    #[test]
    fn known_label_sets_start_at_zero() {
        let text = Metrics::new().encode();
        for rcode in RCODES {
            let line = format!("podns_dns_responses_total{{rcode=\"{rcode}\"}} 0\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        for action in RATE_LIMIT_ACTIONS {
            let line = format!("podns_dns_rate_limited_total{{action=\"{action}\"}} 0\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        for resource in SYNCED_RESOURCES {
            let line = format!("podns_watch_synced{{resource=\"{resource}\"}} 0\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }

    #[test]
    fn a_node_instance_exports_its_own_and_at_zero_only_what_its_alerts_read() {
        let families = |text: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.strip_prefix("# TYPE "))
                .map(|l| l.split(' ').next().unwrap().to_string())
                .collect()
        };
        let node = Metrics::for_role(Role::Node);
        node.watch_from_zero("pods", &["expired_410"], &["resume", "relist"]);
        let text = node.encode();
        let exported = families(&text);
        for name in [NODE_RELAY_REACHABLE, NODE_RELAY_FAILURES, DNS_FORWARDED] {
            assert!(exported.iter().any(|f| f == name), "{name} in\n{text}");
        }
        for f in &exported {
            assert!(
                !f.starts_with("podns_relay_") && f != GANG_COMPLETE,
                "{f} in\n{text}"
            );
        }
        for reason in NODE_RELAY_FAILURE_REASONS {
            let line = format!("podns_node_relay_failures_total{{reason=\"{reason}\"}} 0\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(text.contains("podns_dns_responses_total{rcode=\"SERVFAIL\"} 0\n"));
        for absent in [
            "podns_dns_responses_total{rcode=\"NOERROR\"}",
            "podns_dns_rate_limited_total{",
            "podns_watch_restarts_total{",
            "podns_watch_skipped_objects_total{",
        ] {
            assert!(!text.contains(absent), "{absent} in\n{text}");
        }
        // Two buckets and +Inf each.
        for name in [DNS_REQUEST_DURATION, PROPAGATION] {
            let buckets = text
                .lines()
                .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
                .count();
            assert_eq!(buckets, 3, "{name} in\n{text}");
        }

        // A forward target or a relay: the other way round.
        let server = Metrics::new();
        server.watch_from_zero("pods", &["expired_410"], &["resume", "relist"]);
        let text = server.encode();
        let exported = families(&text);
        for f in &exported {
            assert!(
                !f.starts_with("podns_node_") && f != DNS_FORWARDED,
                "{f} in\n{text}"
            );
        }
        for name in [RELAY_LISTS, RELAY_DENIED, GANG_COMPLETE] {
            assert!(exported.iter().any(|f| f == name), "{name} in\n{text}");
        }
        for retry in ["resume", "relist"] {
            let line = format!(
                "podns_watch_restarts_total{{resource=\"pods\",reason=\"expired_410\",retry=\"{retry}\"}} 0\n"
            );
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(text.contains("podns_watch_skipped_objects_total{resource=\"pods\"} 0\n"));
    }

    #[test]
    fn rcode_labels_are_all_listed() {
        for code in 0..=u16::from(hickory_proto::op::ResponseCode::BADCOOKIE) + 1 {
            let label = rcode_label(<hickory_proto::op::ResponseCode as From<u16>>::from(code));
            assert!(RCODES.contains(&label), "{code} -> {label}");
        }
    }
}
