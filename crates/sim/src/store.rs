//! The object store: one global resourceVersion counter (like etcd), objects
//! kept as serialized JSON bytes plus the few fields selectors need, and a
//! ring buffer of the last `--history` events for watch resumption.
//!
//! Every mutation bumps the counter by exactly one and appends exactly one
//! event, so the ring is indexed by `rv - first_rv`. Events keep the previous
//! version of the object, which lets a watch decide selector transitions and
//! lets a paged list be served at the snapshot of its first page.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use podns_kapi::filter::{Filter, Selectable};
use podns_kapi::pbenc;
use podns_kapi::selector::Field;
use podns_kapi::watch::{EvType, event_line};
use podns_kapi::{ApiError, KINDS};

/// The kinds the store keeps (kapi's), named here too for the callers
/// outside the crate that list stored objects by kind.
pub use podns_kapi::Kind;

use crate::service_net::ServiceNet;

/// One stored version of an object.
#[derive(Debug)]
pub struct Obj {
    pub bytes: Bytes,
    pub rv: u64,
    pub ns: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub node_name: String,
    pub phase: String,
    pub has_ip: bool,
    /// A Pod's Ready condition is True.
    pub ready: bool,
    pub deleting: bool,
    /// The Protobuf form (one `…List` item), encoded on first use and
    /// shared by every list and watch that sends it.
    pub pb: OnceLock<Option<Bytes>>,
}

impl Obj {
    /// This object as one item of its kind's Protobuf list; `None` (and a
    /// warning once) when the stored JSON has no typed form.
    pub fn pb_item(&self, kind: Kind) -> Option<&Bytes> {
        self.pb
            .get_or_init(|| match pbenc::list_item(kind, &self.bytes) {
                Ok(b) => Some(Bytes::from(b)),
                Err(error) => {
                    tracing::warn!(%error, ns = %self.ns, name = %self.name, "no protobuf form");
                    None
                }
            })
            .as_ref()
    }

    /// The enveloped object, as a get or a watch event carries it.
    pub fn pb_object(&self, kind: Kind) -> Option<Vec<u8>> {
        let item = self.pb_item(kind)?;
        let raw = pbenc::object(item)?;
        Some(pbenc::envelope(
            kind.api_version(),
            kind.name(),
            raw.to_vec(),
        ))
    }

    fn from_value(v: &Value, rv: u64) -> Obj {
        let meta = &v["metadata"];
        let s = |x: &Value| x.as_str().unwrap_or_default().to_string();
        Obj {
            bytes: Bytes::from(serde_json::to_vec(v).expect("a Value always serializes")),
            rv,
            ns: s(&meta["namespace"]),
            name: s(&meta["name"]),
            uid: s(&meta["uid"]),
            labels: labels_of(v),
            node_name: s(&v["spec"]["nodeName"]),
            phase: s(&v["status"]["phase"]),
            has_ip: v["status"]["podIP"].as_str().is_some_and(|s| !s.is_empty()),
            ready: v["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            }),
            deleting: !meta["deletionTimestamp"].is_null(),
            pb: OnceLock::new(),
        }
    }

    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes).expect("stored bytes are JSON")
    }
}

impl Selectable for Obj {
    fn namespace(&self) -> &str {
        &self.ns
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    fn field(&self, f: Field) -> &str {
        match f {
            Field::Name => &self.name,
            Field::Namespace => &self.ns,
            Field::NodeName => &self.node_name,
            Field::Phase => &self.phase,
        }
    }
}

/// One change, as it appears in the history ring.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: Kind,
    pub ty: EvType,
    pub obj: Arc<Obj>,
    pub prev: Option<Arc<Obj>>,
    /// The wire line per event type, built once and shared by every watcher
    /// (a selector transition turns a MODIFIED into ADDED or DELETED).
    lines: [OnceLock<Bytes>; 3],
}

impl Event {
    pub fn line(&self, ty: EvType) -> Bytes {
        self.lines[ty as usize]
            .get_or_init(|| event_line(ty.as_str(), &self.obj.bytes))
            .clone()
    }
}

/// An object's key: its namespace ("" when cluster-scoped) and name.
pub type Key = (String, String);

struct Inner {
    rv: u64,
    objects: [BTreeMap<Key, Arc<Obj>>; KINDS],
    ring: VecDeque<Arc<Event>>,
    /// rv of `ring[0]`; `rv + 1` when the ring is empty. Resuming from any
    /// rv >= `first_rv - 1` is possible.
    first_rv: u64,
    cap: usize,
    /// The service CIDRs and the cluster IPs taken from them.
    services: ServiceNet,
    pod_events: u64,
}

impl Inner {
    /// Whether a new object `ns/name` of `kind` may be created: its
    /// namespace exists and the name is free.
    fn room_for(&self, kind: Kind, ns: &str, name: &str) -> Result<(), ApiError> {
        if kind.namespaced()
            && !self.objects[Kind::Namespace.idx()].contains_key(&(String::new(), ns.to_string()))
        {
            return Err(ApiError::not_found(Kind::Namespace, ns));
        }
        if self.objects[kind.idx()].contains_key(&(ns_key(kind, ns), name.to_string())) {
            return Err(ApiError::already_exists(kind, name));
        }
        Ok(())
    }

    /// The stored object `ns/name` of `kind` (`ns` ignored for a
    /// cluster-scoped kind), or NotFound.
    fn stored(&self, kind: Kind, ns: &str, name: &str) -> Result<Arc<Obj>, ApiError> {
        self.objects[kind.idx()]
            .get(&(ns_key(kind, ns), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))
    }
}

