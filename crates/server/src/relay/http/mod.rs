//! The relay's HTTP API: the kube-apiserver paths of Pods, Services and
//! Jobs (namespaced and cluster-wide), read-only.
//!
//! - `GET` list and get, in JSON or Protobuf by `Accept`, with
//!   `labelSelector` (set-based too) and `fieldSelector` (`metadata.name`,
//!   `metadata.namespace`, and for Pods `spec.nodeName`).
//! - `watch=true` from a `resourceVersion` (the API server's own),
//!   `allowWatchBookmarks`, `sendInitialEvents=true` with the
//!   `k8s.io/initial-events-end` bookmark, `timeoutSeconds`; 410 Gone past
//!   the history, and for a version the relay has not reached yet, a wait
//!   of up to 3 s and then 504, as kube-apiserver's watch cache does.
//! - Discovery (`/api`, `/apis`, `/api/v1`, `/apis/batch/v1`,
//!   `/apis/discovery.k8s.io/v1`, `/version`)
//!   enough for kubectl.
//! - Any other verb: 405. No valid ServiceAccount token: 401.
//!
//! - A node instance's watches in one response
//!   (`/apis/podns.io/v1/watches?w=...`, [`crate::k8s::mux`]): each inner
//!   watch served and authorized as its own request would be, all of them
//!   in the connection's task.
//!
//! A connection is one task ([`conn`]); a watch runs in it and
//! writes each batch of changes to it as one chunk. Who may read what is
//! [`auth`]'s (a TokenReview, then the token's node scope); the
//! certificate is [`tls`]'s.

pub mod auth;
pub mod conn;
pub mod tls;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use podns_kapi::Kind;
use podns_kapi::discovery::Discovery;
use podns_kapi::filter::{Filter, Selectable};
use podns_kapi::path::Target;
use podns_kapi::pbenc::{self, Media};
use podns_kapi::selector::Field;
use podns_kapi::status::ApiError;
use podns_kapi::watch::{EvType, ParamError, WatchParams, bookmark_line, event_line};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::store::cache::{self, After, Cache, Item, Wire};
use super::{Relay, RelayConfig};
use crate::k8s::{compact, mux};
use crate::metrics::{Metrics, ReasonLabels};
use auth::{Auth, Denied, PERMISSION};
use conn::{Conn, Head, Next, Stream};
use tls::Tls;

/// How long a watch from a version the relay has not reached waits for it.
const FUTURE_WAIT: Duration = Duration::from_secs(3);

/// Changes read from the history at once per subscriber.
const BATCH: usize = 1024;

/// Initial events sent as one chunk, at most.
const INITIAL_CHUNK: usize = 64 * 1024;

struct Server {
    relay: Arc<Relay>,
    auth: Auth,
    metrics: Metrics,
    bookmark_every: Duration,
    shutdown: CancellationToken,
    /// Whether the multiplexed watch is served ([`RelayConfig::mux`]).
    mux: bool,
}

