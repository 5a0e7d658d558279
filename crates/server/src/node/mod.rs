//! A node instance (`podns serve --relay-kubeconfig FILE --node NAME`): the
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

mod reach;

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
use crate::index::types::{Arrival, GangSelector, Update};
use crate::k8s::failure::Failure;
use crate::k8s::updates::ToWriter;
use crate::k8s::watch::{self, WatchConfig};
use crate::metrics::Metrics;
pub use reach::Reach;

/// `--node` and where the relays answer DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node's name (the DaemonSet passes `spec.nodeName`).
    pub node: String,
    /// The relays' DNS addresses, for the questions out of scope.
    pub relay_dns: Vec<SocketAddr>,
    /// How long a namespace lingers after its last pod left.
    pub linger: Duration,
    /// The relay's URL, as its kubeconfig names it (for the log).
    pub relay_url: String,
}

/// A pod's gang ([`crate::labels::gang_of`]) from its labels.
fn gang_of(p: &Pod) -> Option<(&'static str, String)> {
    let labels = p.metadata.labels.as_ref()?;
    crate::labels::gang_of(|k| labels.get(k).map(String::as_str))
}

/// One namespace in scope: its watches, since when it has no pod here,
/// the gangs held when it is held in part, and since when each held gang
/// has no pod here.
struct InScope {
    stop: CancellationToken,
    tasks: JoinSet<()>,
    empty_since: Option<Instant>,
    gangs: Option<GangSelector>,
    gang_gone: HashMap<String, Instant>,
}