/// Hooks the store calls after a commit (the kubelet and grace timers).
pub trait Hooks: Send + Sync {
    fn pod_written(&self, obj: &Arc<Obj>, ty: EvType);
}

pub struct Store {
    inner: Mutex<Inner>,
    notify: watch::Sender<u64>,
    hooks: OnceLock<Arc<dyn Hooks>>,
}

/// A page of a list, served at `rv`.
#[derive(Debug)]
pub struct Page {
    pub rv: u64,
    pub items: Vec<Arc<Obj>>,
    pub cont: Option<String>,
}

/// An object's labels (`metadata.labels`), a value that is no string
/// read as empty.
pub fn labels_of(v: &Value) -> BTreeMap<String, String> {
    v["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// How the current time is written in object metadata.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}

pub fn new_uid() -> String {
    let x: u128 = rand::random();
    let h = format!("{x:032x}");
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// A random suffix from the alphabet apiserver uses for `generateName`.
pub fn rand_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHA[rand::random_range(0..ALPHA.len())] as char)
        .collect()
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("just made an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn set_rv(v: &mut Value, rv: u64) {
    v["metadata"]["resourceVersion"] = Value::String(rv.to_string());
}

impl Store {
    /// A store whose Services take cluster IPs from kube-apiserver's
    /// default range (10.96.0.0/12, single-stack).
    pub fn new(history: usize) -> Arc<Store> {
        Self::with_services(history, ServiceNet::default())
    }

    /// A store whose Services take cluster IPs from `services`.
    pub fn with_services(history: usize, services: ServiceNet) -> Arc<Store> {
        let (notify, _) = watch::channel(0);
        Arc::new(Store {
            inner: Mutex::new(Inner {
                rv: 0,
                objects: Default::default(),
                ring: VecDeque::new(),
                first_rv: 1,
                cap: history.max(1),
                services,
                pod_events: 0,
            }),
            notify,
            hooks: OnceLock::new(),
        })
    }

    pub fn set_hooks(&self, h: Arc<dyn Hooks>) {
        let _ = self.hooks.set(h);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// The first address of the primary service CIDR, which the
    /// `kubernetes` Service holds.
    pub fn first_service_ip(&self) -> std::net::IpAddr {
        self.lock().services.first_ip()
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn pod_events(&self) -> u64 {
        self.lock().pod_events
    }

    /// Objects per kind, indexed by [`Kind::idx`].
    pub fn counts(&self) -> [usize; KINDS] {
        let g = self.lock();
        std::array::from_fn(|i| g.objects[i].len())
    }

    /// Forgets the history: the next resume from an older rv gets 410.
    ///
    /// The counter moves on by one (as an etcd compaction does not, but a
    /// write to an object we do not serve would), so that a watcher caught
    /// up to the last event cannot resume either, while a fresh list's rv
    /// stays resumable.
    pub fn compact(&self) {
        let mut g = self.lock();
        g.ring.clear();
        g.rv += 1;
        g.first_rv = g.rv + 1;
    }

    /// Commits one change: bumps the rv, stamps it into the object, stores it
    /// and appends the event. Returns the stored version.
    fn commit(
        &self,
        g: &mut Inner,
        kind: Kind,
        ty: EvType,
        mut v: Value,
        prev: Option<Arc<Obj>>,
    ) -> Arc<Obj> {
        set_rv(&mut v, g.rv + 1);
        let obj = Arc::new(Obj::from_value(&v, g.rv + 1));
        self.commit_obj(g, kind, ty, obj, prev)
    }

    fn commit_obj(
        &self,
        g: &mut Inner,
        kind: Kind,
        ty: EvType,
        obj: Arc<Obj>,
        prev: Option<Arc<Obj>>,
    ) -> Arc<Obj> {
        g.rv += 1;
        let rv = g.rv;
        debug_assert_eq!(obj.rv, rv);
        let key = (obj.ns.clone(), obj.name.clone());
        if ty == EvType::Deleted {
            g.objects[kind.idx()].remove(&key);
            if kind == Kind::Service {
                // A deleted Service gives its cluster IPs back.
                g.services.release(&obj.value()["spec"]);
            }
        } else {
            g.objects[kind.idx()].insert(key, obj.clone());
        }
        if kind == Kind::Pod {
            g.pod_events += 1;
        }
        let ev = Arc::new(Event {
            rv,
            kind,
            ty,
            obj: obj.clone(),
            prev,
            lines: Default::default(),
        });
        if g.ring.len() >= g.cap {
            g.ring.pop_front();
        }
        g.ring.push_back(ev);
        g.first_rv = g.ring.front().map_or(rv, |e| e.rv);
        obj
    }

    /// Commits one change as [`Store::commit`] does, then (the lock
    /// released) wakes the watchers and runs the hooks.
    fn write(
        &self,
        mut g: MutexGuard<'_, Inner>,
        kind: Kind,
        ty: EvType,
        v: Value,
        prev: Option<Arc<Obj>>,
    ) -> Arc<Obj> {
        let obj = self.commit(&mut g, kind, ty, v, prev);
        drop(g);
        self.after_commit(obj.rv, kind, &obj, ty);
        obj
    }

    fn after_commit(&self, rv: u64, kind: Kind, obj: &Arc<Obj>, ty: EvType) {
        self.notify.send_replace(rv);
        if kind == Kind::Pod
            && let Some(h) = self.hooks.get()
        {
            h.pod_written(obj, ty);
        }
    }

    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Result<Arc<Obj>, ApiError> {
        let g = self.lock();
        g.objects[kind.idx()]
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))
    }

    /// Checks the body names the right kind and is an object.
    fn check_kind(kind: Kind, v: &Value) -> Result<(), ApiError> {
        let name = v["metadata"]["name"].as_str().unwrap_or_default();
        let Some(o) = v.as_object() else {
            return Err(ApiError::invalid(
                kind,
                name,
                "the body is not a JSON object",
            ));
        };
        if let Some(k) = o.get("kind")
            && k.as_str() != Some(kind.name())
        {
            return Err(ApiError::invalid(
                kind,
                name,
                format!("kind: Invalid value: {k}: must be {}", kind.name()),
            ));
        }
        if let Some(a) = o.get("apiVersion")
            && a.as_str() != Some(kind.api_version())
        {
            return Err(ApiError::invalid(
                kind,
                name,
                format!(
                    "apiVersion: Invalid value: {a}: must be {}",
                    kind.api_version()
                ),
            ));
        }
        if !o.get("metadata").is_none_or(Value::is_object) {
            return Err(ApiError::invalid(kind, name, "metadata: must be an object"));
        }
        for f in ["spec", "status"] {
            if !o.get(f).is_none_or(|x| x.is_object() || x.is_null()) {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    format!("{f}: must be an object"),
                ));
            }
        }
        Ok(())
    }

    /// Creates an object. `ns` is the namespace of the request path.
    pub fn create(&self, kind: Kind, ns: &str, v: Value) -> Result<Arc<Obj>, ApiError> {
        self.create_with(kind, ns, v, false)
    }

    /// Creates an object; `keep_status` keeps the given `uid` and `status`
    /// (for the simulator's own controllers, never for API clients).
    pub fn create_with(
        &self,
        kind: Kind,
        ns: &str,
        mut v: Value,
        keep_status: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        Self::check_kind(kind, &v)?;
        v["kind"] = kind.name().into();
        v["apiVersion"] = kind.api_version().into();
        let meta = v["metadata"].as_object_mut().map(|_| ()).is_some();
        if !meta {
            v["metadata"] = json!({});
        }
        if kind.namespaced() {
            match v["metadata"]["namespace"].as_str() {
                Some(b) if !b.is_empty() && b != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => v["metadata"]["namespace"] = ns.into(),
            }
        } else if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let mut g = self.lock();
        let name = match v["metadata"]["name"].as_str() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match v["metadata"]["generateName"].as_str() {
                Some(p) if !p.is_empty() => loop {
                    let n = format!("{p}{}", rand_suffix());
                    if !g.objects[kind.idx()].contains_key(&(ns_key(kind, ns), n.clone())) {
                        break n;
                    }
                },
                _ => {
                    return Err(ApiError::invalid(
                        kind,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                kind,
                &name,
                "metadata.name: Invalid value: a lowercase RFC 1123 subdomain must consist of \
                 lower case alphanumeric characters, '-' or '.'",
            ));
        }
        g.room_for(kind, ns, &name)?;
        {
            let m = &mut v["metadata"];
            m["name"] = name.clone().into();
            if !(keep_status && m["uid"].as_str().is_some_and(|u| !u.is_empty())) {
                m["uid"] = new_uid().into();
            }
            m["creationTimestamp"] = now_rfc3339().into();
            // The Pod and Job registries count spec changes; the Service
            // and Namespace registries keep no generation.
            if matches!(kind, Kind::Pod | Kind::Job) {
                m["generation"] = 1.into();
            } else if let Some(o) = m.as_object_mut() {
                o.remove("generation");
            }
            if let Some(o) = m.as_object_mut() {
                o.remove("deletionTimestamp");
                o.remove("deletionGracePeriodSeconds");
            }
        }
        let status = if keep_status {
            v.get("status").cloned()
        } else {
            None
        };
        default_object(kind, &mut v, &mut g)?;
        if let Some(st) = status {
            v["status"] = st;
        }
        let obj = self.write(g, kind, EvType::Added, v, None);
        Ok(obj)
    }

    /// Inserts an object built by the simulator itself from prebuilt bytes
    /// (`make` gets the resourceVersion to stamp in). No defaulting or
    /// validation: the caller builds a complete object.
    pub fn insert_raw(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        make: impl FnOnce(u64) -> Obj,
    ) -> Result<Arc<Obj>, ApiError> {
        let mut g = self.lock();
        g.room_for(kind, ns, name)?;
        let obj = Arc::new(make(g.rv + 1));
        let obj = self.commit_obj(&mut g, kind, EvType::Added, obj, None);
        drop(g);
        self.after_commit(obj.rv, kind, &obj, EvType::Added);
        Ok(obj)
    }

    /// Replaces an object (PUT). `status` selects the status subresource:
    /// only `.status` changes; otherwise `.status` is kept from the stored
    /// object, as the apiserver does for pods and services.
    pub fn replace(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        v: Value,
        status: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        Self::check_kind(kind, &v)?;
        if let Some(n) = v["metadata"]["name"].as_str()
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let want_rv = v["metadata"]["resourceVersion"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        self.modify(kind, ns, name, want_rv.as_deref(), move |old| {
            Ok(merge_update(old, v, status))
        })
    }

    /// Merge-patches an object (strategic merge patch is treated alike).
    pub fn patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
        status: bool,
    ) -> Result<Arc<Obj>, ApiError> {
        if !patch.is_object() {
            return Err(ApiError::bad_request("a merge patch must be a JSON object"));
        }
        let want_rv = patch["metadata"]["resourceVersion"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        self.modify(kind, ns, name, want_rv.as_deref(), move |old| {
            let mut new = old.clone();
            merge_patch(&mut new, &patch);
            Self::check_kind(kind, &new)?;
            Ok(merge_update(old, new, status))
        })
    }

    /// Read-modify-write under the lock. `f` gets the stored object and
    /// returns the new one; server-owned metadata is restored afterwards.
    pub fn modify(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        want_rv: Option<&str>,
        f: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Obj>, ApiError> {
        let mut g = self.lock();
        let old = g.stored(kind, ns, name)?;
        if let Some(w) = want_rv
            && w != old.rv.to_string()
        {
            return Err(ApiError::conflict(kind, name));
        }
        let old_v = old.value();
        let mut new = f(&old_v)?;
        // Server-owned fields survive any client write.
        for k in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_v["metadata"].get(k) {
                Some(x) => new["metadata"][k] = x.clone(),
                None => {
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove(k);
                    }
                }
            }
        }
        new["kind"] = kind.name().into();
        new["apiVersion"] = kind.api_version().into();
        if kind == Kind::Service {
            // The IP fields change only as the apiserver allows; a status
            // write leaves the spec as it was, which is always allowed.
            if !new["spec"].is_object() {
                new["spec"] = json!({});
            }
            g.services.update(name, &old_v["spec"], &mut new["spec"])?;
        }
        match kind {
            Kind::ClusterRole | Kind::Role => check_rules(kind, &new)?,
            Kind::ClusterRoleBinding | Kind::RoleBinding => {
                check_binding(kind, &new)?;
                if new["roleRef"] != old_v["roleRef"] {
                    return Err(ApiError::invalid(
                        kind,
                        name,
                        "roleRef: Invalid value: cannot change roleRef",
                    ));
                }
            }
            _ => {}
        }
        if new == old_v {
            // A no-op write does not bump the resourceVersion.
            return Ok(old);
        }
        let obj = self.write(g, kind, EvType::Modified, new, Some(old));
        Ok(obj)
    }

    /// Deletes an object. For a scheduled pod with `grace > 0`, marks it
    /// with a `deletionTimestamp` (MODIFIED) and returns `(obj, true)`; the
    /// caller removes it when the grace period ends.
    pub fn delete(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        grace: u64,
        want_uid: Option<&str>,
    ) -> Result<(Arc<Obj>, bool), ApiError> {
        let mut g = self.lock();
        let old = g.stored(kind, ns, name)?;
        if let Some(u) = want_uid
            && u != old.uid
        {
            return Err(ApiError::conflict(kind, name));
        }
        if kind == Kind::Pod && grace > 0 && !old.node_name.is_empty() {
            if old.deleting {
                return Ok((old, true));
            }
            let mut v = old.value();
            let at = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(grace as i64))
                .unwrap_or_else(|_| jiff::Timestamp::now());
            v["metadata"]["deletionTimestamp"] = at
                .round(jiff::Unit::Second)
                .map(|t| t.to_string())
                .unwrap_or_else(|_| at.to_string())
                .into();
            v["metadata"]["deletionGracePeriodSeconds"] = grace.into();
            let obj = self.write(g, kind, EvType::Modified, v, Some(old));
            return Ok((obj, true));
        }
        let mut removed = Vec::new();
        if kind == Kind::Namespace {
            // Deleting a namespace deletes what it holds, each with its event.
            for k in [Kind::Pod, Kind::Service, Kind::Job, Kind::EndpointSlice] {
                let keys: Vec<Key> = g.objects[k.idx()]
                    .range((name.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == name)
                    .map(|(key, _)| key.clone())
                    .collect();
                for key in keys {
                    if let Some(o) = g.objects[k.idx()].get(&key).cloned() {
                        let o2 = self.commit(&mut g, k, EvType::Deleted, o.value(), Some(o));
                        removed.push((k, o2));
                    }
                }
            }
        }
        let obj = self.commit(&mut g, kind, EvType::Deleted, old.value(), Some(old));
        drop(g);
        for (k, o) in &removed {
            self.after_commit(o.rv, *k, o, EvType::Deleted);
        }
        self.after_commit(obj.rv, kind, &obj, EvType::Deleted);
        Ok((obj, false))
    }

    /// Finishes a graceful deletion if the pod (same uid) is still there.
    pub fn finish_delete(&self, ns: &str, name: &str, uid: &str) {
        let _ = self.delete(Kind::Pod, ns, name, 0, Some(uid));
    }

    /// All current objects of a kind matching `f`, and the rv they are at.
    pub fn snapshot(&self, kind: Kind, f: &Filter) -> (u64, Vec<Arc<Obj>>) {
        let g = self.lock();
        let items = range_of(&g.objects[kind.idx()], f)
            .filter(|o| f.matches(*o))
            .cloned()
            .collect();
        (g.rv, items)
    }

    /// A page of a list. `at`: serve at this rv (an `Exact` list or a
    /// continuation); `None` serves the current state. `start`: the key to
    /// continue after.
    pub fn list(
        &self,
        kind: Kind,
        f: &Filter,
        at: Option<u64>,
        start: Option<Key>,
        limit: Option<usize>,
    ) -> Result<Page, ApiError> {
        let g = self.lock();
        let rv = at.unwrap_or(g.rv);
        if rv > g.rv {
            return Err(ApiError::new(
                504,
                "Timeout",
                format!("Too large resource version: {rv}, current: {}", g.rv),
            )
            .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1})));
        }
        // Undo the events after `rv`: the state of a key at `rv` is the
        // `prev` of the first later event that touched it.
        let mut overlay: BTreeMap<Key, Option<Arc<Obj>>> = BTreeMap::new();
        if rv < g.rv {
            if rv + 1 < g.first_rv {
                return Err(ApiError::gone_rv(rv));
            }
            let from = (rv + 1 - g.first_rv) as usize;
            for ev in g.ring.range(from..) {
                if ev.kind != kind {
                    continue;
                }
                let key = (ev.obj.ns.clone(), ev.obj.name.clone());
                overlay.entry(key).or_insert_with(|| ev.prev.clone());
            }
        }
        let map = &g.objects[kind.idx()];
        let lower = match &start {
            Some(k) => std::ops::Bound::Excluded(k.clone()),
            None => match &f.ns {
                Some(ns) if kind.namespaced() => {
                    std::ops::Bound::Included((ns.clone(), String::new()))
                }
                _ => std::ops::Bound::Unbounded,
            },
        };
        let mut cur = map
            .range((lower.clone(), std::ops::Bound::Unbounded))
            .peekable();
        let mut ov = overlay
            .range((lower, std::ops::Bound::Unbounded))
            .peekable();
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last: Option<Key> = None;
        let mut more = false;
        loop {
            // Merge the two ordered streams; the overlay wins on equal keys.
            let next: Option<(&Key, Option<&Arc<Obj>>)> = match (cur.peek(), ov.peek()) {
                (None, None) => None,
                (Some(_), None) => cur.next().map(|(k, o)| (k, Some(o))),
                (None, Some(_)) => ov.next().map(|(k, o)| (k, o.as_ref())),
                (Some((ck, _)), Some((ok, _))) => {
                    if ck < ok {
                        cur.next().map(|(k, o)| (k, Some(o)))
                    } else {
                        if ck == ok {
                            cur.next();
                        }
                        ov.next().map(|(k, o)| (k, o.as_ref()))
                    }
                }
            };
            let Some((k, o)) = next else { break };
            if kind.namespaced()
                && let Some(ns) = &f.ns
                && &k.0 != ns
            {
                if k.0 > *ns {
                    break;
                }
                continue;
            }
            let Some(o) = o else { continue };
            if !f.matches(o) {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            last = Some(k.clone());
            items.push(o.clone());
        }
        let cont = if more {
            last.map(|k| encode_continue(rv, &k))
        } else {
            None
        };
        Ok(Page { rv, items, cont })
    }

    /// Events after `after`, up to `max`, and the rv the caller is then
    /// caught up to. `Err` when `after` is older than the history.
    pub fn events_after(&self, after: u64, max: usize) -> Result<(Vec<Arc<Event>>, u64), u64> {
        let g = self.lock();
        if after >= g.rv {
            return Ok((Vec::new(), after.max(g.rv)));
        }
        if after + 1 < g.first_rv {
            return Err(g.first_rv);
        }
        let from = (after + 1 - g.first_rv) as usize;
        let evs: Vec<Arc<Event>> = g.ring.range(from..).take(max).cloned().collect();
        let upto = evs.last().map(|e| e.rv).unwrap_or(g.rv);
        let upto = if evs.len() < max { g.rv } else { upto };
        Ok((evs, upto))
    }

    /// The oldest rv a watch can still resume from.
    pub fn oldest_resumable(&self) -> u64 {
        self.lock().first_rv.saturating_sub(1)
    }

    /// Keys of all pods (for churn).
    pub fn pod_keys(&self, f: &Filter) -> Vec<(String, String)> {
        let g = self.lock();
        range_of(&g.objects[Kind::Pod.idx()], f)
            .filter(|o| f.matches(*o))
            .map(|o| (o.ns.clone(), o.name.clone()))
            .collect()
    }
}

