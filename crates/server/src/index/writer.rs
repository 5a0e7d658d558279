//! The one writer. It owns the model of pods and services, the small
//! indexes that say which names an object contributes to, and applies each
//! watch event by rebuilding exactly the names the event touches.
//!
//! A pod event costs O(names it owns + headless Services of its namespace
//! that select it); a Service event re-evaluates only its namespace's pods.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use super::policy::{Duplicates, Hostnames, Policy, Publish};
use crate::admin::Metrics;

#[path = "ranks.rs"]
pub mod ranks;

#[path = "explain.rs"]
pub mod explain;

use ranks::{Group, Ranks, group};

use super::by_name::{ByIp, ByName};
use super::headless::{HeadlessSet, PodId, SrvAdded};
use super::interned::Interned;
use super::model::{Interner, Pod};
use super::names::{
    gang_name, host_name, leader_name, member_name, pod_name, port_name, rank_name, reverse,
    service_name,
};
use super::table::{IpName, Rrs, Srv, SrvSet, Table, Target, Value};
use super::types::*;

/// The index's hash maps: foldhash, several times faster than SipHash on
/// its short keys, and seeded at random per map (the keys are names that
/// anyone who can create a pod chooses).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

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

/// How often a sync in progress says how far it got.
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The resources a watch lists.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Pods,
    Services,
    Jobs,
}

