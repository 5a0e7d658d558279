//! A node instance's watches in one response: the relay's multiplexed
//! watch (`GET /apis/podns.io/v1/watches?w=<watch>&w=...`) and the node
//! side that opens every watch through it ([`Mux`]).
//!
//! Why: a relay's memory per node instance was its connections' (about
//! 19 KiB each, TLS and the connection's task), one per watch, and a
//! restarted node instance cost it a TLS handshake per watch. Multiplexed,
//! a node instance holds one connection to a relay for all its watches.
//!
//! The request names each inner watch by its path and query, URL-encoded
//! (`w=%2Fapi%2Fv1%2Fnamespaces%2Fml%2Fpods%3Fwatch%3Dtrue...`), at most
//! [`MAX_INNER`] of them, and asks for the compact stream
//! ([`super::compact`], `dicts=` naming the dictionaries held, for every
//! inner watch). The relay serves and authorizes each inner watch as the
//! request it names, with the outer request's token and `Accept`. The
//! answer (`Content-Type:` [`MUX`]) is outer frames, each a LEB128 length
//! and its body: a tag, the inner watch's index (LEB128, its place in the
//! request) and
//! - tag 1: bytes of that watch's compact stream, as its own request
//!   would have been sent them (the same frames, dictionaries and claims);
//!   an inner frame may span outer frames;
//! - tag 2: that watch ended (its timeout, a 410 after its `ERROR`
//!   event…), with nothing after, or with the JSON `Status` its own
//!   request would have been refused with (403 outside the token's node
//!   scope, 400, 504). The others go on; the response ends when they all
//!   have.
//!
//! A relay without it answers 404: the node instance then opens each watch
//! as its own request, as before, and asks that relay again after
//! [`FALLBACK_FOR`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use super::compact::{self, put_varint, varint};
use crate::metrics::{DecodeErrorLabels, Metrics};

/// The multiplexed watch's path.
pub const MUX_PATH: &str = "/apis/podns.io/v1/watches";
/// Its media type.
pub const MUX: &str = "application/vnd.podns.mux.v1";
/// Inner watches in one request, at most.
pub const MAX_INNER: usize = 64;
/// An inner stream's bytes in one outer frame, at most (the relay splits
/// longer runs).
pub const MAX_RUN: usize = 64 << 10;
/// The longest outer frame a node instance reads: a run and its head, or
/// an ending's `Status`.
pub const MAX_OUTER: usize = MAX_RUN + 64;

const TAG_DATA: u8 = 1;
const TAG_END: u8 = 2;

/// The head of an outer frame of `len` bytes of inner watch `index`'s
/// stream (the bytes follow it).
pub fn data_head(index: usize, len: usize) -> Bytes {
    let mut fields = vec![TAG_DATA];
    put_varint(&mut fields, index as u64);
    let mut out = Vec::with_capacity(fields.len() + 4);
    put_varint(&mut out, (fields.len() + len) as u64);
    out.extend_from_slice(&fields);
    Bytes::from(out)
}

/// The frame ending inner watch `index`, with the `Status` (JSON) it was
/// refused with, if it was.
pub fn end_frame(index: usize, status: Option<&[u8]>) -> Bytes {
    let mut body = vec![TAG_END];
    put_varint(&mut body, index as u64);
    // An ending is short: a refusal's message is cut to fit.
    if let Some(s) = status {
        body.extend_from_slice(&s[..s.len().min(MAX_OUTER - 16)]);
    }
    let mut out = Vec::with_capacity(body.len() + 4);
    put_varint(&mut out, body.len() as u64);
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// One outer frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Outer {
    /// Bytes of inner watch `.0`'s compact stream.
    Data(usize, Bytes),
    /// Inner watch `.0` ended; with the JSON `Status` it was refused with.
    End(usize, Option<Bytes>),
}

