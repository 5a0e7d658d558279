//! The namespaces a node instance holds: which gangs of each, and
//! starting and stopping their watches as its node's pods come and go.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Here;
use super::state::{Keep, Store};
use crate::index::types::{Arrival, GangSelector, Update};
use crate::k8s::updates::ToWriter;
use crate::k8s::watch::{self, WatchConfig};
use crate::metrics::Metrics;

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

/// The namespaces in scope, each with its watches, and what starting
/// them takes.
pub(super) struct Held {
    scope: HashMap<String, InScope>,
    /// How long a namespace or gang stays after its last pod here left.
    linger: Duration,
    client: kube::Client,
    wcfg: WatchConfig,
    /// The writer's channel: every watch's, and the scope's own updates.
    tx: mpsc::Sender<Arrival>,
    metrics: Metrics,
    shutdown: CancellationToken,
    /// Where the watches' objects are kept for the saved scope
    /// (`--node-state-dir`).
    store: Option<Arc<Store>>,
}

impl Held {
    pub(super) fn new(
        linger: Duration,
        client: kube::Client,
        wcfg: WatchConfig,
        tx: mpsc::Sender<Arrival>,
        (metrics, shutdown, store): (Metrics, CancellationToken, Option<Arc<Store>>),
    ) -> Self {
        Self {
            scope: HashMap::new(),
            linger,
            client,
            wcfg,
            tx,
            metrics,
            shutdown,
            store,
        }
    }

    /// The watches of `ns` stopped: they are saved no more.
    fn forget(&self, ns: &str) {
        if let Some(store) = &self.store {
            store.forget(ns);
        }
    }

    /// Start the watches of namespaces new to the scope, restart those
    /// whose held gangs changed; stop those of namespaces empty for longer
    /// than the linger, and drop their objects.
    pub(super) async fn rescope(&mut self, here: &Here) {
        let wanted: HashSet<&str> = here.keys().map(|(ns, _)| ns.as_str()).collect();
        let now = Instant::now();
        for ns in &wanted {
            // Gangs only without a selector of the operator's own.
            let gangs = match self.scope.get_mut(*ns) {
                _ if self.wcfg.label_selector.is_some() => None,
                Some(s) => s.gangs_to_hold(gangs_here(here, ns), self.linger, now),
                None => gangs_here(here, ns),
            };
            let before = match self.scope.get_mut(*ns) {
                Some(s) if s.gangs == gangs => {
                    s.empty_since = None;
                    continue;
                }
                Some(_) => self.scope.remove(*ns),
                None => None,
            };
            if self.hold(ns, gangs, before).await.is_break() {
                return;
            }
        }
        self.release(&wanted, now).await;
    }

    /// Hold `ns` (only `gangs`' pods, if any): the watches that held it
    /// otherwise (`before`) stop, the writer is told, its watches start.
    async fn hold(
        &mut self,
        ns: &str,
        gangs: Option<GangSelector>,
        before: Option<InScope>,
    ) -> ControlFlow<()> {
        // A gang kept for the linger keeps the moment it left.
        let mut gang_gone = HashMap::new();
        if let Some(mut s) = before {
            gang_gone = std::mem::take(&mut s.gang_gone);
            s.stop.cancel();
            // Every event the old watches sent is in the channel before
            // what follows.
            s.tasks.shutdown().await;
            self.forget(ns);
            tracing::info!(namespace = %ns, gangs = ?gangs.as_ref().map(GangSelector::to_label_selector), "held gangs changed");
            // Forwarded until the pods are listed anew.
            self.send(Update::Relisting {
                resource: "pods",
                namespace: ns.to_string(),
            })
            .await?;
        } else {
            tracing::info!(namespace = %ns, gangs = ?gangs.as_ref().map(GangSelector::to_label_selector), "namespace in scope");
        }
        self.send(Update::Partial {
            namespace: ns.to_string(),
            gangs: gangs.clone(),
        })
        .await?;
        let stop = self.shutdown.child_token();
        let mut tasks = JoinSet::new();
        let one = WatchConfig {
            namespaces: vec![ns.to_string()],
            label_selector: gangs
                .as_ref()
                .map(GangSelector::to_label_selector)
                .or_else(|| self.wcfg.label_selector.clone()),
            ..self.wcfg.clone()
        };
        let keep = self.store.as_ref().map(|store| Keep {
            store: store.clone(),
            pods_selector: one.label_selector.clone(),
        });
        let taps = (
            ToWriter::new(self.tx.clone(), self.metrics.clone(), stop.clone()),
            keep,
        );
        watch::spawn_watchers(
            self.client.clone(),
            &one,
            &taps,
            self.metrics.clone(),
            &mut tasks,
            stop.clone(),
        );
        self.scope.insert(
            ns.to_string(),
            InScope {
                stop,
                tasks,
                empty_since: None,
                gangs,
                gang_gone,
            },
        );
        ControlFlow::Continue(())
    }

    /// Stop the watches of the namespaces not `wanted` for longer than the
    /// linger, and drop their objects.
    async fn release(&mut self, wanted: &HashSet<&str>, now: Instant) {
        let mut gone = Vec::new();
        for (ns, s) in self.scope.iter_mut() {
            if wanted.contains(ns.as_str()) {
                continue;
            }
            let since = *s.empty_since.get_or_insert(now);
            if now.duration_since(since) >= self.linger {
                gone.push(ns.clone());
            }
        }
        for ns in gone {
            let Some(mut s) = self.scope.remove(&ns) else {
                continue;
            };
            s.stop.cancel();
            // Every event its watches sent is in the channel before this.
            s.tasks.shutdown().await;
            self.forget(&ns);
            tracing::info!(namespace = %ns, "namespace out of scope");
            if self.send(Update::Unscope(ns)).await.is_break() {
                return;
            }
        }
    }

    /// One update for the writer; `Break` when it is gone.
    async fn send(&self, update: Update) -> ControlFlow<()> {
        let arrival = Arrival {
            update,
            at: std::time::Instant::now(),
        };
        match self.tx.send(arrival).await {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    }

    /// Stop every watch (at shutdown).
    pub(super) async fn stop(mut self) {
        for (_, mut s) in self.scope.drain() {
            s.stop.cancel();
            s.tasks.shutdown().await;
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
}
