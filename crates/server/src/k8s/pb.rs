//! Kubernetes Protobuf framing: the envelope, lists and watch frames around
//! the objects, which each kind's declared fields decode
//! ([`objects`](super::objects)) into the same slim types JSON decodes
//! into, so the conversion and the index never know which wire fed them.
//!
//! The format (kubernetes.io "API concepts: Protobuf encoding";
//! apimachinery `runtime/serializer/protobuf`): a body is the 4-byte magic
//! `k8s\0` followed by a `runtime.Unknown` envelope (`typeMeta` = 1, `raw` =
//! 2, `contentEncoding` = 3, `contentType` = 4) whose `raw` is the object.
//! A list is one object whose field 2 repeats the items (`metadata` = 1 is a
//! `ListMeta`). A watch (`;stream=watch`) is a sequence of frames, each a
//! 4-byte big-endian length and an enveloped `metav1.WatchEvent` (`type` = 1,
//! `object` = 2, a `RawExtension` whose `raw` = 1 is the enveloped object).
//! Field numbers are those of `k8s.io/api` and `apimachinery`'s
//! `generated.proto` (the tests encode with the `k8s-pb` crate, generated
//! from the same files, so these decoders cannot agree with themselves on
//! a mistake).
//!
//! Decoding an object is total like the JSON path: a field of the wrong
//! wire type, invalid UTF-8 or a truncated sub-message marks the object
//! `malformed`, for its conversion to reject and the watcher to count.
//! Only a broken envelope or list framing fails the whole body, as invalid
//! JSON syntax fails a JSON list.

use std::collections::BTreeMap;

use kube::core::watch::{Bookmark, BookmarkMeta};
use kube::core::{Status, TypeMeta, WatchEvent};

use super::objects::Slim;
use super::objects::loose::{AllKeys, Loose, NoKeys};
use super::objects::meta::MetaRaw;
pub use super::objects::proto::PbError;
use super::objects::proto::{Val, fields, str_of, sub};
use super::objects::value::Value;

/// The media type of Kubernetes Protobuf.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The prefix of every Protobuf body and watch frame.
pub const MAGIC: &[u8; 4] = b"k8s\0";
/// The annotation on the bookmark that ends a streaming list.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A `runtime.Unknown` envelope, borrowed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub raw: &'a [u8],
}

