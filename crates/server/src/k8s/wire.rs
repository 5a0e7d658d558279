//! The one list/watch loop of every wire: kube-runtime's watcher states
//! (list or streaming list, then watch from the last resourceVersion,
//! bookmarks, relist on 410 or on a failed first list, resume otherwise)
//! over raw HTTP, because kube's `Api` only reads JSON. It asks for the
//! encoding `--wire` names in `Accept` and decodes what the server sends by
//! `Content-Type` ([`Codec`]): Protobuf with [`pb`](super::pb), JSON with
//! the slim serde types (both declared in [`objects`](super::objects)), and
//! a podns relay's compact stream ([`compact`](super::compact)), which
//! `--wire auto` asks for first on a watch (any other server skips a type
//! it does not know). A compact stream it cannot decode ends the watch
//! with a relist of its scope. It
//! yields kube-runtime's `watcher::Event`s and `watcher::Error`s, so the retry loop, its backoffs, fallbacks and
//! metrics in [`watch`](super::watch) are the same for both wires.

use std::fmt::Debug;

use bytes::Bytes;
use futures::Stream;
use http_body_util::BodyExt;
use kube::core::params::{ListParams, WatchParams};
use kube::core::{ObjectList, Status, WatchEvent};
use kube::runtime::watcher::{self, Event, ListSemantic};
use serde::de::DeserializeOwned;

use podns_kapi::watch::EvType;

use super::compact::{self, COMPACT, DecodeError, Decoded};
use super::objects::Slim;
use super::pb::{self, INITIAL_EVENTS_END, PROTOBUF};

/// Which encoding podns asks the API server for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Wire {
    /// Prefer Protobuf, accept JSON; decode whatever comes, by Content-Type.
    #[default]
    Auto,
    /// Ask for Protobuf only.
    Protobuf,
    /// Ask for JSON only.
    Json,
}

keywords!(Wire {
    Auto = "auto",
    Protobuf = "protobuf",
    Json = "json"
});

impl Wire {
    /// The `Accept` header: Protobuf first (order decides between equal
    /// `q`, RFC 9110 §12.5.1, and the API server follows it), JSON after.
    pub fn accept(self) -> &'static str {
        match self {
            Wire::Auto => "application/vnd.kubernetes.protobuf, application/json",
            Wire::Protobuf => PROTOBUF,
            Wire::Json => "application/json",
        }
    }

    /// The `Accept` header of a watch: `auto` asks for a podns relay's
    /// compact stream first.
    pub fn watch_accept(self) -> &'static str {
        match self {
            Wire::Auto => {
                "application/vnd.podns.compact.v1, application/vnd.kubernetes.protobuf, application/json"
            }
            w => w.accept(),
        }
    }

    /// [`Wire::watch_accept`], naming the compact stream's dictionaries
    /// the node instance holds (content ids, [`compact::accept_holding`]).
    pub fn watch_accept_holding(self, held: &[u64]) -> std::borrow::Cow<'static, str> {
        match self {
            Wire::Auto if !held.is_empty() => format!(
                "{}, application/vnd.kubernetes.protobuf, application/json",
                compact::accept_holding(held)
            )
            .into(),
            w => w.watch_accept().into(),
        }
    }
}

/// What the watcher needs of a slim type.
pub trait RawWatched:
    kube::Resource<DynamicType = ()> + Slim + DeserializeOwned + Clone + Debug + Send + 'static
{
}
impl<K> RawWatched for K where
    K: kube::Resource<DynamicType = ()> + Slim + DeserializeOwned + Clone + Debug + Send + 'static
{
}

/// How to list and watch one scope.
#[derive(Clone, Debug)]
pub struct RawConfig {
    /// `/api/v1/namespaces/ml/pods` or `/api/v1/pods`.
    pub url_path: String,
    pub label_selector: Option<String>,
    pub list_semantic: ListSemantic,
    pub streaming: bool,
    pub wire: Wire,
    /// Where the watcher publishes the resourceVersion it would resume
    /// from (a list's, an event's, a bookmark's), for the relay.
    pub seen: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Where the watcher publishes each bookmark's resourceVersion (every
    /// event before it has been yielded), for a tap that saves where the
    /// watch is (a node instance's saved scope).
    pub bookmarked: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// The compact stream's dictionaries kept across the node instance's
    /// watches and reconnects, named in each watch request so the relay
    /// sends them once ([`compact::Held`]); `None`: each stream is sent
    /// its own.
    pub held: Option<std::sync::Arc<compact::Held>>,
    /// The longest a watch may go without an event or a bookmark before it
    /// is reopened from its resourceVersion ([`Stalled`]); `None`: never.
    pub progress: Option<std::time::Duration>,
    /// A relay's watch multiplexer: the watch (`--wire auto`) opens its
    /// stream through it, on the one connection it holds for all of a
    /// node instance's watches ([`super::mux`]); `None`: its own request.
    pub mux: Option<super::mux::Mux>,
    /// How long a watch may deliver nothing before a probe checks that
    /// the server has nothing it missed ([`Deaf`]); `None`: never.
    pub probe: Option<std::time::Duration>,
    /// The server sends every watch a bookmark at least every minute,
    /// whether its kind moves or not (a podns relay): the progress
    /// deadline ([`Stalled`]) covers a watch from its start.
    pub steady_bookmarks: bool,
    /// Where the watch says how current it is and counts its probes.
    pub currency: Option<Currency>,
}

