//! One kind's relayed state: the current objects and the history of
//! changes, both keyed by the API server's own resourceVersions, as
//! kube-apiserver's watch cache keeps them.
//!
//! Each change is encoded once, lazily, per wire and event type, and the
//! same bytes go to every subscriber ([`Change::frame`]). A subscriber reads
//! the history at its own pace from its own position ([`Cache::after`]): a
//! slow one is held back by its own connection's flow control and never
//! holds back the feed or another subscriber. Only a subscriber that falls
//! behind the history's start gets 410 Gone, as from the API server.
//!
//! A change the served object cannot show (a status the relay does not
//! serve: a Job's counts, a container's restarts, a condition other than
//! Ready) moves the object and the cache's position but is no change in
//! the history: sent, it would be the same object under a new
//! resourceVersion, to every watch that holds it. A watch's bookmarks carry
//! the position past it; a list or get shows the object's newest version.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use podns_kapi::watch::{EvType, event_line};
use podns_kapi::{Kind, pbenc};
use tokio::sync::{Notify, watch};

use super::labels::Labels;
use super::scope::{self, NodeScopes};
use crate::k8s::compact::{self, Dict};
use crate::k8s::objects::Served;
use crate::k8s::objects::loose::{Loose, StrMap};
use crate::k8s::objects::served::apart_from_version;

/// One relayed object, encoded once, in Protobuf: the history holds
/// every version of every object for minutes, and the Protobuf is what
/// node instances read. A JSON client gets the JSON made from it
/// ([`Item::json`]).
#[derive(Debug)]
pub struct Item {
    pub ns: String,
    pub name: String,
    /// The API server's resourceVersion of this version of the object.
    pub rv: u64,
    /// All its labels, served or not: selectors match on these.
    pub labels: Labels,
    /// `spec.nodeName` (Pods; empty otherwise).
    pub node_name: String,
    /// The object as one item of its kind's Protobuf list.
    pub pb_item: Bytes,
    /// The object compressed for the compact stream, once, with the
    /// dictionary current then (which it keeps alive).
    pub packed: OnceLock<compact::Packed>,
}

impl Item {
    /// `o` encoded with the labels `served` keeps; `None` when it has no
    /// name or resourceVersion, or cannot be served ([`Unfit`]).
    ///
    /// [`Unfit`]: crate::k8s::objects::value::Unfit
    pub fn new(mut o: Served, served: &dyn Fn(&str) -> bool) -> Option<Self> {
        let meta = o.meta_mut();
        let ns = meta.namespace.get().cloned().unwrap_or_default();
        let name = meta.name.get()?.clone();
        let rv = meta.resource_version.get()?.parse().ok()?;
        let mut all = match std::mem::take(&mut meta.labels) {
            Loose::Ok(map) => map,
            _ => StrMap::default(),
        };
        all.normalize();
        let labels = Labels::new(all.entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        all.entries.retain(|(k, _)| served(k));
        if !all.entries.is_empty() {
            meta.labels = Loose::Ok(all);
        }
        let node_name = o.node_name().to_owned();
        let pb_item = Bytes::from(o.pb_item().ok()?);
        Some(Self {
            ns,
            name,
            rv,
            labels,
            node_name,
            pb_item,
            packed: OnceLock::new(),
        })
    }

    /// Where this pod is, for [`NodeScopes`].
    pub fn place(&self) -> scope::Pod<'_> {
        scope::Pod {
            node: &self.node_name,
            ns: &self.ns,
            labels: &self.labels,
        }
    }

    /// The object as served in JSON: its Protobuf decoded as podns decodes
    /// the API server's, and written as JSON (what it was encoded from).
    pub fn json(&self, kind: Kind) -> Bytes {
        Served::decode(kind, self.raw())
            .map(|o| Bytes::from(o.json()))
            .unwrap_or_default()
    }

    /// This version again, with the labels `served` keeps now.
    pub fn reserved(&self, kind: Kind, served: &dyn Fn(&str) -> bool) -> Option<Self> {
        let mut o = Served::decode(kind, self.raw())?;
        let all: Vec<(String, String)> = self
            .labels
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        o.meta_mut().labels = Loose::Ok(StrMap::new(all));
        let mut again = Self::new(o, served)?;
        if again.labels == self.labels {
            again.labels = self.labels.clone();
        }
        Some(again)
    }

    /// Whether this version serves as `other` does, but for its
    /// resourceVersion: the same served bytes but for the version's field,
    /// the same labels (served or not: selectors match on all of them), on
    /// the same node.
    pub fn serves_as(&self, other: &Item) -> bool {
        self.node_name == other.node_name
            && self.labels == other.labels
            && apart_from_version(self.raw())
                .is_some_and(|a| Some(a) == apart_from_version(other.raw()))
    }

