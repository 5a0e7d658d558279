//! The one writer. It owns the model of pods and services, the small
//! indexes that say which names an object contributes to, and applies each
//! watch event by rebuilding exactly the names the event touches.
//!
//! A pod event costs O(names it owns + headless Services of its namespace
//! that select it); a Service event re-evaluates only its namespace's pods.
//!
//! This file holds the writer's state and its batch loop. Each resource
//! has a file (`pods.rs`, `services.rs`, `ranks.rs` for Jobs and the rank
//! view), and so has each derived view (`by_name.rs`, `headless.rs`,
//! `rank_view.rs`, the names in `build.rs`), the publication rules
//! (`publish.rs`) and `podns explain` (`explain/`, with `findings.rs`). The
//! files that add to `impl Writer` import this one; it imports none of
//! them, only the data they define.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use super::policy::{Duplicates, Hostnames, Policy, Publish};
use crate::metrics::{Metrics, PROGRESS_EVERY};

mod build;
mod by_name;
pub mod explain;
mod headless;
mod model;
mod pods;
mod publish;
mod ranges;
mod rank_view;
mod ranks;
mod services;
mod slices;

use rank_view::{Group, Ranks, group};
use rank_view::{JOB_NAME, LEGACY_JOB_NAME};
#[cfg(test)]
pub(crate) use services::pins;

use by_name::{ByIp, ByName};
use headless::{HeadlessSet, PodId, SrvAdded};
use model::{Interner, Pod};

use super::containers::{HashMap, HashSet, Interned, SmallSet, remove_from};
use super::names::{
    gang_name, host_name, leader_name, member_name, pod_name, port_name, rank_name, reverse,
    service_name,
};
use super::table::{IpName, Rrs, Srv, SrvSet, Table, Target, Value};
use super::types::*;

/// A logical group of names that is rebuilt as one unit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    /// `<host>.<sub>.<ns>.svc`
    Host {
        ns: String,
        sub: String,
        host: String,
    },
    /// What one pod adds to a headless Service's set (no name of its own:
    /// sorted before `Svc`, which publishes the set).
    Member(ObjKey, PodId),
    /// `<svc>.<ns>.svc` and its SRV names `_<port>._<proto>.<svc>.<ns>.svc`
    Svc(ObjKey),
    /// `<a-b-c-d>.<svc>.<ns>.svc` of a headless Service
    SvcIp(ObjKey, IpAddr),
    /// `<a-b-c-d>.<ns>.pod`
    PodIp { ns: String, ip: IpAddr },
    /// the reverse name of an IP
    Ptr(IpAddr),
    // The rank view comes last: a batch rebuilds ranks (which move the
    // gang counters) before the summaries that print them.
    /// `<i>.<group>.<ns>.rank`
    Rank(Group, u32),
    /// `leader.<group>.<ns>.rank`
    Leader(Group),
    /// `<group>.<ns>.rank` TXT
    Summary(Group),
}

/// The resources a watch lists.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Pods,
    Services,
    Jobs,
    Slices,
    /// Nodes and ServiceCIDRs, counted together by [`ranges::Ranges`].
    Ranges,
}

/// How many complete lists (one per watch scope) each resource needs before
/// the index counts as synced.
#[derive(Clone, Copy, Debug, Default)]
pub struct SyncNeeds {
    pub pod_scopes: usize,
    pub service_scopes: usize,
    /// 0 when the rank view (and its Job watch) is off.
    pub job_scopes: usize,
    /// 0 when EndpointSlices are not watched.
    pub slice_scopes: usize,
}

impl SyncNeeds {
    /// One complete list of each resource, cluster-wide (what `zonefile`
    /// reads): Pods and Services, and Jobs when `jobs`, EndpointSlices
    /// when `slices`.
    pub fn one_list(jobs: bool, slices: bool) -> Self {
        Self {
            pod_scopes: 1,
            service_scopes: 1,
            job_scopes: usize::from(jobs),
            slice_scopes: usize::from(slices),
        }
    }
}