/// Where a watch reports how current it is: each proof (the end of its
/// list, an event, a bookmark, a probe that found nothing missed) to the
/// staleness gauge, and its probes by result.
#[derive(Clone, Debug)]
pub struct Currency {
    pub resource: &'static str,
    pub fresh: std::sync::Arc<crate::metrics::Fresh>,
    pub probes: prometheus_client::metrics::family::Family<
        crate::metrics::ProbeLabels,
        prometheus_client::metrics::counter::Counter,
    >,
}

impl Currency {
    fn probed(&self, result: &'static str) {
        self.probes
            .get_or_create(&crate::metrics::ProbeLabels {
                resource: self.resource,
                result,
            })
            .inc();
    }
}

/// A watch that delivered nothing (no event, no bookmark) for the probe
/// interval, while a probe found the server holding a change for its
/// scope that it had not delivered, and still had not [`PROBE_GRACE`]
/// later: it is deaf. Its connection is dropped and the watch resumes from
/// its resourceVersion, so the server's history brings what it missed.
///
/// Silence alone proves nothing: the API server's watch cache sends a
/// watcher a bookmark only when the cache's own position for the kind
/// moves past it ([`Stalled`]), so a quiet kind is silent for as long as
/// it is quiet, and a fresh watch that never got anything cannot be told
/// from one that is deaf by waiting. The probe asks the server itself:
/// a second, short watch of the same scope and selectors from the last
/// resourceVersion the watch delivered (`timeoutSeconds` [`PROBE_SECONDS`],
/// bookmarks allowed). The watch cache answers it from its history: every
/// change after that version, and nothing for a watch that is current. A
/// change in it is one the watch should have had (or has in flight: the
/// grace). Comparing a `limit=1` list's resourceVersion with the watch's
/// would not tell a deaf watch from a quiet kind: a list's resourceVersion
/// is etcd's global revision, which every write of any kind moves. A
/// probe that finds nothing proves the watch was current when it was
/// sent; one that fails proves nothing (counted, and the watch's
/// staleness keeps growing); one that gets 410 means the watch's version
/// has left the history, and the watch relists as after its own 410.
#[derive(Debug, thiserror::Error)]
#[error(
    "silent for {silent:?}, while a probe from resourceVersion {from} got a change \
     (resourceVersion {missed}) this watch had not delivered: the watch is reopened"
)]
pub struct Deaf {
    pub silent: std::time::Duration,
    pub from: String,
    pub missed: String,
}

/// Whether a watch ended because a probe found it deaf ([`Deaf`]).
pub fn is_deaf(e: &kube::Error) -> bool {
    match e {
        kube::Error::ReadEvents(io) => io.get_ref().is_some_and(|i| i.is::<Deaf>()),
        _ => false,
    }
}

/// A probe's `timeoutSeconds`: the server replays its history after the
/// version at once, so a second is enough to see it, and the server
/// holds the probe no longer.
pub const PROBE_SECONDS: u32 = 1;

/// How long a change a probe found may be in flight to the watch before
/// the watch is taken for deaf.
pub const PROBE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest a probe's response may take to start.
const PROBE_CONNECT: std::time::Duration = std::time::Duration::from_secs(5);

/// What one probe found.
#[derive(Debug, PartialEq, Eq)]
enum Probed {
    /// Nothing after the version: the watch was current when it was sent.
    Current,
    /// A change after the version, at this resourceVersion.
    Missed(String),
}

/// The probe's verdict for a result: `Ok(None)` the watch was current,
/// `Ok(Some)` the change it should have had, `Err` an error that ends the
/// watch (410: relist), and the `result` label. A failure to ask proves
/// nothing either way.
fn verdict(r: &Result<Probed, kube::Error>) -> (&'static str, bool) {
    match r {
        Ok(Probed::Current) => ("current", false),
        Ok(Probed::Missed(_)) => ("missed", true),
        Err(kube::Error::Api(s)) if s.code == 410 => ("expired", true),
        Err(_) => ("failed", false),
    }
}

/// A watch that has shown progress (an event or a bookmark after its
/// list), or any watch of a server that bookmarks every watch
/// ([`RawConfig::steady_bookmarks`]), and then got neither for `after`. The API server's watch cache
/// sends a bookmark about every minute only while its own position for
/// the kind moves past the watcher's (a change of the kind, or etcd's
/// progress notice): a kind no one has changed since the watch began can
/// be silent until the watch's timeout, so silence alone proves nothing,
/// and such a watch is left alone. A relay sends one every minute. A
/// watch that had been moving and went silent may be stuck: its
/// connection is dropped and the watch resumes from its resourceVersion,
/// so the server's history brings what it missed. Once reopened, it waits
/// for progress again before its silence counts.
#[derive(Debug, thiserror::Error)]
#[error("no event and no bookmark for {after:?}: the watch is reopened")]
pub struct Stalled {
    pub after: std::time::Duration,
}

/// Whether a watch ended because it stalled ([`Stalled`]).
pub fn is_stalled(e: &kube::Error) -> bool {
    match e {
        kube::Error::ReadEvents(io) => io.get_ref().is_some_and(|i| i.is::<Stalled>()),
        _ => false,
    }
}

/// A list a watcher starts from as if it had just read it: a node
/// instance's saved scope. Its items go out as a list's (`Init`,
/// `InitApply`…, `InitDone`), then the watch resumes from `rv`, and the
/// server's history decides: the changes since, or 410 and one relist.
#[derive(Debug)]
pub struct Listed<K> {
    pub items: Vec<K>,
    pub rv: String,
}

/// What differs between the wires, chosen per response by its
/// `Content-Type` (`--wire auto` may get either): how a watch body splits
/// into events, and how a list, an event and an error `Status` decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codec {
    Json,
    Protobuf,
    /// A podns relay's compact stream (watches only).
    Compact,
}

