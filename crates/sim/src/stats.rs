//! Load counters served at `/sim/stats`, so tests and benchmarks can
//! measure what a client costs the API server.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use axum::response::Response;
use http_body::Body as _;
use serde_json::{Value, json};

/// Marks a response whose body bytes are counted as they stream.
#[derive(Clone, Copy, Debug)]
pub struct Counted;

#[derive(Default)]
pub struct Stats {
    requests: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    responses: Mutex<BTreeMap<u16, u64>>,
    /// Responses by `Content-Type` (`application/vnd.kubernetes.protobuf`…).
    content_types: Mutex<BTreeMap<String, u64>>,
    pub requests_total: AtomicU64,
    pub open_watches: AtomicI64,
    pub watch_events_sent: AtomicU64,
    pub watch_bytes_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
}

impl Stats {
    /// Counts one request by verb and resource (`list` / `pods`).
    pub fn count(&self, verb: &str, resource: &str) {
        self.requests_total.fetch_add(1, Ordering::Relaxed);
        let mut m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(verb.to_string())
            .or_default()
            .entry(resource.to_string())
            .or_default() += 1;
    }

    /// Counts a response's status and (when known up front) body size.
    pub fn sent(&self, r: Response) -> Response {
        *self
            .responses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(r.status().as_u16())
            .or_default() += 1;
        let ct = r
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        *self
            .content_types
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(ct)
            .or_default() += 1;
        if r.extensions().get::<Counted>().is_none()
            && let Some(n) = r.body().size_hint().exact()
        {
            self.bytes_sent.fetch_add(n, Ordering::Relaxed);
        }
        r
    }

    pub fn reset(&self) {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.responses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.content_types
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.requests_total.store(0, Ordering::Relaxed);
        self.watch_events_sent.store(0, Ordering::Relaxed);
        self.watch_bytes_sent.store(0, Ordering::Relaxed);
        self.bytes_sent.store(0, Ordering::Relaxed);
    }

    /// The `/sim/stats` document. `objects` and `pod_mutations` come from
    /// the store: bytes per pod mutation is `watch_bytes_sent / pod_mutations`
    /// over a window (take two snapshots, or reset first).
    pub fn snapshot(&self, objects: Value, pod_mutations: u64, resource_version: u64) -> Value {
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let responses: BTreeMap<String, u64> = self
            .responses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        let content_types = self
            .content_types
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        json!({
            "responses_by_content_type": content_types,
            "requests_total": self.requests_total.load(Ordering::Relaxed),
            "requests": requests,
            "responses": responses,
            "open_watches": self.open_watches.load(Ordering::Relaxed),
            "watch_events_sent": self.watch_events_sent.load(Ordering::Relaxed),
            "watch_bytes_sent": self.watch_bytes_sent.load(Ordering::Relaxed),
            "bytes_sent": self.bytes_sent.load(Ordering::Relaxed),
            "pod_mutations": pod_mutations,
            "resource_version": resource_version,
            "objects": objects,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_verb_and_resource() {
        let s = Stats::default();
        s.count("list", "pods");
        s.count("list", "pods");
        s.count("watch", "pods");
        let v = s.snapshot(json!({}), 0, 0);
        assert_eq!(v["requests"]["list"]["pods"], 2);
        assert_eq!(v["requests_total"], 3);
        s.reset();
        assert_eq!(s.snapshot(json!({}), 0, 0)["requests_total"], 0);
    }
}