    /// The enveloped Protobuf object, as a get answers it (made on
    /// demand: a change's frames are kept, not this).
    pub fn pb_object(&self, kind: Kind) -> Bytes {
        let raw = self.raw().to_vec();
        Bytes::from(pbenc::envelope(kind.api_version(), kind.name(), raw))
    }

    /// The object compressed for the compact stream: once per version,
    /// with `dict` (the cache's current dictionary) on first use.
    pub fn packed(
        &self,
        dict: impl FnOnce() -> Option<Arc<Dict>>,
        encoded: &prometheus_client::metrics::counter::Counter,
    ) -> &compact::Packed {
        self.packed.get_or_init(|| {
            encoded.inc();
            compact::pack(self.raw(), dict().as_ref())
        })
    }

    /// The object's own message: `pb_item` without its list-item key.
    pub fn raw(&self) -> &[u8] {
        pbenc::object(&self.pb_item).unwrap_or_default()
    }
}

/// The wire a subscriber reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Json,
    Protobuf,
    /// The compact stream (`k8s::compact`), for node instances' watches.
    Compact,
}

/// A watch event as it is sent, in parts: in Protobuf the object's bytes
/// are the item's own, between the event's head and the envelope's end,
/// not a copy per event.
#[derive(Clone, Debug, Default)]
pub struct Frame {
    head: Bytes,
    object: Bytes,
    tail: Bytes,
    /// The compact stream's dictionary this event needs sent before it.
    dict: Option<Arc<Dict>>,
}