pub struct Writer {
    table: Arc<Table>,
    policy: Policy,
    metrics: Metrics,
    /// Pods by id. Every index below names a pod by its id (4 bytes), not
    /// by a copy of its namespace and name.
    pods: Slab<Pod>,
    /// Label and annotation pairs, shared by the pods in `pods`.
    interner: Interner,
    services: HashMap<ObjKey, ServiceInfo>,
    jobs: HashMap<ObjKey, JobInfo>,
    /// User-managed EndpointSlices, and what finds them (`slices.rs`).
    slices: slices::Slices,
    ranks: Ranks,
    /// Pod ids by namespace and name.
    ns_pods: HashMap<Arc<str>, ByName>,
    /// Service names by namespace.
    /// Headless Services with a selector, by namespace and by one pair of
    /// their selector (its anchor): a pod is tried against the Services
    /// whose anchor it carries, not against every Service of its
    /// namespace (1,000 Jobs in one namespace made that 1,000 tries a pod).
    selectors: HashMap<String, Anchors>,
    /// Pods by namespace, subdomain and hostname, in any state.
    hosts: HashMap<Arc<str>, HashMap<Arc<str>, ByName>>,
    /// Pods selected by each headless Service, in any state (the reverse is
    /// `Pod::services`).
    members: HashMap<ObjKey, BTreeSet<PodId>>,
    /// The records of each headless Service with a selector, counted
    /// member by member (derived from `members`).
    sets: HashMap<ObjKey, HeadlessSet>,
    /// Services whose set must be counted again from all members (the
    /// Service itself changed).
    stale_sets: HashSet<ObjKey>,
    /// Namespace and Service names the table's address entries hold,
    /// one copy each.
    /// Shared copies of the namespace and Service names in the table's
    /// address entries: a million pods of one namespace hold one string.
    strs: Interned<str>,
    /// Pods holding each IP, and Services holding each ClusterIP.
    ip_pods: ByIp,
    ip_services: HashMap<IpAddr, SmallSet<ObjKey>>,
    /// The names each Service key published last time it was built (every
    /// other key has exactly one name, [`key_name`]).
    svc_published: HashMap<Key, Vec<Box<str>>>,
    needs: SyncNeeds,
    /// Keys touched since the last flush, with repeats: a batch of events
    /// (a relist, a burst during a gang restart) rebuilds each touched name
    /// once, after sorting them. Event handlers collect keys in a local
    /// list and extend this one, so one that returns early cannot drop what
    /// the batch staged before it.
    dirty: Vec<Key>,
    /// Names with data in the table (kept here: counting is O(names)).
    name_count: i64,
    pod_resets: HashSet<Option<String>>,
    service_resets: HashSet<Option<String>>,
    job_resets: HashSet<Option<String>>,
    slice_resets: HashSet<Option<String>>,
    /// A node instance's watches relisting, by (resource, namespace): their
    /// namespaces are out of scope until the lists are in.
    relisting: HashSet<(&'static str, String)>,
    /// A node instance's namespaces held in part, and the gangs held.
    partial: HashMap<String, GangSelector>,
    /// `podns explain` requests, answered between batches (`--admin-debug`).
    explain_rx: Option<explain::ExplainReceiver>,
    /// A list was applied since [`RELEASE_MEMORY`] last ran.
    listed_since_release: bool,
    /// The ranges learned for the reverse zones ([`Self::with_ranges`]).
    ranges: ranges::Ranges,
}

/// What the process calls to hand freed memory back to the OS, once the
/// writer is idle after a list (the first sync, a relist): the moment the
/// most has just been freed (the decoded list, its strings, the batches).
/// The binary sets its allocator's collect here; unset (tests, benches),
/// nothing is called. An allocator that purges only when it is next used
/// keeps those pages resident in a server that then sits idle.
static RELEASE_MEMORY: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Set [`RELEASE_MEMORY`] (the first call wins).
pub fn set_release_memory(release: fn()) {
    let _ = RELEASE_MEMORY.set(release);
}

impl Writer {
    pub fn new(table: Arc<Table>, policy: Policy, metrics: Metrics, needs: SyncNeeds) -> Self {
        table.set_synced(false);
        Self {
            table,
            policy,
            metrics,
            pods: Slab::default(),
            interner: Interner::default(),
            services: HashMap::default(),
            jobs: HashMap::default(),
            slices: slices::Slices::default(),
            ranks: Ranks::default(),
            ns_pods: HashMap::default(),
            selectors: HashMap::default(),
            hosts: HashMap::default(),
            members: HashMap::default(),
            sets: HashMap::default(),
            stale_sets: HashSet::default(),
            strs: Interned::default(),
            ip_pods: ByIp::default(),
            ip_services: HashMap::default(),
            svc_published: HashMap::default(),
            needs,
            dirty: Vec::new(),
            name_count: 0,
            pod_resets: HashSet::default(),
            service_resets: HashSet::default(),
            job_resets: HashSet::default(),
            slice_resets: HashSet::default(),
            relisting: HashSet::default(),
            partial: HashMap::default(),
            explain_rx: None,
            listed_since_release: false,
            ranges: ranges::Ranges::default(),
        }
    }

    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    /// Apply one update and make it visible.
    pub fn apply(&mut self, update: Update) {
        self.stage(update);
        self.flush();
    }