/// How many complete lists (one per watch scope) each resource needs before
/// the index counts as synced.
#[derive(Clone, Copy, Debug)]
pub struct SyncNeeds {
    pub pod_scopes: usize,
    pub service_scopes: usize,
    /// 0 when the rank view (and its Job watch) is off.
    pub job_scopes: usize,
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
    /// `podns explain` requests, answered between batches (`--admin-debug`).
    explain_rx: Option<explain::ExplainReceiver>,
    /// A list was applied since [`RELEASE_MEMORY`] last ran.
    listed_since_release: bool,
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
            explain_rx: None,
            listed_since_release: false,
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
        }
    }

    /// A complete list of one watch scope is applied: rebuild its names,
    /// then count the scope as listed (synced only once the names are in).
    fn listed(&mut self, kind: Kind, namespace: Option<String>) {
        self.listed_since_release = true;
        self.flush();
        match kind {
            Kind::Pods => self.pod_resets.insert(namespace),
            Kind::Services => self.service_resets.insert(namespace),
            Kind::Jobs => self.job_resets.insert(namespace),
        };
        self.update_synced();
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
            && self.job_resets.len() >= self.needs.job_scopes;
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
            .get_or_create(&crate::admin::metrics::ResourceLabels { resource: "pods" })
            .set(i64::from(self.pod_resets.len() >= self.needs.pod_scopes));
        self.metrics
            .watch_synced
            .get_or_create(&crate::admin::metrics::ResourceLabels {
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
                .get_or_create(&crate::admin::metrics::ResourceLabels { resource: "jobs" })
                .set(i64::from(self.job_resets.len() >= self.needs.job_scopes));
        }
    }

    // ---- pods ----------------------------------------------------------

    /// The id of a pod by namespace and name.
    fn pod_id(&self, ns: &str, name: &str) -> Option<PodId> {
        self.ns_pods
            .get(ns)?
            .get(name, |id| self.pod_name(id))
            .next()
    }

    fn pod_name(&self, id: PodId) -> &str {
        self.pods.get(id).name()
    }

    /// The pods holding `ip`, in any state and no order.
    fn ip_holders(&self, ip: IpAddr) -> impl Iterator<Item = &Pod> {
        self.ip_pods
            .get(ip, |id| &self.pods.get(id).ips)
            .map(|id| self.pods.get(id))
    }

    fn pod(&self, id: PodId) -> &Pod {
        self.pods.get(id)
    }

    pub fn apply_pod(&mut self, pod: PodInfo) {
        let old = self.pod_id(&pod.key.namespace, &pod.key.name);
        if old.is_some_and(|id| self.pod(id).same_as(&pod)) {
            return;
        }
        let mut dirty = Vec::new();
        if let Some(id) = old {
            self.pod_keys(id, &mut dirty);
            self.unlink_pod(id);
        }
        let id = self.link_pod(pod);
        self.pod_keys(id, &mut dirty);
        self.dirty.extend(dirty);
    }

    pub fn delete_pod(&mut self, key: &ObjKey) {
        let Some(id) = self.pod_id(&key.namespace, &key.name) else {
            return;
        };
        let mut dirty = Vec::new();
        self.pod_keys(id, &mut dirty);
        self.unlink_pod(id);
        self.dirty.extend(dirty);
    }

    /// Remove the pods of a listed scope that the list no longer has.
    fn retain_pods<'a>(
        &mut self,
        namespace: Option<&str>,
        listed: impl Iterator<Item = &'a ObjKey>,
    ) {
        let keep: HashSet<(&str, &str)> = listed
            .map(|k| (k.namespace.as_str(), k.name.as_str()))
            .collect();
        let gone: Vec<PodId> = self
            .ns_pods
            .iter()
            .filter(|(ns, _)| namespace.is_none_or(|n| *n == ***ns))
            .flat_map(|(ns, names)| {
                names
                    .iter()
                    .filter(|&id| !keep.contains(&(&**ns, self.pod_name(id))))
            })
            .collect();
        drop(keep);
        for id in gone {
            let mut dirty = Vec::new();
            self.pod_keys(id, &mut dirty);
            self.unlink_pod(id);
            self.dirty.extend(dirty);
        }
    }

    /// Every key whose names depend on this pod as it is now.
    fn pod_keys(&self, id: PodId, out: &mut Vec<Key>) {
        let pod = self.pod(id);
        let ns = pod.ns();
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain()) {
            // Pods sharing the hostname: which one wins decides their PTRs
            // and SRV targets too.
            for sibling in self.host_pods(ns, sub, host) {
                if sibling == id {
                    continue;
                }
                let sp = self.pod(sibling);
                for ip in &sp.ips {
                    out.push(Key::Ptr(*ip));
                }
                for svc in &sp.services {
                    let sk = ObjKey::new(&**ns, &**svc);
                    out.push(Key::Member(sk.clone(), sibling));
                    out.push(Key::Svc(sk));
                }
            }
            out.push(Key::Host {
                ns: ns.to_string(),
                sub: sub.to_string(),
                host: host.to_string(),
            });
        }
        for svc in &pod.services {
            let sk = ObjKey::new(&**ns, &**svc);
            for ip in &pod.ips {
                out.push(Key::SvcIp(sk.clone(), *ip));
            }
            out.push(Key::Member(sk.clone(), id));
            out.push(Key::Svc(sk));
        }
        for ip in &pod.ips {
            out.push(Key::PodIp {
                ns: ns.to_string(),
                ip: *ip,
            });
            out.push(Key::Ptr(*ip));
        }
        self.rank_keys(id, out);
    }

    /// The pods with a hostname under a subdomain, in any state.
    fn host_pods<'a>(
        &'a self,
        ns: &str,
        sub: &str,
        host: &'a str,
    ) -> impl Iterator<Item = PodId> + 'a {
        let hostname = |id| self.pods.get(id).hostname().unwrap_or_default();
        self.hosts
            .get(ns)
            .and_then(|subs| subs.get(sub))
            .into_iter()
            .flat_map(move |by| by.get(host, hostname))
    }

    fn link_pod(&mut self, info: PodInfo) -> PodId {
        let namespace = &info.key.namespace;
        // Share the namespace and subdomain strings with the indexes that
        // hold them already.
        let ns = match self.ns_pods.get_key_value(namespace.as_str()) {
            Some((ns, _)) => ns.clone(),
            None => {
                let ns = Arc::<str>::from(namespace.as_str());
                self.ns_pods.insert(ns.clone(), ByName::default());
                ns
            }
        };
        let subdomain = info.subdomain.as_deref().map(|sub| {
            self.hosts
                .get(&*ns)
                .and_then(|subs| subs.get_key_value(sub))
                .map_or_else(|| Arc::from(sub), |(s, _)| s.clone())
        });
        let mut pod = Pod::new(info, ns.clone(), subdomain, &mut self.interner);
        if let Some(anchors) = self.selectors.get(&*ns) {
            let mut services = SmallSet::default();
            for pair in pod.labels() {
                for svc in anchors.get(&**pair).into_iter().flatten() {
                    if let Some(s) = self.services.get(&ObjKey::new(&*ns, svc.as_str()))
                        && selects(s, &pod)
                    {
                        services.insert(svc.as_str().into());
                    }
                }
            }
            pod.services = self.interner.services(services);
        }
        let id = self.pods.insert(pod);
        let pods = &self.pods;
        let pod = pods.get(id);
        if let Some(names) = self.ns_pods.get_mut(&*ns) {
            names.insert(id, |i| pods.get(i).name());
        }
        if let (Some(_), Some(sub)) = (pod.hostname(), pod.subdomain()) {
            self.hosts
                .entry(ns.clone())
                .or_default()
                .entry(sub.clone())
                .or_default()
                .insert(id, |i| pods.get(i).hostname().unwrap_or_default());
        }
        self.ip_pods.insert(id, |i| &pods.get(i).ips);
        for svc in &pod.services {
            self.members
                .entry(ObjKey::new(&*ns, &**svc))
                .or_default()
                .insert(id);
        }
        self.link_ranks(id);
        id
    }

    fn unlink_pod(&mut self, id: PodId) {
        self.unlink_ranks(id);
        let pod = self.pods.remove(id);
        let ns = pod.ns();
        for svc in &pod.services {
            if let Some(set) = self.sets.get_mut(&ObjKey::new(&**ns, &**svc)) {
                set.take(id, &pod.ips);
            }
        }
        if let Some(names) = self.ns_pods.get_mut(&**ns) {
            names.remove(id, pod.name());
            if names.is_empty() {
                self.ns_pods.remove(&**ns);
            }
        }
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain())
            && let Some(subs) = self.hosts.get_mut(&**ns)
        {
            if let Some(hosts) = subs.get_mut(&**sub) {
                hosts.remove(id, host);
                if hosts.is_empty() {
                    subs.remove(&**sub);
                }
            }
            if subs.is_empty() {
                self.hosts.remove(&**ns);
            }
        }
        self.ip_pods.remove(id, &pod.ips);
        for svc in &pod.services {
            remove_from(&mut self.members, &ObjKey::new(&**ns, &**svc), &id);
        }
        pod.release(&mut self.interner);
    }

    // ---- services ------------------------------------------------------

    pub fn apply_service(&mut self, svc: ServiceInfo) {
        if self.services.get(&svc.key) == Some(&svc) {
            return;
        }
        let key = svc.key.clone();
        let mut dirty = Vec::new();
        self.service_keys(&key, &mut dirty);
        self.unlink_service(&key);
        self.link_service(svc);
        self.service_keys(&key, &mut dirty);
        self.dirty.extend(dirty);
    }

    pub fn delete_service(&mut self, key: &ObjKey) {
        if !self.services.contains_key(key) {
            return;
        }
        let mut dirty = Vec::new();
        self.service_keys(key, &mut dirty);
        self.unlink_service(key);
        self.dirty.extend(dirty);
    }

    fn retain_services<'a>(
        &mut self,
        namespace: Option<&str>,
        listed: impl Iterator<Item = &'a ObjKey>,
    ) {
        for k in &vanished(&self.services, namespace, listed) {
            self.delete_service(k);
        }
    }

    /// Every key whose names depend on this Service as it is now: its own
    /// names, its members' dashed names and PTRs (whose most specific name
    /// may be under it), and the hostname names under a subdomain of its name
    /// (which policies tie to the Service).
    fn service_keys(&self, key: &ObjKey, out: &mut Vec<Key>) {
        out.push(Key::Svc(key.clone()));
        if let Some(ServiceKind::ClusterIp(ips)) = self.services.get(key).map(|s| &s.kind) {
            for ip in ips {
                out.push(Key::Ptr(*ip));
            }
        }
        for &id in self.members.get(key).into_iter().flatten() {
            for ip in &self.pod(id).ips {
                out.push(Key::SvcIp(key.clone(), *ip));
                out.push(Key::Ptr(*ip));
            }
        }
        let under = self
            .hosts
            .get(key.namespace.as_str())
            .and_then(|subs| subs.get(key.name.as_str()));
        // A hostname held by several pods is pushed for each: the batch
        // rebuilds each key once.
        for id in under.into_iter().flat_map(ByName::iter) {
            let pod = self.pod(id);
            out.push(Key::Host {
                ns: key.namespace.clone(),
                sub: key.name.clone(),
                host: pod.hostname().unwrap_or_default().to_string(),
            });
            for ip in &pod.ips {
                out.push(Key::Ptr(*ip));
            }
        }
    }

    fn link_service(&mut self, svc: ServiceInfo) {
        let key = svc.key.clone();
        self.stale_sets.insert(key.clone());
        let ns = key.namespace.clone();
        if let Some(anchor) = anchor(&svc) {
            self.selectors
                .entry(ns.clone())
                .or_default()
                .entry(anchor)
                .or_default()
                .insert(key.name.clone());
        }
        if let ServiceKind::ClusterIp(ips) = &svc.kind {
            for ip in ips {
                self.ip_services.entry(*ip).or_default().insert(key.clone());
            }
        }
        if svc.kind == ServiceKind::Headless && svc.selector.is_some() {
            // A Service change re-evaluates only its namespace's pods.
            let mut members = BTreeSet::new();
            if let Some(names) = self.ns_pods.get(ns.as_str()) {
                for id in names.iter() {
                    if selects(&svc, self.pods.get(id)) {
                        members.insert(id);
                        let pod = self.pods.get_mut(id);
                        self.interner
                            .change_services(&mut pod.services, &key.name, true);
                    }
                }
            }
            if !members.is_empty() {
                self.members.insert(key.clone(), members);
            }
        }
        self.services.insert(key, svc);
    }

    fn unlink_service(&mut self, key: &ObjKey) {
        let Some(svc) = self.services.remove(key) else {
            return;
        };
        self.sets.remove(key);
        self.stale_sets.insert(key.clone());
        if let Some(anchor) = anchor(&svc)
            && let Some(anchors) = self.selectors.get_mut(&key.namespace)
        {
            remove_from(anchors, &anchor, &key.name);
            if anchors.is_empty() {
                self.selectors.remove(&key.namespace);
            }
        }
        if let ServiceKind::ClusterIp(ips) = &svc.kind {
            for ip in ips {
                remove_from(&mut self.ip_services, ip, key);
            }
        }
        if let Some(members) = self.members.remove(key) {
            for id in members {
                let pod = self.pods.get_mut(id);
                self.interner
                    .change_services(&mut pod.services, &key.name, false);
            }
        }
    }

    // ---- publication ---------------------------------------------------

    /// Is the pod published for a Service whose `publishNotReadyAddresses`
    /// is `pnr`?
    fn published(&self, pod: &Pod, pnr: bool) -> bool {
        !pod.ips.is_empty()
            && !pod.phase.is_terminal()
            && !pod.deleting()
            && (self.policy.publish == Publish::Ip || pod.ready() || pnr)
    }

    fn headless(&self, ns: &str, name: &str) -> Option<&ServiceInfo> {
        self.services
            .get(&ObjKey::new(ns, name))
            .filter(|s| s.kind == ServiceKind::Headless)
    }

    /// Published for its hostname name: the headless Service named like the
    /// subdomain decides `publishNotReadyAddresses`, and, under
    /// `--hostnames service`, whether the name exists at all.
    fn host_published(&self, pod: &Pod) -> bool {
        let Some(sub) = &pod.subdomain() else {
            return false;
        };
        let svc = self.headless(pod.ns(), sub);
        if self.policy.hostnames == Hostnames::Service && svc.is_none() {
            return false;
        }
        self.published(pod, svc.is_some_and(|s| s.publish_not_ready))
    }

    /// Published as a member of any Service, or for its hostname name:
    /// what PTR and `pod.<zone>` names require.
    fn published_anywhere(&self, pod: &Pod) -> bool {
        if self.published(pod, false) || self.host_published(pod) {
            return true;
        }
        pod.services.iter().any(|s| {
            self.services
                .get(&ObjKey::new(&**pod.ns(), &**s))
                .is_some_and(|s| self.published(pod, s.publish_not_ready))
        })
    }

    /// The pods a name answers with, in the duplicate rule's order
    /// ([`Pod::duplicate_order`]).
    fn choose<'a>(&self, mut pods: Vec<&'a Pod>) -> Vec<&'a Pod> {
        pods.sort_by(|a, b| a.duplicate_order(b));
        if self.policy.duplicates == Duplicates::One {
            pods.truncate(1);
        }
        pods
    }

    /// One pod by the duplicate rule, whatever `--duplicate-hostnames` says
    /// (a rank name must name one rank).
    fn choose_one<'a>(&self, pods: Vec<&'a Pod>) -> Option<&'a Pod> {
        pods.into_iter().min_by(|a, b| a.duplicate_order(b))
    }

    /// The name a pod's SRV record and PTR point at under a headless Service:
    /// its hostname name when its subdomain is that Service, else its dashed
    /// name under the Service.
    fn target_under(&self, pod: &Pod, svc: &str, ip: IpAddr) -> String {
        let ns = pod.ns();
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain())
            && **sub == *svc
            && self
                .host_winner(ns, sub, host)
                .is_some_and(|w| std::ptr::eq(w, pod))
        {
            return host_name(host, sub, ns);
        }
        member_name(ip, svc, ns)
    }

    /// The pod that answers for a hostname name (first under the duplicate rule).
    fn host_winner(&self, ns: &str, sub: &str, host: &str) -> Option<&Pod> {
        let pods: Vec<&Pod> = self
            .host_pods(ns, sub, host)
            .map(|id| self.pod(id))
            .filter(|p| self.host_published(p))
            .collect();
        self.choose(pods).into_iter().next()
    }

    fn rebuild(&mut self, dirty: Vec<Key>) {
        let mut again = Vec::new();
        // Members sort before the Service that publishes their set.
        let mut changed: HashMap<ObjKey, Vec<PodId>> = HashMap::default();
        for key in dirty {
            match key {
                Key::Member(sk, id) => {
                    changed.entry(sk).or_default().push(id);
                    continue;
                }
                Key::Svc(ref sk) => {
                    let ids = changed.remove(sk).unwrap_or_default();
                    self.update_set(sk, ids);
                }
                _ => {}
            }
            self.rebuild_key(key, Some(&mut again));
        }
        for key in again {
            self.rebuild_key(key, None);
        }
        self.metrics.index_names.set(self.name_count);
    }

    /// Bring a headless Service's set up to date: what the `changed`
    /// members add now, or every member's when the Service itself changed.
    fn update_set(&mut self, sk: &ObjKey, changed: Vec<PodId>) {
        let Some(svc) = self
            .services
            .get(sk)
            .filter(|s| s.kind == ServiceKind::Headless)
        else {
            self.stale_sets.remove(sk);
            self.sets.remove(sk);
            return;
        };
        if self.stale_sets.remove(sk) || !self.sets.contains_key(sk) {
            let mut set = HeadlessSet::new(&svc.ports);
            for &id in self.members.get(sk).into_iter().flatten() {
                set.put(id, &self.pods.get(id).ips, self.added(svc, id));
            }
            self.sets.insert(sk.clone(), set);
            return;
        }
        // A member that left was taken out when its pod was unlinked.
        let now: Vec<(PodId, SrvAdded, bool)> = changed
            .into_iter()
            .filter(|&id| self.pods.try_get(id).is_some())
            .map(|id| match self.added(svc, id) {
                Some(srv) => (id, srv, true),
                None => (id, SrvAdded::default(), false),
            })
            .collect();
        let Some(set) = self.sets.get_mut(sk) else {
            return;
        };
        for (id, srv, published) in now {
            let ips = &self.pods.get(id).ips;
            set.put(id, ips, published.then_some(srv));
        }
    }

    /// The SRV records pod `id` adds to headless Service `svc` as things
    /// are now, or `None` unless it is a live, published member.
    fn added(&self, svc: &ServiceInfo, id: PodId) -> Option<SrvAdded> {
        let p = self.pods.try_get(id)?;
        if **p.ns() != *svc.key.namespace
            || !p.services.contains(svc.key.name.as_str())
            || !self.published(p, svc.publish_not_ready)
        {
            return None;
        }
        let mut srv = Vec::new();
        // JobSet's Services have no ports: no SRV, and no per-member
        // target to work out.
        if !svc.ports.is_empty() {
            for ip in &p.ips {
                let target = self
                    .table
                    .shared_name(self.target_under(p, &svc.key.name, *ip));
                for (i, port) in svc.ports.iter().enumerate() {
                    let r = Srv {
                        port: pod_port(port, p),
                        target: target.clone(),
                    };
                    srv.push((u16::try_from(i).unwrap_or(u16::MAX), r));
                }
            }
        }
        Some(srv.into_boxed_slice())
    }

    /// Publish the names of one key as [`Self::build`] makes them now. A
    /// name removed here that another key may also build (see
    /// [`collider`]) queues that key in `again`, to be rebuilt after the
    /// batch, so the name stays if the other key still publishes it.
    fn rebuild_key(&mut self, key: Key, again: Option<&mut Vec<Key>>) {
        match &key {
            Key::Rank(group, idx) => self.update_rank_state(group, *idx),
            Key::Summary(group) => self.settle_group(group),
            // Names spelled from an address: the table keeps facts, not names.
            Key::PodIp { ns, ip } => {
                let name = IpName::Pod(self.strs.get(ns.as_str()));
                return self.publish_ip_name(*ip, name, &key);
            }
            Key::SvcIp(sk, ip) => {
                let name = IpName::Member(
                    self.strs.get(sk.namespace.as_str()),
                    self.strs.get(sk.name.as_str()),
                );
                return self.publish_ip_name(*ip, name, &key);
            }
            Key::Ptr(ip) => {
                self.name_count += self.table.set_ptr(*ip, self.ptr_target(*ip));
                return;
            }
            _ => {}
        }
        let names = self.build(&key);
        let Some(name) = key_name(&key) else {
            // A Service: how many names it has depends on its ports.
            let old = self.svc_published.remove(&key).unwrap_or_default();
            let mut now = Vec::with_capacity(names.len());
            for (name, rrs) in names {
                self.set_name(&name, rrs);
                now.push(name.into_boxed_str());
            }
            for name in old {
                if !now.contains(&name) {
                    self.remove_name(&name);
                }
            }
            if !now.is_empty() {
                self.svc_published.insert(key, now);
            }
            return;
        };
        debug_assert!(names.len() <= 1 && names.iter().all(|(n, _)| *n == name));
        match names.into_iter().next() {
            Some((_, rrs)) => self.set_name(&name, rrs),
            None => {
                if self.remove_name(&name)
                    && let (Some(again), Some(other)) = (again, collider(&key))
                {
                    again.push(other);
                }
            }
        }
    }

    /// Give or take one name spelled from `ip`, as [`Self::build`] says.
    fn publish_ip_name(&mut self, ip: IpAddr, name: IpName, key: &Key) {
        if self.build(key).is_empty() {
            if self.table.remove_ip_name(ip, &name) {
                self.name_count -= 1;
            }
        } else if self.table.add_ip_name(ip, name.clone()) {
            self.name_count += 1;
        }
        match name {
            IpName::Pod(ns) => self.strs.release(&ns),
            IpName::Member(ns, svc) => {
                self.strs.release(&ns);
                // Dropped before the next: a Service named as its
                // namespace is one string, held twice here.
                drop(ns);
                self.strs.release(&svc);
            }
        }
    }

    /// Publish a name's data: one address inline (a pod's hostname and
    /// rank names), anything else as a shared record set.
    fn set_name(&mut self, name: &str, rrs: Rrs) {
        if self.table.set(name, Value::of(rrs)) {
            self.name_count += 1;
        }
    }

    /// Remove a name's data; true if it had any.
    fn remove_name(&mut self, name: &str) -> bool {
        let had = self.table.remove(name).is_some();
        if had {
            self.name_count -= 1;
        }
        had
    }

    /// The names and data of one key, from the model as it is now.
    fn build(&self, key: &Key) -> Vec<(String, Rrs)> {
        match key {
            Key::Host { ns, sub, host } => {
                let pods: Vec<&Pod> = self
                    .host_pods(ns, sub, host)
                    .map(|id| self.pod(id))
                    .filter(|p| self.host_published(p))
                    .collect();
                let chosen = self.choose(pods);
                if chosen.is_empty() {
                    return vec![];
                }
                let mut rrs = Rrs::default();
                for p in chosen {
                    add_ips(&mut rrs, &p.ips);
                }
                vec![(host_name(host, sub, ns), rrs)]
            }
            // Members have no names of their own (see `rebuild`).
            Key::Member(..) => vec![],
            Key::Svc(sk) => self.build_service(sk),
            Key::SvcIp(sk, ip) => {
                let Some(svc) = self
                    .services
                    .get(sk)
                    .filter(|s| s.kind == ServiceKind::Headless)
                else {
                    return vec![];
                };
                // Through the pods holding this IP, not the Service's members:
                // O(1) per name, not O(size of the gang).
                let holds = self.ip_holders(*ip).any(|p| {
                    **p.ns() == *sk.namespace
                        && p.services.contains(sk.name.as_str())
                        && self.published(p, svc.publish_not_ready)
                });
                if !holds {
                    return vec![];
                }
                let mut rrs = Rrs::default();
                add_ips(&mut rrs, &[*ip]);
                vec![(member_name(*ip, &sk.name, &sk.namespace), rrs)]
            }
            Key::PodIp { ns, ip } => {
                // "Verified" pod names: only if a pod in <ns> has that IP.
                // hostNetwork pods share the node's IP: no pod name for them.
                let exists = self
                    .ip_holders(*ip)
                    .any(|p| **p.ns() == **ns && !p.host_network() && self.published_anywhere(p));
                if !exists {
                    return vec![];
                }
                let mut rrs = Rrs::default();
                add_ips(&mut rrs, &[*ip]);
                vec![(pod_name(*ip, ns), rrs)]
            }
            Key::Rank(group, idx) => self.build_rank(group, *idx),
            Key::Leader(group) => self.build_leader(group),
            Key::Summary(group) => self.build_summary(group),
            Key::Ptr(ip) => match self.ptr_target(*ip) {
                Some(target) => {
                    vec![(
                        reverse(*ip),
                        Rrs {
                            ptr: Some(target.spell(*ip).into()),
                            ..Default::default()
                        },
                    )]
                }
                None => vec![],
            },
        }
    }

    fn build_service(&self, sk: &ObjKey) -> Vec<(String, Rrs)> {
        let Some(svc) = self.services.get(sk) else {
            return vec![];
        };
        let base = service_name(&sk.name, &sk.namespace);
        let mut out = Vec::new();
        match &svc.kind {
            ServiceKind::ExternalName(target) => {
                let rrs = Rrs {
                    cname: Some(target.to_ascii_lowercase().into()),
                    ..Default::default()
                };
                out.push((base, rrs));
            }
            ServiceKind::ClusterIp(ips) => {
                let mut rrs = Rrs::default();
                add_ips(&mut rrs, ips);
                let mut named: BTreeMap<String, SrvSet> = BTreeMap::new();
                for port in &svc.ports {
                    let srv = Srv {
                        port: port.port,
                        target: base.clone().into(),
                    };
                    rrs.srv.add(&srv);
                    if let Some(name) = &port.name {
                        named
                            .entry(port_name(
                                name,
                                port.protocol.label(),
                                &sk.name,
                                &sk.namespace,
                            ))
                            .or_default()
                            .add(&srv);
                    }
                }
                out.push((base, rrs));
                for (name, srv) in named {
                    out.push((
                        name,
                        Rrs {
                            srv,
                            ..Default::default()
                        },
                    ));
                }
            }
            ServiceKind::Headless => {
                let Some(set) = self.sets.get(sk) else {
                    out.push((base, Rrs::default()));
                    return out;
                };
                out.push((base.clone(), set.rrs()));
                for (i, port) in svc.ports.iter().enumerate() {
                    let Some(pn) = &port.name else { continue };
                    let srv = set.port_srv(u16::try_from(i).unwrap_or(u16::MAX));
                    if !srv.is_empty() {
                        out.push((
                            port_name(pn, port.protocol.label(), &sk.name, &sk.namespace),
                            Rrs {
                                srv,
                                ..Default::default()
                            },
                        ));
                    }
                }
            }
        }
        out
    }

    /// Most specific name for an IP: a ClusterIP's Service name; a pod's
    /// hostname name, else its dashed name under a headless Service that
    /// publishes it, else `<a-b-c-d>.<ns>.pod`. hostNetwork pods get none.
    fn ptr_target(&self, ip: IpAddr) -> Option<Target<'_>> {
        self.ptr_choice(ip).map(|c| c.target)
    }

    /// [`Self::ptr_target`] with what decided it: the Service or the pod
    /// the address belongs to, and which of the rule's steps named the
    /// target. `podns explain` reads the PTR rule only through this.
    pub(super) fn ptr_choice(&self, ip: IpAddr) -> Option<PtrChoice<'_>> {
        if let Some(sk) = self.ip_services.get(&ip).and_then(|s| s.iter().next()) {
            return Some(PtrChoice {
                target: Target::Name(service_name(&sk.name, &sk.namespace)),
                owner: PtrOwner::Service(sk),
            });
        }
        let pods: Vec<&Pod> = self
            .ip_holders(ip)
            .filter(|p| !p.host_network() && self.published_anywhere(p))
            .collect();
        let pod = self.choose(pods).into_iter().next()?;
        let ns = pod.ns();
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain())
            && self.host_published(pod)
            && self
                .host_winner(ns, sub, host)
                .is_some_and(|w| std::ptr::eq(w, pod))
        {
            return Some(PtrChoice {
                target: Target::Name(host_name(host, sub, ns)),
                owner: PtrOwner::Pod(pod),
            });
        }
        for s in &pod.services {
            if let Some(svc) = self.services.get(&ObjKey::new(&**ns, &**s))
                && self.published(pod, svc.publish_not_ready)
            {
                return Some(PtrChoice {
                    target: Target::Member(ns, s),
                    owner: PtrOwner::Pod(pod),
                });
            }
        }
        Some(PtrChoice {
            target: Target::Pod(ns),
            owner: PtrOwner::Pod(pod),
        })
    }
}