impl Frame {
    pub fn len(&self) -> usize {
        self.head.len() + self.object.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dictionary to send on the stream before this event, if any.
    pub fn dict(&self) -> Option<&Arc<Dict>> {
        self.dict.as_ref()
    }

    /// The parts, in order, for a send that writes them as one.
    pub fn parts(self) -> impl Iterator<Item = Bytes> {
        [self.head, self.object, self.tail]
            .into_iter()
            .filter(|b| !b.is_empty())
    }
}

/// An event sent whole (JSON), as its head alone.
impl From<Bytes> for Frame {
    fn from(head: Bytes) -> Self {
        Self {
            head,
            ..Self::default()
        }
    }
}

/// One change in the history.
#[derive(Debug)]
pub struct Change {
    /// Its position: the object's resourceVersion, or for a deletion found
    /// by a relist, the list's.
    pub rv: u64,
    pub ty: EvType,
    pub obj: Arc<Item>,
    /// The version before, for selector transitions.
    pub prev: Option<Arc<Item>>,
    pub at: Instant,
    /// Encoded on first use, by event type: the Protobuf event's head (the
    /// object and the tail are the item's), and JSON events whole (only
    /// when a JSON client watches).
    pb_heads: [OnceLock<Bytes>; 3],
    json: OnceLock<Box<[OnceLock<Bytes>; 3]>>,
}

impl Change {
    /// This change as an event of type `ty` on `wire`, encoded once for
    /// every subscriber (`encoded` counts the encodings).
    pub fn frame(
        &self,
        cache: &Cache,
        wire: Wire,
        ty: EvType,
        encoded: &prometheus_client::metrics::counter::Counter,
    ) -> Frame {
        let kind = cache.kind;
        match wire {
            Wire::Compact => compact_frame(ty, self.obj.packed(|| cache.dict(), encoded)),
            Wire::Protobuf => {
                let head = self.pb_heads[ty.idx()].get_or_init(|| {
                    encoded.inc();
                    pb_head(kind, ty, &self.obj)
                });
                pb_frame(head.clone(), &self.obj)
            }
            Wire::Json => {
                let slot = &self.json.get_or_init(Default::default)[ty.idx()];
                let line = slot.get_or_init(|| {
                    encoded.inc();
                    json_line(kind, ty, &self.obj)
                });
                Frame::from(line.clone())
            }
        }
    }
}

/// The head of `obj`'s Protobuf event of type `ty`: everything before the
/// object's own bytes.
fn pb_head(kind: Kind, ty: EvType, obj: &Item) -> Bytes {
    Bytes::from(pbenc::watch_frame_head(
        ty.as_str(),
        kind.api_version(),
        kind.name(),
        obj.raw().len(),
    ))
}

/// A Protobuf event of `obj` whose head is `head`.
fn pb_frame(head: Bytes, obj: &Item) -> Frame {
    Frame {
        head,
        object: obj.pb_item.slice_ref(obj.raw()),
        tail: Bytes::from_static(pbenc::envelope_tail()),
        dict: None,
    }
}

/// A compact event of the object `p`: a few bytes of head, then the
/// object's compressed bytes, shared.
fn compact_frame(ty: EvType, p: &compact::Packed) -> Frame {
    Frame {
        head: compact::event_head(ty, p),
        object: p.data.clone(),
        tail: Bytes::new(),
        dict: p.dict.clone(),
    }
}

fn json_line(kind: Kind, ty: EvType, obj: &Item) -> Bytes {
    event_line(ty.as_str(), &obj.json(kind))
}

/// An object as a watch event (initial events are built per subscriber;
/// a compact one's object is compressed once per version, `encoded`
/// counting it).
pub fn frame(
    cache: &Cache,
    wire: Wire,
    ty: EvType,
    obj: &Item,
    encoded: &prometheus_client::metrics::counter::Counter,
) -> Frame {
    let kind = cache.kind;
    match wire {
        Wire::Json => json_line(kind, ty, obj).into(),
        Wire::Protobuf => pb_frame(pb_head(kind, ty, obj), obj),
        Wire::Compact => compact_frame(ty, obj.packed(|| cache.dict(), encoded)),
    }
}

struct Inner {
    objects: BTreeMap<(String, String), Arc<Item>>,
    history: VecDeque<Arc<Change>>,
    /// The resourceVersion the cache is at: its last change's, a list's.
    rv: u64,
    /// Changes before this were dropped: a watch from an older
    /// resourceVersion gets 410.
    oldest: u64,
    /// A first list has completed: until then the cache answers 503.
    synced: bool,
    /// Namespaces whose objects were served anew ([`Cache::rekey`]), as
    /// long as the history reaches back to them.
    rekeys: VecDeque<Rekey>,
    next_rekey: u64,
}

/// A namespace's objects served anew (with more labels): a watch that may
/// hold them as served before must relist.
#[derive(Debug)]
struct Rekey {
    id: u64,
    /// The cache's position then: what a client got at or before it may be
    /// served the old way.
    rv: u64,
    ns: String,
    /// The nodes of the objects that changed.
    nodes: HashSet<String>,
    at: Instant,
}

/// How long after a rekey a resumed watch is told to relist whatever its
/// position: another relay may have served it the old way at a later
/// position, when that relay's watch of Services lagged its watch of Pods.
const REKEY_GRACE: Duration = Duration::from_secs(10);

/// What a list finds: the objects, the position they are at, and the
/// rekeys they already reflect ([`Cache::stale`]).
pub struct Snapshot {
    pub rv: u64,
    pub items: Vec<Arc<Item>>,
    pub epoch: u64,
}

/// One kind's objects and history.
pub struct Cache {
    pub kind: Kind,
    inner: Mutex<Inner>,
    /// Changes are kept at least this long.
    keep: Duration,
    notify: watch::Sender<u64>,
    /// Changes not recorded because the served object did not change.
    unseen: prometheus_client::metrics::counter::Counter,
    /// Watchers to wake on a change, indexed by the node their selector
    /// pins (as kube-apiserver's watch cache indexes watchers): a pod's
    /// change wakes its node's watchers and the unindexed ones, not every
    /// node's.
    watchers: Mutex<Watchers>,
    /// Pods by node, for what each node's instance may read (Pods only).
    scopes: Option<Arc<NodeScopes>>,
    /// The compact stream's dictionaries of this kind.
    dicts: Arc<Mutex<Dicts>>,
}

/// The compact stream's dictionary of a kind (`k8s::compact`), trained on
/// its own objects: first when it holds [`TRAIN_MIN`] of them, again each
/// time it has grown [`RETRAIN_GROWTH`]-fold since (so at most a few times
/// in a relay's life: a stream rarely carries more than one or two). A
/// version lives while an object compressed with it does (each holds it):
/// an object compressed once keeps its bytes, so watchers that hold it
/// decode it with the version they were sent, and a stream sends each
/// version once, before the first event that uses it.
#[derive(Default)]
struct Dicts {
    current: Option<Arc<Dict>>,
    /// The objects the current one was trained on (0: none yet).
    trained_on: usize,
    training: bool,
    last_id: u32,
}

/// Objects a kind holds before its first dictionary.
const TRAIN_MIN: usize = 64;
/// How much a kind grows before its dictionary is trained again.
const RETRAIN_GROWTH: usize = 4;
/// Objects a dictionary is trained on, at most (spread over the kind).
const TRAIN_SAMPLES: usize = 2000;
/// A dictionary's size: sent once per stream ([`Dicts`]), so small; 1 KiB
/// holds the keys (benches/results/notes/2026-12-06-compact-stream.md).
pub const DICT_SIZE: usize = 1024;

#[derive(Default)]
struct Watchers {
    by_node: HashMap<String, Vec<Weak<Notify>>>,
    all: Vec<Weak<Notify>>,
}

/// Wake the live watchers of `list`, forgetting the gone ones.
fn wake(list: &mut Vec<Weak<Notify>>) {
    list.retain(|w| match w.upgrade() {
        Some(n) => {
            n.notify_one();
            true
        }
        None => false,
    });
}

/// What a resume point finds in the history.
pub enum After {
    /// The changes after it (up to a maximum) and the position reached.
    Changes(Vec<Arc<Change>>, u64),
    /// Older than the history: 410 Gone.
    Expired { oldest: u64 },
}

impl Cache {
    pub fn new(
        kind: Kind,
        keep: Duration,
        unseen: prometheus_client::metrics::counter::Counter,
    ) -> Arc<Self> {
        Self::with_scopes(kind, keep, unseen, None)
    }