impl Server {
    /// Count a request refused for `reason`.
    fn denied(&self, reason: &'static str) {
        self.metrics
            .relay_denied
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Whether a reader whose token names `node` may make this request:
    /// only its node's scope ([`super::store::scope`]). 403 with the reason
    /// otherwise, logged with the user.
    fn in_scope(
        &self,
        user: &str,
        node: &str,
        target: &Target,
        filter: &Filter,
    ) -> Result<(), ApiError> {
        let pods = self.relay.cache(Kind::Pod);
        if !pods.is_some_and(|c| c.is_synced()) {
            return Err(ApiError::new(
                503,
                "ServiceUnavailable",
                "the relay has not listed from the API server yet",
            ));
        }
        let ns = filter.namespace();
        let pod_filter = (target.kind == Kind::Pod)
            .then(|| (&filter.labels, filter.fields.pinned(Field::NodeName)));
        self.relay
            .scopes()
            .allows(node, ns, pod_filter)
            .map_err(|why| {
                self.denied("out_of_scope");
                tracing::warn!(%user, %node, namespace = ns.unwrap_or("*"), resource = target.kind.plural(), reason = %why, "relay request refused: outside the node's scope");
                ApiError::new(
                    403,
                    "Forbidden",
                    format!("{user} cannot read {} here: {why}", target.kind.resource()),
                )
            })
    }
}

/// Serve the relay on `listener` until `shutdown`.
pub async fn run(
    listener: TcpListener,
    tls: Tls,
    relay: Arc<Relay>,
    auth: Auth,
    cfg: &RelayConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let server = Arc::new(Server {
        relay,
        auth,
        metrics,
        bookmark_every: cfg.bookmark_every,
        shutdown: shutdown.clone(),
        mux: cfg.mux,
    });
    let slots = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    loop {
        let (stream, _) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    // Out of descriptors: wait rather than spin.
                    tracing::warn!(%error, "relay accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // A slot per connection, handshake included: past the cap a
        // connection is closed at once (its client retries, as from an
        // API server that is going away), before any TLS work.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            server.metrics.relay_refused.inc();
            tracing::debug!("relay connection refused: at --relay-max-connections");
            drop(stream);
            continue;
        };
        let (acceptor, server) = (tls.acceptor.clone(), server.clone());
        tokio::spawn(async move {
            let _open = Open::new(slot, &server.metrics);
            if let Ok(Ok(stream)) = tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                connection(&server, stream).await;
            }
        });
    }
}

/// A connection's slot, counted in `podns_relay_connections` while held.
struct Open {
    _slot: OwnedSemaphorePermit,
    gauge: Gauge<i64, AtomicI64>,
}

