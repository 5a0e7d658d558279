//! Watches: the initial events when asked (a streaming list ends with
//! its bookmark), then the store's history from the watch's position,
//! each change as this watcher's selectors see it, bookmarks, 410 past the
//! history; in JSON lines, Protobuf frames or Table rows.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, header};
use podns_kapi::filter::Filter;
use podns_kapi::path::Target;
use podns_kapi::pbenc::{self, Media};
use podns_kapi::watch::{EvType, ParamError, WatchParams, event_line};
use podns_kapi::{ApiError, Kind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Query, filter, too_large};
use crate::state::Sim;
use crate::store::Obj;
use crate::table;

/// Starts a watch of `t` (`q` its query): the response streams the
/// events a task sends it.
pub(super) fn start(
    sim: &Arc<Sim>,
    t: &Target,
    mut q: Query,
    table: bool,
    media: Media,
) -> Result<Response, ApiError> {
    // A Table watch is JSON whatever else the client accepts.
    let media = if table { Media::Json } else { media };
    if let Some(n) = &t.name {
        q.insert("fieldSelector".into(), format!("metadata.name={n}"));
    }
    let f = filter(t, &q)?;
    let params = WatchParams::parse(|k| q.get(k).map(String::as_str)).map_err(|e| match e {
        // As the apiserver validates streaming lists (KEP-3157).
        ParamError::Invalid(m) => ApiError::invalid(t.kind, "", m.to_string()),
        ParamError::BadRequest(m) => ApiError::bad_request(m),
    })?;
    let start_rv = params.start;
    if let Some(want) = start_rv {
        let cur = sim.store.current_rv();
        if want > cur {
            // The apiserver waits a few seconds for a future version, then
            // gives up the same way.
            return Err(too_large(want, cur));
        }
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let w = WatchTask {
        table,
        media,
        sim: sim.clone(),
        kind: t.kind,
        filter: f,
        bookmarks: params.bookmarks,
        initial: params.initial(),
        initial_end_bookmark: params.initial_end(),
        start_rv,
        deadline: params.timeout.map(|d| Instant::now() + d),
        tx,
    };
    sim.stats.open_watches.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(w.run());
    let mut r = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(match media {
            Media::Json => "application/json",
            Media::Protobuf => pbenc::PROTOBUF_WATCH,
        }),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r.extensions_mut().insert(crate::stats::Counted);
    Ok(r)
}

struct WatchTask {
    sim: Arc<Sim>,
    kind: Kind,
    filter: Filter,
    bookmarks: bool,
    initial: bool,
    initial_end_bookmark: bool,
    /// kubectl's `get -w` asks for Table rows; each event carries one.
    table: bool,
    /// JSON lines or Protobuf frames.
    media: Media,
    start_rv: Option<u64>,
    deadline: Option<Instant>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
}

impl WatchTask {
    async fn send(&self, b: Bytes) -> bool {
        if b.is_empty() {
            return true;
        }
        let n = b.len() as u64;
        if self.tx.send(Ok(b)).await.is_err() {
            return false;
        }
        let s = &self.sim.stats;
        s.watch_events_sent.fetch_add(1, Ordering::Relaxed);
        s.watch_bytes_sent.fetch_add(n, Ordering::Relaxed);
        s.bytes_sent.fetch_add(n, Ordering::Relaxed);
        true
    }

    async fn run(self) {
        let _ = self.run_inner().await;
        self.sim.stats.open_watches.fetch_sub(1, Ordering::Relaxed);
    }

    /// A line for one object, built for this watcher (initial events and
    /// Table watches; shared events use `Event::line`).
    fn object_line(&self, ty: EvType, o: &Arc<Obj>) -> Bytes {
        if self.media == Media::Protobuf
            && let Some(obj) = o.pb_object(self.kind)
        {
            return Bytes::from(pbenc::watch_frame(ty.as_str(), obj));
        }
        if self.media == Media::Protobuf {
            // No typed form (already warned): nothing a Protobuf client could read.
            return Bytes::new();
        }
        if self.table {
            let page = crate::store::Page {
                rv: o.rv,
                items: vec![o.clone()],
                cont: None,
            };
            let t = serde_json::to_vec(&table::table(self.kind, &page)).unwrap_or_default();
            event_line(ty.as_str(), &t)
        } else {
            event_line(ty.as_str(), &o.bytes)
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        match self.media {
            Media::Json => podns_kapi::watch::bookmark_line(self.kind, rv, initial_end),
            Media::Protobuf => Bytes::from(pbenc::watch_frame(
                "BOOKMARK",
                pbenc::bookmark_object(self.kind, rv, initial_end),
            )),
        }
    }

    /// Decides what a watcher with this filter sees of one event.
    fn visible(&self, ev: &crate::store::Event) -> Option<EvType> {
        if ev.kind != self.kind {
            return None;
        }
        let now = self.filter.matches(&ev.obj);
        let before = ev.prev.as_ref().is_some_and(|p| self.filter.matches(p));
        ev.ty.seen(before, now)
    }

    async fn run_inner(&self) -> Option<()> {
        let store = &self.sim.store;
        let cancel = self.sim.faults.watch_token();
        let stall = self.sim.faults.stall_token();
        let deaf = self.sim.faults.take_deaf(self.kind.plural());
        let shutdown = self.sim.shutdown.clone();
        let mut changes = store.subscribe();
        let mut cursor = match self.start_rv {
            Some(rv) if !self.initial => rv,
            _ => {
                let (rv, objs) = store.snapshot(self.kind, &self.filter);
                for o in objs {
                    if !self.send(self.object_line(EvType::Added, &o)).await {
                        return None;
                    }
                }
                if self.initial_end_bookmark && !self.send(self.bookmark(rv, true)).await {
                    return None;
                }
                rv
            }
        };
        if deaf {
            // Open and never fed, until the client goes or its timeout.
            let deadline = self.deadline;
            tokio::select! {
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => {}
                _ = cancel.cancelled() => {}
                _ = shutdown.cancelled() => {}
                _ = self.tx.closed() => {}
            }
            return None;
        }
        let interval = Duration::from_secs(self.sim.bookmark_interval.max(1));
        let mut next_bookmark = Instant::now() + interval;
        loop {
            if stall.is_cancelled() {
                // Open and silent until the client goes.
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = shutdown.cancelled() => {}
                    _ = self.tx.closed() => {}
                }
                return None;
            }
            changes.borrow_and_update();
            match store.events_after(cursor, 1024) {
                Err(_) => {
                    let e = ApiError::expired(format!(
                        "too old resource version: {cursor} ({})",
                        store.oldest_resumable() + 1
                    ));
                    let line = match self.media {
                        Media::Json => event_line(
                            "ERROR",
                            &serde_json::to_vec(&e.status()).unwrap_or_default(),
                        ),
                        Media::Protobuf => {
                            Bytes::from(pbenc::watch_frame("ERROR", pbenc::status(&e.status())))
                        }
                    };
                    self.send(line).await;
                    return None;
                }
                Ok((evs, upto)) => {
                    let full = evs.len() == 1024;
                    for ev in evs {
                        if let Some(ty) = self.visible(&ev)
                            && !self
                                .send(if self.table || self.media == Media::Protobuf {
                                    self.object_line(ty, &ev.obj)
                                } else {
                                    ev.line(ty)
                                })
                                .await
                        {
                            return None;
                        }
                    }
                    cursor = upto;
                    if full {
                        continue;
                    }
                }
            }
            let deadline = self.deadline;
            tokio::select! {
                r = changes.changed() => { r.ok()?; }
                _ = tokio::time::sleep_until(next_bookmark), if self.bookmarks => {
                    if !self.send(self.bookmark(cursor, false)).await {
                        return None;
                    }
                    next_bookmark = Instant::now() + interval;
                }
                _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)).await }, if deadline.is_some() => return None,
                _ = cancel.cancelled() => return None,
                _ = shutdown.cancelled() => return None,
                _ = self.tx.closed() => return None,
                _ = stall.cancelled() => {}
            }
        }
    }
}
