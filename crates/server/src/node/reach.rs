//! Whether a node instance can read its relay.

use std::time::Duration;

use tokio::time::Instant;

use crate::k8s::failure::Failure;
use crate::metrics::{Metrics, ReasonLabels};

/// How often a node instance says at WARN that it still cannot read its
/// relay for the same reason (each failure is counted; the rest are
/// logged at debug level).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Whether this node instance can read its relay: each failure counted by
/// reason and said in words (rate-limited), the gauges a
/// `PodnsNodeRelayUnreachable` alert reads, and what `/readyz` says until
/// the first list.
pub struct Reach {
    url: String,
    metrics: Metrics,
    why: tokio::sync::watch::Sender<Option<String>>,
    state: std::sync::Mutex<ReachState>,
}

#[derive(Default)]
struct ReachState {
    /// Failures since the last success.
    failing: u32,
    /// The last WARN line: when, and for which reason.
    warned: Option<(Instant, &'static str)>,
}

impl Reach {
    pub fn new(
        url: &str,
        metrics: Metrics,
        why: tokio::sync::watch::Sender<Option<String>>,
    ) -> Self {
        Self {
            url: url.to_owned(),
            metrics,
            why,
            state: Default::default(),
        }
    }

    /// An attempt to read the relay failed.
    pub fn failed(&self, what: &str, f: &Failure) {
        self.metrics.node_relay_reachable.set(0);
        self.metrics
            .node_relay_failures
            .get_or_create(&ReasonLabels { reason: f.reason })
            .inc();
        self.why.send_replace(Some(format!(
            "cannot read the relay {}: {}",
            self.url, f.words
        )));
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.failing += 1;
        let now = Instant::now();
        let due = s
            .warned
            .is_none_or(|(at, reason)| reason != f.reason || now.duration_since(at) >= WARN_EVERY);
        if due {
            s.warned = Some((now, f.reason));
            tracing::warn!(relay = %self.url, reason = f.reason, error = %f.words, failures = s.failing, "cannot {what} on the relay; retrying");
        } else {
            tracing::debug!(relay = %self.url, reason = f.reason, error = %f.words, failures = s.failing, "cannot {what} on the relay; retrying");
        }
    }

    /// An attempt to read the relay worked.
    pub fn worked(&self) {
        self.metrics.node_relay_reachable.set(1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.metrics.node_relay_last_success.set(now);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.failing > 0 {
            tracing::info!(relay = %self.url, failures = s.failing, "reading the relay works again");
            self.why.send_replace(None);
        }
        *s = ReachState::default();
    }
}