impl Open {
    fn new(slot: OwnedSemaphorePermit, metrics: &Metrics) -> Self {
        let gauge = metrics.relay_connections.clone();
        gauge.inc();
        Self { _slot: slot, gauge }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// One client's requests, answered in turn until it or the relay closes.
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(s: &Arc<Server>, io: S) {
    let mut conn = Conn::new(io, s.shutdown.clone());
    loop {
        let head = match conn.next().await {
            Next::Head(head) => head,
            Next::Closed => return,
            Next::Refuse(code, why) => {
                let e = ApiError::new(code.as_u16(), "BadRequest", why);
                conn.refuse(code, &error_body(&e)).await;
                return;
            }
        };
        // Boxed: the connection's task would otherwise keep room for
        // `serve`'s state while it streams a watch (minutes), not only
        // while it answers.
        let keep = match Box::pin(serve(s, &head)).await {
            Ok(Reply::Body { content_type, body }) => {
                conn.reply(&head, StatusCode::OK, content_type, &body).await
            }
            Ok(Reply::Watch(sub)) => match conn.stream(&head, sub.content_type()).await {
                Some(mut out) => {
                    drop(head);
                    sub.run(&mut out).await;
                    out.finish().await
                }
                None => head.method == Method::HEAD,
            },
            Ok(Reply::Mux(heads)) => match conn.stream(&head, mux::MUX).await {
                Some(mut out) => {
                    // Its URI names every inner watch: not kept while
                    // they run.
                    drop(head);
                    multiplexed(s, heads, &mut out).await;
                    out.finish().await
                }
                None => head.method == Method::HEAD,
            },
            Err(e) => {
                let code =
                    StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = [Bytes::from(error_body(&e))];
                conn.reply(&head, code, "application/json", &body).await
            }
        };
        if !keep {
            conn.close().await;
            return;
        }
    }
}

/// How long a client gets to finish its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

fn error_body(e: &ApiError) -> Vec<u8> {
    serde_json::to_vec(&e.status()).unwrap_or_default()
}

/// A 200 answer: a body, or a watch to stream.
enum Reply {
    Body {
        content_type: &'static str,
        body: Vec<Bytes>,
    },
    Watch(Box<Subscriber>),
    /// A multiplexed watch: the inner watches' requests.
    Mux(Vec<Head>),
}

fn value_response(v: &Value) -> Reply {
    Reply::Body {
        content_type: "application/json",
        body: vec![Bytes::from(serde_json::to_vec(v).unwrap_or_default())],
    }
}

/// The target of a path of the relayed kinds: no subresource, no
/// `/watch/` path (404 for those, as for every kind not relayed).
fn parse_target(path: &str) -> Option<Target> {
    Target::parse(path, &super::KINDS).filter(|t| !t.status && !t.watch)
}

/// The discovery documents: the relayed kinds, read-only.
static DISCOVERY: std::sync::LazyLock<Discovery> =
    std::sync::LazyLock::new(|| Discovery::read_only(&super::KINDS));

async fn serve(s: &Arc<Server>, req: &Head) -> Result<Reply, ApiError> {
    let path = req.uri.path();
    if req.method != Method::GET && req.method != Method::HEAD {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "the relay is read-only: {} is not allowed on {path}",
                req.method
            ),
        ));
    }
    let (checked, fresh) = s.auth.check(req.authorization.as_deref()).await;
    let reader = match checked {
        Ok(reader) => reader,
        Err(denied) => {
            s.denied(denied.reason());
            let (code, reason, message) = match &denied {
                Denied::NoToken => (
                    401,
                    "Unauthorized",
                    "Unauthorized: no bearer token".to_owned(),
                ),
                Denied::Unauthenticated(why) => {
                    if fresh {
                        tracing::info!(reason = %why, "relay request refused: token not authenticated");
                    }
                    (401, "Unauthorized", format!("Unauthorized: {why}"))
                }
                Denied::Forbidden { user } => {
                    if fresh {
                        tracing::warn!(%user, "relay request refused: the user may not read the relay (needs {} on {}.{})", PERMISSION.verb, PERMISSION.resource, PERMISSION.group);
                    }
                    (
                        403,
                        "Forbidden",
                        format!(
                            "{user} cannot {} resource \"{}\" in API group \"{}\": the relay serves node instances only",
                            PERMISSION.verb, PERMISSION.resource, PERMISSION.group
                        ),
                    )
                }
                Denied::Unavailable(why) => {
                    tracing::warn!(error = %why, "relay request refused: cannot check its token now");
                    (
                        503,
                        "ServiceUnavailable",
                        format!("cannot check the token now: {why}"),
                    )
                }
            };
            return Err(ApiError::new(code, reason, message));
        }
    };
    let trimmed = path.trim_end_matches('/');
    if trimmed == "/version" {
        return Ok(value_response(&version()));
    }
    if let Some(doc) = DISCOVERY.document(trimmed) {
        return Ok(value_response(&doc));
    }
    if s.mux && trimmed == mux::MUX_PATH {
        return mux_request(req);
    }
    let target = parse_target(path).ok_or_else(|| {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    })?;
    let query: HashMap<String, String> = serde_urlencoded::from_str(req.uri.query().unwrap_or(""))
        .map_err(|e| ApiError::new(400, "BadRequest", format!("bad query: {e}")))?;
    let watching = query.get("watch").is_some_and(|v| v == "true" || v == "1");
    // A podns node instance asks for the compact stream first; for lists
    // and gets, the type it names next.
    let wire = if watching && compact::preferred(req.accept.as_deref()) {
        Wire::Compact
    } else {
        match pbenc::negotiate(req.accept.as_deref(), true) {
            Some(Media::Json) => Wire::Json,
            Some(Media::Protobuf) => Wire::Protobuf,
            None => {
                return Err(ApiError::new(
                    406,
                    "NotAcceptable",
                    "only application/json and application/vnd.kubernetes.protobuf are served",
                ));
            }
        }
    };
    let cache = s
        .relay
        .cache(target.kind)
        .ok_or_else(|| ApiError::new(404, "NotFound", "not relayed"))?
        .clone();
    if !cache.is_synced() {
        return Err(ApiError::new(
            503,
            "ServiceUnavailable",
            "the relay has not listed from the API server yet",
        ));
    }
    // The relay keeps no pod phase: `status.phase` is no field here.
    let fields: &[Field] = match target.kind {
        Kind::Pod => &[Field::Name, Field::Namespace, Field::NodeName],
        _ => &[Field::Name, Field::Namespace],
    };
    let filter = Filter::parse(target.ns.clone(), fields, |k| {
        query.get(k).map(String::as_str)
    })?;
    if let Some(node) = &reader.node {
        s.in_scope(&reader.user, node, &target, &filter)?;
    }
    if let Some(name) = &target.name {
        let items = cache
            .snapshot(|i| i.name == *name && Some(&i.ns) == target.ns.as_ref())
            .items;
        let item = items.first().ok_or_else(|| {
            ApiError::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", target.kind.resource()),
            )
        })?;
        return Ok(object_response(target.kind, item, wire));
    }
    if watching {
        // The compact stream's dictionaries the node instance holds.
        let held = match wire {
            Wire::Compact => compact::claimed(req.accept.as_deref()),
            _ => Vec::new(),
        };
        watch(s, cache, filter, &query, wire, held).await
    } else {
        s.metrics.relay_lists.inc();
        Ok(list(&cache, &filter, wire))
    }
}