/// One decoded list body: its items, resourceVersion and continue token.
struct Page<K> {
    items: Vec<K>,
    resource_version: Option<String>,
    continue_: Option<String>,
}

impl Codec {
    fn of(headers: &http::HeaderMap) -> Self {
        let ct = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim_start();
        if ct.starts_with(PROTOBUF) {
            Codec::Protobuf
        } else if ct.starts_with(COMPACT) {
            Codec::Compact
        } else {
            Codec::Json
        }
    }

    fn list<K: RawWatched>(self, body: &[u8]) -> Result<Page<K>, kube::Error> {
        match self {
            Codec::Protobuf => {
                let l = pb::list::<K>(body).map_err(|e| kube::Error::Service(Box::new(e)))?;
                Ok(Page {
                    items: l.items,
                    resource_version: l.resource_version,
                    continue_: l.continue_,
                })
            }
            Codec::Json => {
                let l: ObjectList<K> =
                    serde_json::from_slice(body).map_err(kube::Error::SerdeError)?;
                Ok(Page {
                    items: l.items,
                    resource_version: l.metadata.resource_version,
                    continue_: l.metadata.continue_.filter(|c| !c.is_empty()),
                })
            }
            Codec::Compact => Err(kube::Error::Service(
                "a list in the compact stream's media type: only watches use it".into(),
            )),
        }
    }

    /// The `Status` of an error response, if the body is one.
    fn status(self, body: &[u8]) -> Option<Status> {
        match self {
            Codec::Protobuf => pb::envelope(body).and_then(|e| pb::status(e.raw)).ok(),
            Codec::Json | Codec::Compact => serde_json::from_slice::<Status>(body).ok(),
        }
    }

    /// One watch event from its frame (Protobuf) or line (JSON). A JSON
    /// line that is a bare `Status` is the API error it reports, as in
    /// kube-client.
    fn event<K: RawWatched>(self, raw: &[u8]) -> Result<WatchEvent<K>, kube::Error> {
        match self {
            Codec::Protobuf | Codec::Compact => pb::watch_event::<K>(raw)
                .map_err(|e| kube::Error::ReadEvents(std::io::Error::other(e))),
            Codec::Json => serde_json::from_slice::<WatchEvent<K>>(raw).map_err(|e| {
                match serde_json::from_slice::<Status>(raw) {
                    Ok(status) => kube::Error::Api(status.boxed()),
                    Err(_) => kube::Error::SerdeError(e),
                }
            }),
        }
    }
}

/// A watch's response body: its own, or its part of a multiplexed one.
enum Body {
    Http(kube::client::Body),
    Mux(super::mux::Inner),
}

impl Body {
    /// The next bytes; `None` at the end.
    async fn chunk(&mut self) -> Option<Result<Bytes, kube::Error>> {
        match self {
            Body::Http(b) => loop {
                match b.frame().await? {
                    Err(e) => return Some(Err(kube::Error::ReadEvents(std::io::Error::other(e)))),
                    Ok(f) => {
                        if let Ok(data) = f.into_data() {
                            return Some(Ok(data));
                        }
                    }
                }
            },
            Body::Mux(inner) => inner.next().await,
        }
    }
}

/// The body of a watch, split into events.
struct Events {
    body: Body,
    codec: Codec,
    frames: pb::Framer,
    lines: Vec<u8>,
    compact: compact::Decoder,
}

/// A compact stream's error as the watch's.
fn undecodable(e: DecodeError) -> kube::Error {
    kube::Error::ReadEvents(std::io::Error::other(e))
}

/// Whether a watch failed on a compact stream it could not decode.
fn is_undecodable(e: &kube::Error) -> bool {
    DecodeError::of(e).is_some()
}