    /// Change the model for one update; names are rebuilt by [`Self::flush`].
    pub fn stage(&mut self, update: Update) {
        match update {
            Update::Pod(Change::Apply(p)) => self.apply_pod(p),
            Update::Pod(Change::Delete(k)) => self.delete_pod(&k),
            Update::Pod(Change::Reset { namespace, items }) => {
                self.retain_pods(namespace.as_deref(), items.iter().map(|p| &p.key));
                for p in items {
                    self.apply_pod(p);
                }
                self.listed(Kind::Pods, namespace);
            }
            Update::Pod(Change::Listed { namespace, keys }) => {
                self.retain_pods(namespace.as_deref(), keys.iter());
                self.listed(Kind::Pods, namespace);
            }
            Update::Service(Change::Apply(s)) => self.apply_service(s),
            Update::Service(Change::Delete(k)) => self.delete_service(&k),
            Update::Service(Change::Reset { namespace, items }) => {
                self.retain_services(namespace.as_deref(), items.iter().map(|s| &s.key));
                for s in items {
                    self.apply_service(s);
                }
                self.listed(Kind::Services, namespace);
            }
            Update::Service(Change::Listed { namespace, keys }) => {
                self.retain_services(namespace.as_deref(), keys.iter());
                self.listed(Kind::Services, namespace);
            }
            Update::Job(Change::Apply(j)) => self.apply_job(j),
            Update::Job(Change::Delete(k)) => self.delete_job(&k),
            Update::Job(Change::Reset { namespace, items }) => {
                self.retain_jobs(namespace.as_deref(), items.iter().map(|j| &j.key));
                for j in items {
                    self.apply_job(j);
                }
                self.listed(Kind::Jobs, namespace);
            }
            Update::Job(Change::Listed { namespace, keys }) => {
                self.retain_jobs(namespace.as_deref(), keys.iter());
                self.listed(Kind::Jobs, namespace);
            }
            Update::Slice(Change::Apply(e)) => self.apply_slice(e),
            Update::Slice(Change::Delete(k)) => self.delete_slice(&k),
            Update::Slice(Change::Reset { namespace, items }) => {
                self.retain_slices(namespace.as_deref(), items.iter().map(|e| &e.key));
                for e in items {
                    self.apply_slice(e);
                }
                self.listed(Kind::Slices, namespace);
            }
            Update::Slice(Change::Listed { namespace, keys }) => {
                self.retain_slices(namespace.as_deref(), keys.iter());
                self.listed(Kind::Slices, namespace);
            }
            Update::Unscope(ns) => {
                let none = std::iter::empty();
                self.retain_pods(Some(&ns), none);
                self.retain_services(Some(&ns), std::iter::empty());
                self.retain_jobs(Some(&ns), std::iter::empty());
                self.retain_slices(Some(&ns), std::iter::empty());
                let scope = Some(ns.clone());
                self.pod_resets.remove(&scope);
                self.service_resets.remove(&scope);
                self.job_resets.remove(&scope);
                self.slice_resets.remove(&scope);
                self.relisting.retain(|(_, n)| *n != ns);
                self.partial.remove(&ns);
                self.table.scope().set_partial(&ns, false);
                self.table.scope().set_stale(&ns, false);
                let held = self.table.scope().set_contains(&ns, false);
                self.metrics.node_scope_namespaces.set(held as i64);
                self.flush();
            }
            Update::Relisting {
                resource,
                namespace,
            } => {
                let scope = self.table.scope();
                if scope.is_node() {
                    // What it answered until now stays, for the questions
                    // the relays leave unanswered meanwhile.
                    if scope.contains(&namespace) {
                        scope.set_stale(&namespace, true);
                    }
                    let held = scope.set_contains(&namespace, false);
                    self.metrics.node_scope_namespaces.set(held as i64);
                    self.relisting.insert((resource, namespace));
                }
            }
            Update::Partial { namespace, gangs } => {
                if self.table.scope().is_node() {
                    self.table.scope().set_partial(&namespace, gangs.is_some());
                    match gangs {
                        Some(g) => self.partial.insert(namespace.clone(), g),
                        None => self.partial.remove(&namespace),
                    };
                    // Which of its Services are held whole changes with the gangs.
                    let keys: Vec<ObjKey> = self
                        .services
                        .keys()
                        .filter(|k| k.namespace == namespace)
                        .cloned()
                        .collect();
                    for k in keys {
                        let unheld = self.services.get(&k).is_some_and(|s| self.is_unheld(s));
                        self.table.scope().set_unheld(&k.namespace, &k.name, unheld);
                    }
                }
            }
            Update::NodeRanges(change) => {
                if self.ranges.stage(ranges::Source::Nodes, change) {
                    self.listed(Kind::Ranges, None);
                }
            }
            Update::ServiceRanges(change) => {
                if self.ranges.stage(ranges::Source::ServiceCidrs, change) {
                    self.listed(Kind::Ranges, None);
                }
            }
        }
    }

