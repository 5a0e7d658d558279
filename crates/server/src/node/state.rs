//! A node instance's saved scope (`--node-state-dir`): what it held when it
//! stopped, so a restart (a DaemonSet rollout) serves at once and resumes
//! its watches from the relays' history instead of relisting them.
//!
//! The state is one file: the pods of this node (the scope) and, per watch
//! (the watch of this node's pods among them), its objects (their Protobuf
//! messages, as [`Slim::to_raw`] writes them and [`Slim::decode_pb`] reads
//! them) and the resourceVersion it would resume from, the compact
//! stream's dictionaries it holds ([`compact::Held`], so a restart claims
//! them and the relay sends each as a reference, not again), with the identity of the relay tier it came from (its URL
//! and the SHA-256 of the CA the relay kubeconfig trusts) and the node's
//! name. The file is a SHA-256-checked Protobuf message behind a magic and
//! a format version, at most [`MAX_BYTES`], written atomically (a
//! temporary file, fsync, rename) on a blocking thread, every
//! [`SAVE_EVERY`] when something changed and once at shutdown: never on
//! the DNS path.
//!
//! On start a state that is unreadable, corrupt, of another format, of
//! another relay tier, CA or node, older than [`MAX_AGE`] or larger than
//! [`MAX_BYTES`] is dropped with one log line saying why
//! (`podns_node_state_loads_total{result}`), and the scope is listed as
//! without one; it is never served. A state that loads is served at once
//! (each watch starts from its saved list, [`Listed`], this node's pods'
//! too) and each watch resumes from its resourceVersion: the relay's history decides between
//! the changes since and 410 and one relist of that watch. A watch whose
//! list is not complete when the state is written (a first list, a relist
//! after 410) is left out, and lists after a restart.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kube::runtime::watcher::Event;
use ring::digest::{SHA256, digest};

use super::Here;
use crate::k8s::compact;
use crate::k8s::objects::Message;
use crate::k8s::objects::proto::{Val, fields, put_bytes, put_int, put_message, str_of, sub};
use crate::k8s::tap::{Tap, Taps, Watched};
use crate::k8s::wire::Listed;
use crate::metrics::{Metrics, ResultLabels};

/// The state's format: raised whenever what is written changes meaning.
/// 2: the compact stream's dictionaries held, and the watch of this
/// node's pods (a field selector, no namespace).
pub const FORMAT: u32 = 2;
/// The largest state written or read. Past it nothing is written (the
/// file there is removed, so an older scope is never loaded), one WARN
/// line says so and `podns_node_state_writes_total{result="too_large"}`
/// counts it: the next restart lists. 64 MiB is about 200k relayed pods.
pub const MAX_BYTES: u64 = 64 << 20;
/// The oldest state loaded: the relay's default `--relay-history`. An
/// older one would find its resourceVersions gone from the history (410
/// and a relist for every watch) after serving what it held for nothing.
pub const MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// How often the state is written when something changed.
pub const SAVE_EVERY: Duration = Duration::from_secs(5);
/// The file in `--node-state-dir`.
pub const FILE: &str = "podns-node-scope.state";
const MAGIC: &[u8; 8] = b"podnsst\n";
/// Magic, format (u32 LE), SHA-256 of the body.
const HEAD: usize = 8 + 4 + 32;

/// Every `result` of `podns_node_state_loads_total`.
pub const LOAD_RESULTS: [&str; 8] = [
    "loaded",
    "missing",
    "unreadable",
    "corrupt",
    "version",
    "foreign",
    "too_old",
    "too_large",
];
/// Every `result` of `podns_node_state_writes_total`.
pub const WRITE_RESULTS: [&str; 3] = ["written", "failed", "too_large"];

/// Whom a state is valid for: the relay tier (its URL and the CA its
/// kubeconfig trusts) and the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub relay: String,
    /// SHA-256 of the CA certificates, hex; empty without one.
    pub ca: String,
    pub node: String,
}

impl Identity {
    /// The SHA-256 of the CA certificates (DER) a kubeconfig trusts.
    pub fn fingerprint<'a>(certs: impl IntoIterator<Item = &'a [u8]>) -> String {
        let mut all = Vec::new();
        for c in certs {
            all.extend_from_slice(&(c.len() as u64).to_le_bytes());
            all.extend_from_slice(c);
        }
        if all.is_empty() {
            return String::new();
        }
        hex(digest(&SHA256, &all).as_ref())
    }

    /// Why `saved` is not ours, if it is not.
    fn differs(&self, saved: &Identity) -> Option<String> {
        if saved.ca != self.ca {
            Some("it was saved under another relay CA (another cluster?)".into())
        } else if saved.relay != self.relay {
            Some(format!("it was saved from another relay ({})", saved.relay))
        } else if saved.node != self.node {
            Some(format!("it was saved by another node ({})", saved.node))
        } else {
            None
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// One watch of the scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatchKey {
    pub resource: String,
    /// Empty for the watch of this node's pods (every namespace).
    pub namespace: String,
    /// The pods' label selector (a held gang's), or the field selector of
    /// this node's pods (`spec.nodeName=`); `None` for the other kinds.
    pub selector: Option<String>,
}

/// One watch's saved list: its objects and where it resumes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SavedWatch {
    pub rv: u64,
    pub objects: Vec<Bytes>,
}