    /// A cache that also counts its objects by node into `scopes`.
    pub fn with_scopes(
        kind: Kind,
        keep: Duration,
        unseen: prometheus_client::metrics::counter::Counter,
        scopes: Option<Arc<NodeScopes>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            kind,
            inner: Mutex::new(Inner {
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                rv: 0,
                oldest: 0,
                synced: false,
                rekeys: VecDeque::new(),
                next_rekey: 0,
            }),
            keep,
            notify: watch::channel(0).0,
            unseen,
            watchers: Mutex::new(Watchers::default()),
            scopes,
            dicts: Default::default(),
        })
    }

    /// The compact stream's current dictionary; when one is due, trains it
    /// on a thread of its own (objects compressed meanwhile use the
    /// current one, or none).
    pub fn dict(&self) -> Option<Arc<Dict>> {
        let mut d = self.dicts.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.len();
        let due = n >= TRAIN_MIN && n >= d.trained_on * RETRAIN_GROWTH && !d.training;
        if due {
            d.training = true;
            d.last_id += 1;
            let (id, samples, dicts) = (d.last_id, self.samples(), self.dicts.clone());
            let kind = self.kind;
            let spawned = std::thread::Builder::new()
                .name("podns-dict".into())
                .spawn(move || {
                    let trained = train(id, &samples, kind);
                    let mut d = dicts.lock().unwrap_or_else(|p| p.into_inner());
                    d.training = false;
                    d.trained_on = n;
                    if let Some(t) = trained {
                        d.current = Some(t);
                    }
                });
            if spawned.is_err() {
                d.training = false;
            }
        }
        d.current.clone()
    }

    /// Train the dictionary now, whatever the size (benches and tests).
    pub fn train_now(&self) -> Option<Arc<Dict>> {
        let mut d = self.dicts.lock().unwrap_or_else(|p| p.into_inner());
        d.last_id += 1;
        d.current = train(d.last_id, &self.samples(), self.kind);
        d.trained_on = self.len();
        d.current.clone()
    }

    /// The objects' messages, spread over the kind, to train on.
    fn samples(&self) -> Vec<Bytes> {
        let g = self.lock();
        let step = g.objects.len().div_ceil(TRAIN_SAMPLES).max(1);
        g.objects
            .values()
            .step_by(step)
            .map(|i| i.pb_item.slice_ref(i.raw()))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// A watcher to wake when a change may concern it: every change, or
    /// with `node`, only changes of objects on that node (before or after).
    /// It stays registered while the returned handle lives.
    pub fn watcher(&self, node: Option<&str>) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        let mut w = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        match node {
            Some(node) => {
                let list = w.by_node.entry(node.to_owned()).or_default();
                list.retain(|x| x.strong_count() > 0);
                list.push(Arc::downgrade(&n));
            }
            None => {
                w.all.retain(|x| x.strong_count() > 0);
                w.all.push(Arc::downgrade(&n));
            }
        }
        n
    }

    /// Wake the watchers a change of objects on these nodes concerns.
    fn wake(&self, nodes: [&str; 2]) {
        let mut w = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        wake(&mut w.all);
        for node in nodes {
            if let Some(list) = w.by_node.get_mut(node) {
                wake(list);
                if list.is_empty() {
                    w.by_node.remove(node);
                }
            }
            if nodes[0] == nodes[1] {
                break;
            }
        }
    }

    /// Wake every watcher (a relist may change anything).
    fn wake_all(&self) {
        let mut w = self.watchers.lock().unwrap_or_else(|p| p.into_inner());
        wake(&mut w.all);
        for list in w.by_node.values_mut() {
            wake(list);
        }
        w.by_node.retain(|_, l| !l.is_empty());
    }

    pub fn rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn is_synced(&self) -> bool {
        self.lock().synced
    }

    pub fn len(&self) -> usize {
        self.lock().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current objects (those `keep` selects) and the resourceVersion
    /// they are at.
    pub fn snapshot(&self, keep: impl Fn(&Item) -> bool) -> Snapshot {
        let g = self.lock();
        let items = g.objects.values().filter(|o| keep(o)).cloned().collect();
        Snapshot {
            rv: g.rv,
            items,
            epoch: g.next_rekey,
        }
    }

    /// Serve the objects of `ns` anew as `f` makes them (the same
    /// versions, other labels), and record it so that the watches that
    /// may hold them as served before end with 410 ([`Self::stale`]): the
    /// change has no resourceVersion of its own, so no event could carry
    /// it to every client, resumed ones included.
    pub fn rekey(&self, ns: &str, f: impl Fn(&Item) -> Option<Item>) {
        let mut g = self.lock();
        let mut nodes = HashSet::new();
        let mut changed = Vec::new();
        let from = (ns.to_owned(), String::new());
        for (k, old) in g.objects.range(from..).take_while(|(k, _)| k.0 == ns) {
            if let Some(new) = f(old)
                && new.pb_item != old.pb_item
            {
                nodes.insert(old.node_name.clone());
                changed.push((k.clone(), Arc::new(new)));
            }
        }
        if changed.is_empty() {
            return; // served the same: nobody holds anything stale
        }
        for (k, new) in changed {
            g.objects.insert(k, new);
        }
        let id = g.next_rekey;
        g.next_rekey += 1;
        let rv = g.rv;
        g.rekeys.push_back(Rekey {
            id,
            rv,
            ns: ns.to_owned(),
            nodes,
            at: Instant::now(),
        });
        drop(g);
        self.wake_all();
    }

    /// The rekeys a client resuming from `rv` may not reflect (those at or
    /// after it, and the recent ones): an epoch for [`Self::stale`].
    pub fn epoch_at(&self, rv: u64) -> u64 {
        let g = self.lock();
        g.rekeys
            .iter()
            .find(|r| r.rv >= rv || r.at.elapsed() < REKEY_GRACE)
            .map_or(g.next_rekey, |r| r.id)
    }

    /// Whether a watch that reflects the rekeys before `epoch` may hold
    /// objects served before a later one that `covers` (namespace, nodes)
    /// says concerns it; `epoch` moves past them.
    pub fn stale(&self, epoch: &mut u64, covers: impl Fn(&str, &HashSet<String>) -> bool) -> bool {
        let g = self.lock();
        if *epoch == g.next_rekey {
            return false;
        }
        // Rekeys older than the history are forgotten: a watch that has
        // not looked since is told to relist.
        let first = g.rekeys.front().map_or(g.next_rekey, |r| r.id);
        let stale = *epoch < first
            || g.rekeys
                .iter()
                .filter(|r| r.id >= *epoch)
                .any(|r| covers(&r.ns, &r.nodes));
        *epoch = g.next_rekey;
        stale
    }

    /// Up to `max` changes after `rv`.
    pub fn after(&self, rv: u64, max: usize) -> After {
        let g = self.lock();
        if rv < g.oldest {
            return After::Expired { oldest: g.oldest };
        }
        let start = g.history.partition_point(|c| c.rv <= rv);
        let changes: Vec<_> = g.history.range(start..).take(max).cloned().collect();
        let upto = match changes.last() {
            Some(c) if changes.len() == max => c.rv,
            _ => g.rv.max(rv),
        };
        After::Changes(changes, upto)
    }

    /// An object's version arrived (added or modified).
    pub fn apply(&self, mut item: Item) {
        let mut g = self.lock();
        let key = (item.ns.clone(), item.name.clone());
        // Labels rarely change with a version: share the last one's.
        if let Some(p) = g.objects.get(&key)
            && p.labels == item.labels
        {
            item.labels = p.labels.clone();
        }
        let item = Arc::new(item);
        let prev = g.objects.insert(key, item.clone());
        if prev.as_ref().is_some_and(|p| p.rv == item.rv) {
            return; // the same version again (a resumed watch)
        }
        if let Some(p) = &prev
            && item.serves_as(p)
        {
            // Nothing a client of the relay sees changed: only the
            // position moves.
            if item.rv > g.rv {
                g.rv = item.rv;
                if g.synced {
                    self.notify.send_replace(g.rv);
                }
            }
            self.unseen.inc();
            return;
        }
        let ty = if prev.is_some() {
            EvType::Modified
        } else {
            EvType::Added
        };
        let rv = item.rv;
        self.push(&mut g, rv, ty, item, prev);
    }

    /// An object was deleted, at `rv`.
    pub fn delete(&self, ns: &str, name: &str, rv: u64) {
        let mut g = self.lock();
        let Some(prev) = g.objects.remove(&(ns.to_owned(), name.to_owned())) else {
            return;
        };
        let gone = Arc::new(Item {
            ns: prev.ns.clone(),
            name: prev.name.clone(),
            rv: rv.max(prev.rv),
            labels: prev.labels.clone(),
            node_name: prev.node_name.clone(),
            pb_item: prev.pb_item.clone(),
            packed: prev.packed.clone(),
        });
        let rv = gone.rv;
        self.push(&mut g, rv, EvType::Deleted, gone, Some(prev));
    }

    /// A complete list at `rv` (of one scope, `namespace` or all): what
    /// changed since is recorded as changes, as the API server's own cache
    /// would have sent them, so subscribers never relist.
    pub fn relisted(&self, namespace: Option<&str>, items: Vec<Item>, rv: u64) {
        {
            let mut g = self.lock();
            if !g.synced && g.objects.is_empty() && g.history.is_empty() {
                // The first list: no history before it. A watch from an
                // older version gets 410 (changes since it, deletions
                // included, are not known here) and relists.
                for item in items {
                    if let Some(s) = &self.scopes {
                        s.moved(None, Some(item.place()));
                    }
                    g.objects
                        .insert((item.ns.clone(), item.name.clone()), Arc::new(item));
                }
                g.rv = g.rv.max(rv);
                g.oldest = g.rv;
                g.synced = true;
                let now = g.rv;
                drop(g);
                self.notify.send_replace(now);
                self.wake_all();
                return;
            }
        }
        let mut seen: HashMap<(String, String), ()> = HashMap::with_capacity(items.len());
        let mut items = items;
        items.sort_by_key(|i| i.rv);
        for item in items {
            seen.insert((item.ns.clone(), item.name.clone()), ());
            self.apply(item);
        }
        let gone: Vec<(String, String)> = {
            let g = self.lock();
            g.objects
                .keys()
                .filter(|k| namespace.is_none_or(|ns| k.0 == ns) && !seen.contains_key(*k))
                .cloned()
                .collect()
        };
        for (ns, name) in gone {
            self.delete(&ns, &name, rv);
        }
        let mut g = self.lock();
        g.rv = g.rv.max(rv);
        g.synced = true;
        let now = g.rv;
        drop(g);
        self.notify.send_replace(now);
        self.wake_all();
    }

    fn push(&self, g: &mut Inner, rv: u64, ty: EvType, obj: Arc<Item>, prev: Option<Arc<Item>>) {
        if let Some(s) = &self.scopes {
            s.moved(
                prev.as_deref().map(Item::place),
                (ty != EvType::Deleted).then(|| obj.place()),
            );
        }
        let at = Instant::now();
        // Positions only grow: a version older than the cache (an object
        // relisted after a newer change of another) takes the cache's.
        let rv = rv.max(g.rv);
        g.history.push_back(Arc::new(Change {
            rv,
            ty,
            obj,
            prev,
            at,
            pb_heads: Default::default(),
            json: OnceLock::new(),
        }));
        g.rv = rv;
        while let Some(first) = g.history.front() {
            if at.duration_since(first.at) <= self.keep {
                break;
            }
            g.oldest = first.rv;
            g.history.pop_front();
        }
        while g.rekeys.front().is_some_and(|r| r.rv < g.oldest) {
            g.rekeys.pop_front();
        }
        if g.synced {
            self.notify.send_replace(rv);
            let c = g.history.back().expect("just pushed");
            let before = c.prev.as_ref().map_or("", |p| p.node_name.as_str());
            self.wake([c.obj.node_name.as_str(), before]);
        }
    }

    /// The watch of this kind reached `rv` with nothing to change (a
    /// bookmark): subscribers' bookmarks may say so.
    pub fn advance(&self, rv: u64) {
        let mut g = self.lock();
        if rv > g.rv {
            g.rv = rv;
        }
    }
}