    /// A complete list of one watch scope is applied: rebuild its names,
    /// then count the scope as listed (synced only once the names are in).
    fn listed(&mut self, kind: Kind, namespace: Option<String>) {
        self.listed_since_release = true;
        self.flush();
        match kind {
            Kind::Pods => self.pod_resets.insert(namespace.clone()),
            Kind::Services => self.service_resets.insert(namespace.clone()),
            Kind::Jobs => self.job_resets.insert(namespace.clone()),
            Kind::Slices => self.slice_resets.insert(namespace.clone()),
            Kind::Ranges => true,
        };
        self.update_synced();
        // A node instance answers a namespace from here once all its
        // watches have listed; until then its names are forwarded.
        if let Some(ns) = namespace.as_deref()
            && self.table.scope().is_node()
        {
            let resource = match kind {
                Kind::Pods => "pods",
                Kind::Services => "services",
                Kind::Jobs => "jobs",
                Kind::Slices => "endpointslices",
                Kind::Ranges => "",
            };
            self.relisting.remove(&(resource, ns.to_owned()));
            let scope = Some(ns.to_owned());
            let whole = !self.relisting.iter().any(|(_, n)| n == ns)
                && self.pod_resets.contains(&scope)
                && self.service_resets.contains(&scope)
                && (!self.policy.rank_view || self.job_resets.contains(&scope))
                && (!self.table.scope().slices_held() || self.slice_resets.contains(&scope));
            if whole {
                self.table.scope().set_stale(ns, false);
                let held = self.table.scope().set_contains(ns, true);
                self.metrics.node_scope_namespaces.set(held as i64);
            }
        }
    }

    /// Rebuild every name touched since the last flush, then publish gauges.
    pub fn flush(&mut self) {
        if !self.dirty.is_empty() {
            let mut dirty = std::mem::take(&mut self.dirty);
            // In key order: ranks before the summaries that count them.
            dirty.sort_unstable();
            dirty.dedup();
            self.rebuild(dirty);
            self.table.bump_generation();
        }
        if let Some(zones) = self.ranges.take_changed() {
            self.table.set_reverse_zones(zones);
            self.table.bump_generation();
        }
        self.metrics.index_pods.set(self.pods.len() as i64);
        self.metrics.index_services.set(self.services.len() as i64);
        self.metrics.rank_jobs.set(self.ranks.groups() as i64);
    }