/// A pod on this node, as saved: namespace, name, gang.
pub type HerePod = (String, String, Option<(&'static str, String)>);

/// What a state holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Saved {
    pub identity: Identity,
    /// Unix seconds.
    pub saved_at: u64,
    /// Whether the relay served EndpointSlices.
    pub slices: bool,
    pub here: Vec<HerePod>,
    pub watches: BTreeMap<WatchKey, SavedWatch>,
    /// The compact stream's dictionaries held, least recently used first.
    pub dicts: Vec<Bytes>,
}

/// Why a state was not loaded: the `result` label and the words.
#[derive(Debug, PartialEq, Eq)]
pub struct Dropped {
    pub result: &'static str,
    pub why: String,
}

fn dropped(result: &'static str, why: impl Into<String>) -> Dropped {
    Dropped {
        result,
        why: why.into(),
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

// The body's fields.
const F_RELAY: u32 = 1;
const F_CA: u32 = 2;
const F_NODE: u32 = 3;
const F_SAVED_AT: u32 = 4;
const F_SLICES: u32 = 5;
const F_HERE: u32 = 6;
const F_WATCH: u32 = 7;
const F_DICT: u32 = 8;
// A pod here.
const H_NS: u32 = 1;
const H_NAME: u32 = 2;
const H_GANG_KEY: u32 = 3;
const H_GANG: u32 = 4;
// A watch.
const W_RESOURCE: u32 = 1;
const W_NAMESPACE: u32 = 2;
const W_SELECTOR: u32 = 3;
const W_RV: u32 = 4;
const W_OBJECT: u32 = 5;

impl Saved {
    /// The whole file: magic, format, checksum, body.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        put_bytes(&mut body, F_RELAY, self.identity.relay.as_bytes());
        put_bytes(&mut body, F_CA, self.identity.ca.as_bytes());
        put_bytes(&mut body, F_NODE, self.identity.node.as_bytes());
        put_int(&mut body, F_SAVED_AT, self.saved_at as i64);
        put_int(&mut body, F_SLICES, i64::from(self.slices));
        for (ns, name, gang) in &self.here {
            let _ = put_message(&mut body, F_HERE, |w| {
                put_bytes(w, H_NS, ns.as_bytes());
                put_bytes(w, H_NAME, name.as_bytes());
                if let Some((k, v)) = gang {
                    put_bytes(w, H_GANG_KEY, k.as_bytes());
                    put_bytes(w, H_GANG, v.as_bytes());
                }
                Ok::<(), ()>(())
            });
        }
        for (key, watch) in &self.watches {
            let _ = put_message(&mut body, F_WATCH, |w| {
                put_bytes(w, W_RESOURCE, key.resource.as_bytes());
                put_bytes(w, W_NAMESPACE, key.namespace.as_bytes());
                if let Some(s) = &key.selector {
                    put_bytes(w, W_SELECTOR, s.as_bytes());
                }
                put_int(w, W_RV, watch.rv as i64);
                for o in &watch.objects {
                    put_bytes(w, W_OBJECT, o);
                }
                Ok::<(), ()>(())
            });
        }
        for d in &self.dicts {
            put_bytes(&mut body, F_DICT, d);
        }
        let mut out = Vec::with_capacity(HEAD + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(digest(&SHA256, &body).as_ref());
        out.extend_from_slice(&body);
        out
    }

    /// A file's state, if it is whole, of this format, ours and recent.
    pub fn decode(file: &[u8], ours: &Identity, now: u64) -> Result<Self, Dropped> {
        if file.len() as u64 > MAX_BYTES {
            return Err(dropped(
                "too_large",
                format!("it is {} bytes, past the {MAX_BYTES} limit", file.len()),
            ));
        }
        if file.len() < HEAD || &file[..8] != MAGIC {
            return Err(dropped("corrupt", "it is not a podns node state"));
        }
        let format = u32::from_le_bytes(file[8..12].try_into().expect("4 bytes"));
        if format != FORMAT {
            return Err(dropped(
                "version",
                format!("its format is {format}, this podns reads {FORMAT}"),
            ));
        }
        let body = &file[HEAD..];
        if digest(&SHA256, body).as_ref() != &file[12..HEAD] {
            return Err(dropped("corrupt", "its checksum does not match"));
        }
        let saved =
            Self::decode_body(body).map_err(|what| dropped("corrupt", format!("bad {what}")))?;
        if let Some(why) = ours.differs(&saved.identity) {
            return Err(dropped("foreign", why));
        }
        let age = now.saturating_sub(saved.saved_at);
        if age > MAX_AGE.as_secs() {
            return Err(dropped(
                "too_old",
                format!("it is {age} s old, past {} s", MAX_AGE.as_secs()),
            ));
        }
        Ok(saved)
    }

    fn decode_body(body: &[u8]) -> Result<Self, &'static str> {
        let mut s = Saved::default();
        for f in fields(body) {
            let (num, v) = f.map_err(|_| "framing")?;
            match num {
                F_RELAY => s.identity.relay = text(v, "relay")?,
                F_CA => s.identity.ca = text(v, "CA")?,
                F_NODE => s.identity.node = text(v, "node")?,
                F_SAVED_AT => s.saved_at = varint(v, "time")?,
                F_SLICES => s.slices = varint(v, "slices")? != 0,
                F_HERE => s.here.push(decode_here(sub(v).ok_or("pod")?)?),
                F_WATCH => {
                    let (k, w) = decode_watch(sub(v).ok_or("watch")?)?;
                    s.watches.insert(k, w);
                }
                F_DICT => s
                    .dicts
                    .push(Bytes::copy_from_slice(sub(v).ok_or("dictionary")?)),
                _ => return Err("field"),
            }
        }
        Ok(s)
    }
}

fn text(v: Val<'_>, what: &'static str) -> Result<String, &'static str> {
    str_of(v).map(str::to_owned).ok_or(what)
}

fn varint(v: Val<'_>, what: &'static str) -> Result<u64, &'static str> {
    match v {
        Val::Varint(n) => Ok(n),
        _ => Err(what),
    }
}