/// Whether a watch with this filter may hold objects of namespace `ns`
/// on these nodes.
fn holds(filter: &Filter, ns: &str, nodes: &std::collections::HashSet<String>) -> bool {
    filter.namespace().is_none_or(|n| n == ns)
        && filter
            .fields
            .pinned(Field::NodeName)
            .is_none_or(|node| nodes.contains(node))
}

impl Selectable for Item {
    fn namespace(&self) -> &str {
        &self.ns
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }

    fn field(&self, field: Field) -> &str {
        match field {
            Field::Name => &self.name,
            Field::Namespace => &self.ns,
            Field::NodeName => &self.node_name,
            Field::Phase => "",
        }
    }
}

fn object_response(kind: Kind, item: &Item, wire: Wire) -> Reply {
    let (body, content_type) = match wire {
        Wire::Json => (item.json(kind), "application/json"),
        Wire::Protobuf | Wire::Compact => (item.pb_object(kind), pbenc::PROTOBUF),
    };
    Reply::Body {
        content_type,
        body: vec![body],
    }
}

fn list(cache: &Cache, filter: &Filter, wire: Wire) -> Reply {
    let cache::Snapshot { rv, items, .. } = cache.snapshot(|o| filter.matches(o));
    let kind = cache.kind;
    let (body, content_type): (Vec<Bytes>, &str) = match wire {
        Wire::Json => {
            let mut head = format!(
                "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"items\":[",
                kind.list_name(),
                kind.api_version()
            )
            .into_bytes();
            let mut out = Vec::with_capacity(items.len() + 2);
            for (i, o) in items.iter().enumerate() {
                if i > 0 {
                    head.push(b',');
                }
                head.extend_from_slice(&o.json(kind));
                if head.len() > 64 * 1024 {
                    out.push(Bytes::from(std::mem::take(&mut head)));
                }
            }
            head.extend_from_slice(b"]}");
            out.push(Bytes::from(head));
            (out, "application/json")
        }
        Wire::Protobuf | Wire::Compact => {
            let total = items.iter().map(|o| o.pb_item.len()).sum();
            let mut out = vec![Bytes::from(pbenc::list_head(kind, rv, None, total))];
            out.extend(items.iter().map(|o| o.pb_item.clone()));
            (out, pbenc::PROTOBUF)
        }
    };
    Reply::Body { content_type, body }
}

async fn watch(
    s: &Arc<Server>,
    cache: Arc<Cache>,
    filter: Filter,
    q: &HashMap<String, String>,
    wire: Wire,
    held: Vec<u64>,
) -> Result<Reply, ApiError> {
    let params = WatchParams::parse(|k| q.get(k).map(String::as_str)).map_err(|e| match e {
        ParamError::Invalid(m) => ApiError::new(422, "Invalid", m),
        ParamError::BadRequest(m) => ApiError::new(400, "BadRequest", m),
    })?;
    let start = params.start;
    if let Some(want) = start {
        // Another relay may be ahead of this one: wait a little, as the
        // API server's watch cache waits for etcd.
        let mut changes = cache.subscribe();
        let deadline = Instant::now() + FUTURE_WAIT;
        while cache.rv() < want {
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return Err(ApiError::new(
                    504,
                    "Timeout",
                    format!(
                        "Too large resource version: {want}, current: {}",
                        cache.rv()
                    ),
                ));
            }
        }
    }

    Ok(Reply::Watch(Box::new(Subscriber {
        cache,
        filter,
        wire,
        bookmarks: params.bookmarks,
        initial: params.initial(),
        initial_end: params.initial_end(),
        start,
        deadline: params.timeout.map(|d| Instant::now() + d),
        server: s.clone(),
        held,
    })))
}