/// A pod on this node: its gang, if it has one.
type Here = HashMap<(String, String), Option<(&'static str, String)>>;

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
    // Whether the relay serves EndpointSlices (one from before it did
    // does not): if it does, Services without a selector are held here
    // too; if not, their names are forwarded.
    let Some(slices) = relay_serves_slices(&client, &reach, &shutdown).await else {
        return;
    };
    let slices = slices && wcfg.endpoint_slices;
    table.scope().set_slices_held(slices);
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
    // Pods on this node.
    let mut here: Here = HashMap::new();
    let mut listing: Option<Here> = None;
    let mut scope: HashMap<String, InScope> = HashMap::new();
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

fn key(p: &Pod) -> Option<(String, String)> {
    Some((p.metadata.namespace.clone()?, p.metadata.name.clone()?))
}

/// The gangs of namespace `ns`'s pods here, by their one gang label;
/// `None` (the whole namespace) when a pod here has no gang or the pods
/// name their gangs by different labels.
fn gangs_here(here: &Here, ns: &str) -> Option<GangSelector> {
    let mut key = None;
    let mut values = std::collections::BTreeSet::new();
    for ((n, _), gang) in here {
        if n != ns {
            continue;
        }
        let (k, v) = gang.as_ref()?;
        if key.is_some_and(|key| key != *k) {
            return None;
        }
        key = Some(*k);
        values.insert(v.clone());
    }
    Some(GangSelector {
        key: key?.to_owned(),
        values,
    })
}

impl InScope {
    /// The gangs to hold now: those `here` (of [`gangs_here`]) and those
    /// held already whose last pod left less than `linger` ago (a gang
    /// restart deletes and recreates its pods). Notes when a held gang
    /// left.
    fn gangs_to_hold(
        &mut self,
        here: Option<GangSelector>,
        linger: Duration,
        now: Instant,
    ) -> Option<GangSelector> {
        let mut want = here?;
        let present = want.values.clone();
        if let Some(held) = &self.gangs
            && held.key == want.key
        {
            for v in &held.values {
                if want.values.contains(v) {
                    continue;
                }
                let gone = *self.gang_gone.entry(v.clone()).or_insert(now);
                if now.duration_since(gone) < linger {
                    want.values.insert(v.clone());
                }
            }
        }
        // Only the gangs kept without a pod here have a moment they left.
        self.gang_gone
            .retain(|v, _| want.values.contains(v) && !present.contains(v));
        Some(want)
    }
}

/// Start the watches of namespaces new to the scope, restart those whose
/// held gangs changed; stop those of namespaces empty for longer than the
/// linger, and drop their objects.
#[allow(clippy::too_many_arguments)]
async fn rescope(
    here: &Here,
    scope: &mut HashMap<String, InScope>,
    cfg: &NodeConfig,
    client: &kube::Client,
    wcfg: &WatchConfig,
    tx: &mpsc::Sender<Arrival>,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) {
    let wanted: HashSet<&str> = here.keys().map(|(ns, _)| ns.as_str()).collect();
    let now = Instant::now();
    for ns in &wanted {
        // Gangs only without a selector of the operator's own.
        let gangs = match scope.get_mut(*ns) {
            _ if wcfg.label_selector.is_some() => None,
            Some(s) => s.gangs_to_hold(gangs_here(here, ns), cfg.linger, now),
            None => gangs_here(here, ns),
        };
        match scope.get_mut(*ns) {
            Some(s) if s.gangs == gangs => s.empty_since = None,
            held => {
                // A gang kept for the linger keeps the moment it left.
                let mut gang_gone = HashMap::new();
                if let Some(s) = held {
                    gang_gone = std::mem::take(&mut s.gang_gone);
                    s.stop.cancel();
                    // Every event the old watches sent is in the channel
                    // before what follows.
                    s.tasks.shutdown().await;
                    tracing::info!(namespace = %ns, gangs = ?gangs.as_ref().map(GangSelector::to_label_selector), "held gangs changed");
                    // Forwarded until the pods are listed anew.
                    let relisting = Arrival {
                        update: Update::Relisting {
                            resource: "pods",
                            namespace: ns.to_string(),
                        },
                        at: std::time::Instant::now(),
                    };
                    if tx.send(relisting).await.is_err() {
                        return;
                    }
                } else {
                    tracing::info!(namespace = %ns, gangs = ?gangs.as_ref().map(GangSelector::to_label_selector), "namespace in scope");
                }
                let partial = Arrival {
                    update: Update::Partial {
                        namespace: ns.to_string(),
                        gangs: gangs.clone(),
                    },
                    at: std::time::Instant::now(),
                };
                if tx.send(partial).await.is_err() {
                    return;
                }
                let stop = shutdown.child_token();
                let mut tasks = JoinSet::new();
                let one = WatchConfig {
                    namespaces: vec![ns.to_string()],
                    label_selector: gangs
                        .as_ref()
                        .map(GangSelector::to_label_selector)
                        .or_else(|| wcfg.label_selector.clone()),
                    ..wcfg.clone()
                };
                let taps = ToWriter::new(tx.clone(), metrics.clone(), stop.clone());
                watch::spawn_watchers(
                    client.clone(),
                    &one,
                    &taps,
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
                        gangs,
                        gang_gone,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::writer::pins;

    /// A pod here in a test: namespace, name, gang.
    type TestPod<'a> = (&'a str, &'a str, Option<(&'static str, &'a str)>);

    fn here(pods: &[TestPod<'_>]) -> Here {
        pods.iter()
            .map(|(ns, name, gang)| {
                (
                    (ns.to_string(), name.to_string()),
                    gang.map(|(k, v)| (k, v.to_string())),
                )
            })
            .collect()
    }

    fn kept_both(key: &str) -> GangSelector {
        GangSelector {
            key: key.into(),
            values: ["a".to_string(), "b".to_string()].into(),
        }
    }

    fn values(g: &GangSelector) -> Vec<&str> {
        g.values.iter().map(String::as_str).collect()
    }

    #[test]
    fn a_namespace_is_held_by_gang_only_when_every_pod_here_names_one_by_the_same_label() {
        let js = "jobset.sigs.k8s.io/jobset-name";
        let job = "batch.kubernetes.io/job-name";
        let now = Instant::now();
        let linger = Duration::from_secs(60);
        let h = here(&[
            ("ml", "a-0", Some((js, "a"))),
            ("ml", "b-0", Some((js, "b"))),
            ("ml", "b-1", Some((js, "b"))),
            ("web", "x", None),
            ("mix", "j-0", Some((job, "j"))),
            ("mix", "s-0", Some((js, "s"))),
        ]);
        let g = gangs_here(&h, "ml").unwrap();
        assert_eq!(g.key, js);
        assert_eq!(values(&g), ["a", "b"]);
        assert_eq!(
            g.to_label_selector(),
            "jobset.sigs.k8s.io/jobset-name in (a,b)"
        );
        assert!(pins(
            &g,
            &[(js.into(), "b".into()), ("x".into(), "y".into())]
        ));
        assert!(!pins(&g, &[(js.into(), "c".into())]));
        assert!(!pins(&g, &[(job.into(), "a".into())]));
        let jobs = GangSelector {
            key: job.into(),
            values: ["j".to_string()].into(),
        };
        assert!(
            pins(&jobs, &[("job-name".into(), "j".into())]),
            "the same label"
        );
        assert_eq!(gangs_here(&h, "web"), None, "no gang");
        assert_eq!(gangs_here(&h, "mix"), None, "two labels");

        // Gang `a` leaves the node: it stays held for the linger.
        let h = here(&[("ml", "b-0", Some((js, "b")))]);
        let mut held = InScope {
            stop: CancellationToken::new(),
            tasks: JoinSet::new(),
            empty_since: None,
            gangs: Some(g),
            gang_gone: HashMap::new(),
        };
        let kept = held
            .gangs_to_hold(gangs_here(&h, "ml"), linger, now)
            .unwrap();
        assert_eq!(values(&kept), ["a", "b"]);
        held.gangs = Some(kept);
        let later = now + linger / 2;
        let kept = held
            .gangs_to_hold(gangs_here(&h, "ml"), linger, later)
            .unwrap();
        assert_eq!(values(&kept), ["a", "b"], "left less than the linger ago");
        let left = held
            .gangs_to_hold(gangs_here(&h, "ml"), linger, now + linger)
            .unwrap();
        assert_eq!(values(&left), ["b"]);
        assert!(held.gang_gone.is_empty(), "nothing kept without a pod");
        // A gang back before the linger ends starts a fresh one if it leaves again.
        held.gangs = Some(kept_both(js));
        held.gang_gone.insert("a".into(), now);
        let h = here(&[
            ("ml", "a-0", Some((js, "a"))),
            ("ml", "b-0", Some((js, "b"))),
        ]);
        held.gangs_to_hold(gangs_here(&h, "ml"), linger, later);
        assert!(held.gang_gone.is_empty(), "a is here again");
    }

    #[test]
    fn a_pods_gang_is_its_most_encompassing_label() {
        let mut p = Pod::default();
        assert_eq!(gang_of(&p), None);
        p.metadata.labels = Some(
            [
                ("batch.kubernetes.io/job-name", "js-workers-0"),
                ("jobset.sigs.k8s.io/jobset-name", "js"),
                ("app", "x"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        assert_eq!(
            gang_of(&p),
            Some(("jobset.sigs.k8s.io/jobset-name", "js".to_string()))
        );
    }
}
