//! The relay's feed: what one watch of a relayed kind hands the relay, as
//! its events arrive.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use kube::runtime::watcher::Event;
use podns_kapi::Kind;

use super::Relay;
use super::store::cache::{Cache, Item};
use super::store::labels::{self, ServedLabels};
use crate::k8s::objects::Served;
use crate::k8s::tap::{Tap, Taps, Watched};

/// Each watch of a kind the relay serves feeds its cache.
impl Taps for Relay {
    type Tap<K: Watched> = Option<Feed>;

    fn tap<K: Watched>(&self, namespace: Option<&str>) -> Option<Feed> {
        self.feed(K::RELAYED?, namespace.map(str::to_owned))
    }
}

/// The object as the relay serves it is the kind's to say
/// (`k8s::objects`, [`Slim::relayed`](crate::k8s::objects::Slim::relayed)).
impl<K: Watched> Tap<K> for Feed {
    async fn event(&mut self, event: &Event<K>, _at: Instant) -> ControlFlow<()> {
        self.on_event(event, K::relayed);
        ControlFlow::Continue(())
    }

    fn resume_version(&self) -> Option<Arc<AtomicU64>> {
        Some(self.seen())
    }
}

impl Relay {
    /// The feed of one watch (`kind` in `namespace`, or all).
    pub fn feed(&self, kind: Kind, namespace: Option<String>) -> Option<Feed> {
        Some(Feed {
            cache: self.cache(kind)?.clone(),
            pods: self.cache(Kind::Pod)?.clone(),
            labels: self.labels.clone(),
            namespace,
            seen: Arc::new(AtomicU64::new(0)),
            listing: None,
            generation: 0,
        })
    }
}

/// What one watch hands the relay: its events, as they arrive.
pub struct Feed {
    cache: Arc<Cache>,
    /// The Pods' cache, which a Service selecting on new labels rekeys.
    pods: Arc<Cache>,
    labels: Arc<ServedLabels>,
    namespace: Option<String>,
    /// The resourceVersion the watch would resume from, published by the
    /// watcher (a list's, for the end of a list).
    seen: Arc<AtomicU64>,
    /// A list in progress.
    listing: Option<Vec<Item>>,
    /// The served labels' generation when it started.
    generation: u64,
}

impl Feed {
    pub fn seen(&self) -> Arc<AtomicU64> {
        self.seen.clone()
    }

    /// One event of the watch; `object` is the object as the relay serves
    /// it, before its labels are chosen.
    pub fn on_event<K: kube::Resource>(
        &mut self,
        event: &Event<K>,
        object: impl Fn(&K) -> Option<Served>,
    ) {
        let kind = self.cache.kind;
        match event {
            Event::Init => {
                self.listing = Some(Vec::new());
                self.generation = self.labels.read().generation();
            }
            Event::InitApply(o) => {
                if let Some(item) = object(o).and_then(|o| self.item(o)) {
                    self.listing.get_or_insert_with(Vec::new).push(item);
                }
            }
            Event::InitDone => {
                let mut items = self.listing.take().unwrap_or_default();
                let rv = self.seen.load(Ordering::Acquire);
                let served = self.labels.read();
                if kind == Kind::Pod && served.generation() != self.generation {
                    // Services widened what is served in some namespaces
                    // while this listed: serve their pods anew.
                    let since = self.generation;
                    for i in &mut items {
                        if served.widened_since(&i.ns, since)
                            && let Some(again) =
                                i.reserved(kind, &|k: &str| served.serves(&i.ns, k))
                        {
                            *i = again;
                        }
                    }
                }
                self.cache.relisted(self.namespace.as_deref(), items, rv);
            }
            Event::Apply(k) => {
                let Some(o) = object(k) else {
                    // Now malformed: withdrawn, as the index withdraws it.
                    return self.delete(k);
                };
                self.widen_for(&o);
                // Held until stored: a widening meanwhile waits, then
                // serves this version anew with the rest.
                let served = self.labels.read();
                match self.item_with(o, &served) {
                    Some(item) => self.cache.apply(item),
                    None => {
                        drop(served);
                        self.delete(k);
                    }
                }
            }
            Event::Delete(o) => self.delete(o),
        }
    }

    fn item(&self, o: Served) -> Option<Item> {
        self.widen_for(&o);
        let served = self.labels.read();
        self.item_with(o, &served)
    }