/// One watch: initial events if asked, then the history from its position.
struct Subscriber {
    cache: Arc<Cache>,
    filter: Filter,
    wire: Wire,
    bookmarks: bool,
    initial: bool,
    initial_end: bool,
    start: Option<u64>,
    deadline: Option<Instant>,
    /// The bookmark interval, the metrics and the shutdown are the
    /// server's: one pointer, not a copy of each per watch.
    server: Arc<Server>,
    /// The compact stream's dictionaries the client holds (content ids):
    /// each goes as its number and id, not its bytes.
    held: Vec<u64>,
}

impl Subscriber {
    fn content_type(&self) -> &'static str {
        match self.wire {
            Wire::Json => "application/json",
            Wire::Protobuf => pbenc::PROTOBUF_WATCH,
            Wire::Compact => compact::COMPACT,
        }
    }

    /// Send `frames` as one chunk: false if the client is gone.
    async fn send<O: Sink>(&self, out: &mut O, frames: &[Bytes]) -> bool {
        let n: usize = frames.iter().map(Bytes::len).sum();
        let sent = out.send(frames).await;
        if sent {
            self.server.metrics.relay_sent_bytes.inc_by(n as u64);
        }
        sent
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let kind = self.cache.kind;
        match self.wire {
            Wire::Json => bookmark_line(kind, rv, initial_end),
            Wire::Protobuf => Bytes::from(pbenc::watch_frame(
                "BOOKMARK",
                pbenc::bookmark_object(kind, rv, initial_end),
            )),
            Wire::Compact => compact::protobuf_frame(&pbenc::watch_frame(
                "BOOKMARK",
                pbenc::bookmark_object(kind, rv, initial_end),
            )),
        }
    }

    fn gone(&self, rv: u64, oldest: u64) -> Bytes {
        let status = ApiError::new(
            410,
            "Expired",
            format!("too old resource version: {rv} ({oldest})"),
        )
        .status();
        match self.wire {
            Wire::Json => event_line("ERROR", &serde_json::to_vec(&status).unwrap_or_default()),
            Wire::Protobuf => Bytes::from(pbenc::watch_frame("ERROR", pbenc::status(&status))),
            Wire::Compact => {
                compact::protobuf_frame(&pbenc::watch_frame("ERROR", pbenc::status(&status)))
            }
        }
    }

    async fn run<O: Sink>(self, out: &mut O) {
        let wire = match self.wire {
            Wire::Json => "json",
            Wire::Protobuf => "protobuf",
            Wire::Compact => "compact",
        };
        self.server
            .metrics
            .relay_watches_started
            .get_or_create(&crate::metrics::WireLabels { wire })
            .inc();
        // Counted while it runs: a multiplexed watch is dropped, not
        // ended, when its connection goes.
        struct Running(Gauge<i64, AtomicI64>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.server.metrics.relay_watches.inc();
        let _running = Running(self.server.metrics.relay_watches.clone());
        self.stream(out).await;
    }

    async fn stream<O: Sink>(&self, out: &mut O) {
        // The compact stream's dictionaries sent so far (each once).
        let mut dicts = Vec::new();
        // Woken only by changes that may concern this watch.
        let node = self.filter.fields.pinned(Field::NodeName);
        let changes = self.cache.watcher(node);
        let mut epoch;
        let mut cursor = match self.start {
            Some(rv) if !self.initial => {
                epoch = self.cache.epoch_at(rv);
                rv
            }
            _ => {
                let snap = self.cache.snapshot(|o| self.filter.matches(o));
                epoch = snap.epoch;
                let (rv, items) = (snap.rv, snap.items);
                let (mut frames, mut size) = (Vec::new(), 0);
                for o in items {
                    let frame = cache::frame(
                        &self.cache,
                        self.wire,
                        EvType::Added,
                        &o,
                        &self.server.metrics.relay_encoded,
                    );
                    size += frame.len();
                    self.add(&mut frames, &mut dicts, frame);
                    if size >= INITIAL_CHUNK {
                        if !self.send(out, &frames).await {
                            return;
                        }
                        (frames, size) = (Vec::new(), 0);
                    }
                }
                if self.initial_end {
                    frames.push(self.bookmark(rv, true));
                }
                if !self.send(out, &frames).await {
                    return;
                }
                rv
            }
        };
        let mut next_bookmark = Instant::now() + self.server.bookmark_every;
        loop {
            if self
                .cache
                .stale(&mut epoch, |ns, nodes| holds(&self.filter, ns, nodes))
            {
                // Served anew with more labels (`labels`): relist.
                self.send(out, &[self.gone(cursor, cursor)]).await;
                return;
            }
            match self.cache.after(cursor, BATCH) {
                After::Expired { oldest } => {
                    self.send(out, &[self.gone(cursor, oldest)]).await;
                    return;
                }
                After::Changes(batch, upto) => {
                    let full = batch.len() == BATCH;
                    let (mut frames, mut events) = (Vec::new(), 0);
                    for c in &batch {
                        let before = c.prev.as_ref().is_some_and(|p| self.filter.matches(p));
                        let now = self.filter.matches(&c.obj);
                        if let Some(ty) = c.ty.seen(before, now) {
                            let f = c.frame(
                                &self.cache,
                                self.wire,
                                ty,
                                &self.server.metrics.relay_encoded,
                            );
                            self.add(&mut frames, &mut dicts, f);
                            events += 1;
                        }
                    }
                    if !self.send(out, &frames).await {
                        return;
                    }
                    self.server.metrics.relay_sent.inc_by(events);
                    cursor = upto;
                    if full {
                        continue;
                    }
                }
            }
            // One timer: the next bookmark or the watch's end.
            let deadline = self.deadline;
            let wake = match (self.bookmarks.then_some(next_bookmark), deadline) {
                (Some(b), Some(d)) => Some(b.min(d)),
                (b, d) => b.or(d),
            };
            tokio::select! {
                () = changes.notified() => {}
                () = async { tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)).await }, if wake.is_some() => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return;
                    }
                    if !self.send(out, &[self.bookmark(cursor, false)]).await {
                        return;
                    }
                    next_bookmark = Instant::now() + self.server.bookmark_every;
                }
                () = self.server.shutdown.cancelled() => return,
                () = out.closed() => return,
            }
        }
    }

    /// Add `f` to `frames`, after its dictionary if this stream has not
    /// sent it yet (`sent`): only its number and content id if the client
    /// holds it.
    fn add(&self, frames: &mut Vec<Bytes>, sent: &mut Vec<u32>, f: cache::Frame) {
        if let Some(d) = f.dict()
            && !sent.contains(&d.id)
        {
            sent.push(d.id);
            let frame = if self.held.contains(&d.content) {
                self.server.metrics.relay_dicts_held.inc();
                d.held_frame()
            } else {
                self.server
                    .metrics
                    .relay_dict_bytes_sent
                    .inc_by(d.frame().len() as u64);
                d.frame()
            };
            frames.push(frame);
        }
        frames.extend(f.parts());
    }
}