/// Why a multiplexed stream cannot be read: the node instance closes it,
/// counts it (`podns_watch_decode_errors_total{resource="mux"}`) and each
/// inner watch resumes (or relists) as after a dropped connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxError {
    #[error("multiplexed frame of {0} bytes, over the {MAX_OUTER}-byte limit")]
    TooLarge(u64),
    #[error("multiplexed frame length is not a valid number")]
    BadLength,
    #[error("multiplexed stream ended inside a frame ({0} bytes left over)")]
    Truncated(usize),
    #[error("multiplexed frame is empty or cut short")]
    Short,
    #[error("unknown multiplexed frame tag {0}")]
    UnknownTag(u8),
    #[error("multiplexed frame of inner watch {0}, not one requested or one that ended")]
    UnknownIndex(u64),
}

impl MuxError {
    /// The `error` label of `podns_watch_decode_errors`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::TooLarge(_) => "too_large",
            Self::BadLength | Self::Short | Self::Truncated(_) => "truncated",
            Self::UnknownTag(_) => "unknown_frame",
            Self::UnknownIndex(_) => "unknown_index",
        }
    }
}

/// Splits a multiplexed stream into outer frames.
#[derive(Default)]
pub struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// At the end of the stream: an error if it ended inside a frame.
    pub fn finish(&self) -> Result<(), MuxError> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(MuxError::Truncated(n)),
        }
    }

    /// The next outer frame, once it has arrived whole.
    pub fn next_frame(&mut self) -> Result<Option<Outer>, MuxError> {
        let Some((n, used)) = varint(&self.buf).map_err(|_| MuxError::BadLength)? else {
            return Ok(None);
        };
        if n > MAX_OUTER as u64 {
            return Err(MuxError::TooLarge(n));
        }
        let n = n as usize;
        if self.buf.len() < used + n {
            return Ok(None);
        }
        self.buf.advance(used);
        let mut body = self.buf.split_to(n).freeze();
        if body.is_empty() {
            return Err(MuxError::Short);
        }
        let tag = body.get_u8();
        let (index, used) = varint(&body)
            .map_err(|_| MuxError::BadLength)?
            .ok_or(MuxError::Short)?;
        body.advance(used);
        let index = usize::try_from(index).map_err(|_| MuxError::UnknownIndex(index))?;
        match tag {
            TAG_DATA => Ok(Some(Outer::Data(index, body))),
            TAG_END => Ok(Some(Outer::End(index, (!body.is_empty()).then_some(body)))),
            t => Err(MuxError::UnknownTag(t)),
        }
    }
}

/// The request naming `targets` (path and query of each inner watch).
pub fn request_uri(targets: &[String]) -> String {
    let mut q = form_query(targets.iter().map(|t| ("w", t.as_str())));
    if q.is_empty() {
        q.push_str("w=");
    }
    format!("{MUX_PATH}?{q}")
}

fn form_query<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let pairs: Vec<(&str, &str)> = pairs.collect();
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// How long a node instance waits after a watch asks to open for others
/// to ask too, before opening them all in one request; reset by each one
/// that comes, up to [`DEBOUNCE_MAX`].
pub const DEBOUNCE: Duration = Duration::from_millis(20);
/// The longest a watch waits for others to open with it.
pub const DEBOUNCE_MAX: Duration = Duration::from_millis(250);
/// How long a relay that answered 404 to the multiplexed watch is read
/// one request per watch before it is asked again.
pub const FALLBACK_FOR: Duration = Duration::from_secs(600);
/// After a multiplexed request failed (no connection, 503…), the watches
/// that ask meanwhile wait until this (doubling to [`RETRY_MAX`]) and go
/// in one request again.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(16);
/// Bytes of an inner stream waiting for its watch, at most (in chunks).
const INNER_QUEUE: usize = 16;

/// What a watch gets when it asks the multiplexer to open it.
pub enum Opened {
    /// Its stream, on the multiplexed connection.
    Stream(Inner),
    /// This relay does not multiplex: open it as its own request.
    Fallback,
    /// The multiplexed request failed (the watch retries as after its own
    /// request failed).
    Failed(kube::Error),
}