    /// An object as served: a Pod with the labels served in its
    /// namespace, anything else whole.
    fn item_with(&self, o: Served, served: &labels::Served<'_>) -> Option<Item> {
        if self.cache.kind == Kind::Pod {
            let ns = o.meta().and_then(|m| m.namespace.get()).cloned();
            let ns = ns.unwrap_or_default();
            Item::new(o, &|k: &str| served.serves(&ns, k))
        } else {
            Item::new(o, &|_: &str| true)
        }
    }

    /// A Service widens the pod labels served in its namespace with the
    /// keys it selects on.
    fn widen_for(&self, o: &Served) {
        let keys = o.selects_on();
        let Some(ns) = o.meta().and_then(|m| m.namespace.get()) else {
            return;
        };
        if keys.is_empty() {
            return;
        }
        self.labels.select(ns, keys, |served| {
            self.pods
                .rekey(ns, |i| i.reserved(Kind::Pod, &|k: &str| served(k)));
        });
    }

    fn delete<K: kube::Resource>(&self, o: &K) {
        let m = o.meta();
        let rv = m
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .unwrap_or_else(|| self.seen.load(Ordering::Acquire));
        if let Some(name) = &m.name {
            self.cache
                .delete(m.namespace.as_deref().unwrap_or(""), name, rv);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Pod, Service};
    use serde_json::json;

    use super::*;
    use crate::k8s::objects::{SlimJob, SlimNode, SlimPod, SlimServiceCidr};

    /// A relay of every namespace, with ten minutes of history.
    fn relay() -> Arc<Relay> {
        Relay::new(
            Duration::from_secs(600),
            vec![],
            Duration::from_secs(60),
            Default::default(),
        )
    }

    /// A typed object as the relay serves it: decoded as podns decodes it.
    fn object<K: serde::Serialize>(o: &K) -> Option<Served> {
        use crate::k8s::objects::{Relayed, SlimPod, SlimService};
        let v = serde_json::to_value(o).ok()?;
        match v["kind"].as_str() {
            Some("Service") => serde_json::from_value::<SlimService>(v).ok()?.served(),
            _ => serde_json::from_value::<SlimPod>(v).ok()?.served(),
        }
    }

    fn served(relay: &Relay, name: &str) -> Vec<String> {
        let snap = relay.cache(Kind::Pod).unwrap().snapshot(|i| i.name == name);
        let v: serde_json::Value = serde_json::from_slice(&snap.items[0].json(Kind::Pod)).unwrap();
        v["metadata"]["labels"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_service_widening_while_pods_list_has_them_served_with_its_key() {
        let relay = relay();
        let mut pods = relay.feed(Kind::Pod, None).unwrap();
        let mut services = relay.feed(Kind::Service, None).unwrap();
        let pod = |ns: &str, name: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns, "resourceVersion": "5",
                             "labels": {"tier": "gpu", "job-name": "j"}},
                "spec": {"containers": []},
            }))
            .unwrap()
        };
        pods.on_event(&Event::<Pod>::Init, object);
        pods.on_event(&Event::InitApply(pod("ml", "a")), object);
        pods.on_event(&Event::InitApply(pod("other", "b")), object);
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "gpus", "namespace": "ml", "resourceVersion": "6"},
            "spec": {"clusterIP": "None", "selector": {"tier": "gpu"}},
        }))
        .unwrap();
        services.on_event(&Event::Apply(svc), object);
        pods.seen().store(7, Ordering::Release);
        pods.on_event(&Event::<Pod>::InitDone, object);
        assert_eq!(served(&relay, "a"), ["job-name", "tier"]);
        assert_eq!(served(&relay, "b"), ["job-name"], "another namespace");
    }

    #[test]
    fn the_relay_taps_the_watches_of_the_kinds_it_serves_only() {
        let relay = relay();
        let pods = Taps::tap::<SlimPod>(&*relay, Some("ml")).expect("pods are relayed");
        assert_eq!(pods.namespace.as_deref(), Some("ml"));
        // The watcher publishes where it would resume: the feed reads it.
        let version = Tap::<SlimPod>::resume_version(&pods).expect("read by the feed");
        assert!(Arc::ptr_eq(&version, &pods.seen));
        assert!(Taps::tap::<SlimJob>(&*relay, None).is_some());
        assert!(Taps::tap::<SlimNode>(&*relay, None).is_none());
        assert!(Taps::tap::<SlimServiceCidr>(&*relay, None).is_none());
    }
}