    /// Run as the writer, on a thread of its own (a 100k-pod relist is
    /// seconds of CPU that must not stall the runtime's DNS loops): take
    /// every arrival that is already queued (up to a bound), apply them,
    /// flush once, until the channel closes.
    pub fn run_blocking(mut self, mut rx: tokio::sync::mpsc::Receiver<Arrival>) {
        const BATCH: usize = 1024;
        let mut arrived = Vec::with_capacity(BATCH);
        let started = std::time::Instant::now();
        let mut logged = started;
        while let Some(first) = self.next_arrival(&mut rx) {
            arrived.clear();
            arrived.push(first.at);
            self.stage(first.update);
            while arrived.len() < BATCH {
                match rx.try_recv() {
                    Ok(Arrival { update, at }) => {
                        arrived.push(at);
                        self.stage(update);
                    }
                    Err(_) => break,
                }
            }
            self.flush();
            for at in &arrived {
                self.metrics.propagation.observe(at.elapsed().as_secs_f64());
            }
            if self.listed_since_release && self.table.is_synced() && rx.is_empty() {
                self.listed_since_release = false;
                if let Some(release) = RELEASE_MEMORY.get() {
                    let t = std::time::Instant::now();
                    release();
                    tracing::debug!(
                        elapsed_ms = t.elapsed().as_millis() as u64,
                        "freed memory handed back after a list"
                    );
                }
            }
            if !self.table.is_synced() && logged.elapsed() >= PROGRESS_EVERY {
                // A 1M-pod sync takes a while: show it moving.
                logged = std::time::Instant::now();
                let secs = started.elapsed().as_secs_f64();
                tracing::info!(
                    phase = "indexing",
                    pods = self.pods.len(),
                    pods_per_second = (self.pods.len() as f64 / secs) as u64,
                    services = self.services.len(),
                    queued = rx.len(),
                    "sync in progress"
                );
            }
        }
    }

    fn update_synced(&mut self) {
        let synced = self.pod_resets.len() >= self.needs.pod_scopes
            && self.service_resets.len() >= self.needs.service_scopes
            && self.job_resets.len() >= self.needs.job_scopes
            && self.slice_resets.len() >= self.needs.slice_scopes
            && self.ranges.listed();
        if synced && !self.table.is_synced() {
            tracing::info!(
                pods = self.pods.len(),
                services = self.services.len(),
                "index synced"
            );
        }
        self.table.set_synced(synced);
        self.metrics
            .watch_synced
            .get_or_create(&crate::metrics::ResourceLabels { resource: "pods" })
            .set(i64::from(self.pod_resets.len() >= self.needs.pod_scopes));
        self.metrics
            .watch_synced
            .get_or_create(&crate::metrics::ResourceLabels {
                resource: "services",
            })
            .set(i64::from(
                self.service_resets.len() >= self.needs.service_scopes,
            ));
        // The Job watch (rank view) is optional for readiness but reports
        // its state like the others, when there is one.
        if self.needs.job_scopes > 0 {
            self.metrics
                .watch_synced
                .get_or_create(&crate::metrics::ResourceLabels { resource: "jobs" })
                .set(i64::from(self.job_resets.len() >= self.needs.job_scopes));
        }
        if self.needs.slice_scopes > 0 {
            self.metrics
                .watch_synced
                .get_or_create(&crate::metrics::ResourceLabels {
                    resource: "endpointslices",
                })
                .set(i64::from(
                    self.slice_resets.len() >= self.needs.slice_scopes,
                ));
        }
    }
}

/// The headless Services of one namespace by a pair of their selector.
type Anchors = HashMap<(Box<str>, Box<str>), BTreeSet<String>>;

/// Pods by id: a [`slab::Slab`] (a deleted pod's id is reused) under
/// `u32` ids, the size every index of the writer stores.
#[derive(Debug)]
struct Slab<T>(slab::Slab<T>);

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self(slab::Slab::new())
    }
}

impl<T> Slab<T> {
    fn insert(&mut self, v: T) -> PodId {
        // `PodId::MAX` is the rank view's "no pod".
        let id = PodId::try_from(self.0.insert(v)).expect("fewer than 2^32 pods");
        assert!(id != PodId::MAX, "fewer than 2^32 - 1 pods");
        id
    }

    /// The entry of an id, if it is live.
    fn try_get(&self, id: PodId) -> Option<&T> {
        self.0.get(id as usize)
    }

    /// The entry of a live id (ids come from the writer's own indexes).
    fn get(&self, id: PodId) -> &T {
        &self.0[id as usize]
    }

    fn get_mut(&mut self, id: PodId) -> &mut T {
        &mut self.0[id as usize]
    }

    fn remove(&mut self, id: PodId) -> T {
        self.0.remove(id as usize)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The keys of `map` in a relist's scope that the relist no longer lists.
pub(super) fn vanished<'a, V>(
    map: &HashMap<ObjKey, V>,
    namespace: Option<&str>,
    listed: impl Iterator<Item = &'a ObjKey>,
) -> Vec<ObjKey> {
    let keep: HashSet<&ObjKey> = listed.collect();
    map.keys()
        .filter(|k| namespace.is_none_or(|ns| k.namespace == ns) && !keep.contains(k))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;