/// A dictionary trained on `samples`; `None` (and a log line) if zstd
/// finds too little in them.
fn train(id: u32, samples: &[Bytes], kind: Kind) -> Option<Arc<Dict>> {
    let refs: Vec<&[u8]> = samples.iter().map(|b| &b[..]).collect();
    match Dict::train(id, &refs, DICT_SIZE) {
        Ok(d) => {
            tracing::info!(
                resource = kind.plural(),
                dictionary = id,
                content = format_args!("{:016x}", d.content),
                samples = samples.len(),
                "compact stream dictionary trained"
            );
            Some(Arc::new(d))
        }
        Err(error) => {
            tracing::warn!(resource = kind.plural(), %error, "compact stream dictionary not trained; objects go without one");
            None
        }
    }
}

/// A pod as the relay makes its items: decoded as podns decodes the API
/// server's, then served.
#[cfg(test)]
fn labelled_pod(
    ns: &str,
    name: &str,
    rv: u64,
    node: &str,
    labels: &[(&str, &str)],
    served: &dyn Fn(&str) -> bool,
) -> Item {
    use crate::k8s::objects::Relayed;
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let pod: crate::k8s::objects::SlimPod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(),
                     "labels": labels},
        "spec": {"nodeName": node, "containers": []},
    }))
    .unwrap();
    Item::new(pod.served().unwrap(), served).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_in(ns: &str, name: &str, rv: u64, node: &str, served: &dyn Fn(&str) -> bool) -> Item {
        labelled_pod(
            ns,
            name,
            rv,
            node,
            &[("app", "w"), ("job-name", "j")],
            served,
        )
    }

    fn pod(name: &str, rv: u64, node: &str) -> Item {
        pod_in("ml", name, rv, node, &|_| true)
    }

    fn served_labels(i: &Item) -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(&i.json(Kind::Pod)).unwrap();
        v["metadata"]["labels"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn labels_not_served_still_select_and_can_be_served_later() {
        let i = pod_in("ml", "a", 1, "n", &|k| k == "job-name");
        assert_eq!(served_labels(&i), ["job-name"]);
        assert_eq!(i.labels.len(), 2, "selectors match on every label");
        let none = pod_in("ml", "a", 1, "n", &|_| false);
        assert!(!String::from_utf8_lossy(&none.json(Kind::Pod)).contains("labels"));
        let again = i.reserved(Kind::Pod, &|_| true).unwrap();
        assert_eq!(served_labels(&again), ["app", "job-name"]);
        assert_eq!(again.rv, 1);
        assert!(again.pb_item.len() > i.pb_item.len());
    }

    #[test]
    fn a_rekey_makes_the_watches_that_hold_the_old_serving_relist() {
        let few = |k: &str| k == "job-name";
        let c = Cache::new(Kind::Pod, Duration::from_secs(600), Default::default());
        c.relisted(
            None,
            vec![
                pod_in("ml", "a", 5, "n1", &few),
                pod_in("other", "b", 6, "n2", &few),
            ],
            10,
        );
        let before = c.snapshot(|_| true);
        let covers_ml = |ns: &str, _: &HashSet<String>| ns == "ml";
        let covers_other = |ns: &str, _: &HashSet<String>| ns == "other";
        let on_n2 = |_: &str, nodes: &HashSet<String>| nodes.contains("n2");
        let mut e = before.epoch;
        assert!(!c.stale(&mut e, covers_ml), "nothing rekeyed yet");

        // Serving the same again is no rekey.
        c.rekey("ml", |i| i.reserved(Kind::Pod, &few));
        let mut e = before.epoch;
        assert!(!c.stale(&mut e, covers_ml));

        c.rekey("ml", |i| i.reserved(Kind::Pod, &|_| true));
        let (mut e1, mut e2, mut e3) = (before.epoch, before.epoch, before.epoch);
        assert!(c.stale(&mut e1, covers_ml), "a watch of ml relists");
        assert!(!c.stale(&mut e1, covers_ml), "once");
        assert!(!c.stale(&mut e2, covers_other), "other namespaces do not");
        assert!(!c.stale(&mut e3, on_n2), "nor nodes without a changed pod");

        let after = c.snapshot(|_| true);
        let a = after.items.iter().find(|i| i.name == "a").unwrap();
        assert_eq!(served_labels(a), ["app", "job-name"]);
        let mut e = after.epoch;
        assert!(!c.stale(&mut e, covers_ml), "a list after it is current");
        // A resume from before it relists; so does one just after it
        // (another relay may have served the old way later).
        let mut e = c.epoch_at(9);
        assert!(c.stale(&mut e, covers_ml));
        let mut e = c.epoch_at(11);
        assert!(c.stale(&mut e, covers_ml));
        assert_eq!(types(&c, 10), vec![], "no event: nothing to resume from");
    }

    fn types(c: &Cache, after: u64) -> Vec<(u64, EvType, String)> {
        match c.after(after, 100) {
            After::Changes(cs, _) => cs
                .iter()
                .map(|c| (c.rv, c.ty, c.obj.name.clone()))
                .collect(),
            After::Expired { .. } => panic!("expired"),
        }
    }

    #[test]
    fn before_the_first_list_is_gone_it_keeps_no_history() {
        let c = Cache::new(Kind::Pod, Duration::from_secs(600), Default::default());
        c.relisted(None, vec![pod("a", 5, "n1"), pod("b", 7, "n1")], 10);
        // b's ADDED at 7 is not a change a watch from 6 could trust: a pod
        // deleted at 8 would be missing from it.
        assert!(matches!(c.after(6, 10), After::Expired { oldest: 10 }));
        assert_eq!(types(&c, 10), vec![]);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_relist_becomes_the_changes_it_implies() {
        let c = Cache::new(Kind::Pod, Duration::from_secs(600), Default::default());
        c.relisted(None, vec![pod("a", 5, "n1"), pod("b", 6, "n1")], 10);
        assert_eq!(c.rv(), 10);
        c.apply(pod("a", 12, "n2"));
        // The feed missed some changes and relisted at 20: b deleted, c added.
        c.relisted(None, vec![pod("a", 12, "n2"), pod("c", 15, "n1")], 20);
        assert_eq!(
            types(&c, 10),
            vec![
                (12, EvType::Modified, "a".into()),
                (15, EvType::Added, "c".into()),
                (20, EvType::Deleted, "b".into()),
            ]
        );
        assert_eq!(c.len(), 2);
        let snap = c.snapshot(|i| i.node_name == "n1");
        assert_eq!((snap.rv, snap.items.len()), (20, 1));
    }

    #[test]
    fn a_change_the_served_object_cannot_show_moves_the_position_only() {
        let unseen = prometheus_client::metrics::counter::Counter::default();
        let c = Cache::new(Kind::Pod, Duration::from_secs(600), unseen.clone());
        c.relisted(None, vec![pod("a", 5, "n1")], 10);
        // A status the relay does not serve changed (a container restarted):
        // upstream, a new version; served, the same object.
        c.apply(pod("a", 12, "n1"));
        assert_eq!(types(&c, 10), vec![], "nothing to send");
        assert_eq!((c.rv(), unseen.get()), (12, 1), "the position moved");
        let snap = c.snapshot(|_| true);
        assert_eq!(snap.items[0].rv, 12, "a list shows the newest version");
        // Served with fewer labels: a change.
        let hidden = |k: &str| k != "app";
        c.apply(pod_in("ml", "a", 13, "n1", &hidden));
        // A label not served changed: served the same, but selectors match
        // on it, so a change.
        let mut relabeled = pod_in("ml", "a", 14, "n1", &hidden);
        relabeled.labels = Labels::new([("app", "x"), ("job-name", "j")]);
        let mut again = pod_in("ml", "a", 15, "n1", &hidden);
        again.labels = relabeled.labels.clone();
        c.apply(relabeled);
        c.apply(again);
        // Another node: a change.
        c.apply(pod_in("ml", "a", 16, "n2", &hidden));
        assert_eq!(
            types(&c, 12),
            vec![
                (13, EvType::Modified, "a".into()),
                (14, EvType::Modified, "a".into()),
                (16, EvType::Modified, "a".into()),
            ]
        );
        assert_eq!((c.rv(), unseen.get()), (16, 2));
    }

    #[test]
    fn past_the_history_is_gone_and_frames_are_encoded_once() {
        let c = Cache::new(Kind::Pod, Duration::ZERO, Default::default());
        c.relisted(None, vec![], 1);
        c.apply(pod("a", 2, "n"));
        std::thread::sleep(Duration::from_millis(2));
        c.apply(pod("a", 3, "m"));
        assert!(matches!(c.after(1, 10), After::Expired { oldest: 2 }));
        let After::Changes(cs, upto) = c.after(2, 10) else {
            panic!("resumable")
        };
        assert_eq!(upto, 3);
        let encoded = Default::default();
        let a = cs[0].frame(&c, Wire::Protobuf, EvType::Modified, &encoded);
        let b = cs[0].frame(&c, Wire::Protobuf, EvType::Modified, &encoded);
        assert_eq!(encoded.get(), 1);
        let ptrs = |f: Frame| f.parts().map(|p| p.as_ptr()).collect::<Vec<_>>();
        assert_eq!(
            ptrs(a.clone()),
            ptrs(b),
            "the same bytes for every subscriber"
        );
        // The object's bytes are the item's own, and the parts make the
        // event the API server would send.
        let raw = cs[0].obj.raw();
        assert!(ptrs(a.clone()).contains(&raw.as_ptr()));
        let sent: Vec<u8> = a.parts().flat_map(|p| p.to_vec()).collect();
        assert_eq!(
            sent,
            pbenc::watch_frame("MODIFIED", cs[0].obj.pb_object(Kind::Pod).to_vec())
        );
    }
}