/// Where a watch writes: its own response, or its part of a multiplexed
/// one ([`Part`]).
trait Sink {
    /// Send `frames` as one chunk: false if the client is gone.
    async fn send(&mut self, frames: &[Bytes]) -> bool;
    /// Resolves when the client has closed the connection.
    async fn closed(&mut self);
}

impl<S: AsyncRead + AsyncWrite + Unpin> Sink for Stream<'_, S> {
    async fn send(&mut self, frames: &[Bytes]) -> bool {
        Stream::send(self, frames).await
    }

    async fn closed(&mut self) {
        Stream::closed(self).await;
    }
}

/// The requests of a multiplexed watch's inner watches (`w=`, each a
/// URL-encoded path and query), with the outer request's token and
/// `Accept`. Served in the compact stream only.
fn mux_request(req: &Head) -> Result<Reply, ApiError> {
    let bad = |m: String| ApiError::new(400, "BadRequest", m);
    if !compact::preferred(req.accept.as_deref()) {
        return Err(ApiError::new(
            406,
            "NotAcceptable",
            format!(
                "the multiplexed watch is served as {} only",
                compact::COMPACT
            ),
        ));
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(req.uri.query().unwrap_or(""))
        .map_err(|e| bad(format!("bad query: {e}")))?;
    let mut heads = Vec::new();
    for (k, v) in pairs {
        if k != "w" {
            continue;
        }
        if heads.len() == mux::MAX_INNER {
            return Err(bad(format!(
                "over {} watches in one request",
                mux::MAX_INNER
            )));
        }
        let uri: http::Uri = v
            .parse()
            .map_err(|e| bad(format!("bad watch {v:?}: {e}")))?;
        if !uri.path().starts_with('/') || uri.authority().is_some() {
            return Err(bad(format!("bad watch {v:?}: a path and a query")));
        }
        heads.push(req.inner(uri));
    }
    if heads.is_empty() {
        return Err(bad("no watch named (w=)".into()));
    }
    Ok(Reply::Mux(heads))
}

/// A multiplexed response's frames not yet written, and the bytes they
/// hold.
#[derive(Default)]
struct Queue {
    frames: std::sync::Mutex<(Vec<Bytes>, usize)>,
    /// An inner watch queued frames.
    pushed: tokio::sync::Notify,
    /// The connection's task wrote what was queued.
    drained: tokio::sync::Notify,
}

/// Bytes queued at most before an inner watch waits for them to be
/// written (as its own response would wait on the socket).
const QUEUED: usize = 256 * 1024;

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Bytes>, usize)> {
        self.frames.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, frames: impl IntoIterator<Item = Bytes>) {
        let mut q = self.lock();
        for f in frames {
            q.1 += f.len();
            q.0.push(f);
        }
        drop(q);
        self.pushed.notify_one();
    }
}

