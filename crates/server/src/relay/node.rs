//! A node instance (`podns serve --relay-kubeconfig FILE --node NAME`): the
//! DaemonSet's podns, which watches the relays, never the API server, and
//! holds only what its own pods can ask about.
//!
//! It follows the pods on its node (`fieldSelector=spec.nodeName=NAME`);
//! their namespaces are its scope. For each namespace in scope it runs the
//! same watches `podns serve` runs for `--namespace` (Pods, Services, Jobs,
//! and EndpointSlices if the relay serves them),
//! against the relay, so a rank resolves its whole gang and its Services
//! from the node. A namespace whose last pod left the node stays for
//! [`LINGER`] (a gang restart deletes and recreates its pods: no relist
//! storm), then its watches stop and its objects leave the index. Names
//! outside the scope (and reverse names, which any pod may be behind) are
//! forwarded to the relays over DNS (`dns::forward`), so every name of the
//! zone answers right from any node.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::index::Table;
use crate::index::types::{Arrival, Update};
use crate::k8s::watch::{self, WatchConfig};
use crate::metrics::Metrics;

/// How long a namespace stays in scope after its last pod left the node.
pub const LINGER: Duration = Duration::from_secs(5 * 60);

/// `--node` and where the relays answer DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node's name (the DaemonSet passes `spec.nodeName`).
    pub node: String,
    /// The relays' DNS addresses, for the questions out of scope.
    pub relay_dns: Vec<SocketAddr>,
    /// How long a namespace lingers after its last pod left.
    pub linger: Duration,
}

/// One namespace in scope: its watches, and since when it has no pod here.
struct InScope {
    stop: CancellationToken,
    tasks: JoinSet<()>,
    empty_since: Option<Instant>,
}

/// Follow this node's pods and keep the scope's watches running.
pub async fn run(
    client: kube::Client,
    cfg: NodeConfig,
    wcfg: WatchConfig,
    tx: mpsc::Sender<Arrival>,
    table: Arc<Table>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    // Whether the relay serves EndpointSlices (one from before it did
    // does not): if it does, Services without a selector are held here
    // too; if not, their names are forwarded.
    let Some(slices) = relay_serves_slices(&client, &shutdown).await else {
        return;
    };
    let slices = slices && wcfg.endpoint_slices;
    table.set_slices_held(slices);
    let wcfg = WatchConfig {
        endpoint_slices: slices,
        ..wcfg
    };
    let api: Api<Pod> = Api::all(client.clone());
    let selector = format!("spec.nodeName={}", cfg.node);
    // Without `Init`, which the watcher sends before it asks for a list:
    // the backoff resets on every item, and on `Init` it would never grow
    // while the relays are down (every node retrying about once a second).
    let mut pods = watcher::watcher(api, watcher::Config::default().fields(&selector))
        .try_filter(|e| std::future::ready(!matches!(e, Event::Init)))
        .default_backoff()
        .boxed();
    // Pods on this node: (namespace, name).
    let mut here: HashSet<(String, String)> = HashSet::new();
    let mut listing: Option<HashSet<(String, String)>> = None;
    let mut scope: HashMap<String, InScope> = HashMap::new();
    // Failures of this watch in a row: the first is logged, the rest only
    // at debug level until it works again.
    let mut failing = 0u32;
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
                    if failing == 0 {
                        tracing::warn!(%error, "watch of this node's pods on the relay failed; retrying (logged again once it works)");
                    } else {
                        tracing::debug!(%error, failing, "watch of this node's pods still failing");
                    }
                    failing += 1;
                    // The watcher lists again from the start.
                    listing = None;
                    false
                }
                Some(Ok(event)) => {
                    if failing > 0 {
                        tracing::info!(failures = failing, "watch of this node's pods on the relay works again");
                        failing = 0;
                    }
                    match event {
                        Event::Init => {}
                        Event::InitApply(p) => {
                            if let Some(k) = key(&p) {
                                listing.get_or_insert_with(HashSet::new).insert(k);
                            }
                        }
                        Event::InitDone => {
                            here = listing.take().unwrap_or_default();
                            // The scope is known: ready, even with no pod here.
                            table.set_synced(true);
                        }
                        Event::Apply(p) => {
                            if let Some(k) = key(&p) {
                                here.insert(k);
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
            rescope(
                &here, &mut scope, &cfg, &client, &wcfg, &tx, &metrics, &shutdown,
            )
            .await;
        }
    }
    for (_, mut s) in scope.drain() {
        s.stop.cancel();
        s.tasks.shutdown().await;
    }
}

/// Ask the relay whether it serves EndpointSlices, until it answers;
/// `None` on shutdown.
async fn relay_serves_slices(client: &kube::Client, shutdown: &CancellationToken) -> Option<bool> {
    let mut wait = Duration::from_millis(500);
    loop {
        match client.list_api_group_resources("discovery.k8s.io/v1").await {
            Ok(list) => return Some(list.resources.iter().any(|r| r.name == "endpointslices")),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                tracing::info!(
                    "the relay serves no EndpointSlices: names of Services without a selector are forwarded"
                );
                return Some(false);
            }
            Err(error) => {
                tracing::debug!(%error, "asking the relay what it serves; retrying");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

fn key(p: &Pod) -> Option<(String, String)> {
    Some((p.metadata.namespace.clone()?, p.metadata.name.clone()?))
}

/// Start the watches of namespaces new to the scope; stop those of
/// namespaces empty for longer than the linger, and drop their objects.
#[allow(clippy::too_many_arguments)]
async fn rescope(
    here: &HashSet<(String, String)>,
    scope: &mut HashMap<String, InScope>,
    cfg: &NodeConfig,
    client: &kube::Client,
    wcfg: &WatchConfig,
    tx: &mpsc::Sender<Arrival>,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) {
    let wanted: HashSet<&str> = here.iter().map(|(ns, _)| ns.as_str()).collect();
    let now = Instant::now();
    for ns in &wanted {
        match scope.get_mut(*ns) {
            Some(s) => s.empty_since = None,
            None => {
                tracing::info!(namespace = %ns, "namespace in scope");
                let stop = shutdown.child_token();
                let mut tasks = JoinSet::new();
                let one = WatchConfig {
                    namespaces: vec![ns.to_string()],
                    ..wcfg.clone()
                };
                watch::spawn_watchers(
                    client.clone(),
                    &one,
                    tx.clone(),
                    metrics.clone(),
                    &mut tasks,
                    stop.clone(),
                );
                scope.insert(
                    ns.to_string(),
                    InScope {
                        stop,
                        tasks,
                        empty_since: None,
                    },
                );
            }
        }
    }
    let mut gone = Vec::new();
    for (ns, s) in scope.iter_mut() {
        if wanted.contains(ns.as_str()) {
            continue;
        }
        let since = *s.empty_since.get_or_insert(now);
        if now.duration_since(since) >= cfg.linger {
            gone.push(ns.clone());
        }
    }
    for ns in gone {
        let Some(mut s) = scope.remove(&ns) else {
            continue;
        };
        s.stop.cancel();
        // Every event its watches sent is in the channel before this.
        s.tasks.shutdown().await;
        tracing::info!(namespace = %ns, "namespace out of scope");
        let unscope = Arrival {
            update: Update::Unscope(ns),
            at: std::time::Instant::now(),
        };
        if tx.send(unscope).await.is_err() {
            return;
        }
    }
}