/// One watch's stream on the multiplexed connection.
pub struct Inner {
    rx: mpsc::Receiver<Result<Bytes, kube::Error>>,
    decoder: Option<compact::Decoder>,
    shared: Arc<Shared>,
}

impl Inner {
    /// The next bytes of its compact stream; `None` at its end (its own,
    /// or the connection's: it resumes from its resourceVersion).
    pub async fn next(&mut self) -> Option<Result<Bytes, kube::Error>> {
        self.rx.recv().await
    }

    /// The decoder holding the dictionaries the request claimed.
    pub fn take_decoder(&mut self) -> compact::Decoder {
        self.decoder.take().unwrap_or_default()
    }
}

impl Drop for Inner {
    /// A watch that stops (its namespace left the scope) has the
    /// connection reopened without it.
    fn drop(&mut self) {
        self.rx.close();
        self.shared.wake.notify_one();
    }
}

struct Want {
    target: String,
    reply: oneshot::Sender<Opened>,
}

#[derive(Default)]
struct State {
    wants: Vec<Want>,
    /// Until when this relay is read one request per watch.
    fallback_until: Option<Instant>,
    /// Whether the driver task runs.
    driving: bool,
    /// After a failed request: the next not before this.
    retry_at: Option<Instant>,
    retry_after: Duration,
}

struct Shared {
    client: kube::Client,
    held: Arc<compact::Held>,
    metrics: Metrics,
    state: Mutex<State>,
    wake: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A node instance's multiplexer for one relay (one client): every watch
/// opens its stream through it, and it holds one connection for them all.
#[derive(Clone)]
pub struct Mux {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mux")
    }
}

/// One multiplexer is equal to itself only.
impl PartialEq for Mux {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Eq for Mux {}

/// Why a multiplexed connection ended.
enum Ended {
    /// Every inner watch ended: the response is read to its end, so the
    /// connection is kept for the next.
    Done,
    /// A watch wants in, or one left: the connection is dropped and the
    /// others resume on the next.
    Reopen,
    /// The connection ended or broke.
    Dropped,
    /// The relay sent what cannot be read: each watch gets the error
    /// (and resumes after its backoff).
    Broken(MuxError),
}

impl Mux {
    pub fn new(client: kube::Client, held: Arc<compact::Held>, metrics: Metrics) -> Self {
        Self {
            shared: Arc::new(Shared {
                client,
                held,
                metrics,
                state: Mutex::new(State::default()),
                wake: Notify::new(),
            }),
        }
    }