/// An inner watch's part of a multiplexed response: its frames go to the
/// queue marked with its index, the connection's task writes them.
struct Part {
    index: usize,
    queue: Arc<Queue>,
    /// `podns_relay_sent_bytes_total`, for the frames' heads.
    sent_bytes: Counter,
}

impl Sink for Part {
    async fn send(&mut self, frames: &[Bytes]) -> bool {
        let mut out = Vec::with_capacity(frames.len() + 1);
        let mut run: Vec<Bytes> = Vec::new();
        let mut len = 0;
        let mut heads = 0;
        let mut flush = |run: &mut Vec<Bytes>, len: &mut usize| {
            if *len > 0 {
                let head = mux::data_head(self.index, *len);
                heads += head.len();
                out.push(head);
                out.append(run);
                *len = 0;
            }
        };
        for f in frames {
            let mut f = f.clone();
            while !f.is_empty() {
                let take = (mux::MAX_RUN - len).min(f.len());
                run.push(f.split_to(take));
                len += take;
                if len == mux::MAX_RUN {
                    flush(&mut run, &mut len);
                }
            }
        }
        flush(&mut run, &mut len);
        if out.is_empty() {
            return true;
        }
        self.sent_bytes.inc_by(heads as u64);
        self.queue.push(out);
        loop {
            let drained = self.queue.drained.notified();
            if self.queue.lock().1 <= QUEUED {
                return true;
            }
            drained.await;
        }
    }

    async fn closed(&mut self) {
        // The connection's task watches the connection.
        std::future::pending::<()>().await;
    }
}

