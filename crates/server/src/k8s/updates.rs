//! The index writer's tap: a watch's events as index updates (`Mapper`),
//! sent to the one writer on its channel ([`ToWriter`]). Objects are
//! converted here; one that does not convert is logged, counted and
//! skipped (or, changed into one, withdrawn).

use std::collections::HashSet;
use std::ops::ControlFlow;

use kube::runtime::watcher::Event;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::convert::ConvertError;
use super::tap::{Tap, Taps, Watched};
use crate::index::types::{Arrival, Change, ObjKey, Update};
use crate::metrics::{EventLabels, Metrics, PROGRESS_EVERY, ResourceLabels};

/// Every watch's events, as index updates, to the writer's channel.
#[derive(Clone)]
pub struct ToWriter {
    tx: mpsc::Sender<Arrival>,
    metrics: Metrics,
    /// A send waiting on a full channel gives up when this is cancelled.
    shutdown: CancellationToken,
}

impl ToWriter {
    pub fn new(tx: mpsc::Sender<Arrival>, metrics: Metrics, shutdown: CancellationToken) -> Self {
        Self {
            tx,
            metrics,
            shutdown,
        }
    }
}

impl Taps for ToWriter {
    type Tap<K: Watched> = WriterTap<K>;

    fn tap<K: Watched>(&self, namespace: Option<&str>) -> WriterTap<K> {
        WriterTap {
            mapper: Mapper::new(namespace.map(str::to_owned), self.metrics.clone()),
            tx: self.tx.clone(),
            shutdown: self.shutdown.clone(),
        }
    }
}

/// One watch's events, as index updates, to the writer.
pub struct WriterTap<K: Watched> {
    mapper: Mapper<K>,
    tx: mpsc::Sender<Arrival>,
    shutdown: CancellationToken,
}

impl<K: Watched> Tap<K> for WriterTap<K> {
    async fn event(&mut self, event: &Event<K>, at: std::time::Instant) -> ControlFlow<()> {
        let Some(update) = self.mapper.on_event(event) else {
            return ControlFlow::Continue(());
        };
        let send = self.tx.send(Arrival { update, at });
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => ControlFlow::Break(()),
            sent = send => match sent {
                Ok(()) => ControlFlow::Continue(()),
                Err(_) => {
                    tracing::debug!("index writer gone, stopping watch");
                    ControlFlow::Break(())
                }
            },
        }
    }

    /// The index is told the resource is empty, so DNS still becomes
    /// ready.
    async fn refused(&mut self, at: std::time::Instant) -> ControlFlow<()> {
        let update = K::update(Change::Reset {
            namespace: self.mapper.namespace.clone(),
            items: Vec::new(),
        });
        match self.tx.send(Arrival { update, at }).await {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    }
}

/// Past this many, the set of uids already reported is cleared (so a
/// persistently bad object is logged again now and then, and memory stays
/// bounded).
const REPORTED_MAX: usize = 10_000;

/// Turns watcher events of one watch into index updates.
struct Mapper<K: Watched> {
    namespace: Option<String>,
    /// The list in progress (between `Init` and `InitDone`).
    buffer: Option<Listing<K::Info>>,
    /// A list of this watch has completed before. Until then the index
    /// holds nothing from this scope and is not ready, so each listed
    /// object is sent at once as an `Apply` and only its key is kept: the
    /// writer builds names on its own core while the rest of the list is
    /// still decoded, and the closing `Listed` removes what the list no
    /// longer has. Later relists are buffered whole and sent as one
    /// `Reset`, so a relist's state is never seen half-applied.
    listed_once: bool,
    /// Uids of malformed objects already logged.
    reported: HashSet<String>,
    /// The list in progress: when it started, objects so far, last log.
    progress: Option<(Instant, u64, Instant)>,
    metrics: Metrics,
}

/// What a list in progress keeps until its end.
enum Listing<T> {
    /// The first list: the objects went to the writer already.
    Keys(Vec<ObjKey>),
    /// A relist: the objects, applied together at the end.
    Items(Vec<T>),
}

impl<K: Watched> Mapper<K> {
    fn new_listing(&self) -> Listing<K::Info> {
        if self.listed_once {
            Listing::Items(Vec::new())
        } else {
            Listing::Keys(Vec::new())
        }
    }

    fn new(namespace: Option<String>, metrics: Metrics) -> Self {
        Self {
            namespace,
            buffer: None,
            listed_once: false,
            reported: HashSet::new(),
            progress: None,
            metrics,
        }
    }