/// Checks the magic and opens the envelope. An encoded (`contentEncoding`,
/// e.g. gzip) or non-Protobuf (`contentType`) inner object is refused.
pub fn envelope(b: &[u8]) -> Result<Envelope<'_>, PbError> {
    let body = b.strip_prefix(MAGIC).ok_or(PbError("missing k8s magic"))?;
    let mut out = Envelope::default();
    for f in fields(body) {
        match f? {
            (1, v) => {
                for f in fields(sub(v).ok_or(PbError("bad typeMeta"))?) {
                    match f? {
                        (1, v) => out.api_version = str_of(v).ok_or(PbError("bad apiVersion"))?,
                        (2, v) => out.kind = str_of(v).ok_or(PbError("bad kind"))?,
                        _ => {}
                    }
                }
            }
            (2, v) => out.raw = sub(v).ok_or(PbError("bad raw"))?,
            (3, v) => {
                let enc = str_of(v).ok_or(PbError("bad contentEncoding"))?;
                if !enc.is_empty() {
                    return Err(PbError("encoded content is not supported"));
                }
            }
            (4, v) => {
                let ct = str_of(v).ok_or(PbError("bad contentType"))?;
                if !(ct.is_empty() || ct.starts_with(PROTOBUF)) {
                    return Err(PbError("inner content type is not protobuf"));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A decoded list.
#[derive(Debug)]
pub struct PbList<K> {
    pub resource_version: Option<String>,
    pub continue_: Option<String>,
    pub items: Vec<K>,
}

/// A whole list body (magic, envelope, `…List`): items never fail it.
pub fn list<K: Slim>(body: &[u8]) -> Result<PbList<K>, PbError> {
    let env = envelope(body)?;
    if env.kind == "Status" {
        return Err(PbError("a Status, not a list"));
    }
    let mut out = PbList {
        resource_version: None,
        continue_: None,
        items: Vec::new(),
    };
    for f in fields(env.raw) {
        match f? {
            (1, v) => {
                for f in fields(sub(v).ok_or(PbError("bad list metadata"))?) {
                    match f? {
                        (2, v) => {
                            out.resource_version =
                                Some(str_of(v).ok_or(PbError("bad resourceVersion"))?.to_owned());
                        }
                        (3, v) => {
                            let c = str_of(v).ok_or(PbError("bad continue"))?;
                            out.continue_ = (!c.is_empty()).then(|| c.to_owned());
                        }
                        _ => {}
                    }
                }
            }
            (2, v) => match v {
                Val::Bytes(b) => out.items.push(K::decode_pb(b)),
                _ => return Err(PbError("bad list item")),
            },
            _ => {}
        }
    }
    Ok(out)
}

/// `metav1.Status` (`status` = 2, `message` = 3, `reason` = 4, `details`
/// = 5 with `retryAfterSeconds` = 5, `code` = 6) as kube's [`Status`].
pub fn status(raw: &[u8]) -> Result<Status, PbError> {
    let (mut st, mut message, mut reason, mut code, mut retry) = ("", "", "", 0i64, None);
    for f in fields(raw) {
        match f? {
            (2, v) => st = str_of(v).unwrap_or(""),
            (3, v) => message = str_of(v).unwrap_or(""),
            (4, v) => reason = str_of(v).unwrap_or(""),
            (5, v) => {
                for f in fields(sub(v).ok_or(PbError("bad status details"))?) {
                    if let (5, Val::Varint(n)) = f? {
                        retry = Some(n as i64);
                    }
                }
            }
            (6, Val::Varint(n)) => code = n as i64,
            _ => {}
        }
    }
    let mut v =
        serde_json::json!({"status": st, "message": message, "reason": reason, "code": code});
    if let Some(r) = retry {
        v["details"] = serde_json::json!({"retryAfterSeconds": r});
    }
    serde_json::from_value(v).map_err(|_| PbError("status does not fit"))
}

/// A bookmark's object: only its resourceVersion and annotations matter
/// (the end of a streaming list is one annotation).
fn bookmark(raw: &[u8], types: TypeMeta) -> Result<Bookmark, PbError> {
    let mut meta = None;
    for f in fields(raw) {
        if let (1, v) = f? {
            meta = Some(
                MetaRaw::<NoKeys, AllKeys>::from_pb(v).ok_or(PbError("bad bookmark metadata"))?,
            );
        }
    }
    let meta = meta.unwrap_or_default();
    let resource_version = match meta.resource_version {
        Loose::Ok(rv) => rv,
        Loose::Absent => String::new(),
        Loose::Bad => return Err(PbError("bad resourceVersion")),
    };
    let annotations = meta
        .annotations
        .into_option()
        .map(|a| a.entries.into_iter().collect())
        .unwrap_or_else(BTreeMap::new);
    Ok(Bookmark {
        types,
        metadata: BookmarkMeta {
            resource_version,
            annotations,
        },
    })
}

/// One watch frame (without its length prefix) as kube's [`WatchEvent`].
pub fn watch_event<K: Slim>(frame: &[u8]) -> Result<WatchEvent<K>, PbError> {
    // kube-apiserver frames a watch with its raw serializer: the frame is
    // the `metav1.WatchEvent` itself, without the magic and the
    // `runtime.Unknown` envelope; only the object inside carries them
    // (apimachinery's protobuf RawSerializer for streams). A frame that
    // does start with the magic is opened as an envelope, for servers that
    // wrap the event too.
    let event = if frame.starts_with(MAGIC) {
        envelope(frame)?.raw
    } else {
        frame
    };
    let (mut ty, mut obj) = ("", None);
    for f in fields(event) {
        match f? {
            (1, v) => ty = str_of(v).ok_or(PbError("bad event type"))?,
            (2, v) => {
                for f in fields(sub(v).ok_or(PbError("bad event object"))?) {
                    if let (1, v) = f? {
                        obj = Some(sub(v).ok_or(PbError("bad event object"))?);
                    }
                }
            }
            _ => {}
        }
    }
    let inner = envelope(obj.ok_or(PbError("event without object"))?)?;
    Ok(match ty {
        "ADDED" => WatchEvent::Added(K::decode_pb(inner.raw)),
        "MODIFIED" => WatchEvent::Modified(K::decode_pb(inner.raw)),
        "DELETED" => WatchEvent::Deleted(K::decode_pb(inner.raw)),
        "BOOKMARK" => WatchEvent::Bookmark(bookmark(
            inner.raw,
            TypeMeta {
                api_version: inner.api_version.to_owned(),
                kind: inner.kind.to_owned(),
            },
        )?),
        "ERROR" => WatchEvent::Error(Box::new(status(inner.raw)?)),
        _ => return Err(PbError("unknown event type")),
    })
}

/// Splits a watch stream into frames: each a 4-byte big-endian length and
/// that many bytes.
#[derive(Default)]
pub struct Framer {
    buf: Vec<u8>,
    start: usize,
}

/// Frames past this are refused: no Kubernetes object comes close (etcd
/// caps a value at 1.5 MiB by default).
pub const MAX_FRAME: usize = 64 << 20;

impl Framer {
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, PbError> {
        let rest = &self.buf[self.start..];
        let Some(len) = rest.get(..4) else {
            return Ok(None);
        };
        let n = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if n > MAX_FRAME {
            return Err(PbError("watch frame too large"));
        }
        if rest.len() < 4 + n {
            // Compact now and then so the buffer does not grow forever.
            if self.start > 0 && self.start >= self.buf.len() / 2 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            return Ok(None);
        }
        let s = self.start + 4;
        self.start = s + n;
        Ok(Some(&self.buf[s..s + n]))
    }
}

#[cfg(test)]
mod tests;