/// Serve a multiplexed watch on `out`: each inner watch as its own
/// request would be served (its token checked, its node scope), all of
/// them in this task; each ending with an ending frame, the response when
/// they all have or the client goes.
async fn multiplexed<S: AsyncRead + AsyncWrite + Unpin>(
    s: &Arc<Server>,
    heads: Vec<Head>,
    out: &mut Stream<'_, S>,
) {
    use futures::StreamExt as _;
    let queue = Arc::new(Queue::default());
    let ending = |index: usize, e: Option<&ApiError>| {
        let frame = mux::end_frame(index, e.map(error_body).as_deref());
        s.metrics.relay_sent_bytes.inc_by(frame.len() as u64);
        frame
    };
    let replies = futures::future::join_all(heads.iter().map(|h| async move {
        let watching = h
            .uri
            .query()
            .unwrap_or("")
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        if !watching {
            return Err(ApiError::new(
                400,
                "BadRequest",
                "only watches (watch=true) are multiplexed",
            ));
        }
        serve(s, h).await
    }))
    .await;
    // The requests are served: not kept while the watches run.
    drop(heads);
    type Running<'a> = std::pin::Pin<Box<dyn Future<Output = usize> + Send + 'a>>;
    let mut parts = futures::stream::FuturesUnordered::<Running<'_>>::new();
    for (index, reply) in replies.into_iter().enumerate() {
        match reply {
            Ok(Reply::Watch(sub)) => {
                let mut part = Part {
                    index,
                    queue: queue.clone(),
                    sent_bytes: s.metrics.relay_sent_bytes.clone(),
                };
                parts.push(Box::pin(async move {
                    sub.run(&mut part).await;
                    index
                }));
            }
            Ok(_) => {
                let e = ApiError::new(400, "BadRequest", "only watches are multiplexed");
                queue.push([ending(index, Some(&e))]);
            }
            Err(e) => queue.push([ending(index, Some(&e))]),
        }
    }
    loop {
        let frames = std::mem::take(&mut *queue.lock()).0;
        if !frames.is_empty() && !out.send(&frames).await {
            return;
        }
        // Not kept while the watches wait: a node instance's initial
        // events (thousands of frames and the list of them) stayed
        // referenced until its next change, 40 KiB and more a node
        // instance.
        drop(frames);
        queue.drained.notify_waiters();
        if parts.is_empty() {
            return;
        }
        tokio::select! {
            Some(index) = parts.next() => queue.push([ending(index, None)]),
            () = queue.pushed.notified() => {}
            () = out.closed() => return,
        }
    }
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": concat!("v1.34.0-podns-relay-", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": "linux",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns, without making one.
    fn future_size<A, F: Future>(_f: impl Fn(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// What a connection's task holds while it waits, before what the
    /// socket and TLS hold (printed for the notes).
    #[test]
    fn a_connections_task_is_small() {
        type Io = tokio::io::DuplexStream;
        let conn = future_size(|(s, io): (Arc<Server>, Io)| async move {
            connection(&s, io).await;
        });
        let served = future_size(|(s, h): (Arc<Server>, Head)| async move {
            let _ = serve(&s, &h).await;
        });
        let streaming = future_size(|(sub, mut p): (Subscriber, Part)| async move {
            sub.run(&mut p).await;
        });
        println!(
            "connection future {conn} B, serve {served} B, an inner watch {streaming} B, Subscriber {} B",
            std::mem::size_of::<Subscriber>()
        );
        assert!(conn < 64 * 1024);
    }

    #[test]
    fn paths_name_the_relayed_kinds_only() {
        let t = parse_target("/api/v1/namespaces/ml/pods").unwrap();
        assert_eq!(
            (t.kind, t.ns.as_deref(), t.name),
            (Kind::Pod, Some("ml"), None)
        );
        let t = parse_target("/apis/batch/v1/namespaces/ml/jobs/j").unwrap();
        assert_eq!((t.kind, t.name.as_deref()), (Kind::Job, Some("j")));
        assert!(parse_target("/api/v1/services").is_some());
        assert!(parse_target("/api/v1/nodes").is_none());
        assert!(parse_target("/api/v1/jobs").is_none(), "jobs are batch");
        assert!(parse_target("/apis/batch/v1/pods").is_none());
        assert!(parse_target("/api/v1/namespaces/ml/pods/p/status").is_none());
    }
}