    /// One more listed object; every few seconds a line saying how far the
    /// list got (a 1M-pod list takes a while).
    fn listed_one(&mut self) {
        let now = Instant::now();
        let (started, n, logged) = self.progress.get_or_insert((now, 0, now));
        *n += 1;
        if *n % 1024 == 0 && now.duration_since(*logged) >= PROGRESS_EVERY {
            *logged = now;
            let secs = now.duration_since(*started).as_secs_f64();
            tracing::info!(
                phase = "listing",
                resource = K::RESOURCE,
                listed = *n,
                per_second = (*n as f64 / secs) as u64,
                "sync in progress"
            );
        }
    }

    fn count(&self, event: &'static str) {
        self.metrics
            .watch_events
            .get_or_create(&EventLabels {
                resource: K::RESOURCE,
                event,
            })
            .inc();
    }

    fn on_event(&mut self, event: &Event<K>) -> Option<Update> {
        match event {
            Event::Init => {
                self.count("init");
                self.progress = None;
                self.buffer = Some(self.new_listing());
                // A relist of one namespace: a node instance stops
                // answering it until the list is in.
                match (&self.namespace, self.listed_once) {
                    (Some(ns), true) => Some(Update::Relisting {
                        resource: K::RESOURCE,
                        namespace: ns.clone(),
                    }),
                    _ => None,
                }
            }
            Event::InitApply(obj) => {
                self.count("init_apply");
                self.listed_one();
                let info = self.convert(obj)?;
                if self.buffer.is_none() {
                    self.buffer = Some(self.new_listing());
                }
                match self.buffer.as_mut() {
                    Some(Listing::Keys(keys)) => {
                        keys.push(K::key(&info).clone());
                        Some(K::update(Change::Apply(info)))
                    }
                    Some(Listing::Items(items)) => {
                        items.push(info);
                        None
                    }
                    None => None,
                }
            }
            Event::InitDone => {
                self.count("init_done");
                if let Some((started, n, _)) = self.progress.take()
                    && started.elapsed() >= PROGRESS_EVERY
                {
                    tracing::info!(
                        resource = K::RESOURCE,
                        listed = n,
                        seconds = started.elapsed().as_secs(),
                        "list complete"
                    );
                }
                self.listed_once = true;
                let namespace = self.namespace.clone();
                Some(K::update(
                    match self.buffer.take().unwrap_or_else(|| self.new_listing()) {
                        Listing::Keys(keys) => {
                            tracing::debug!(items = keys.len(), "first list complete");
                            Change::Listed { namespace, keys }
                        }
                        Listing::Items(items) => {
                            tracing::debug!(items = items.len(), "list complete");
                            Change::Reset { namespace, items }
                        }
                    },
                ))
            }
            Event::Apply(obj) => {
                self.count("apply");
                match self.convert(obj) {
                    Some(info) => Some(K::update(Change::Apply(info))),
                    // The object is now malformed: withdraw what we knew of
                    // it rather than keep answering with stale data.
                    None => K::key_of(obj.meta())
                        .ok()
                        .map(|key| K::update(Change::Delete(key))),
                }
            }
            Event::Delete(obj) => {
                self.count("delete");
                match K::key_of(obj.meta()) {
                    Ok(key) => Some(K::update(Change::Delete(key))),
                    Err(error) => {
                        self.skip(obj, &error);
                        None
                    }
                }
            }
        }
    }

    fn convert(&mut self, obj: &K) -> Option<K::Info> {
        match obj.convert() {
            Ok(info) => {
                if !self.reported.is_empty()
                    && let Some(uid) = obj.meta().uid.as_deref()
                {
                    // Fixed: report it again if it breaks again.
                    self.reported.remove(uid);
                }
                Some(info)
            }
            Err(error) => {
                self.skip(obj, &error);
                None
            }
        }
    }

