//! Prometheus metrics. Names are constants so dashboards and tests agree;
//! histogram buckets are explicit.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
/// Pods, Services and DNS names in the index.
pub const INDEX_PODS: &str = "podns_index_pods";
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
/// Gangs (Jobs and JobSets) in the rank view.
pub const RANK_JOBS: &str = "podns_rank_jobs";
/// From the earliest creation of a generation's pods to every rank of it published, in seconds.
pub const GANG_COMPLETE: &str = "podns_rank_gang_complete_seconds";

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
pub struct RestartLabels {
    pub resource: &'static str,
    pub reason: &'static str,
}

/// Every metric podns exports. Cheap to clone (all handles are `Arc`s).
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub responses: Family<RcodeLabels, Counter>,
    pub request_duration: Histogram,
    pub truncated: Counter,
    pub tcp_refused: Counter,
    pub rate_limited: Family<ActionLabels, Counter>,
    pub index_pods: Gauge<i64, AtomicI64>,
    pub index_services: Gauge<i64, AtomicI64>,
    pub index_names: Gauge<i64, AtomicI64>,
    pub watch_events: Family<EventLabels, Counter>,
    pub watch_restarts: Family<RestartLabels, Counter>,
    pub watch_skipped: Family<ResourceLabels, Counter<u64, AtomicU64>>,
    pub watch_synced: Family<ResourceLabels, Gauge>,
    pub propagation: Histogram,
    pub rank_jobs: Gauge<i64, AtomicI64>,
    pub gang_complete: Histogram,
    registry: Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        let responses = Family::<RcodeLabels, Counter>::default();
        // 5 µs … ~80 ms: the answer path is microseconds, a slow one is news.
        let request_duration = Histogram::new([
            5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 2.5e-2, 8e-2,
        ]);
        let truncated = Counter::default();
        let tcp_refused = Counter::default();
        let rate_limited = Family::<ActionLabels, Counter>::default();
        let index_pods = Gauge::<i64, AtomicI64>::default();
        let index_services = Gauge::<i64, AtomicI64>::default();
        let index_names = Gauge::<i64, AtomicI64>::default();
        let watch_events = Family::<EventLabels, Counter>::default();
        let watch_restarts = Family::<RestartLabels, Counter>::default();
        let watch_skipped = Family::<ResourceLabels, Counter>::default();
        let watch_synced = Family::<ResourceLabels, Gauge>::default();
        // 10 µs … 10 s: the target is ≤ 1 ms; tens of ms under churn are
        // what BENCHMARKS.md has to tell apart; seconds mean a backlog.
        let propagation = Histogram::new([
            1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 1.0, 10.0,
        ]);

        let rank_jobs = Gauge::<i64, AtomicI64>::default();
        // 0.5 s … 30 min: pod start-up to a whole gang resolvable.
        let gang_complete = Histogram::new([
            0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
        ]);

        // Label sets known in advance exist at 0 from the start. A counter
        // born at 1 has no earlier sample, so Prometheus's rate() and
        // increase() never see its first events (the first SERVFAILs, the
        // first drops), and a missing series reads as "no data", not 0. A
        // podns that never syncs must export `watch_synced 0`, or the alert
        // on it has nothing to fire on.
        for rcode in RCODES {
            let _ = responses.get_or_create(&RcodeLabels { rcode });
        }
        for action in RATE_LIMIT_ACTIONS {
            let _ = rate_limited.get_or_create(&ActionLabels { action });
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
        registry.register(INDEX_PODS, "Pods in the index", index_pods.clone());
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
        registry.register(
            GANG_COMPLETE,
            "Earliest pod creation of a generation to every rank published",
            gang_complete.clone(),
        );
        Self {
            rank_jobs,
            gang_complete,
            requests,
            responses,
            request_duration,
            truncated,
            tcp_refused,
            rate_limited,
            index_pods,
            index_services,
            index_names,
            watch_events,
            watch_restarts,
            watch_skipped,
            watch_synced,
            propagation,
            registry: Arc::new(registry),
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
    fn rcode_labels_are_all_listed() {
        for code in 0..=u16::from(hickory_proto::op::ResponseCode::BADCOOKIE) + 1 {
            let label = rcode_label(<hickory_proto::op::ResponseCode as From<u16>>::from(code));
            assert!(RCODES.contains(&label), "{code} -> {label}");
        }
    }
}