fn range_of<'a>(
    map: &'a BTreeMap<Key, Arc<Obj>>,
    f: &Filter,
) -> Box<dyn Iterator<Item = &'a Arc<Obj>> + 'a> {
    match &f.ns {
        Some(ns) => {
            let ns = ns.clone();
            Box::new(
                map.range((ns.clone(), String::new())..)
                    .take_while(move |((n, _), _)| *n == ns)
                    .map(|(_, o)| o),
            )
        }
        None => Box::new(map.values()),
    }
}

fn ns_key(kind: Kind, ns: &str) -> String {
    if kind.namespaced() {
        ns.to_string()
    } else {
        String::new()
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The new object of an update: a status write changes only `.status`; a
/// main-resource write changes everything but `.status`.
fn merge_update(old: &Value, mut new: Value, status: bool) -> Value {
    if status {
        let mut out = old.clone();
        out["status"] = new.get("status").cloned().unwrap_or(json!({}));
        out
    } else {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        new
    }
}

/// Server-side defaults, as the apiserver's defaulting and registry
/// strategies set them on create. A create ignores `status`.
fn default_object(kind: Kind, v: &mut Value, g: &mut Inner) -> Result<(), ApiError> {
    match kind {
        Kind::Pod => {
            if !v["spec"].is_object() {
                v["spec"] = json!({});
            }
            let spec = &mut v["spec"];
            for (k, d) in [
                ("restartPolicy", json!("Always")),
                ("dnsPolicy", json!("ClusterFirst")),
                ("schedulerName", json!("default-scheduler")),
                ("terminationGracePeriodSeconds", json!(30)),
                ("securityContext", json!({})),
            ] {
                if spec.get(k).is_none() {
                    spec[k] = d;
                }
            }
            v["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        Kind::Service => {
            if !v["spec"].is_object() {
                v["spec"] = json!({});
            }
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let spec = &mut v["spec"];
            // Type, cluster IPs and IP families, or the apiserver's 422.
            g.services.create(&name, spec)?;
            // Every type gets a session affinity; only the types with a
            // cluster IP an internal traffic policy.
            if spec.get("sessionAffinity").is_none() {
                spec["sessionAffinity"] = json!("None");
            }
            if spec["type"] != "ExternalName" {
                if spec.get("internalTrafficPolicy").is_none() {
                    spec["internalTrafficPolicy"] = json!("Cluster");
                }
                if let Some(ports) = spec["ports"].as_array_mut() {
                    for p in ports {
                        if p.get("protocol").is_none() {
                            p["protocol"] = json!("TCP");
                        }
                        if p.get("targetPort").is_none() {
                            p["targetPort"] = p["port"].clone();
                        }
                    }
                }
            }
            v["status"] = json!({"loadBalancer": {}});
        }
        Kind::Namespace => {
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            v["metadata"]["labels"]["kubernetes.io/metadata.name"] = name.into();
            v["spec"] = json!({"finalizers": ["kubernetes"]});
            v["status"] = json!({"phase": "Active"});
        }
        Kind::Job => default_job(v)?,
        Kind::EndpointSlice => {
            // The fields the apiserver requires; it defaults none.
            let name = v["metadata"]["name"].as_str().unwrap_or_default();
            if !matches!(v["addressType"].as_str(), Some("IPv4" | "IPv6" | "FQDN")) {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    "addressType: Unsupported value: must be IPv4, IPv6 or FQDN",
                ));
            }
            if v.get("endpoints").is_none_or(Value::is_null) {
                v["endpoints"] = json!([]);
            }
        }
        // A Node keeps what its creator (a kubelet) sends, status included.
        Kind::Node => {
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            check_cidrs(Kind::Node, &name, &v["spec"]["podCIDRs"], "spec.podCIDRs")?;
        }
        Kind::ServiceCidr => {
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            check_cidrs(Kind::ServiceCidr, &name, &v["spec"]["cidrs"], "spec.cidrs")?;
            v["status"] = json!({});
        }
        Kind::ClusterRole | Kind::Role => check_rules(kind, v)?,
        Kind::ClusterRoleBinding | Kind::RoleBinding => check_binding(kind, v)?,
    }
    Ok(())
}

/// A role's rules, as `pkg/apis/rbac/validation` checks them: each rule
/// has verbs, and either resources (with API groups) or non-resource URLs
/// (only in a ClusterRole).
fn check_rules(kind: Kind, v: &Value) -> Result<(), ApiError> {
    let name = v["metadata"]["name"].as_str().unwrap_or_default();
    let rules = match &v["rules"] {
        Value::Null => return Ok(()),
        Value::Array(r) => r,
        _ => {
            return Err(ApiError::invalid(
                kind,
                name,
                "rules: Invalid value: must be a list",
            ));
        }
    };
    let strings = |r: &Value, k: &str| r[k].as_array().map_or(0, Vec::len);
    for (i, r) in rules.iter().enumerate() {
        if strings(r, "verbs") == 0 {
            return Err(ApiError::invalid(
                kind,
                name,
                format!("rules[{i}].verbs: Required value: verbs must contain at least one value"),
            ));
        }
        let urls = strings(r, "nonResourceURLs");
        if urls > 0 && kind == Kind::Role {
            return Err(ApiError::invalid(
                kind,
                name,
                format!(
                    "rules[{i}].nonResourceURLs: Invalid value: namespaced rules cannot apply to non-resource URLs"
                ),
            ));
        }
        if urls > 0 && (strings(r, "apiGroups") > 0 || strings(r, "resources") > 0) {
            return Err(ApiError::invalid(
                kind,
                name,
                format!(
                    "rules[{i}].nonResourceURLs: Invalid value: rules cannot apply to both regular resources and non-resource URLs"
                ),
            ));
        }
        if urls == 0 && strings(r, "resources") > 0 && strings(r, "apiGroups") == 0 {
            return Err(ApiError::invalid(
                kind,
                name,
                format!(
                    "rules[{i}].apiGroups: Required value: resource rules must supply at least one api group"
                ),
            ));
        }
    }
    Ok(())
}

/// A binding's role reference and subjects, as `pkg/apis/rbac/validation`
/// checks them.
fn check_binding(kind: Kind, v: &Value) -> Result<(), ApiError> {
    let name = v["metadata"]["name"].as_str().unwrap_or_default();
    let role = &v["roleRef"];
    if role["apiGroup"] != "rbac.authorization.k8s.io" {
        return Err(ApiError::invalid(
            kind,
            name,
            "roleRef.apiGroup: Unsupported value: supported values: \"rbac.authorization.k8s.io\"",
        ));
    }
    let kinds: &[&str] = if kind == Kind::RoleBinding {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !role["kind"].as_str().is_some_and(|k| kinds.contains(&k)) {
        return Err(ApiError::invalid(
            kind,
            name,
            format!("roleRef.kind: Unsupported value: supported values: {kinds:?}"),
        ));
    }
    if role["name"].as_str().is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            kind,
            name,
            "roleRef.name: Required value",
        ));
    }
    for (i, s) in v["subjects"].as_array().into_iter().flatten().enumerate() {
        let sname = s["name"].as_str().unwrap_or_default();
        if sname.is_empty() {
            return Err(ApiError::invalid(
                kind,
                name,
                format!("subjects[{i}].name: Required value"),
            ));
        }
        match s["kind"].as_str() {
            Some("ServiceAccount") => {
                if kind == Kind::ClusterRoleBinding
                    && s["namespace"].as_str().is_none_or(str::is_empty)
                {
                    return Err(ApiError::invalid(
                        kind,
                        name,
                        format!("subjects[{i}].namespace: Required value"),
                    ));
                }
            }
            Some("User" | "Group") => {}
            _ => {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    format!(
                        "subjects[{i}].kind: Unsupported value: supported values: \"ServiceAccount\", \"User\", \"Group\""
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// At most two ranges, one per family, each a network address and its
/// prefix (`10.244.1.0/24`), as the apiserver validates Node.spec.podCIDRs
/// and ServiceCIDR.spec.cidrs.
fn check_cidrs(kind: Kind, name: &str, v: &Value, path: &str) -> Result<(), ApiError> {
    let Some(items) = v.as_array() else {
        return if v.is_null() {
            Ok(())
        } else {
            Err(ApiError::invalid(
                kind,
                name,
                format!("{path}: Invalid value: must be a list"),
            ))
        };
    };
    let mut families = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let text = item.as_str().unwrap_or_default();
        let net: ipnet::IpNet = text.parse().map_err(|_| {
            ApiError::invalid(
                kind,
                name,
                format!("{path}[{i}]: Invalid value: {text:?}: must be a valid CIDR value"),
            )
        })?;
        if net.trunc() != net {
            return Err(ApiError::invalid(
                kind,
                name,
                format!(
                    "{path}[{i}]: Invalid value: {text:?}: must be a valid CIDR value, (e.g. {})",
                    net.trunc()
                ),
            ));
        }
        families.push(net.addr().is_ipv4());
    }
    if items.len() > 2 || (items.len() == 2 && families[0] == families[1]) {
        return Err(ApiError::invalid(
            kind,
            name,
            format!("{path}: Invalid value: may specify no more than one CIDR for each IP family"),
        ));
    }
    Ok(())
}

/// A Job as the apiserver's defaulting and the Job registry strategy make
/// it: spec defaults, and (unless `manualSelector`) the generated selector
/// on `controller-uid` with the matching template and object labels.
fn default_job(v: &mut Value) -> Result<(), ApiError> {
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let uid = v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !v["spec"].is_object() {
        v["spec"] = json!({});
    }
    let spec = &mut v["spec"];
    if !spec["template"].is_object() {
        return Err(ApiError::invalid(
            Kind::Job,
            &name,
            "spec.template: Required value",
        ));
    }
    let indexed = spec["completionMode"] == "Indexed";
    if indexed && !spec["completions"].is_u64() {
        return Err(ApiError::invalid(
            Kind::Job,
            &name,
            "spec.completions: Required value: when completion mode is Indexed",
        ));
    }
    for (k, d) in [
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("manualSelector", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
    ] {
        if spec.get(k).is_none_or(Value::is_null) {
            spec[k] = d;
        }
    }
    if spec.get("completions").is_none_or(Value::is_null) && !indexed {
        // Unset completions with parallelism 1 means "one success".
        if spec["parallelism"] == 1 {
            spec["completions"] = json!(1);
        }
    }
    if spec["manualSelector"] != true {
        let generated = [
            ("batch.kubernetes.io/controller-uid", uid.clone()),
            ("batch.kubernetes.io/job-name", name.clone()),
            ("controller-uid", uid.clone()),
            ("job-name", name.clone()),
        ];
        spec["selector"] =
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid.clone()}});
        let tl = &mut spec["template"]["metadata"]["labels"];
        if !tl.is_object() {
            *tl = json!({});
        }
        for (k, val) in &generated {
            tl[*k] = val.clone().into();
        }
        let ol = &mut v["metadata"]["labels"];
        if !ol.is_object() {
            *ol = json!({});
        }
        for (k, val) in &generated {
            if ol.get(*k).is_none() {
                ol[*k] = val.clone().into();
            }
        }
    }
    v["status"] = json!({});
    Ok(())
}

/// A continue token: the list's rv and the last key served, like the
/// apiserver's base64 JSON token (opaque to clients).
pub fn encode_continue(rv: u64, k: &Key) -> String {
    let raw = format!("{rv}\u{0}{}\u{0}{}", k.0, k.1);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

pub fn decode_continue(s: &str) -> Option<(u64, Key)> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\u{0}');
    let rv = parts.next()?.parse().ok()?;
    let ns = parts.next()?.to_string();
    let name = parts.next()?.to_string();
    Some((rv, (ns, name)))
}

/// Counts objects by kind for stats.
pub fn kind_counts(store: &Store) -> HashMap<&'static str, usize> {
    let c = store.counts();
    Kind::ALL.iter().map(|k| (k.plural(), c[k.idx()])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Arc<Store> {
        let s = Store::new(100);
        s.create(Kind::Namespace, "", json!({"metadata": {"name": "ns"}}))
            .unwrap();
        s
    }

    fn pod(name: &str, app: &str) -> Value {
        json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "labels": {"app": app}},
               "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"},
               "extra": {"kept": true}})
    }

    #[test]
    fn create_sets_server_fields_and_ignores_status() {
        let s = store();
        let o = s.create(Kind::Pod, "ns", pod("a", "x")).unwrap();
        let v = o.value();
        assert_eq!(v["status"]["phase"], "Pending");
        assert_eq!(v["extra"]["kept"], true);
        assert_eq!(v["metadata"]["resourceVersion"], o.rv.to_string());
        assert!(!o.uid.is_empty());
        let e = s.create(Kind::Pod, "ns", pod("a", "x")).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "AlreadyExists"));
        let e = s.create(Kind::Pod, "nope", pod("b", "x")).unwrap_err();
        assert_eq!(e.code, 404);
    }

    #[test]
    fn generate_name_and_wrong_kind() {
        let s = store();
        let o = s
            .create(Kind::Pod, "ns", json!({"metadata": {"generateName": "w-"}}))
            .unwrap();
        assert!(o.name.starts_with("w-") && o.name.len() == 7, "{}", o.name);
        let e = s
            .create(
                Kind::Pod,
                "ns",
                json!({"kind": "Service", "metadata": {"name": "x"}}),
            )
            .unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        let e = s.create(Kind::Pod, "ns", json!([1, 2])).unwrap_err();
        assert_eq!(e.code, 422);
    }

    #[test]
    fn replace_conflict_and_status_subresource() {
        let s = store();
        let o = s.create(Kind::Pod, "ns", pod("a", "x")).unwrap();
        let mut v = o.value();
        v["status"]["phase"] = "Running".into();
        let o2 = s.replace(Kind::Pod, "ns", "a", v.clone(), true).unwrap();
        assert_eq!(o2.phase, "Running");
        // `v` now carries a stale resourceVersion.
        let e = s.replace(Kind::Pod, "ns", "a", v, false).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        // A main-resource patch cannot change status.
        let o3 = s
            .patch(
                Kind::Pod,
                "ns",
                "a",
                json!({"metadata": {"labels": {"app": "y"}}, "status": {"phase": "Failed"}}),
                false,
            )
            .unwrap();
        assert_eq!(o3.phase, "Running");
        assert_eq!(o3.labels["app"], "y");
    }

    #[test]
    fn service_cluster_ip() {
        let s = store();
        // The stored spec of a Service `name` created in "ns" with `spec`.
        let spec = |name: &str, spec: Value| {
            s.create(
                Kind::Service,
                "ns",
                json!({"metadata": {"name": name}, "spec": spec}),
            )
            .unwrap()
            .value()["spec"]
                .clone()
        };
        let a = spec("a", json!({"ports": [{"port": 80}]}));
        assert!(a["clusterIP"].as_str().unwrap().starts_with("10.96."));
        let h = spec("h", json!({"clusterIP": "None"}));
        assert_eq!(h["clusterIP"], "None");
        let x = spec(
            "x",
            json!({"type": "ExternalName", "externalName": "e.com"}),
        );
        assert!(x.get("clusterIP").is_none());
        let g = spec("g", json!({"clusterIP": "10.96.9.9"}));
        assert_eq!(g["clusterIP"], "10.96.9.9");
    }

    #[test]
    fn paged_list_is_a_snapshot() {
        let s = store();
        for i in 0..5 {
            s.create(Kind::Pod, "ns", pod(&format!("p{i}"), "x"))
                .unwrap();
        }
        let f = Filter::default();
        let p1 = s.list(Kind::Pod, &f, None, None, Some(2)).unwrap();
        assert_eq!(p1.items.len(), 2);
        let (rv, key) = decode_continue(p1.cont.as_deref().unwrap()).unwrap();
        assert_eq!(rv, p1.rv);
        // Changes after the first page do not show in later pages.
        s.delete(Kind::Pod, "ns", "p3", 0, None).unwrap();
        s.create(Kind::Pod, "ns", pod("p9", "x")).unwrap();
        let p2 = s
            .list(Kind::Pod, &f, Some(rv), Some(key), Some(10))
            .unwrap();
        let names: Vec<_> = p2.items.iter().map(|o| o.name.clone()).collect();
        assert_eq!(names, ["p2", "p3", "p4"]);
        assert!(p2.cont.is_none());
        s.compact();
        assert_eq!(
            s.list(Kind::Pod, &f, Some(rv), None, None)
                .unwrap_err()
                .code,
            410
        );
    }

    #[test]
    fn namespace_delete_cascades() {
        let s = store();
        s.create(Kind::Pod, "ns", pod("a", "x")).unwrap();
        let before = s.current_rv();
        s.delete(Kind::Namespace, "", "ns", 0, None).unwrap();
        let (evs, _) = s.events_after(before, 10).unwrap();
        let kinds: Vec<_> = evs.iter().map(|e| (e.kind, e.ty)).collect();
        assert_eq!(
            kinds,
            [
                (Kind::Pod, EvType::Deleted),
                (Kind::Namespace, EvType::Deleted)
            ]
        );
        assert_eq!(s.counts(), [0; KINDS]);
    }

    #[test]
    fn ring_forgets_old_events() {
        let s = Store::new(3);
        for i in 0..6 {
            s.create(
                Kind::Namespace,
                "",
                json!({"metadata": {"name": format!("n{i}")}}),
            )
            .unwrap();
        }
        assert!(s.events_after(1, 10).is_err());
        let (evs, upto) = s.events_after(3, 10).unwrap();
        assert_eq!(evs.len(), 3);
        assert_eq!(upto, 6);
    }

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge_patch(&mut t, &json!({"a": {"b": null, "e": 3}, "d": [2]}));
        assert_eq!(t, json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }

    #[test]
    fn continue_token_round_trip() {
        let k = ("ns".to_string(), "name".to_string());
        assert_eq!(decode_continue(&encode_continue(42, &k)), Some((42, k)));
        assert_eq!(decode_continue("zz"), None);
    }
}