    /// Counts a skipped object and logs it the first time its uid is seen.
    fn skip(&mut self, obj: &K, error: &ConvertError) {
        self.metrics
            .watch_skipped
            .get_or_create(&ResourceLabels {
                resource: K::RESOURCE,
            })
            .inc();
        let meta = obj.meta();
        let id = match (&meta.uid, &meta.namespace, &meta.name) {
            (Some(uid), _, _) => uid.clone(),
            (None, ns, name) => format!(
                "{}/{}",
                ns.as_deref().unwrap_or(""),
                name.as_deref().unwrap_or("")
            ),
        };
        if self.reported.len() >= REPORTED_MAX {
            self.reported.clear();
        }
        if self.reported.insert(id) {
            let key = ObjKey::new(
                meta.namespace.as_deref().unwrap_or("?"),
                meta.name.as_deref().unwrap_or("?"),
            );
            tracing::warn!(%key, uid = meta.uid.as_deref().unwrap_or(""), %error, "skipping malformed object");
        } else {
            tracing::debug!(%error, "skipping malformed object again");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::k8s::objects::SlimPod;
    use serde_json::json;

    fn pod(name: &str, ip: serde_json::Value) -> SlimPod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"), "resourceVersion": "1"},
            "status": {"phase": "Running", "podIP": ip}
        }))
        .unwrap()
    }

    pub(crate) fn skipped(m: &Metrics) -> u64 {
        m.watch_skipped
            .get_or_create(&ResourceLabels { resource: "pods" })
            .get()
    }

    #[test]
    fn events_map_to_updates() {
        let metrics = Metrics::new();
        let mut m = Mapper::<SlimPod>::new(Some("ml".into()), metrics.clone());
        assert!(m.on_event(&Event::Init).is_none());
        // The first list: each object is also applied at once.
        let Some(Update::Pod(Change::Apply(early))) =
            m.on_event(&Event::InitApply(pod("a", json!("10.0.0.1"))))
        else {
            panic!("expected an early apply")
        };
        assert_eq!(early.key, ObjKey::new("ml", "a"));
        assert!(
            m.on_event(&Event::InitApply(pod("bad", json!(7))))
                .is_none()
        );
        assert!(matches!(
            m.on_event(&Event::InitApply(pod("b", json!("10.0.0.2")))),
            Some(Update::Pod(Change::Apply(_)))
        ));
        // Its end names what was listed; the objects themselves went ahead.
        let Some(Update::Pod(Change::Listed { namespace, keys })) = m.on_event(&Event::InitDone)
        else {
            panic!("expected the end of a first list")
        };
        assert_eq!(namespace.as_deref(), Some("ml"));
        let names: Vec<_> = keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(skipped(&metrics), 1);

        let Some(Update::Pod(Change::Apply(p))) =
            m.on_event(&Event::Apply(pod("c", json!("10.0.0.3"))))
        else {
            panic!("expected an apply")
        };
        assert_eq!(p.key, ObjKey::new("ml", "c"));

        let Some(Update::Pod(Change::Delete(k))) =
            m.on_event(&Event::Delete(pod("c", json!("10.0.0.3"))))
        else {
            panic!("expected a delete")
        };
        assert_eq!(k, ObjKey::new("ml", "c"));

        // A second list starts from an empty buffer, and its objects wait
        // for the Reset (a relist is never seen half-applied).
        m.on_event(&Event::Init);
        assert!(
            m.on_event(&Event::InitApply(pod("d", json!("10.0.0.4"))))
                .is_none()
        );
        let Some(Update::Pod(Change::Reset { items, .. })) = m.on_event(&Event::InitDone) else {
            panic!("expected a reset")
        };
        assert_eq!(items.len(), 1);
        m.on_event(&Event::Init);
        let Some(Update::Pod(Change::Reset { items, .. })) = m.on_event(&Event::InitDone) else {
            panic!("expected a reset")
        };
        assert!(items.is_empty());

        let events = metrics
            .watch_events
            .get_or_create(&EventLabels {
                resource: "pods",
                event: "init_apply",
            })
            .get();
        assert_eq!(events, 4);
    }

    #[test]
    fn malformed_apply_deletes_and_is_reported_once() {
        let metrics = Metrics::new();
        let mut m = Mapper::<SlimPod>::new(None, metrics.clone());
        for _ in 0..3 {
            let Some(Update::Pod(Change::Delete(k))) =
                m.on_event(&Event::Apply(pod("a", json!({"x": 1}))))
            else {
                panic!("expected a delete")
            };
            assert_eq!(k, ObjKey::new("ml", "a"));
        }
        assert_eq!(skipped(&metrics), 3);
        assert_eq!(m.reported.len(), 1);
        // Fixed, then forgotten, so a new breakage is logged again.
        assert!(matches!(
            m.on_event(&Event::Apply(pod("a", json!("10.0.0.1")))),
            Some(Update::Pod(Change::Apply(_)))
        ));
        assert!(m.reported.is_empty());

        // Without a name there is nothing to delete.
        let nameless: SlimPod =
            serde_json::from_value(json!({"metadata": {"namespace": "ml"}})).unwrap();
        assert!(m.on_event(&Event::Apply(nameless.clone())).is_none());
        assert!(m.on_event(&Event::Delete(nameless)).is_none());
        assert_eq!(skipped(&metrics), 5);
    }

    #[test]
    fn reported_set_is_bounded() {
        let mut m = Mapper::<SlimPod>::new(None, Metrics::new());
        for i in 0..(REPORTED_MAX + 10) {
            m.on_event(&Event::Apply(pod(&format!("p{i}"), json!(1))));
        }
        assert!(m.reported.len() <= REPORTED_MAX);
    }
}