/// What the PTR rule chose for an address ([`Writer::ptr_choice`]).
pub(super) struct PtrChoice<'a> {
    pub(super) target: Target<'a>,
    pub(super) owner: PtrOwner<'a>,
}

/// Whose name a PTR record names.
pub(super) enum PtrOwner<'a> {
    /// A Service's ClusterIP: the Service's name.
    Service(&'a ObjKey),
    /// The pod the duplicate rule chose among the address's published
    /// holders; the target says which of its names.
    Pod(&'a Pod),
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

/// The one name of a key, as [`Writer::build`] spells it; `None` for a
/// Service, whose SRV names depend on its ports.
fn key_name(key: &Key) -> Option<String> {
    Some(match key {
        Key::Host { ns, sub, host } => host_name(host, sub, ns),
        Key::Member(..) | Key::Svc(_) => return None,
        Key::SvcIp(sk, ip) => member_name(*ip, &sk.name, &sk.namespace),
        Key::PodIp { ns, ip } => pod_name(*ip, ns),
        Key::Ptr(ip) => reverse(*ip),
        Key::Rank(group, idx) => rank_name(*idx, &group.name, &group.ns),
        Key::Leader(group) => leader_name(&group.name, &group.ns),
        Key::Summary(group) => gang_name(&group.name, &group.ns),
    })
}

/// The other key that may build the same name: a pod whose hostname is a
/// dashed IP under a headless Service's name (`10-0-0-1.web.ns.svc`) meets
/// that Service's dashed name of the IP; a Job and a JobSet of one name
/// meet in the rank view.
fn collider(key: &Key) -> Option<Key> {
    let flip = |g: &Group| group(!g.set, g.ns.clone(), g.name.clone());
    match key {
        Key::Rank(g, idx) => Some(Key::Rank(flip(g), *idx)),
        Key::Leader(g) => Some(Key::Leader(flip(g))),
        Key::Summary(g) => Some(Key::Summary(flip(g))),
        // A hostname name spelled like a dashed name under a Service of the
        // subdomain's name (`10-0-0-1.web.ns.svc`) is stored; the dashed
        // name is spelled from the address, and the stored one wins.
        Key::Host { .. } | Key::SvcIp(..) => None,
        Key::Member(..) | Key::Svc(_) | Key::PodIp { .. } | Key::Ptr(_) => None,
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

/// The selector pair a Service that can select pods is found by: any pair
/// would do, since a pod must carry all of them.
fn anchor(svc: &ServiceInfo) -> Option<(Box<str>, Box<str>)> {
    if svc.kind != ServiceKind::Headless {
        return None;
    }
    let (k, v) = svc.selector.as_ref()?.first()?;
    Some((k.as_str().into(), v.as_str().into()))
}

/// Does the Service select this pod? Only headless Services with a selector
/// select pods for DNS; an empty selector selects nothing (as for Endpoints).
fn selects(svc: &ServiceInfo, pod: &Pod) -> bool {
    if svc.kind != ServiceKind::Headless {
        return false;
    }
    match &svc.selector {
        Some(sel) if !sel.is_empty() => sel.iter().all(|(k, v)| pod.has_label(k, v)),
        _ => false,
    }
}

/// The port a headless Service's SRV record names for one pod: `targetPort`
/// when numeric, the pod's container port of that name when named, else
/// `port` (what EndpointSlices carry).
fn pod_port(port: &ServicePort, pod: &Pod) -> u16 {
    match &port.target {
        TargetPort::Same => port.port,
        TargetPort::Number(n) => *n,
        TargetPort::Name(name) => pod
            .ports()
            .iter()
            .find(|cp| cp.name.as_deref() == Some(name) && cp.protocol == port.protocol)
            .map(|cp| cp.port)
            .unwrap_or(port.port),
    }
}

fn add_ips(rrs: &mut Rrs, ips: &[IpAddr]) {
    for ip in ips {
        match ip {
            IpAddr::V4(v4) => rrs.a.push(*v4),
            IpAddr::V6(v6) => rrs.aaaa.push(*v6),
        }
    }
}

/// Remove `v` from the set at `k`, dropping the set when it empties.
fn remove_from<K, V, S, M>(map: &mut M, k: &K, v: &V)
where
    M: MapLike<K, S>,
    S: SetLike<V>,
{
    if let Some(set) = map.get_mut_(k) {
        set.remove_(v);
        if set.is_empty_() {
            map.remove_(k);
        }
    }
}

trait MapLike<K, V> {
    fn get_mut_(&mut self, k: &K) -> Option<&mut V>;
    fn remove_(&mut self, k: &K);
}

impl<K: std::hash::Hash + Eq, V> MapLike<K, V> for HashMap<K, V> {
    fn get_mut_(&mut self, k: &K) -> Option<&mut V> {
        self.get_mut(k)
    }
    fn remove_(&mut self, k: &K) {
        self.remove(k);
    }
}

impl<K: Ord, V> MapLike<K, V> for BTreeMap<K, V> {
    fn get_mut_(&mut self, k: &K) -> Option<&mut V> {
        self.get_mut(k)
    }
    fn remove_(&mut self, k: &K) {
        self.remove(k);
    }
}

trait SetLike<V> {
    fn remove_(&mut self, v: &V);
    fn is_empty_(&self) -> bool;
}

impl<V: Ord> SetLike<V> for BTreeSet<V> {
    fn remove_(&mut self, v: &V) {
        self.remove(v);
    }
    fn is_empty_(&self) -> bool {
        self.is_empty()
    }
}

impl<V: Ord> SetLike<V> for SmallSet<V> {
    fn remove_(&mut self, v: &V) {
        self.remove(v);
    }
    fn is_empty_(&self) -> bool {
        self.is_empty()
    }
}

/// A sorted set in a boxed slice: most of the writer's sets hold one
/// element (the pods of one rank, the Services of one pod), where a
/// `BTreeSet` allocates a whole node (≈ 0.5 KB), and a `Vec`'s capacity is
/// 8 bytes more in every pod and rank for room these sets never use.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SmallSet<T>(Box<[T]>);

impl<T> Default for SmallSet<T> {
    fn default() -> Self {
        Self(Box::default())
    }
}

impl<T: Ord> SmallSet<T> {
    pub(crate) fn insert(&mut self, v: T) -> bool {
        match self.0.binary_search(&v) {
            Ok(_) => false,
            Err(i) => {
                let mut all = Vec::from(std::mem::take(&mut self.0));
                all.insert(i, v);
                self.0 = all.into_boxed_slice();
                true
            }
        }
    }
    pub(crate) fn remove<Q: Ord + ?Sized>(&mut self, v: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
    {
        match self.0.binary_search_by(|x| x.borrow().cmp(v)) {
            Ok(i) => {
                let mut all = Vec::from(std::mem::take(&mut self.0));
                all.remove(i);
                self.0 = all.into_boxed_slice();
                true
            }
            Err(_) => false,
        }
    }
    pub(crate) fn contains<Q: Ord + ?Sized>(&self, v: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
    {
        self.0.binary_search_by(|x| x.borrow().cmp(v)).is_ok()
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Take the least element out.
    pub(crate) fn pop_first(&mut self) -> Option<T> {
        let mut all = Vec::from(std::mem::take(&mut self.0));
        let first = (!all.is_empty()).then(|| all.remove(0));
        self.0 = all.into_boxed_slice();
        first
    }
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a SmallSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T> IntoIterator for SmallSet<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        Vec::from(self.0).into_iter()
    }
}

#[cfg(test)]
#[path = "ranks_tests.rs"]
mod ranks_tests;

#[cfg(test)]
mod release_tests {
    use std::sync::Mutex;
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    use tokio::sync::mpsc;

    use super::*;
    use crate::index::testing::pod;
    use crate::index::{Arrival, Lookup};

    /// The writer threads that called the hook, one entry per call (other
    /// tests' writers may call it too: each test counts its own thread's).
    static CALLS: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());

    fn record() {
        CALLS.lock().unwrap().push(std::thread::current().id());
    }

    fn send(tx: &mpsc::Sender<Arrival>, update: Update) {
        let at = Instant::now();
        tx.blocking_send(Arrival { update, at }).unwrap();
    }

    fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Freed memory is handed back once the writer is idle after a list
    /// (the first sync, a relist), never after a single event.
    #[test]
    fn memory_is_handed_back_after_each_list_not_after_each_event() {
        set_release_memory(record);
        let needs = SyncNeeds {
            pod_scopes: 1,
            service_scopes: 1,
            job_scopes: 0,
        };
        let policy = Policy {
            rank_view: false,
            ..Policy::default()
        };
        let w = Writer::new(Table::new(), policy, Metrics::new(), needs);
        let table = w.table().clone();
        let (tx, rx) = mpsc::channel(16);
        let writer = std::thread::spawn(move || w.run_blocking(rx));
        let id = writer.thread().id();
        let calls = move || CALLS.lock().unwrap().iter().filter(|&&t| t == id).count();
        let a = pod("ml", "a", "10.0.0.1");
        let b = pod("ml", "b", "10.0.0.2");
        let (ka, kb) = (a.key.clone(), b.key.clone());
        send(&tx, Update::Pod(Change::Apply(a)));
        send(
            &tx,
            Update::Service(Change::Listed {
                namespace: None,
                keys: vec![],
            }),
        );
        send(
            &tx,
            Update::Pod(Change::Listed {
                namespace: None,
                keys: vec![ka.clone()],
            }),
        );
        until("the first sync's release", || calls() == 1);
        assert!(table.is_synced());
        // One event: applied, and nothing handed back for it.
        send(&tx, Update::Pod(Change::Apply(b)));
        until("pod b", || {
            matches!(
                table.lookup("10-0-0-2.ml.pod"),
                Lookup::Ip(_) | Lookup::Found(_)
            )
        });
        // A relist (after a 410, say): handed back again.
        send(
            &tx,
            Update::Pod(Change::Listed {
                namespace: None,
                keys: vec![ka, kb],
            }),
        );
        until("the relist's release", || calls() >= 2);
        drop(tx);
        writer.join().unwrap();
        assert_eq!(calls(), 2, "one release per list, none for the event");
    }
}

#[cfg(test)]
mod strs_tests {
    use super::*;
    use crate::index::Lookup;
    use crate::index::testing::{PodExt, headless, pod, synced_writer};

    /// The namespace and Service names of the table's address entries
    /// leave the writer's shared copies with the last name spelled from
    /// them, a Service named as its namespace too (one string, held twice
    /// by its member names).
    #[test]
    fn shared_names_go_with_their_last_address_name() {
        let mut w = synced_writer(Policy::default());
        w.apply(Update::Service(Change::Apply(headless("ml", "ml", "x"))));
        w.apply(Update::Pod(Change::Apply(
            pod("ml", "a", "10.0.0.1").label("app", "x"),
        )));
        assert_eq!(
            w.table().lookup("10-0-0-1.ml.ml.svc"),
            Lookup::Ip("10.0.0.1".parse().unwrap())
        );
        assert_eq!(w.strs.len(), 1, "ml, once");
        w.apply(Update::Pod(Change::Delete(ObjKey::new("ml", "a"))));
        assert_eq!(w.table().lookup("10-0-0-1.ml.ml.svc"), Lookup::Missing);
        assert_eq!(w.strs.len(), 0);
    }
}