    /// Open the watch `target` (its path and query) on the multiplexed
    /// connection: with the watches that ask within [`DEBOUNCE`], in one
    /// request.
    pub async fn open(&self, target: String) -> Opened {
        let reply = {
            let mut st = self.shared.lock();
            if st.fallback_until.is_some_and(|t| Instant::now() < t) {
                return Opened::Fallback;
            }
            let (tx, rx) = oneshot::channel();
            st.wants.push(Want { target, reply: tx });
            if !st.driving {
                st.driving = true;
                tokio::spawn(drive(self.shared.clone()));
            }
            rx
        };
        self.shared.wake.notify_one();
        reply.await.unwrap_or_else(|_| {
            Opened::Failed(kube::Error::Service("the watch multiplexer stopped".into()))
        })
    }
}

/// The multiplexer's task: gathers the watches that ask to open, opens
/// them in one request, hands each its stream; again when the set
/// changes. Ends when no watch is open or asking.
async fn drive(sh: Arc<Shared>) {
    loop {
        let Some(wants) = gather(&sh).await else {
            return;
        };
        let fallback = sh.lock().fallback_until.is_some_and(|t| Instant::now() < t);
        if fallback {
            for w in wants {
                let _ = w.reply.send(Opened::Fallback);
            }
            continue;
        }
        serve(&sh, wants).await;
    }
}

/// The watches asking to open, once none more came for [`DEBOUNCE`] (and
/// not before a failed request's retry time); `None` when none asks.
async fn gather(sh: &Shared) -> Option<Vec<Want>> {
    let started = Instant::now();
    let mut seen = usize::MAX;
    loop {
        let (n, retry_at) = {
            let mut st = sh.lock();
            st.wants.retain(|w| !w.reply.is_closed());
            if st.wants.is_empty() {
                st.driving = false;
                return None;
            }
            (st.wants.len(), st.retry_at)
        };
        if let Some(at) = retry_at
            && Instant::now() < at
        {
            tokio::time::sleep_until(at).await;
            continue;
        }
        if n == seen || started.elapsed() >= DEBOUNCE_MAX {
            let mut st = sh.lock();
            st.wants.retain(|w| !w.reply.is_closed());
            return Some(std::mem::take(&mut st.wants));
        }
        seen = n;
        tokio::time::sleep(DEBOUNCE).await;
    }
}

fn failed(sh: &Shared, wants: Vec<Want>, e: &kube::Error) {
    {
        let mut st = sh.lock();
        st.retry_after = (st.retry_after * 2).clamp(RETRY_FIRST, RETRY_MAX);
        st.retry_at = Some(Instant::now() + st.retry_after);
    }
    for w in wants {
        let _ = w.reply.send(Opened::Failed(copy_error(e)));
    }
}

/// A watch's copy of the request's error.
fn copy_error(e: &kube::Error) -> kube::Error {
    match e {
        kube::Error::Api(s) => kube::Error::Api(s.clone()),
        other => kube::Error::Service(other.to_string().into()),
    }
}

fn fall_back(sh: &Shared, wants: Vec<Want>, why: &str) {
    tracing::info!(
        reason = why,
        "the relay does not multiplex watches: one request per watch for {FALLBACK_FOR:?}"
    );
    sh.lock().fallback_until = Some(Instant::now() + FALLBACK_FOR);
    for w in wants {
        let _ = w.reply.send(Opened::Fallback);
    }
}

/// Open `wants` in one request and feed their streams until it ends.
async fn serve(sh: &Arc<Shared>, wants: Vec<Want>) {
    let targets: Vec<String> = wants.iter().map(|w| w.target.clone()).collect();
    let (decoders, ids) = sh.held.claim_many(wants.len());
    let accept = if ids.is_empty() {
        compact::COMPACT.to_owned()
    } else {
        compact::accept_holding(&ids)
    };
    let req = http::Request::get(request_uri(&targets))
        .header(http::header::ACCEPT, accept)
        .header(http::header::ACCEPT_ENCODING, "identity")
        .body(Vec::new());
    let req = match req {
        Ok(r) => r,
        Err(e) => return failed(sh, wants, &kube::Error::Service(e.to_string().into())),
    };
    let res = match sh.client.send(req.map(kube::client::Body::from)).await {
        Ok(r) => r,
        Err(e) => return failed(sh, wants, &e),
    };
    let code = res.status();
    let mux = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with(MUX));
    if matches!(code.as_u16(), 404 | 405 | 406 | 501) || (code.is_success() && !mux) {
        return fall_back(sh, wants, code.as_str());
    }
    if !code.is_success() {
        let body = res.into_body().collect().await.map(|b| b.to_bytes());
        let status = body
            .ok()
            .and_then(|b| serde_json::from_slice::<kube::core::Status>(&b).ok())
            .unwrap_or_else(|| {
                kube::core::Status::failure("multiplexed watch refused", "")
                    .with_code(code.as_u16())
            });
        return failed(sh, wants, &kube::Error::Api(status.boxed()));
    }
    let opened = Instant::now();
    {
        let mut st = sh.lock();
        st.retry_at = None;
    }
    let mut txs: Vec<Option<mpsc::Sender<Result<Bytes, kube::Error>>>> = Vec::new();
    for (w, decoder) in wants.into_iter().zip(decoders) {
        let (tx, rx) = mpsc::channel(INNER_QUEUE);
        let inner = Inner {
            rx,
            decoder: Some(decoder),
            shared: sh.clone(),
        };
        txs.push(w.reply.send(Opened::Stream(inner)).is_ok().then_some(tx));
    }
    let mut body = res.into_body();
    let mut frames = Decoder::default();
    let ended = 'conn: loop {
        if txs.iter().all(Option::is_none) {
            break Ended::Done;
        }
        let chunk = tokio::select! {
            () = sh.wake.notified() => {
                let leaving = txs.iter().flatten().any(mpsc::Sender::is_closed);
                if leaving || !sh.lock().wants.is_empty() {
                    break Ended::Reopen;
                }
                continue;
            }
            chunk = body.frame() => chunk,
        };
        let data = match chunk {
            None => match frames.finish() {
                Err(e) => break Ended::Broken(e),
                Ok(()) => break Ended::Dropped,
            },
            Some(Err(e)) => {
                tracing::debug!(error = %e, "multiplexed watch connection broke");
                break Ended::Dropped;
            }
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        frames.push(&data);
        loop {
            let frame = match frames.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => break 'conn Ended::Broken(e),
            };
            let (index, item, end) = match frame {
                Outer::Data(i, b) => (i, Some(Ok(b)), false),
                Outer::End(i, status) => (i, status.map(|s| Err(refused(&s))), true),
            };
            let Some(slot) = txs.get_mut(index).filter(|t| t.is_some()) else {
                break 'conn Ended::Broken(MuxError::UnknownIndex(index as u64));
            };
            if let (Some(tx), Some(item)) = (slot.as_ref(), item)
                && tx.send(item).await.is_err()
            {
                // Its watch stopped: the next connection leaves it out.
                *slot = None;
                break 'conn Ended::Reopen;
            }
            if end {
                *slot = None;
            }
        }
    };
    // A connection that broke soon after it opened is a failed request:
    // the next waits (a relay that ends every stream at once is not asked
    // in a loop).
    let broke = match &ended {
        Ended::Broken(e) => {
            count(sh, e);
            for tx in txs.iter().flatten() {
                let e = kube::Error::ReadEvents(std::io::Error::other(e.clone()));
                let _ = tx.try_send(Err(e));
            }
            true
        }
        Ended::Dropped => opened.elapsed() < Duration::from_secs(1),
        Ended::Done | Ended::Reopen => false,
    };
    if broke {
        let mut st = sh.lock();
        st.retry_after = (st.retry_after * 2).clamp(RETRY_FIRST, RETRY_MAX);
        st.retry_at = Some(Instant::now() + st.retry_after);
    } else {
        sh.lock().retry_after = Duration::ZERO;
    }
    // Every inner watch sees its stream end and resumes from its
    // resourceVersion: they ask again at once and go in one request.
    drop(txs);
    if matches!(ended, Ended::Done) {
        // Read the response to its end, so the connection is reused.
        let rest = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), rest).await;
    }
}

/// The error an inner watch's refusal (its JSON `Status`) is.
fn refused(status: &[u8]) -> kube::Error {
    let s = serde_json::from_slice::<kube::core::Status>(status).unwrap_or_else(|_| {
        kube::core::Status::failure(&String::from_utf8_lossy(status), "").with_code(500)
    });
    kube::Error::Api(s.boxed())
}

fn count(sh: &Shared, e: &MuxError) {
    tracing::warn!(error = %e, "multiplexed watch stream unreadable: reconnecting");
    sh.metrics
        .watch_decode_errors
        .get_or_create(&DecodeErrorLabels {
            resource: "mux",
            error: e.label(),
        })
        .inc();
}

#[cfg(test)]
mod tests;