fn decode_here(b: &[u8]) -> Result<HerePod, &'static str> {
    let (mut ns, mut name, mut key, mut gang) = (None, None, None, None);
    for f in fields(b) {
        let (num, v) = f.map_err(|_| "pod")?;
        match num {
            H_NS => ns = Some(text(v, "pod")?),
            H_NAME => name = Some(text(v, "pod")?),
            H_GANG_KEY => {
                let k = str_of(v).ok_or("pod")?;
                // The gang labels this podns knows, as itself names them.
                let known = crate::labels::GANG_KEYS.iter().find(|g| **g == k);
                key = Some(*known.ok_or("gang label")?);
            }
            H_GANG => gang = Some(text(v, "pod")?),
            _ => return Err("pod"),
        }
    }
    let gang = match (key, gang) {
        (Some(k), Some(v)) => Some((k, v)),
        (None, None) => None,
        _ => return Err("gang"),
    };
    Ok((ns.ok_or("pod")?, name.ok_or("pod")?, gang))
}

fn decode_watch(b: &[u8]) -> Result<(WatchKey, SavedWatch), &'static str> {
    let (mut resource, mut namespace, mut selector) = (None, None, None);
    let mut w = SavedWatch::default();
    for f in fields(b) {
        let (num, v) = f.map_err(|_| "watch")?;
        match num {
            W_RESOURCE => resource = Some(text(v, "watch")?),
            W_NAMESPACE => namespace = Some(text(v, "watch")?),
            W_SELECTOR => selector = Some(text(v, "watch")?),
            W_RV => w.rv = varint(v, "resourceVersion")?,
            W_OBJECT => w
                .objects
                .push(Bytes::copy_from_slice(sub(v).ok_or("object")?)),
            _ => return Err("watch"),
        }
    }
    if w.rv == 0 {
        return Err("resourceVersion");
    }
    let key = WatchKey {
        resource: resource.ok_or("watch")?,
        namespace: namespace.ok_or("watch")?,
        selector,
    };
    Ok((key, w))
}

/// One watch as it runs: its complete list (or none yet), kept current by
/// its events.
#[derive(Default)]
struct Live {
    /// No complete list (a first list, or a relist, in progress).
    listing: bool,
    /// An object that could not be written again: this watch is not saved.
    unfit: bool,
    objects: BTreeMap<(String, String), Bytes>,
    pending: BTreeMap<(String, String), Bytes>,
    /// The resourceVersion of its last event (the watcher's, read as the
    /// tap gets the event).
    rv: u64,
    seen: Arc<AtomicU64>,
    bookmarked: Arc<AtomicU64>,
}

