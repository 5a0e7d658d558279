//! Churn: random pods replaced at a steady rate, job pods coming back
//! under the same hostname with a new IP.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Workload;
use super::templates::job_pod;
use podns_kapi::Kind;

use podns_kapi::filter::Filter;

use crate::store::Obj;

impl Workload {
    /// Replaces one random pod; job pods come back under the same hostname.
    /// `keys` is kept current: a replaced pod's key is swapped for its
    /// successor's, a vanished one is dropped and another tried.
    fn churn_one(&self, keys: &mut Vec<(String, String)>) {
        loop {
            if keys.is_empty() {
                return;
            }
            let at = rand::random_range(0..keys.len());
            let (ns, name) = keys[at].clone();
            match self.store.get(Kind::Pod, &ns, &name) {
                Ok(old) if !old.deleting => {
                    if let Some(new) = self.replace_pod(&ns, &name, &old) {
                        keys[at] = (ns, new);
                    }
                    return;
                }
                _ => {
                    keys.swap_remove(at);
                }
            }
        }
    }

    /// Deletes a pod and creates its replacement; returns the new name.
    fn replace_pod(&self, ns: &str, name: &str, old: &Obj) -> Option<String> {
        let ns = &ns.to_string();
        let v = old.value();
        // The workload a pod belongs to: its JobSet, or its Job.
        let job = old
            .labels
            .get("jobset.sigs.k8s.io/jobset-name")
            .or_else(|| old.labels.get("job-name"))
            .cloned();
        let idx = old
            .labels
            .get("batch.kubernetes.io/job-completion-index")
            .and_then(|s| s.parse::<usize>().ok());
        if self
            .delete_pod(ns, name, self.default_grace, Some(&old.uid))
            .is_err()
        {
            return None;
        }
        let info = job.as_ref().and_then(|j| {
            self.jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&(ns.clone(), j.clone()))
                .cloned()
        });
        let new = match (job, idx, info) {
            (Some(j), Some(i), Some(info)) => job_pod(ns, &j, i, &info),
            _ => {
                let mut n = v;
                if let Some(m) = n["metadata"].as_object_mut() {
                    for k in [
                        "uid",
                        "resourceVersion",
                        "creationTimestamp",
                        "deletionTimestamp",
                        "deletionGracePeriodSeconds",
                    ] {
                        m.remove(k);
                    }
                    if m.get("generateName")
                        .and_then(Value::as_str)
                        .is_some_and(|g| !g.is_empty())
                    {
                        m.remove("name");
                    }
                }
                if let Some(s) = n["spec"].as_object_mut() {
                    s.remove("nodeName");
                }
                n
            }
        };
        let o = self.store.create(Kind::Pod, ns, new).ok()?;
        self.churned.fetch_add(1, Ordering::Relaxed);
        Some(o.name.clone())
    }

    /// Replaces random pods at `rate` per second for `seconds`.
    pub fn start_churn(self: &Arc<Self>, rate: f64, seconds: f64, shutdown: CancellationToken) {
        let w = self.clone();
        tokio::spawn(async move {
            let total = (rate * seconds).round() as u64;
            if total == 0 || rate <= 0.0 {
                return;
            }
            let period = Duration::from_secs_f64(1.0 / rate);
            let start = Instant::now();
            let mut keys = w.store.pod_keys(&Filter::default());
            let mut keys_at = Instant::now();
            for n in 0..total {
                let at = start + period.mul_f64(n as f64);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep_until(at) => {}
                }
                if keys_at.elapsed() > Duration::from_secs(1) {
                    keys = w.store.pod_keys(&Filter::default());
                    keys_at = Instant::now();
                }
                w.churn_one(&mut keys);
            }
            tracing::info!(total, "churn finished");
        });
    }
}
