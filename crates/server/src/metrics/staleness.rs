//! How far behind the API server the index can be, as far as its watches
//! can know ([`INDEX_STALENESS`]): per watch, the time since it last
//! proved it was current (the end of its list, an event, a bookmark, or
//! a probe that found nothing it missed: `k8s::wire`), the most of them
//! per resource. Computed at scrape time: a watch stores one timestamp
//! when it proves itself and nothing else, no query pays for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::{MetricType, TypedMetric};

use super::ResourceLabels;

/// The time since a watch last proved it was current, in seconds, the
/// most over the watches of each resource.
pub const INDEX_STALENESS: &str = "podns_index_staleness_seconds";

/// Probes of silent watches (`--watch-probe-interval`), by resource and
/// result ([`PROBE_RESULTS`]).
pub const WATCH_PROBES: &str = "podns_watch_probes";

/// Every `result` of [`WATCH_PROBES`]: `current` (nothing missed),
/// `missed` (the server had a change the watch had not delivered: it is
/// reopened as deaf), `expired` (410: the watch relists), `failed` (no
/// answer: proves nothing).
pub const PROBE_RESULTS: [&str; 4] = ["current", "missed", "expired", "failed"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ProbeLabels {
    pub resource: &'static str,
    pub result: &'static str,
}

/// Every watch's [`Fresh`], read at scrape time.
#[derive(Clone, Debug, Default)]
pub struct Staleness {
    watches: Arc<Mutex<Vec<Weak<Fresh>>>>,
}

/// One watch's proof of currency: when it was last current. A watch that
/// has never been (its first list has not ended) counts from its start.
#[derive(Debug)]
pub struct Fresh {
    resource: &'static str,
    /// What the times below count from.
    base: Instant,
    /// Milliseconds from `base` to the last proof.
    proved: AtomicU64,
    /// Left out of the gauge: an optional resource the API server refuses
    /// (RBAC), which stands for "none" and never gets current.
    ignored: AtomicBool,
}

impl Fresh {
    /// The watch is current now.
    pub fn proved(&self) {
        self.proved_at(Instant::now());
    }

    /// The watch was current at `at` (a probe's start): a later proof is
    /// kept.
    pub fn proved_at(&self, at: Instant) {
        let ms =
            u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        self.proved.fetch_max(ms, Ordering::Relaxed);
        self.ignored.store(false, Ordering::Relaxed);
    }

    /// Leave the watch out until its next proof.
    pub fn ignore(&self) {
        self.ignored.store(true, Ordering::Relaxed);
    }

    /// Seconds since the last proof at `now`; `None` while ignored.
    pub fn seconds(&self, now: Instant) -> Option<f64> {
        if self.ignored.load(Ordering::Relaxed) {
            return None;
        }
        let ms = self.proved.load(Ordering::Relaxed);
        let at = self.base + std::time::Duration::from_millis(ms);
        Some(now.saturating_duration_since(at).as_secs_f64())
    }
}

impl Staleness {
    /// A new watch of `resource`, stale from now until it proves itself.
    /// It counts until the returned handle is dropped.
    pub fn watch(&self, resource: &'static str) -> Arc<Fresh> {
        let f = Arc::new(Fresh {
            resource,
            base: Instant::now(),
            proved: AtomicU64::new(0),
            ignored: AtomicBool::new(false),
        });
        self.lock().push(Arc::downgrade(&f));
        f
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Fresh>>> {
        self.watches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most staleness per resource at `now`, in the order the watches
    /// started (watches that are gone are forgotten).
    pub fn by_resource(&self, now: Instant) -> Vec<(&'static str, f64)> {
        let mut out: Vec<(&'static str, f64)> = Vec::new();
        self.lock().retain(|w| {
            let Some(f) = w.upgrade() else {
                return false;
            };
            if let Some(s) = f.seconds(now) {
                match out.iter_mut().find(|(r, _)| *r == f.resource) {
                    Some((_, m)) => *m = m.max(s),
                    None => out.push((f.resource, s)),
                }
            }
            true
        });
        out
    }

    /// The most over every watch; `None` without one.
    pub fn max(&self, now: Instant) -> Option<f64> {
        self.by_resource(now)
            .into_iter()
            .map(|(_, s)| s)
            .reduce(f64::max)
    }
}

impl TypedMetric for Staleness {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for Staleness {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (resource, s) in self.by_resource(Instant::now()) {
            // Milliseconds are all a watch stores.
            let s = (s * 1000.0).round() / 1000.0;
            encoder
                .encode_family(&ResourceLabels { resource })?
                .encode_gauge(&s)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_most_per_resource_of_the_watches_alive_and_not_ignored() {
        let s = Staleness::default();
        let t0 = Instant::now();
        let a = s.watch("pods");
        let b = s.watch("pods");
        let c = s.watch("services");
        let later = t0 + Duration::from_secs(100);
        a.proved_at(t0 + Duration::from_secs(90));
        b.proved_at(t0 + Duration::from_secs(40));
        c.proved_at(t0 + Duration::from_secs(95));
        let by = s.by_resource(later);
        assert_eq!(by.len(), 2, "{by:?}");
        let pods = by.iter().find(|(r, _)| *r == "pods").unwrap().1;
        assert!((59.0..=61.0).contains(&pods), "{pods}");
        // An earlier proof does not undo a later one.
        b.proved_at(t0 + Duration::from_secs(10));
        assert!((59.0..=61.0).contains(&s.max(later).unwrap()));
        b.ignore();
        let pods = s.by_resource(later)[0].1;
        assert!((9.0..=11.0).contains(&pods), "{pods}");
        drop(a);
        let by = s.by_resource(later);
        assert_eq!(by.len(), 1, "{by:?}");
        assert_eq!(by[0].0, "services");
        // A proof counts it again.
        b.proved_at(t0 + Duration::from_secs(99));
        assert_eq!(s.by_resource(later).len(), 2);
        drop((b, c));
        assert_eq!(s.max(later), None);
    }
}
