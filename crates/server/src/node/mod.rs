//! A node instance (`podns serve --node-relay-kubeconfig FILE --node NAME`): the
//! DaemonSet's podns, which watches the relays, never the API server, and
//! holds only what its own pods can ask about.
//!
//! It follows the pods on its node (`fieldSelector=spec.nodeName=NAME`);
//! their namespaces are its scope. For each namespace in scope it runs the
//! same watches `podns serve` runs for `--namespace` (Pods, Services, Jobs,
//! and EndpointSlices if the relay serves them),
//! against the relay, so a rank resolves its whole gang and its Services
//! from the node. When every pod of a namespace on the node belongs to a
//! gang by the same label ([`GANG_KEYS`](crate::labels::GANG_KEYS): a JobSet, a Job, a training
//! operator's job), only those gangs' pods are watched (`labelSelector=key
//! in (...)`); the namespace is then held in part (`Update::Partial`) and
//! its names that other gangs' pods may own are forwarded unless found.
//! A namespace whose last pod left the node stays for
//! `--scope-linger` (a gang restart deletes and recreates its pods: no relist
//! storm), then its watches stop and its objects leave the index. Names
//! outside the scope (and reverse names, which any pod may be behind) are
//! forwarded to the relays over DNS (`dns::forward`), so every name of the
//! zone answers right from any node.

mod held;
mod reach;
pub mod state;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{Event, ListSemantic};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::index::Table;
use crate::index::types::Arrival;
use crate::k8s::failure::Failure;
use crate::k8s::objects::SlimPod;
use crate::k8s::watch::{StreamingList, WatchConfig};
use crate::k8s::wire::{RawConfig, raw_watcher_selecting};
use crate::metrics::Metrics;
use held::Held;
pub use reach::Reach;

/// The pods on this node, by (namespace, name): each one's gang, if it has
/// one. What `held` scopes by and `state` saves.
type Here = HashMap<(String, String), Option<(&'static str, String)>>;

/// `--node` and where the relays answer DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node's name (the DaemonSet passes `spec.nodeName`).
    pub node: String,
    /// The relays' DNS addresses, for the questions out of scope.
    pub relay_dns: Vec<SocketAddr>,
    /// How long a namespace lingers after its last pod left.
    pub linger: Duration,
    /// The relay's URL, as its kubeconfig names it (for the log, and
    /// the saved scope's identity).
    pub relay_url: String,
    /// The SHA-256 of the CA the relay kubeconfig trusts
    /// ([`state::Identity::fingerprint`]; empty without one).
    pub relay_ca: String,
    /// Where the scope is saved across restarts (`--node-state-dir`).
    pub state_dir: Option<std::path::PathBuf>,
    /// Open the watches through the relay's multiplexed watch
    /// ([`crate::k8s::mux`]; off: `--no-watch-mux`).
    pub mux: bool,
}

/// A pod's gang ([`crate::labels::gang_of`]) from its labels.
fn gang_of(p: &SlimPod) -> Option<(&'static str, String)> {
    let labels = &p.meta.labels;
    crate::labels::gang_of(|k| {
        labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    })
}