impl Events {
    /// The next event's bytes; `None` at the end of the stream.
    async fn next_raw(&mut self) -> Result<Option<Vec<u8>>, kube::Error> {
        loop {
            if self.codec == Codec::Protobuf {
                if let Some(f) = self
                    .frames
                    .next_frame()
                    .map_err(|e| kube::Error::ReadEvents(std::io::Error::other(e)))?
                {
                    return Ok(Some(f.to_vec()));
                }
            } else if let Some(i) = self.lines.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.lines.drain(..=i).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            match self.body.chunk().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(e),
                Some(Ok(data)) => {
                    if self.codec == Codec::Protobuf {
                        self.frames.push(&data);
                    } else {
                        self.lines.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event of a compact stream.
    async fn next_compact<K: RawWatched>(&mut self) -> Result<Option<WatchEvent<K>>, kube::Error> {
        loop {
            match self.compact.next_event().map_err(undecodable)? {
                Some(Decoded::Event(ty, raw)) => {
                    let k = K::decode_pb(&raw);
                    return Ok(Some(match ty {
                        EvType::Added => WatchEvent::Added(k),
                        EvType::Modified => WatchEvent::Modified(k),
                        EvType::Deleted => WatchEvent::Deleted(k),
                    }));
                }
                Some(Decoded::Protobuf(raw)) => return Codec::Compact.event(&raw).map(Some),
                None => {}
            }
            match self.body.chunk().await {
                None => {
                    self.compact.finish().map_err(undecodable)?;
                    return Ok(None);
                }
                Some(Err(e)) => return Err(e),
                Some(Ok(data)) => self.compact.push(&data),
            }
        }
    }

    async fn next<K: RawWatched>(&mut self) -> Result<Option<WatchEvent<K>>, kube::Error> {
        if self.codec == Codec::Compact {
            return self.next_compact().await;
        }
        match self.next_raw().await? {
            Some(raw) => self.codec.event(&raw).map(Some),
            None => Ok(None),
        }
    }
}

enum State<K> {
    Empty,
    /// Started from a saved list ([`Listed`]).
    Saved(Listed<K>),
    /// A list has arrived; its items go out one by one.
    Listing {
        items: std::vec::IntoIter<K>,
        rv: String,
        /// Read from the server now (not a saved list): its end proves
        /// the watch current.
        fresh: bool,
    },
    /// Watch from `rv` (after a list, or a watch that ended).
    Resume {
        rv: String,
    },
    Watching {
        rv: String,
        events: Box<Events>,
        /// A streaming list whose end bookmark has not come yet.
        initial: bool,
    },
}

/// The watcher's state machine; pulled one event at a time.
struct RawWatcher<K> {
    ctx: Ctx,
    state: State<K>,
    /// An event or a bookmark came after the list and since the last
    /// reopening for silence: the progress deadline applies ([`Stalled`]).
    moving: bool,
    /// When the watch last delivered something, or was opened: the probe
    /// interval counts from here ([`Deaf`]).
    quiet_since: tokio::time::Instant,
}

/// What requests need (shared while a body is being read, so kept apart
/// from the state that holds the body).
struct Ctx {
    client: kube::Client,
    cfg: RawConfig,
    /// The field selector of the list and watch (a node instance's own
    /// pods: `spec.nodeName=NODE`).
    fields: Option<String>,
}

fn rv_of<K: kube::Resource>(k: &K) -> Option<String> {
    k.meta().resource_version.clone()
}

/// Sends a GET with the wire's `Accept` (a watch's names the compact
/// stream's dictionaries `held`); a non-2xx answer becomes the `Status`
/// it carries, in either encoding.
async fn get(
    client: &kube::Client,
    wire: Wire,
    held: &[u64],
    req: http::Request<Vec<u8>>,
) -> Result<http::Response<kube::client::Body>, kube::Error> {
    let (mut parts, body) = req.into_parts();
    let watch = parts
        .uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let accept = if watch {
        wire.watch_accept_holding(held)
    } else {
        wire.accept().into()
    };
    let accept = http::HeaderValue::try_from(accept.as_ref()).map_err(|e| {
        kube::Error::BuildRequest(kube::core::request::Error::Validation(e.to_string()))
    })?;
    parts.headers.insert(http::header::ACCEPT, accept);
    let req = http::Request::from_parts(parts, kube::client::Body::from(body));
    let res = client.send(req).await?;
    let code = res.status();
    if code.is_success() {
        return Ok(res);
    }
    let codec = Codec::of(res.headers());
    let bytes = res.into_body().collect().await?.to_bytes();
    let status = codec.status(&bytes).unwrap_or_else(|| {
        Status::failure(
            String::from_utf8_lossy(&bytes).trim(),
            "Failed to parse error data",
        )
        .with_code(code.as_u16())
    });
    Err(kube::Error::Api(status.boxed()))
}

/// One page of a list in the wire's encoding: the items and the continue
/// token (`podns zonefile` pages as kubectl does).
pub async fn list_page<K: RawWatched>(
    client: &kube::Client,
    wire: Wire,
    url_path: &str,
    lp: &ListParams,
) -> Result<(Vec<K>, Option<String>), kube::Error> {
    let req = kube::core::Request::new(url_path)
        .list(lp)
        .map_err(kube::Error::BuildRequest)?;
    let res = get(client, wire, &[], req).await?;
    let codec = Codec::of(res.headers());
    let body: Bytes = res.into_body().collect().await?.to_bytes();
    let page = codec.list::<K>(&body)?;
    Ok((page.items, page.continue_))
}

impl Ctx {
    async fn get(
        &self,
        held: &[u64],
        req: http::Request<Vec<u8>>,
    ) -> Result<http::Response<kube::client::Body>, kube::Error> {
        get(&self.client, self.cfg.wire, held, req).await
    }

    fn request(&self) -> kube::core::Request {
        kube::core::Request::new(self.cfg.url_path.clone())
    }

    /// The watch is current now (the staleness gauge).
    fn proved(&self) {
        if let Some(c) = &self.cfg.currency {
            c.fresh.proved();
        }
    }

    /// Probes the watch each time it has delivered nothing for `every`
    /// since `quiet_since` (from `rv`), until one finds it deaf ([`Deaf`])
    /// or gets 410, which end the watch; pending forever without `every`.
    /// Dropped as soon as the watch delivers something.
    async fn probe_while_silent<K: RawWatched>(
        &self,
        every: Option<std::time::Duration>,
        rv: &str,
        quiet_since: tokio::time::Instant,
    ) -> kube::Error {
        let Some(every) = every else {
            return std::future::pending().await;
        };
        let mut next = quiet_since + every;
        loop {
            tokio::time::sleep_until(next).await;
            let sent = tokio::time::Instant::now();
            let r = self.probe::<K>(rv).await;
            let (result, ends) = verdict(&r);
            if let Some(c) = &self.cfg.currency {
                c.probed(result);
            }
            match r {
                Ok(Probed::Current) => {
                    if let Some(c) = &self.cfg.currency {
                        c.fresh.proved_at(sent.into_std());
                    }
                }
                Ok(Probed::Missed(missed)) => {
                    // In flight to the watch, perhaps: it has the grace
                    // to deliver it (and drop this future).
                    tokio::time::sleep(PROBE_GRACE).await;
                    return kube::Error::ReadEvents(std::io::Error::other(Deaf {
                        silent: quiet_since.elapsed(),
                        from: rv.to_owned(),
                        missed,
                    }));
                }
                Err(e) if ends => return e,
                Err(e) => tracing::debug!(error = %e, "probe failed: it proves nothing"),
            }
            next = tokio::time::Instant::now().max(sent + every);
        }
    }

    /// One probe: a watch of the same scope and selectors from `rv` for
    /// [`PROBE_SECONDS`], read until its first change or its end. Its own
    /// request, never through a multiplexer.
    async fn probe<K: RawWatched>(&self, rv: &str) -> Result<Probed, kube::Error> {
        let wp = WatchParams {
            label_selector: self.cfg.label_selector.clone(),
            field_selector: self.fields.clone(),
            bookmarks: true,
            timeout: Some(PROBE_SECONDS),
            ..WatchParams::default()
        };
        let mut req = self
            .request()
            .watch(&wp, rv)
            .map_err(kube::Error::BuildRequest)?;
        req.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
        let res = tokio::time::timeout(PROBE_CONNECT, self.get(&[], req))
            .await
            .map_err(|_| {
                kube::Error::ReadEvents(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer to the probe",
                ))
            })??;
        let mut events = Events {
            codec: Codec::of(res.headers()),
            body: Body::Http(res.into_body()),
            frames: pb::Framer::default(),
            lines: Vec::new(),
            compact: compact::Decoder::default(),
        };
        // The server ends it after `timeoutSeconds`; one that does not is
        // read as long.
        let window = std::time::Duration::from_secs(u64::from(PROBE_SECONDS) + 1);
        let read = async {
            loop {
                match events.next::<K>().await? {
                    None => return Ok(Probed::Current),
                    Some(WatchEvent::Bookmark(_)) => {}
                    Some(
                        WatchEvent::Added(k) | WatchEvent::Modified(k) | WatchEvent::Deleted(k),
                    ) => {
                        return Ok(Probed::Missed(rv_of(&k).unwrap_or_default()));
                    }
                    Some(WatchEvent::Error(s)) => return Err(kube::Error::Api(s)),
                }
            }
        };
        tokio::time::timeout(window, read)
            .await
            .unwrap_or(Ok(Probed::Current))
    }

    /// Publish the resourceVersion the watch would resume from.
    fn seen(&self, rv: &str) {
        if let (Some(seen), Ok(rv)) = (&self.cfg.seen, rv.parse::<u64>()) {
            seen.fetch_max(rv, std::sync::atomic::Ordering::Release);
        }
    }

    fn list_rv(&self) -> &'static str {
        match self.cfg.list_semantic {
            ListSemantic::Any => "0",
            ListSemantic::MostRecent => "",
        }
    }

    async fn list<K: RawWatched>(&self) -> Result<(Vec<K>, String), kube::Error> {
        let lp = ListParams {
            label_selector: self.cfg.label_selector.clone(),
            field_selector: self.fields.clone(),
            resource_version: match self.list_rv() {
                "" => None,
                rv => Some(rv.to_owned()),
            },
            ..ListParams::default()
        };
        let req = self
            .request()
            .list(&lp)
            .map_err(kube::Error::BuildRequest)?;
        let res = self.get(&[], req).await?;
        let codec = Codec::of(res.headers());
        let body: Bytes = res.into_body().collect().await?.to_bytes();
        let page = codec.list::<K>(&body)?;
        Ok((page.items, page.resource_version.unwrap_or_default()))
    }

    async fn watch(&self, rv: &str, initial: bool) -> Result<Box<Events>, kube::Error> {
        let mut wp = WatchParams {
            label_selector: self.cfg.label_selector.clone(),
            field_selector: self.fields.clone(),
            bookmarks: true,
            ..WatchParams::default()
        };
        if initial {
            wp = wp.initial_events();
        }
        let mut req = self
            .request()
            .watch(&wp, rv)
            .map_err(kube::Error::BuildRequest)?;
        // One event per gzip member breaks some decoders; watch streams
        // go uncompressed, as kube does.
        req.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
        // Through the relay's multiplexer, unless that relay has none.
        if let (Some(mux), Wire::Auto) = (&self.cfg.mux, self.cfg.wire) {
            let target = req
                .uri()
                .path_and_query()
                .map_or_else(String::new, |p| p.as_str().to_owned());
            match mux.open(target).await {
                super::mux::Opened::Stream(mut inner) => {
                    return Ok(Box::new(Events {
                        codec: Codec::Compact,
                        compact: inner.take_decoder(),
                        body: Body::Mux(inner),
                        frames: pb::Framer::default(),
                        lines: Vec::new(),
                    }));
                }
                super::mux::Opened::Failed(e) => return Err(e),
                super::mux::Opened::Fallback => {}
            }
        }
        // The dictionaries held now, named in the request and kept for
        // this stream by its decoder.
        let (compact, held) = match &self.cfg.held {
            Some(h) if self.cfg.wire == Wire::Auto => h.claim(),
            _ => (compact::Decoder::default(), Vec::new()),
        };
        let res = self.get(&held, req).await?;
        Ok(Box::new(Events {
            codec: Codec::of(res.headers()),
            body: Body::Http(res.into_body()),
            frames: pb::Framer::default(),
            lines: Vec::new(),
            compact,
        }))
    }
}

impl<K: RawWatched> RawWatcher<K> {
    async fn step(&mut self) -> watcher::Result<Event<K>> {
        loop {
            match std::mem::replace(&mut self.state, State::Empty) {
                State::Empty if self.ctx.cfg.streaming => {
                    let rv = self.ctx.list_rv();
                    match self.ctx.watch(rv, true).await {
                        Ok(events) => {
                            self.quiet_since = tokio::time::Instant::now();
                            self.state = State::Watching {
                                rv: String::new(),
                                events,
                                initial: true,
                            };
                            return Ok(Event::Init);
                        }
                        Err(e) => return Err(watcher::Error::WatchStartFailed(e)),
                    }
                }
                State::Empty => match self.ctx.list::<K>().await {
                    Ok((items, rv)) => {
                        if rv.is_empty() {
                            return Err(watcher::Error::NoResourceVersion);
                        }
                        self.state = State::Listing {
                            items: items.into_iter(),
                            rv,
                            fresh: true,
                        };
                        return Ok(Event::Init);
                    }
                    Err(e) => return Err(watcher::Error::InitialListFailed(e)),
                },
                State::Saved(Listed { items, rv }) => {
                    self.state = State::Listing {
                        items: items.into_iter(),
                        rv,
                        fresh: false,
                    };
                    return Ok(Event::Init);
                }
                State::Listing {
                    mut items,
                    rv,
                    fresh,
                } => match items.next() {
                    Some(k) => {
                        self.state = State::Listing { items, rv, fresh };
                        return Ok(Event::InitApply(k));
                    }
                    None => {
                        if fresh {
                            self.ctx.proved();
                        }
                        self.ctx.seen(&rv);
                        self.state = State::Resume { rv };
                        return Ok(Event::InitDone);
                    }
                },
                State::Resume { rv } => match self.ctx.watch(&rv, false).await {
                    Ok(events) => {
                        self.quiet_since = tokio::time::Instant::now();
                        self.state = State::Watching {
                            rv,
                            events,
                            initial: false,
                        };
                    }
                    Err(e) => {
                        let expired = matches!(&e, kube::Error::Api(s) if s.code == 410);
                        self.state = if expired {
                            State::Empty
                        } else {
                            State::Resume { rv }
                        };
                        return Err(watcher::Error::WatchStartFailed(e));
                    }
                },
                State::Watching {
                    mut rv,
                    mut events,
                    mut initial,
                } => {
                    // A streaming list's initial events have their own
                    // deadline (`--streaming-list auto`'s fallback).
                    let moving = self.moving || self.ctx.cfg.steady_bookmarks;
                    let stall = self.ctx.cfg.progress.filter(|_| !initial && moving);
                    let next = async {
                        match stall {
                            Some(after) => tokio::time::timeout(after, events.next::<K>())
                                .await
                                .unwrap_or_else(|_| {
                                    Err(kube::Error::ReadEvents(std::io::Error::new(
                                        std::io::ErrorKind::TimedOut,
                                        Stalled { after },
                                    )))
                                }),
                            None => events.next::<K>().await,
                        }
                    };
                    // Whichever comes first: what the watch delivers, or a
                    // probe's finding that it is deaf (or must relist).
                    let probe = self.ctx.cfg.probe.filter(|_| !initial && !rv.is_empty());
                    let next = tokio::select! {
                        biased;
                        next = next => next,
                        e = self.ctx.probe_while_silent::<K>(probe, &rv, self.quiet_since) => Err(e),
                    };
                    if let Err(e) = &next
                        && is_stalled(e)
                    {
                        self.moving = false;
                    }
                    let ev = match next {
                        Ok(Some(ev)) => ev,
                        // The server closed the watch (timeoutSeconds): resume.
                        Ok(None) if initial => continue,
                        Ok(None) => {
                            self.state = State::Resume { rv };
                            continue;
                        }
                        Err(e) => {
                            // A stream it cannot decode: what it holds may
                            // have missed a change; relist the scope.
                            let expired = matches!(&e, kube::Error::Api(s) if s.code == 410);
                            self.state = if initial || expired || is_undecodable(&e) {
                                State::Empty
                            } else {
                                State::Resume { rv }
                            };
                            return Err(watcher::Error::WatchFailed(e));
                        }
                    };
                    // Progress after the list (a streaming list's initial
                    // events and its end bookmark come whatever the server
                    // does later).
                    self.moving |= !initial;
                    self.quiet_since = tokio::time::Instant::now();
                    let out = match ev {
                        WatchEvent::Added(k) | WatchEvent::Modified(k) => {
                            if let Some(v) = rv_of(&k) {
                                rv = v;
                            }
                            Some(if initial {
                                Event::InitApply(k)
                            } else {
                                Event::Apply(k)
                            })
                        }
                        WatchEvent::Deleted(k) => {
                            if let Some(v) = rv_of(&k) {
                                rv = v;
                            }
                            Some(Event::Delete(k))
                        }
                        WatchEvent::Bookmark(b) => {
                            rv = b.metadata.resource_version;
                            if let (Some(at), Ok(v)) = (&self.ctx.cfg.bookmarked, rv.parse::<u64>())
                            {
                                at.fetch_max(v, std::sync::atomic::Ordering::Release);
                            }
                            let end = b
                                .metadata
                                .annotations
                                .get(INITIAL_EVENTS_END)
                                .is_some_and(|v| v == "true");
                            if initial && end {
                                initial = false;
                                Some(Event::InitDone)
                            } else {
                                None
                            }
                        }
                        WatchEvent::Error(s) => {
                            self.state = if s.code == 410 || initial {
                                State::Empty
                            } else {
                                State::Resume { rv }
                            };
                            return Err(watcher::Error::WatchError(s));
                        }
                    };
                    self.ctx.seen(&rv);
                    if !initial {
                        self.ctx.proved();
                    }
                    self.state = State::Watching {
                        rv,
                        events,
                        initial,
                    };
                    if let Some(out) = out {
                        return Ok(out);
                    }
                }
            }
        }
    }
}

/// The watcher as a stream, pulled like kube-runtime's: nothing is
/// requested while the caller waits out a backoff.
pub fn raw_watcher<K: RawWatched>(
    client: kube::Client,
    cfg: RawConfig,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send {
    raw_watcher_from(client, cfg, None)
}

/// The watcher, started from a saved list when there is one.
pub fn raw_watcher_from<K: RawWatched>(
    client: kube::Client,
    cfg: RawConfig,
    start: Option<Listed<K>>,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send {
    raw_watcher_selecting(client, cfg, None, start)
}

/// [`raw_watcher_from`] of the objects a field selector selects too: a
/// node instance's watch of its node's pods (`spec.nodeName=NODE`).
pub fn raw_watcher_selecting<K: RawWatched>(
    client: kube::Client,
    cfg: RawConfig,
    fields: Option<String>,
    start: Option<Listed<K>>,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send {
    let w = RawWatcher {
        ctx: Ctx {
            client,
            cfg,
            fields,
        },
        state: start.map_or(State::Empty, State::Saved),
        moving: false,
        quiet_since: tokio::time::Instant::now(),
    };
    futures::stream::unfold(w, |mut w| async move {
        let r = w.step().await;
        Some((r, w))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::objects::SlimPod;
    use axum::extract::RawQuery;
    use serde_json::json;

    /// A probe against a tiny API server whose watch from `rv` sends
    /// `lines` and ends, as `timeoutSeconds` ends it.
    async fn probe_of(lines: Vec<String>) -> (Result<Probed, kube::Error>, String) {
        let asked = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let keep = asked.clone();
        let app = axum::Router::new().route(
            "/api/v1/pods",
            axum::routing::get(move |RawQuery(q): RawQuery| {
                *keep.lock().unwrap() = q.unwrap_or_default();
                let body = lines.concat();
                async move { body }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let url: http::Uri = format!("http://{addr}").parse().unwrap();
        let (client, mut cfg) = config(&url);
        cfg.url_path = "/api/v1/pods".into();
        cfg.label_selector = Some("app=x".into());
        let ctx = Ctx {
            client,
            cfg,
            fields: Some("spec.nodeName=n1".into()),
        };
        let r = ctx.probe::<SlimPod>("41").await;
        server.abort();
        let q = asked.lock().unwrap().clone();
        (r, q)
    }

    fn line(v: serde_json::Value) -> String {
        format!("{v}\n")
    }

    #[tokio::test]
    async fn a_probe_asks_for_the_watch_s_scope_from_its_version_and_reads_what_it_missed() {
        let bookmark = line(
            json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"resourceVersion": "41"}}}),
        );
        // Nothing after the version (a bookmark is no change): current.
        let (r, q) = probe_of(vec![bookmark.clone()]).await;
        assert_eq!(r.unwrap(), Probed::Current);
        for want in [
            "watch=true",
            "resourceVersion=41",
            "allowWatchBookmarks=true",
            "timeoutSeconds=1",
            "labelSelector=app%3Dx",
            "fieldSelector=spec.nodeName%3Dn1",
        ] {
            assert!(q.split('&').any(|p| p == want), "{want} not in {q}");
        }
        assert!(!q.contains("sendInitialEvents"), "{q}");

        // A change after it: missed, at its version.
        let added = line(
            json!({"type": "ADDED", "object": {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "a", "namespace": "ml", "uid": "u", "resourceVersion": "42"}}}),
        );
        let (r, _) = probe_of(vec![bookmark, added]).await;
        assert_eq!(r.unwrap(), Probed::Missed("42".into()));

        // 410: the version left the history; the watch must relist.
        let gone = line(
            json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
            "status": "Failure", "reason": "Expired", "code": 410, "message": "too old"}}),
        );
        let (r, _) = probe_of(vec![gone]).await;
        assert_eq!(verdict(&r), ("expired", true));
    }

    /// A tiny API server of `ml`'s pods at resourceVersion 10: an empty
    /// list; its first watch from 10 accepted and never fed (deaf); a
    /// short watch (`timeoutSeconds`, a probe) or any later watch gets the
    /// pod created at 11. The queries it was asked, in order.
    async fn deaf_server() -> (http::Uri, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use axum::response::IntoResponse;
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let keep = asked.clone();
        let app = axum::Router::new().route(
            "/api/v1/namespaces/ml/pods",
            axum::routing::get(move |RawQuery(q): RawQuery| {
                let q = q.unwrap_or_default();
                let watches = {
                    let mut a = keep.lock().unwrap();
                    a.push(q.clone());
                    a.iter().filter(|q| q.contains("watch=true")).count()
                };
                async move {
                    if !q.contains("watch=true") {
                        return json!({"kind": "PodList", "apiVersion": "v1",
                            "metadata": {"resourceVersion": "10"}, "items": []})
                        .to_string()
                        .into_response();
                    }
                    let pending = futures::stream::pending::<Result<String, std::io::Error>>();
                    if watches == 1 {
                        return axum::body::Body::from_stream(pending).into_response();
                    }
                    let ev = line(json!({"type": "ADDED", "object": {"kind": "Pod", "apiVersion": "v1",
                        "metadata": {"name": "late", "namespace": "ml", "uid": "u", "resourceVersion": "11"},
                        "status": {"podIP": "10.0.0.9"}}}));
                    let first = futures::stream::iter([Ok::<_, std::io::Error>(ev)]);
                    if q.contains("timeoutSeconds=1&") || q.ends_with("timeoutSeconds=1") {
                        axum::body::Body::from_stream(first).into_response()
                    } else {
                        use futures::StreamExt;
                        axum::body::Body::from_stream(first.chain(pending)).into_response()
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}").parse().unwrap(), asked)
    }

    fn config(url: &http::Uri) -> (kube::Client, RawConfig) {
        let client = kube::Client::try_from(kube::Config::new(url.clone())).unwrap();
        let cfg = RawConfig {
            url_path: "/api/v1/namespaces/ml/pods".into(),
            label_selector: None,
            list_semantic: ListSemantic::Any,
            streaming: false,
            wire: Wire::Json,
            seen: None,
            bookmarked: None,
            held: None,
            progress: None,
            mux: None,
            probe: None,
            steady_bookmarks: false,
            currency: None,
        };
        (client, cfg)
    }

    /// The next item of `w`, within 10 s.
    async fn next<S: Stream<Item = watcher::Result<Event<SlimPod>>> + Unpin>(
        w: &mut S,
    ) -> watcher::Result<Event<SlimPod>> {
        use futures::StreamExt;
        tokio::time::timeout(std::time::Duration::from_secs(10), w.next())
            .await
            .expect("the watcher said nothing for 10 s")
            .unwrap()
    }

    /// A fresh watch that never gets anything (the deaf fresh watch of
    /// issue 50): its probe finds the pod it missed, the watch ends as
    /// deaf, resumes from its resourceVersion, and the pod comes and
    /// proves the watch current. Without the probe (`probe: None`) the
    /// watcher says nothing after its list, and this fails.
    #[tokio::test]
    async fn a_fresh_deaf_watch_is_probed_ended_as_deaf_and_resumed() {
        let (url, asked) = deaf_server().await;
        let (client, mut cfg) = config(&url);
        cfg.probe = Some(std::time::Duration::from_millis(300));
        let metrics = crate::metrics::Metrics::new();
        cfg.currency = Some(Currency {
            resource: "pods",
            fresh: metrics.staleness.watch("pods"),
            probes: metrics.watch_probes.clone(),
        });
        let mut w = Box::pin(raw_watcher::<SlimPod>(client, cfg));
        assert!(matches!(next(&mut w).await, Ok(Event::Init)));
        assert!(matches!(next(&mut w).await, Ok(Event::InitDone)));
        let started = std::time::Instant::now();
        match next(&mut w).await {
            Err(watcher::Error::WatchFailed(e)) => assert!(is_deaf(&e), "{e}"),
            other => panic!("not deaf: {other:?}"),
        }
        // The interval, the probe, the grace.
        assert!(started.elapsed() >= PROBE_GRACE, "{:?}", started.elapsed());
        match next(&mut w).await {
            Ok(Event::Apply(p)) => assert_eq!(p.metadata.name.as_deref(), Some("late")),
            other => panic!("no pod after the resume: {other:?}"),
        }
        let asked = asked.lock().unwrap().clone();
        let watches: Vec<&String> = asked.iter().filter(|q| q.contains("watch=true")).collect();
        // The deaf watch, its probe, the resume: all from 10, none listed again.
        assert_eq!(watches.len(), 3, "{asked:?}");
        assert!(
            watches.iter().all(|q| q.contains("resourceVersion=10")),
            "{asked:?}"
        );
        assert!(watches[1].contains("timeoutSeconds=1"), "{asked:?}");
        assert_eq!(asked.len(), 4, "{asked:?}");
        let missed = metrics
            .watch_probes
            .get_or_create(&crate::metrics::ProbeLabels {
                resource: "pods",
                result: "missed",
            })
            .get();
        assert_eq!(missed, 1);
        let stale = metrics.staleness.max(std::time::Instant::now()).unwrap();
        assert!(stale < 1.0, "{stale}");
    }

    /// On a server that bookmarks every watch (a relay), the progress
    /// deadline covers a watch that never moved (without
    /// `steady_bookmarks` the watcher says nothing after its list).
    #[tokio::test]
    async fn a_relay_s_fresh_silent_watch_meets_the_progress_deadline() {
        let (url, _) = deaf_server().await;
        let (client, mut cfg) = config(&url);
        cfg.progress = Some(std::time::Duration::from_millis(300));
        cfg.steady_bookmarks = true;
        let mut w = Box::pin(raw_watcher::<SlimPod>(client, cfg));
        assert!(matches!(next(&mut w).await, Ok(Event::Init)));
        assert!(matches!(next(&mut w).await, Ok(Event::InitDone)));
        match next(&mut w).await {
            Err(watcher::Error::WatchFailed(e)) => assert!(is_stalled(&e), "{e}"),
            other => panic!("not stalled: {other:?}"),
        }
        match next(&mut w).await {
            Ok(Event::Apply(p)) => assert_eq!(p.metadata.name.as_deref(), Some("late")),
            other => panic!("no pod after the resume: {other:?}"),
        }
    }

    #[test]
    fn only_a_missed_change_or_a_410_ends_the_watch() {
        assert_eq!(verdict(&Ok(Probed::Current)), ("current", false));
        assert_eq!(verdict(&Ok(Probed::Missed("7".into()))), ("missed", true));
        let io = kube::Error::ReadEvents(std::io::Error::other("refused"));
        assert_eq!(verdict(&Err(io)), ("failed", false));
        let s = |code: u16| kube::Error::Api(Status::failure("m", "r").with_code(code).boxed());
        assert_eq!(verdict(&Err(s(410))), ("expired", true));
        assert_eq!(verdict(&Err(s(429))), ("failed", false));
        assert_eq!(verdict(&Err(s(500))), ("failed", false));
        let deaf = kube::Error::ReadEvents(std::io::Error::other(Deaf {
            silent: std::time::Duration::from_secs(10),
            from: "41".into(),
            missed: "42".into(),
        }));
        assert!(is_deaf(&deaf) && !is_stalled(&deaf));
    }
}