impl Live {
    fn new() -> Self {
        Self {
            listing: true,
            ..Self::default()
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A node instance's state: the one loaded at start (taken by each watch
/// as it starts) and the live one, written by [`Store::save`].
pub struct Store {
    dir: PathBuf,
    identity: Identity,
    metrics: Metrics,
    loaded: Mutex<BTreeMap<WatchKey, SavedWatch>>,
    live: Mutex<HashMap<WatchKey, Arc<Mutex<Live>>>>,
    here: Mutex<Vec<HerePod>>,
    slices: AtomicBool,
    /// The compact stream's dictionaries every watch shares.
    dicts: Arc<compact::Held>,
    /// Bumped on every change; the last one written.
    changes: AtomicU64,
    written: AtomicU64,
    /// The last write was too large (warned once until it fits again).
    too_large: AtomicBool,
}

impl Store {
    /// The state in `dir`, saving and restoring the dictionaries `dicts`
    /// (the `WatchConfig::dicts` of the node instance's watches).
    pub fn new(
        dir: &Path,
        identity: Identity,
        metrics: Metrics,
        dicts: Arc<compact::Held>,
    ) -> Self {
        for result in LOAD_RESULTS {
            let _ = metrics
                .node_state_loads
                .get_or_create(&ResultLabels { result });
        }
        for result in ["saved", "listed"] {
            let _ = metrics
                .node_state_watches
                .get_or_create(&ResultLabels { result });
        }
        for result in WRITE_RESULTS {
            let _ = metrics
                .node_state_writes
                .get_or_create(&ResultLabels { result });
        }
        Self {
            dir: dir.to_owned(),
            identity,
            metrics,
            loaded: Mutex::default(),
            live: Mutex::default(),
            here: Mutex::default(),
            slices: AtomicBool::new(false),
            dicts,
            changes: AtomicU64::new(0),
            written: AtomicU64::new(0),
            too_large: AtomicBool::new(false),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    fn count_load(&self, result: &'static str) {
        self.metrics
            .node_state_loads
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// The saved scope, if there is one this node may serve: its pods
    /// here and whether the relay served EndpointSlices; the watches are
    /// kept for [`Keep`]. A state that is not is dropped with one line.
    pub async fn load(&self) -> Option<(Here, bool)> {
        let path = self.path();
        let file = match tokio::fs::read(&path).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.count_load("missing");
                tracing::info!(path = %path.display(), "no saved scope: listing it");
                return None;
            }
            Err(e) => {
                self.count_load("unreadable");
                tracing::warn!(path = %path.display(), "dropped the saved scope: cannot read it ({e}); listing it");
                return None;
            }
        };
        let saved = match Saved::decode(&file, &self.identity, now_secs()) {
            Ok(s) => s,
            Err(d) => {
                self.count_load(d.result);
                tracing::warn!(path = %path.display(), reason = d.result, "dropped the saved scope: {}; listing it", d.why);
                return None;
            }
        };
        self.count_load("loaded");
        let objects: usize = saved.watches.values().map(|w| w.objects.len()).sum();
        // Held before any watch starts: the first ones claim them.
        let dicts = self.dicts.restore(saved.dicts.iter().map(|d| &d[..]));
        tracing::info!(
            path = %path.display(),
            bytes = file.len(),
            watches = saved.watches.len(),
            objects,
            dicts,
            age_seconds = now_secs().saturating_sub(saved.saved_at),
            "serving the saved scope; its watches resume"
        );
        let here: Here = saved
            .here
            .iter()
            .map(|(ns, name, gang)| ((ns.clone(), name.clone()), gang.clone()))
            .collect();
        *lock(&self.here) = saved.here;
        self.slices.store(saved.slices, Ordering::Relaxed);
        *lock(&self.loaded) = saved.watches;
        Some((here, saved.slices))
    }

    /// The saved watches no watch took (namespaces no longer here) go.
    pub fn forget_loaded(&self) {
        lock(&self.loaded).clear();
    }

    /// This node's pods changed.
    pub fn set_here(&self, here: &Here) {
        let mut pods: Vec<HerePod> = here
            .iter()
            .map(|((ns, name), gang)| (ns.clone(), name.clone(), gang.clone()))
            .collect();
        pods.sort();
        let mut h = lock(&self.here);
        if *h != pods {
            *h = pods;
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn set_slices(&self, slices: bool) {
        self.slices.store(slices, Ordering::Relaxed);
    }

    /// The watches of `ns` stopped: they are no longer saved.
    pub fn forget(&self, ns: &str) {
        lock(&self.live).retain(|k, _| k.namespace != ns);
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// The state now: each watch with a complete list.
    fn snapshot(&self) -> Saved {
        let live: Vec<(WatchKey, Arc<Mutex<Live>>)> = lock(&self.live)
            .iter()
            .map(|(k, l)| (k.clone(), l.clone()))
            .collect();
        let mut watches = BTreeMap::new();
        for (key, l) in live {
            let l = lock(&l);
            if l.listing || l.unfit {
                continue;
            }
            // Every event before the last bookmark has reached the tap.
            let rv = l.rv.max(l.bookmarked.load(Ordering::Acquire));
            if rv == 0 {
                continue;
            }
            let objects = l.objects.values().cloned().collect();
            watches.insert(key, SavedWatch { rv, objects });
        }
        Saved {
            identity: self.identity.clone(),
            saved_at: now_secs(),
            slices: self.slices.load(Ordering::Relaxed),
            here: lock(&self.here).clone(),
            watches,
            dicts: self
                .dicts
                .dicts()
                .iter()
                .map(|d| Bytes::copy_from_slice(d))
                .collect(),
        }
    }

    /// Write the state if it changed since the last write (`force`: in
    /// any case), on a blocking thread.
    pub async fn save(self: &Arc<Self>, force: bool) {
        let changes = self.changes.load(Ordering::Relaxed);
        if !force && changes == self.written.load(Ordering::Relaxed) {
            return;
        }
        let me = self.clone();
        let done = tokio::task::spawn_blocking(move || me.write(changes)).await;
        if let Err(error) = done {
            tracing::warn!(%error, "writing the saved scope failed");
        }
    }

    fn count_write(&self, result: &'static str) {
        self.metrics
            .node_state_writes
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    fn write(&self, changes: u64) {
        let file = self.snapshot().encode();
        let path = self.path();
        if file.len() as u64 > MAX_BYTES {
            self.count_write("too_large");
            let _ = std::fs::remove_file(&path);
            if !self.too_large.swap(true, Ordering::Relaxed) {
                tracing::warn!(path = %path.display(), bytes = file.len(), limit = MAX_BYTES, "the scope is too large to save: a restart will list it");
            }
            self.written.store(changes, Ordering::Relaxed);
            return;
        }
        self.too_large.store(false, Ordering::Relaxed);
        match write_atomically(&path, &file) {
            Ok(()) => {
                self.count_write("written");
                self.metrics.node_state_bytes.set(file.len() as i64);
                self.written.store(changes, Ordering::Relaxed);
            }
            Err(error) => {
                self.count_write("failed");
                tracing::warn!(path = %path.display(), %error, "cannot write the saved scope");
            }
        }
    }

    /// Write every [`SAVE_EVERY`] what changed, until `stop`.
    pub async fn keep_saving(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(SAVE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => self.save(false).await,
            }
        }
    }
}

/// `bytes` at `path`, whole or not at all: a temporary file beside it,
/// synced, renamed over it, and the directory synced.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The taps that keep each watch's objects for the state, for one
/// namespace's watches (the pods' label selector is the held gangs').
#[derive(Clone)]
pub struct Keep {
    pub store: Arc<Store>,
    pub pods_selector: Option<String>,
}

impl Taps for Keep {
    type Tap<K: Watched> = KeepTap;

    fn tap<K: Watched>(&self, namespace: Option<&str>) -> KeepTap {
        let key = WatchKey {
            resource: K::RESOURCE.to_owned(),
            namespace: namespace.unwrap_or_default().to_owned(),
            selector: (K::RESOURCE == "pods")
                .then(|| self.pods_selector.clone())
                .flatten(),
        };
        self.store.keeper(key)
    }
}

impl Store {
    /// The keeper of the watch `key`, kept in the state from now on.
    fn keeper(self: &Arc<Self>, key: WatchKey) -> KeepTap {
        let live = Arc::new(Mutex::new(Live::new()));
        lock(&self.live).insert(key.clone(), live.clone());
        KeepTap {
            store: self.clone(),
            key,
            live,
        }
    }

    /// The keeper of the watch of this node's pods (`fields`:
    /// `spec.nodeName=NODE`, every namespace), which `node` runs itself:
    /// it starts from [`KeepTap::take_saved`] and hands each event to
    /// [`KeepTap::note`].
    pub fn node_pods(self: &Arc<Self>, fields: &str) -> KeepTap {
        self.keeper(WatchKey {
            resource: "pods".into(),
            namespace: String::new(),
            selector: Some(fields.to_owned()),
        })
    }
}

/// One watch's keeper.
pub struct KeepTap {
    store: Arc<Store>,
    key: WatchKey,
    live: Arc<Mutex<Live>>,
}

fn name_of<K: kube::Resource>(k: &K) -> Option<(String, String)> {
    let m = k.meta();
    Some((m.namespace.clone().unwrap_or_default(), m.name.clone()?))
}

fn encode<K: Watched>(k: &K) -> Option<Bytes> {
    let mut b = Vec::new();
    k.to_raw().write_fields(&mut b).ok()?;
    Some(Bytes::from(b))
}

impl KeepTap {
    /// Keep `event` (as [`Tap::event`] does).
    pub fn note<K: Watched>(&self, event: &Event<K>) {
        let mut l = lock(&self.live);
        let rv = l.seen.load(Ordering::Acquire);
        match event {
            Event::Init => {
                l.listing = true;
                l.pending.clear();
            }
            Event::InitApply(k) => match (name_of(k), encode(k)) {
                (Some(n), Some(b)) => {
                    l.pending.insert(n, b);
                }
                _ => l.unfit = true,
            },
            Event::InitDone => {
                l.objects = std::mem::take(&mut l.pending);
                l.listing = false;
                l.rv = rv;
            }
            Event::Apply(k) => {
                match (name_of(k), encode(k)) {
                    (Some(n), Some(b)) => {
                        l.objects.insert(n, b);
                    }
                    _ => l.unfit = true,
                }
                l.rv = rv;
            }
            Event::Delete(k) => {
                if let Some(n) = name_of(k) {
                    l.objects.remove(&n);
                }
                l.rv = rv;
            }
        }
        drop(l);
        self.store.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// The resourceVersion the watcher would resume from, published by
    /// it ([`RawConfig::seen`](crate::k8s::wire::RawConfig::seen)).
    pub fn seen(&self) -> Arc<AtomicU64> {
        lock(&self.live).seen.clone()
    }

    /// Each bookmark's resourceVersion, published by the watcher
    /// ([`RawConfig::bookmarked`](crate::k8s::wire::RawConfig::bookmarked)).
    pub fn bookmarked(&self) -> Arc<AtomicU64> {
        lock(&self.live).bookmarked.clone()
    }

    /// The saved list this watch starts from, if the state loaded has one
    /// (taken once).
    pub fn take_saved<K: Watched>(&mut self) -> Option<Listed<K>> {
        let w = lock(&self.store.loaded).remove(&self.key)?;
        let items = w.objects.iter().map(|b| K::decode_pb(b)).collect();
        Some(Listed {
            items,
            rv: w.rv.to_string(),
        })
    }
}

impl<K: Watched> Tap<K> for KeepTap {
    async fn event(
        &mut self,
        event: &Event<K>,
        _at: std::time::Instant,
    ) -> std::ops::ControlFlow<()> {
        self.note(event);
        std::ops::ControlFlow::Continue(())
    }

    fn resume_version(&self) -> Option<Arc<AtomicU64>> {
        Some(self.seen())
    }

    fn bookmarks(&self) -> Option<Arc<AtomicU64>> {
        Some(self.bookmarked())
    }

    fn saved(&mut self) -> Option<Listed<K>> {
        let listed = self.take_saved();
        let result = if listed.is_some() { "saved" } else { "listed" };
        self.store
            .metrics
            .node_state_watches
            .get_or_create(&ResultLabels { result })
            .inc();
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::objects::served::tests::round_trip;
    use crate::k8s::objects::{Slim, SlimPod};
    use kube::Resource;

    fn ours() -> Identity {
        Identity {
            relay: "https://relay:6443".into(),
            ca: Identity::fingerprint([b"ca-one".as_slice()]),
            node: "node-1".into(),
        }
    }

    fn pod(name: &str, rv: &str, ip: &str) -> SlimPod {
        round_trip::<SlimPod>(&serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": format!("u-{name}"),
                "resourceVersion": rv, "labels": {"jobset.sigs.k8s.io/jobset-name": "js"}},
            "spec": {"nodeName": "node-1"},
            "status": {"podIP": ip, "podIPs": [{"ip": ip}]}
        }))
    }

    fn saved(now: u64) -> Saved {
        let mut watches = BTreeMap::new();
        watches.insert(
            WatchKey {
                resource: "pods".into(),
                namespace: "ml".into(),
                selector: Some("jobset.sigs.k8s.io/jobset-name in (js)".into()),
            },
            SavedWatch {
                rv: 42,
                objects: vec![encode(&pod("js-0", "41", "10.0.0.1")).unwrap()],
            },
        );
        watches.insert(
            WatchKey {
                resource: "pods".into(),
                namespace: String::new(),
                selector: Some("spec.nodeName=node-1".into()),
            },
            SavedWatch {
                rv: 40,
                objects: vec![encode(&pod("js-0", "41", "10.0.0.1")).unwrap()],
            },
        );
        Saved {
            identity: ours(),
            saved_at: now,
            slices: true,
            here: vec![(
                "ml".into(),
                "js-0".into(),
                Some(("jobset.sigs.k8s.io/jobset-name", "js".into())),
            )],
            watches,
            dicts: vec![
                Bytes::from_static(b"the pods' dictionary"),
                Bytes::from_static(b"the services' dictionary"),
            ],
        }
    }

    #[test]
    fn a_state_reads_back_as_written() {
        let now = 1_000_000;
        let s = saved(now);
        let file = s.encode();
        assert_eq!(Saved::decode(&file, &ours(), now + 60), Ok(s.clone()));
        // This node's pods' watch (no namespace) and the dictionaries, in
        // their order.
        let back = Saved::decode(&file, &ours(), now).unwrap();
        assert!(back.watches.keys().any(|k| k.namespace.is_empty()));
        assert_eq!(back.dicts[1], &b"the services' dictionary"[..]);
        // Its object decodes as the pod it was.
        let w = s.watches.values().next().unwrap();
        let back = SlimPod::decode_pb(&w.objects[0]);
        assert_eq!(back.meta().name.as_deref(), Some("js-0"));
        assert_eq!(
            encode(&back).unwrap(),
            w.objects[0],
            "written again, the same bytes"
        );
    }

    #[test]
    fn a_corrupt_state_is_dropped() {
        let now = 1_000_000;
        let file = saved(now).encode();
        let mut flipped = file.clone();
        let last = flipped.len() - 3;
        flipped[last] ^= 0x40;
        let d = Saved::decode(&flipped, &ours(), now).unwrap_err();
        assert_eq!(d.result, "corrupt");
        assert!(d.why.contains("checksum"), "{}", d.why);
        let d = Saved::decode(&file[..file.len() / 2], &ours(), now).unwrap_err();
        assert_eq!(d.result, "corrupt", "truncated");
        let d = Saved::decode(b"not a state at all", &ours(), now).unwrap_err();
        assert_eq!(d.result, "corrupt");
        assert_eq!(
            Saved::decode(&[], &ours(), now).unwrap_err().result,
            "corrupt"
        );
        // A body that checks out but does not parse.
        let body = b"\xff\xff\xff";
        let mut bad = Vec::new();
        bad.extend_from_slice(MAGIC);
        bad.extend_from_slice(&FORMAT.to_le_bytes());
        bad.extend_from_slice(digest(&SHA256, body).as_ref());
        bad.extend_from_slice(body);
        let d = Saved::decode(&bad, &ours(), now).unwrap_err();
        assert_eq!(d.result, "corrupt");
    }

    #[test]
    fn a_foreign_state_is_dropped_saying_whose_it_is() {
        let now = 1_000_000;
        let file = saved(now).encode();
        let other_ca = Identity {
            ca: Identity::fingerprint([b"ca-two".as_slice()]),
            ..ours()
        };
        let d = Saved::decode(&file, &other_ca, now).unwrap_err();
        assert_eq!(d.result, "foreign");
        assert!(d.why.contains("relay CA"), "{}", d.why);
        let other_relay = Identity {
            relay: "https://elsewhere:6443".into(),
            ..ours()
        };
        let d = Saved::decode(&file, &other_relay, now).unwrap_err();
        assert_eq!(d.result, "foreign");
        assert!(d.why.contains("another relay"), "{}", d.why);
        let other_node = Identity {
            node: "node-2".into(),
            ..ours()
        };
        let d = Saved::decode(&file, &other_node, now).unwrap_err();
        assert_eq!(d.result, "foreign");
        assert!(d.why.contains("node-1"), "{}", d.why);
    }

    #[test]
    fn a_state_of_another_format_too_old_or_too_large_is_dropped() {
        let now = 1_000_000;
        let mut file = saved(now).encode();
        let d = Saved::decode(&file, &ours(), now + MAX_AGE.as_secs() + 1).unwrap_err();
        assert_eq!(d.result, "too_old");
        assert!(Saved::decode(&file, &ours(), now + MAX_AGE.as_secs()).is_ok());
        file[8..12].copy_from_slice(&(FORMAT + 1).to_le_bytes());
        let d = Saved::decode(&file, &ours(), now).unwrap_err();
        assert_eq!(d.result, "version");
        let huge = vec![0u8; MAX_BYTES as usize + 1];
        assert_eq!(
            Saved::decode(&huge, &ours(), now).unwrap_err().result,
            "too_large"
        );
    }

    #[tokio::test]
    async fn a_state_of_the_previous_format_is_dropped_in_one_line_and_listed() {
        // Format 1 (no dictionaries, no watch of this node's pods): its
        // body is one this podns could read, but it is not served.
        assert_eq!(FORMAT, 2);
        let now = now_secs();
        let mut old = saved(now);
        old.dicts.clear();
        old.watches.retain(|k, _| !k.namespace.is_empty());
        let mut file = old.encode();
        file[8..12].copy_from_slice(&1u32.to_le_bytes());
        let d = Saved::decode(&file, &ours(), now).unwrap_err();
        assert_eq!(d.result, "version");
        assert_eq!(d.why, "its format is 1, this podns reads 2");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), &file).unwrap();
        let metrics = Metrics::new();
        let held = Arc::new(compact::Held::default());
        let store = Store::new(dir.path(), ours(), metrics.clone(), held.clone());
        assert!(store.load().await.is_none());
        assert_eq!(loads(&metrics, "version"), 1);
        assert_eq!(loads(&metrics, "loaded"), 0);
        assert!(lock(&store.loaded).is_empty() && held.ids().is_empty());
    }

    #[tokio::test]
    async fn the_dictionaries_held_and_this_nodes_pods_are_saved_and_restored() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let held = Arc::new(compact::Held::default());
        for d in [&b"the pods' dictionary"[..], b"the jobs' dictionary"] {
            held.keep(compact::content_id(d), d);
        }
        let store = Arc::new(Store::new(dir.path(), ours(), metrics, held.clone()));
        assert!(store.load().await.is_none());
        // This node's pods, watched by `node` itself through the keeper.
        let mut mine = store.node_pods("spec.nodeName=node-1");
        assert!(mine.take_saved::<SlimPod>().is_none());
        let seen = mine.seen();
        mine.note(&Event::<SlimPod>::Init);
        mine.note(&Event::InitApply(pod("a", "5", "10.0.0.1")));
        seen.store(9, Ordering::Release);
        mine.note(&Event::<SlimPod>::InitDone);
        seen.store(10, Ordering::Release);
        mine.note(&Event::Apply(pod("b", "10", "10.0.0.2")));
        store.save(false).await;

        // A restart: a new `Held` holds them again, in their order, once
        // the state is loaded, and this node's pods start from their list.
        let metrics = Metrics::new();
        let again_held = Arc::new(compact::Held::default());
        let again = Arc::new(Store::new(
            dir.path(),
            ours(),
            metrics.clone(),
            again_held.clone(),
        ));
        assert!(again_held.ids().is_empty());
        again.load().await.expect("loaded");
        assert_eq!(again_held.ids(), held.ids());
        assert_eq!(again_held.dicts(), held.dicts());
        let mut mine = again.node_pods("spec.nodeName=node-1");
        let listed: Listed<SlimPod> = mine.take_saved().expect("saved");
        assert_eq!(listed.rv, "10");
        let names: Vec<_> = listed.items.iter().map(|p| p.meta().name.clone()).collect();
        assert_eq!(names, [Some("a".to_string()), Some("b".to_string())]);
        assert!(mine.take_saved::<SlimPod>().is_none(), "taken once");
        // Not one of the scope's watches in the metric.
        let saved = metrics
            .node_state_watches
            .get_or_create(&ResultLabels { result: "saved" })
            .get();
        assert_eq!(saved, 0);
        // Another node's pods are not this one's.
        let mut other = again.node_pods("spec.nodeName=node-2");
        assert!(other.take_saved::<SlimPod>().is_none());
    }

    fn loads(m: &Metrics, result: &'static str) -> u64 {
        m.node_state_loads
            .get_or_create(&ResultLabels { result })
            .get()
    }

    #[tokio::test]
    async fn a_watch_is_saved_with_its_complete_list_and_starts_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let store = Arc::new(Store::new(
            dir.path(),
            ours(),
            metrics.clone(),
            Arc::default(),
        ));
        assert!(store.load().await.is_none());
        assert_eq!(loads(&metrics, "missing"), 1);
        let keep = Keep {
            store: store.clone(),
            pods_selector: Some("app=x".into()),
        };
        let mut tap = keep.tap::<SlimPod>(Some("ml"));
        let seen = Tap::<SlimPod>::resume_version(&tap).unwrap();
        let marks = Tap::<SlimPod>::bookmarks(&tap).unwrap();
        let at = std::time::Instant::now();
        let _ = tap.event(&Event::<SlimPod>::Init, at).await;
        let _ = tap
            .event(&Event::InitApply(pod("a", "5", "10.0.0.1")), at)
            .await;
        // A list in progress is not saved.
        assert!(store.snapshot().watches.is_empty());
        seen.store(10, Ordering::Release);
        let _ = tap.event(&Event::<SlimPod>::InitDone, at).await;
        seen.store(11, Ordering::Release);
        let _ = tap
            .event(&Event::Apply(pod("b", "11", "10.0.0.2")), at)
            .await;
        seen.store(12, Ordering::Release);
        let _ = tap
            .event(&Event::Delete(pod("a", "12", "10.0.0.1")), at)
            .await;
        // A bookmark after them; an event in flight is ahead of the tap
        // but never ahead of a bookmark.
        marks.store(20, Ordering::Release);
        seen.store(25, Ordering::Release);
        store.set_here(
            &[(("ml".to_string(), "b".to_string()), None)]
                .into_iter()
                .collect(),
        );
        store.set_slices(true);
        store.save(false).await;
        let w = store.snapshot();
        let key = WatchKey {
            resource: "pods".into(),
            namespace: "ml".into(),
            selector: Some("app=x".into()),
        };
        assert_eq!(w.watches[&key].rv, 20);
        assert_eq!(w.watches[&key].objects.len(), 1);
        let written = metrics
            .node_state_writes
            .get_or_create(&ResultLabels { result: "written" })
            .get();
        assert_eq!(written, 1);
        assert!(metrics.node_state_bytes.get() > 0);
        // Nothing changed: not written again.
        store.save(false).await;
        assert_eq!(
            metrics
                .node_state_writes
                .get_or_create(&ResultLabels { result: "written" })
                .get(),
            1
        );

        // The next start serves it: the watch starts from its list.
        let metrics = Metrics::new();
        let again = Arc::new(Store::new(
            dir.path(),
            ours(),
            metrics.clone(),
            Arc::default(),
        ));
        let (here, slices) = again.load().await.expect("loaded");
        assert!(slices);
        assert_eq!(here.len(), 1);
        assert_eq!(loads(&metrics, "loaded"), 1);
        let keep = Keep {
            store: again.clone(),
            pods_selector: Some("app=x".into()),
        };
        let mut other = keep.tap::<SlimPod>(Some("web"));
        assert!(Tap::<SlimPod>::saved(&mut other).is_none());
        let mut tap = keep.tap::<SlimPod>(Some("ml"));
        let listed: Listed<SlimPod> = tap.saved().expect("saved");
        assert_eq!(listed.rv, "20");
        let names: Vec<_> = listed.items.iter().map(|p| p.meta().name.clone()).collect();
        assert_eq!(names, [Some("b".to_string())]);
        assert!(Tap::<SlimPod>::saved(&mut tap).is_none(), "taken once");

        // From another CA it is dropped, once, and never served.
        let metrics = Metrics::new();
        let foreign = Identity {
            ca: "00".into(),
            ..ours()
        };
        let third = Store::new(dir.path(), foreign, metrics.clone(), Arc::default());
        assert!(third.load().await.is_none());
        assert_eq!(loads(&metrics, "foreign"), 1);
        assert!(lock(&third.loaded).is_empty());
    }

    #[tokio::test]
    async fn a_watch_with_a_relist_in_progress_or_a_gone_namespace_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::new(
            dir.path(),
            ours(),
            Metrics::new(),
            Arc::default(),
        ));
        let keep = Keep {
            store: store.clone(),
            pods_selector: None,
        };
        let at = std::time::Instant::now();
        let mut tap = keep.tap::<SlimPod>(Some("ml"));
        let seen = Tap::<SlimPod>::resume_version(&tap).unwrap();
        seen.store(7, Ordering::Release);
        let _ = tap.event(&Event::<SlimPod>::Init, at).await;
        let _ = tap.event(&Event::<SlimPod>::InitDone, at).await;
        assert_eq!(store.snapshot().watches.len(), 1, "an empty list is saved");
        let _ = tap.event(&Event::<SlimPod>::Init, at).await;
        assert!(store.snapshot().watches.is_empty(), "relisting");
        let _ = tap.event(&Event::<SlimPod>::InitDone, at).await;
        assert_eq!(store.snapshot().watches.len(), 1);
        store.forget("ml");
        assert!(store.snapshot().watches.is_empty(), "out of scope");
    }
}