/// Follow this node's pods and keep the scope's watches running.
pub async fn run(
    client: kube::Client,
    cfg: NodeConfig,
    wcfg: WatchConfig,
    tx: mpsc::Sender<Arrival>,
    table: Arc<Table>,
    (metrics, reach): (Metrics, Reach),
    shutdown: CancellationToken,
) {
    let store = cfg.state_dir.as_deref().map(|dir| {
        let identity = state::Identity {
            relay: cfg.relay_url.clone(),
            ca: cfg.relay_ca.clone(),
            node: cfg.node.clone(),
        };
        Arc::new(state::Store::new(
            dir,
            identity,
            metrics.clone(),
            wcfg.dicts.clone(),
        ))
    });
    let loaded = match &store {
        Some(s) => s.load().await,
        None => None,
    };
    // Whether the relay serves EndpointSlices (one from before it did
    // does not): if it does, Services without a selector are held here
    // too; if not, their names are forwarded. A saved scope says what the
    // relay did when it was saved.
    let slices = match &loaded {
        Some((_, slices)) => *slices,
        None => match relay_serves_slices(&client, &reach, &shutdown).await {
            Some(slices) => slices,
            None => return,
        },
    };
    if let Some(s) = &store {
        s.set_slices(slices);
    }
    let slices = slices && wcfg.endpoint_slices;
    table.scope().set_slices_held(slices);
    // Every watch on one connection to the relay (a relay without the
    // multiplexed watch is read one request per watch).
    let mux = (wcfg.wire == crate::k8s::wire::Wire::Auto && cfg.mux)
        .then(|| crate::k8s::mux::Mux::new(client.clone(), wcfg.dicts.clone(), metrics.clone()));
    let wcfg = WatchConfig {
        endpoint_slices: slices,
        mux,
        ..wcfg
    };
    // This node's pods, on the watch loop of the scope's watches: in the
    // relay's compact stream, and with a saved scope started from its
    // saved list and resumed from its resourceVersion, not listed.
    let selector = format!("spec.nodeName={}", cfg.node);
    let mut keep = store.as_ref().map(|s| s.node_pods(&selector));
    let start = keep
        .as_mut()
        .and_then(state::KeepTap::take_saved::<SlimPod>);
    if let Some(l) = &start {
        tracing::info!(pods = l.items.len(), resource_version = %l.rv, "this node's pods: resuming from the saved scope");
    }
    let raw = RawConfig {
        url_path: "/api/v1/pods".into(),
        label_selector: None,
        list_semantic: ListSemantic::Any,
        // A streaming list: the list and its watch in one request. After a
        // Service widens the labels served in a namespace, a relay ends
        // every watch resumed there for a while (another relay may have
        // served the old labels at a later position); a list followed by a
        // watch from its resourceVersion would be sent back to list again
        // and again until that while is over.
        streaming: wcfg.streaming != StreamingList::Off,
        wire: wcfg.wire,
        seen: keep.as_ref().map(state::KeepTap::seen),
        bookmarked: keep.as_ref().map(state::KeepTap::bookmarked),
        held: Some(wcfg.dicts.clone()),
        progress: wcfg.progress,
        mux: wcfg.mux.clone(),
        probe: wcfg.probe,
        steady_bookmarks: wcfg.steady_bookmarks,
        currency: Some(crate::k8s::wire::Currency {
            resource: "pods",
            fresh: metrics.staleness.watch("pods"),
            probes: metrics.watch_probes.clone(),
        }),
    };
    // Without `Init`, which the watcher sends before it asks for a list:
    // the backoff resets on every item, and on `Init` it would never grow
    // while the relays are down (every node retrying about once a second).
    // The state keeps every event, `Init` too.
    let mut pods = raw_watcher_selecting::<SlimPod>(client.clone(), raw, Some(selector), start)
        .inspect(move |e| {
            if let (Some(k), Ok(e)) = (&keep, e) {
                k.note(e);
            }
        })
        .try_filter(|e| std::future::ready(!matches!(e, Event::Init)))
        .default_backoff()
        .boxed();
    // Pods on this node.
    let mut here: Here = HashMap::new();
    let mut listing: Option<Here> = None;
    let mut held = Held::new(
        cfg.linger,
        client.clone(),
        wcfg,
        tx,
        (metrics, shutdown.clone(), store.clone()),
    );
    let saving = CancellationToken::new();
    let saver = store
        .clone()
        .map(|s| tokio::spawn(s.keep_saving(saving.clone())));
    if let Some((saved, _)) = loaded {
        // Served at once: each watch starts from its saved list and
        // resumes, this node's pods' too (listed if none was saved).
        here = saved;
        held.rescope(&here).await;
        table.set_synced(true);
    }
    let mut tick = tokio::time::interval(
        Duration::from_secs(5).min(cfg.linger.max(Duration::from_millis(100))),
    );
    loop {
        let changed = tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => true,
            next = pods.next() => match next {
                None => break,
                Some(Err(error)) => {
                    reach.failed("watch this node's pods", &Failure::of_watcher(&error));
                    // The watcher lists again from the start.
                    listing = None;
                    false
                }
                Some(Ok(event)) => {
                    reach.worked();
                    match event {
                        Event::Init => {}
                        Event::InitApply(p) => {
                            if let Some(k) = key(&p) {
                                listing.get_or_insert_with(HashMap::new).insert(k, gang_of(&p));
                            }
                        }
                        Event::InitDone => {
                            here = listing.take().unwrap_or_default();
                            if let Some(s) = &store {
                                s.forget_loaded();
                            }
                            // The scope is known: ready, even with no pod here.
                            table.set_synced(true);
                        }
                        Event::Apply(p) => {
                            if let Some(k) = key(&p) {
                                here.insert(k, gang_of(&p));
                            }
                        }
                        Event::Delete(p) => {
                            if let Some(k) = key(&p) {
                                here.remove(&k);
                            }
                        }
                    }
                    listing.is_none()
                }
            },
        };
        if changed {
            if let Some(s) = &store {
                s.set_here(&here);
            }
            held.rescope(&here).await;
        }
    }
    held.stop().await;
    // The last state, whole, once every watch has stopped.
    saving.cancel();
    if let Some(saver) = saver {
        let _ = saver.await;
    }
    if let Some(s) = &store {
        s.save(true).await;
    }
}

/// Ask the relay whether it serves EndpointSlices, until it answers;
/// `None` on shutdown.
async fn relay_serves_slices(
    client: &kube::Client,
    reach: &Reach,
    shutdown: &CancellationToken,
) -> Option<bool> {
    let mut wait = Duration::from_millis(500);
    loop {
        match client.list_api_group_resources("discovery.k8s.io/v1").await {
            Ok(list) => {
                reach.worked();
                return Some(list.resources.iter().any(|r| r.name == "endpointslices"));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                reach.worked();
                tracing::info!(
                    "the relay serves no EndpointSlices: names of Services without a selector are forwarded"
                );
                return Some(false);
            }
            Err(error) => reach.failed("ask what it serves", &Failure::of(&error)),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

fn key(p: &SlimPod) -> Option<(String, String)> {
    Some((p.metadata.namespace.clone()?, p.metadata.name.clone()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_pods_gang_is_its_most_encompassing_label() {
        let mut p = SlimPod::default();
        assert_eq!(gang_of(&p), None);
        p.meta.labels = [
            ("batch.kubernetes.io/job-name", "js-workers-0"),
            ("jobset.sigs.k8s.io/jobset-name", "js"),
            ("app", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            gang_of(&p),
            Some(("jobset.sigs.k8s.io/jobset-name", "js".to_string()))
        );
    }
}
