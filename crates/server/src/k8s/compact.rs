//! The compact stream between podns relays and podns node instances
//! (`application/vnd.podns.compact.v1`): each object of a watch compressed
//! once, on its own, with zstd and a dictionary trained on the relay's own
//! objects. The relay encodes ([`Dict`], [`pack`], [`event_frame`]); a node
//! instance's watch loop decodes ([`Decoder`], from `wire`). Only a podns
//! node instance asks for it (by `Accept`); every other client of the relay
//! gets Kubernetes Protobuf or JSON.
//!
//! A stream is a sequence of frames, each an unsigned LEB128 length and
//! that many bytes, the first of which says what the frame is:
//! - `1` a dictionary: its number (LEB128), then the zstd dictionary. It
//!   comes on the stream before the first event that uses it.
//! - `4` a dictionary the node instance holds: its number (LEB128), then
//!   its content id (8 bytes, little-endian), in place of a `1` for a
//!   dictionary the watch request said it holds (below).
//! - `2` an event: its type (`0` ADDED, `1` MODIFIED, `2` DELETED), the
//!   dictionary id (LEB128, `0` for none), the object's size (LEB128),
//!   then the object's own Protobuf message (as in a Kubernetes Protobuf
//!   list item, without envelope) as one magicless zstd frame.
//! - `3` a Kubernetes Protobuf watch event as that wire frames it, without
//!   its 4-byte length (bookmarks and errors, which are few and small).
//!
//! A dictionary has two names. Its *number* (a relay's counter, never 0)
//! is what an event names, in one byte or two: it means something on one
//! stream only, from that stream's `1` or `4` frame. Its *content id*
//! ([`content_id`]: the first 64 bits of the SHA-256 of its bytes) is what
//! it is everywhere: the same dictionary from another relay, or the same
//! relay after a restart, has the same content id, with no coordination.
//! Two different dictionaries share one with a probability of about
//! `k·n / 2^64` for a node instance holding `k` of them while `n` are ever
//! trained in the cluster: with `k` = 8 and `n` = 10^6, 4·10^-13 per watch,
//! about 4·10^-4 over a billion watches. (The content id is not in each
//! event because 8 bytes there would cost a tenth of the 80 an event
//! weighs.)
//!
//! A node instance keeps the dictionaries it is sent ([`Held`]: a few,
//! bounded by count and bytes, the least recently used dropped first)
//! across its watches and their reconnects, and says which it holds when
//! it starts a watch, as a parameter of the compact type in `Accept`
//! ([`accept_holding`]): `application/vnd.podns.compact.v1;dicts=<id>.<id>`,
//! ids in hex. `Accept` because the claim means something only with that
//! type: every proxy forwards `Accept` as it is (caches vary on it), a
//! server that does not serve the type ignores its parameters with it (the
//! API server does), and the node instance's watch request already sets
//! it. The relay sends a held dictionary as a `4` frame (a dozen bytes)
//! instead of a `1` (a kibibyte): a short stream (a node instance's
//! several watches, each reconnect) pays its dictionary once per node
//! instance, not once per stream.
//!
//! Versions mix during a rollout, and both ways work without a new media
//! type: a relay sends `4` frames only on a stream whose request named
//! held dictionaries, which only a node instance that reads them does (an
//! older node instance names none and gets `1` frames as before); an older
//! relay ignores the parameter and sends `1` frames, which a newer node
//! instance reads as before and keeps. Frames `1`, `2` and `3` are as
//! they were.
//!
//! Decoding is bounded: a frame over [`MAX_FRAME`], an object over
//! [`MAX_OBJECT`] or other than its declared size, a dictionary over
//! [`MAX_DICT`], more than [`MAX_DICTS`] dictionaries on one stream, a
//! dictionary number never sent, a `4` frame for a dictionary the request
//! did not claim (a relay's mistake, or a node instance that no longer
//! holds it: what a stream's decoder claims it keeps for the stream,
//! whatever [`Held`] drops meanwhile), an unknown tag or event type,
//! corrupt zstd data, or a stream that ends inside a frame: each is a
//! [`DecodeError`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use podns_kapi::watch::EvType;
use zstd::bulk::{Compressor, Decompressor};
use zstd::zstd_safe::{CParameter, DParameter, FrameFormat};

/// The media type of the compact stream.
pub const COMPACT: &str = "application/vnd.podns.compact.v1";

/// The largest frame read: far above any compressed object.
pub const MAX_FRAME: usize = 4 << 20;
/// The largest object decompressed (etcd caps a value at 1.5 MiB).
pub const MAX_OBJECT: usize = 4 << 20;
/// The largest dictionary accepted.
pub const MAX_DICT: usize = 256 << 10;
/// Dictionaries one stream may send. A relay retrains rarely (when its
/// objects have grown fourfold), so a stream carries one or two.
pub const MAX_DICTS: usize = 16;

/// Dictionaries a node instance holds across its watches ([`Held`]): one
/// or two per kind it watches.
pub const MAX_HELD: usize = 8;
/// Their bytes, at most: a relay's dictionary is 1 KiB; a larger one is
/// used on its stream but not kept.
pub const MAX_HELD_BYTES: usize = 64 << 10;
/// Content ids a relay reads from one request's `Accept` (the rest are
/// ignored: their dictionaries are sent).
pub const MAX_CLAIMED: usize = 16;

/// zstd's level: 3 (its default) costs about what Protobuf encoding does.
const LEVEL: i32 = 3;

const TAG_DICT: u8 = 1;
const TAG_EVENT: u8 = 2;
const TAG_PROTOBUF: u8 = 3;
const TAG_HELD: u8 = 4;

/// The `Accept` parameter naming the dictionaries a node instance holds.
const DICTS_PARAM: &str = "dicts";

/// A dictionary's content id: the first 64 bits of the SHA-256 of its
/// bytes, the same in every process that sees them.
pub fn content_id(dict: &[u8]) -> u64 {
    let d = ring::digest::digest(&ring::digest::SHA256, dict);
    let mut first = [0u8; 8];
    first.copy_from_slice(&d.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// The compact media range of a watch's `Accept`, naming the
/// dictionaries `held` (content ids) when there are any.
pub fn accept_holding(held: &[u64]) -> String {
    let mut out = COMPACT.to_owned();
    for (i, id) in held.iter().enumerate() {
        out.push_str(if i == 0 { ";dicts=" } else { "." });
        out.push_str(&format!("{id:016x}"));
    }
    out
}

/// The content ids the compact media range of `accept` says the client
/// holds (at most [`MAX_CLAIMED`]; one not 16 hex digits is skipped).
pub fn claimed(accept: Option<&str>) -> Vec<u64> {
    let mut out = Vec::new();
    for part in accept.unwrap_or("").split(',') {
        let mut params = part.split(';').map(str::trim);
        if !params.next().unwrap_or("").eq_ignore_ascii_case(COMPACT) {
            continue;
        }
        for p in params {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            if !k.trim().eq_ignore_ascii_case(DICTS_PARAM) {
                continue;
            }
            for id in v.trim().trim_matches('"').split('.') {
                if out.len() == MAX_CLAIMED {
                    return out;
                }
                if id.len() == 16
                    && let Ok(n) = u64::from_str_radix(id, 16)
                    && !out.contains(&n)
                {
                    out.push(n);
                }
            }
        }
    }
    out
}

/// Whether `accept` asks for the compact stream before anything else: its
/// `q` is the highest, and among equal `q` it comes first (RFC 9110
/// §12.5.1). Only a podns node instance names it.
pub fn preferred(accept: Option<&str>) -> bool {
    let mut best: Option<(f32, bool)> = None;
    for part in accept.unwrap_or("").split(',') {
        let mut params = part.split(';').map(str::trim);
        let ty = params.next().unwrap_or("");
        if ty.is_empty() {
            continue;
        }
        let q = params
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim() == "q")
            .map_or(1.0, |(_, v)| v.trim().parse().unwrap_or(0.0));
        if q <= 0.0 {
            continue;
        }
        if best.is_none_or(|(b, _)| q > b) {
            best = Some((q, ty.eq_ignore_ascii_case(COMPACT)));
        }
    }
    best.is_some_and(|(_, compact)| compact)
}

/// A dictionary, by its number on a relay's streams (never 0) and its
/// content id, shared by every object compressed with it; it lives while
/// one of them does.
pub struct Dict {
    pub id: u32,
    /// [`content_id`] of its bytes.
    pub content: u64,
    frame: Bytes,
    held_frame: Bytes,
    compressor: Mutex<Compressor<'static>>,
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Dict({}, {:016x}, {} bytes)",
            self.id,
            self.content,
            self.frame.len()
        )
    }
}

fn compressor(dict: &[u8]) -> std::io::Result<Compressor<'static>> {
    let mut c = Compressor::with_dictionary(LEVEL, dict)?;
    // The frame header says nothing the event does not: no magic, no
    // dictionary id, no size, no checksum (the connection is TLS).
    c.set_parameter(CParameter::Format(FrameFormat::Magicless))?;
    c.set_parameter(CParameter::DictIdFlag(false))?;
    c.set_parameter(CParameter::ContentSizeFlag(false))?;
    c.set_parameter(CParameter::ChecksumFlag(false))?;
    Ok(c)
}

impl Dict {
    pub fn new(id: u32, dict: &[u8]) -> std::io::Result<Self> {
        if id == 0 || dict.len() > MAX_DICT {
            return Err(std::io::Error::other("a dictionary id is never 0"));
        }
        let content = content_id(dict);
        let mut body = vec![TAG_DICT];
        put_varint(&mut body, u64::from(id));
        body.extend_from_slice(dict);
        let mut held = vec![TAG_HELD];
        put_varint(&mut held, u64::from(id));
        held.extend_from_slice(&content.to_le_bytes());
        Ok(Self {
            id,
            content,
            frame: framed(&body),
            held_frame: framed(&held),
            compressor: Mutex::new(compressor(dict)?),
        })
    }

    /// Train a dictionary of at most `size` bytes on `samples` (objects'
    /// Protobuf messages).
    pub fn train(id: u32, samples: &[&[u8]], size: usize) -> std::io::Result<Self> {
        let dict = zstd::dict::from_samples(samples, size)?;
        Self::new(id, &dict)
    }

    /// The dictionary's frame, sent once on a stream before its first use.
    pub fn frame(&self) -> Bytes {
        self.frame.clone()
    }

    /// The frame sent instead of [`Dict::frame`] to a client that holds
    /// the dictionary: its number and content id.
    pub fn held_frame(&self) -> Bytes {
        self.held_frame.clone()
    }
}

/// The dictionaries a node instance holds, shared by its watches: each
/// one a stream sends is kept (at most [`MAX_HELD`] of them and
/// [`MAX_HELD_BYTES`]; the least recently received or used goes first),
/// and a watch names them in its request ([`Held::claim`]).
#[derive(Default)]
pub struct Held {
    /// Least recently used first.
    dicts: Mutex<VecDeque<(u64, Arc<[u8]>)>>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({:016x?})", self.ids())
    }
}

/// One store is equal to itself only: what it holds is no configuration.
impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Held {}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<[u8]>)>> {
        self.dicts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The content ids held, least recently used first.
    pub fn ids(&self) -> Vec<u64> {
        self.lock().iter().map(|(id, _)| *id).collect()
    }

    /// A decoder for a new stream that holds what is held now (whatever
    /// is dropped later), and the content ids to name in its request.
    pub fn claim(self: &Arc<Self>) -> (Decoder, Vec<u64>) {
        let claimed: Vec<(u64, Arc<[u8]>)> = self.lock().iter().cloned().collect();
        let ids = claimed.iter().map(|(id, _)| *id).collect();
        let d = Decoder {
            held: Some(self.clone()),
            claimed,
            ..Decoder::default()
        };
        (d, ids)
    }

    /// [`Held::claim`] for `n` streams at once: decoders that all hold the
    /// same dictionaries, named once in one request (a multiplexed
    /// watch's, [`super::mux`]).
    pub fn claim_many(self: &Arc<Self>, n: usize) -> (Vec<Decoder>, Vec<u64>) {
        let claimed: Vec<(u64, Arc<[u8]>)> = self.lock().iter().cloned().collect();
        let ids = claimed.iter().map(|(id, _)| *id).collect();
        let decoders = (0..n)
            .map(|_| Decoder {
                held: Some(self.clone()),
                claimed: claimed.clone(),
                ..Decoder::default()
            })
            .collect();
        (decoders, ids)
    }

    /// Keep `dict` (its content id `id`) as the most recently used.
    pub fn keep(&self, id: u64, dict: &[u8]) {
        if dict.len() > MAX_HELD_BYTES {
            return;
        }
        let mut g = self.lock();
        let bytes = match g.iter().position(|(i, _)| *i == id) {
            Some(at) => g.remove(at).map(|(_, b)| b),
            None => None,
        }
        .unwrap_or_else(|| Arc::from(dict));
        g.push_back((id, bytes));
        while g.len() > MAX_HELD || g.iter().map(|(_, b)| b.len()).sum::<usize>() > MAX_HELD_BYTES {
            g.pop_front();
        }
    }

    /// The dictionaries held, least recently used first: what a node
    /// instance saves with its scope (`node::state`).
    pub fn dicts(&self) -> Vec<Arc<[u8]>> {
        self.lock().iter().map(|(_, d)| d.clone()).collect()
    }

    /// Hold `dicts` again (least recently used first), as a restarted
    /// node instance does with those it saved, each under its content id
    /// and bounded as [`Held::keep`] is; one zstd refuses (or larger than
    /// [`MAX_DICT`]) is dropped, so a watch never claims what it could not
    /// decode with.
    /// How many are held after.
    pub fn restore<'a>(&self, dicts: impl IntoIterator<Item = &'a [u8]>) -> usize {
        for d in dicts {
            if d.len() <= MAX_DICT && decompressor(d).is_ok() {
                self.keep(content_id(d), d);
            }
        }
        self.lock().len()
    }

    /// `id` was used: the most recently used now (if still held).
    fn touch(&self, id: u64) {
        let mut g = self.lock();
        if let Some(at) = g.iter().position(|(i, _)| *i == id)
            && let Some(e) = g.remove(at)
        {
            g.push_back(e);
        }
    }
}

/// An object compressed once: what every subscriber is sent.
#[derive(Clone, Debug)]
pub struct Packed {
    pub dict: Option<Arc<Dict>>,
    /// The object's own size.
    pub size: usize,
    pub data: Bytes,
}

/// `raw` (an object's Protobuf message) compressed with `dict`, or
/// without one.
pub fn pack(raw: &[u8], dict: Option<&Arc<Dict>>) -> Packed {
    thread_local! {
        static PLAIN: std::cell::RefCell<Option<Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    let data = match dict {
        Some(d) => d
            .compressor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .compress(raw),
        None => PLAIN.with_borrow_mut(|c| match c {
            Some(c) => c.compress(raw),
            None => compressor(&[]).and_then(|mut new| {
                let out = new.compress(raw);
                *c = Some(new);
                out
            }),
        }),
    };
    // Compressing into a growable buffer fails only on allocation.
    let data = data.expect("zstd compresses into a Vec");
    Packed {
        dict: dict.cloned(),
        size: raw.len(),
        data: Bytes::from(data),
    }
}

/// The head of `p`'s event of type `ty`: the frame is this, then `p.data`.
pub fn event_head(ty: EvType, p: &Packed) -> Bytes {
    let mut fields = vec![TAG_EVENT, ty.idx() as u8];
    put_varint(&mut fields, u64::from(p.dict.as_ref().map_or(0, |d| d.id)));
    put_varint(&mut fields, p.size as u64);
    let mut out = Vec::with_capacity(fields.len() + 4);
    put_varint(&mut out, (fields.len() + p.data.len()) as u64);
    out.extend_from_slice(&fields);
    Bytes::from(out)
}

/// A Kubernetes Protobuf watch frame (4-byte length, then the event) as a
/// compact frame.
pub fn protobuf_frame(pb: &[u8]) -> Bytes {
    let event = pb.get(4..).unwrap_or_default();
    let mut body = Vec::with_capacity(event.len() + 1);
    body.push(TAG_PROTOBUF);
    body.extend_from_slice(event);
    framed(&body)
}

fn framed(body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(body.len() + 4);
    put_varint(&mut out, body.len() as u64);
    out.extend_from_slice(body);
    Bytes::from(out)
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A LEB128 number at the start of `b` (at most 5 bytes: 35 bits), and
/// its length; `Ok(None)` when `b` ends inside it.
pub(crate) fn varint(b: &[u8]) -> Result<Option<(u64, usize)>, DecodeError> {
    let mut n = 0u64;
    for (i, byte) in b.iter().enumerate() {
        if i == 5 {
            return Err(DecodeError::BadLength);
        }
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((n, i + 1)));
        }
    }
    if b.len() >= 5 {
        return Err(DecodeError::BadLength);
    }
    Ok(None)
}

/// Why a compact stream cannot be read: the node instance closes the
/// watch, counts it and relists that scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("compact frame of {0} bytes, over the {MAX_FRAME}-byte limit")]
    FrameTooLarge(u64),
    #[error("compact frame length is not a valid number")]
    BadLength,
    #[error("compact stream ended inside a frame ({0} bytes left over)")]
    Truncated(usize),
    #[error("compact frame is empty or cut short")]
    Short,
    #[error("unknown compact frame tag {0}")]
    UnknownTag(u8),
    #[error("unknown compact event type {0}")]
    UnknownType(u8),
    #[error("compact event uses dictionary {0}, never sent on this stream")]
    UnknownDict(u32),
    #[error(
        "compact stream refers to dictionary {0:016x} as held, but this watch did not claim it"
    )]
    NotHeld(u64),
    #[error("over {MAX_DICTS} dictionaries on one compact stream")]
    TooManyDicts,
    #[error("bad compact dictionary: {0}")]
    BadDict(String),
    #[error("compact object of {0} bytes, over the {MAX_OBJECT}-byte limit")]
    ObjectTooLarge(u64),
    #[error("compact object is not the {declared} bytes it declares: {why}")]
    Corrupt { declared: u64, why: String },
}

impl DecodeError {
    /// The `error` label of `podns_watch_decode_errors`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::FrameTooLarge(_) | Self::ObjectTooLarge(_) => "too_large",
            Self::BadLength | Self::Short | Self::Truncated(_) => "truncated",
            Self::UnknownTag(_) | Self::UnknownType(_) => "unknown_frame",
            Self::UnknownDict(_) | Self::NotHeld(_) | Self::TooManyDicts | Self::BadDict(_) => {
                "dictionary"
            }
            Self::Corrupt { .. } => "corrupt",
        }
    }

    /// Every `error` label.
    pub const LABELS: [&str; 5] = [
        "too_large",
        "truncated",
        "unknown_frame",
        "dictionary",
        "corrupt",
    ];

    /// The decode error inside a watch error, if that is what it is.
    pub fn of<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a DecodeError> {
        let mut next = Some(e);
        while let Some(err) = next {
            if let Some(d) = err.downcast_ref::<DecodeError>() {
                return Some(d);
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>()
                && let Some(inner) = io.get_ref()
            {
                next = Some(inner);
                continue;
            }
            next = err.source();
        }
        None
    }
}

/// One decoded frame that is not a dictionary.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// An object event: its type and the object's Protobuf message.
    Event(EvType, Vec<u8>),
    /// A Kubernetes Protobuf watch event (without its length).
    Protobuf(Vec<u8>),
}

/// Reads one compact stream: splits it into frames, keeps the
/// dictionaries it sends (and gives them to its [`Held`], if any),
/// decompresses the objects. A decoder from [`Held::claim`] also reads
/// the `4` frames of the dictionaries it claimed.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
    start: usize,
    dicts: Vec<(u32, Decompressor<'static>)>,
    plain: Option<Decompressor<'static>>,
    held: Option<Arc<Held>>,
    /// What the request said it holds: kept for the stream.
    claimed: Vec<(u64, Arc<[u8]>)>,
}

fn decompressor(dict: &[u8]) -> std::io::Result<Decompressor<'static>> {
    let mut d = Decompressor::with_dictionary(dict)?;
    d.set_parameter(DParameter::Format(FrameFormat::Magicless))?;
    Ok(d)
}

impl Decoder {
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// At the end of the stream: an error if it ended inside a frame.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.buf.len() - self.start {
            0 => Ok(()),
            n => Err(DecodeError::Truncated(n)),
        }
    }

    /// The next complete frame's body, if one has arrived.
    fn next_body(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        let rest = &self.buf[self.start..];
        let Some((n, used)) = varint(rest)? else {
            return Ok(None);
        };
        if n > MAX_FRAME as u64 {
            return Err(DecodeError::FrameTooLarge(n));
        }
        let n = n as usize;
        if rest.len() < used + n {
            if self.start > 0 && self.start >= self.buf.len() / 2 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            return Ok(None);
        }
        let body = rest[used..used + n].to_vec();
        self.start += used + n;
        Ok(Some(body))
    }

    /// The next event, once it has arrived whole (dictionaries before it
    /// are kept on the way).
    pub fn next_event(&mut self) -> Result<Option<Decoded>, DecodeError> {
        while let Some(body) = self.next_body()? {
            let (&tag, rest) = body.split_first().ok_or(DecodeError::Short)?;
            match tag {
                TAG_DICT => self.dict(rest)?,
                TAG_HELD => self.held(rest)?,
                TAG_EVENT => return self.event(rest).map(Some),
                TAG_PROTOBUF => return Ok(Some(Decoded::Protobuf(rest.to_vec()))),
                t => return Err(DecodeError::UnknownTag(t)),
            }
        }
        Ok(None)
    }

    fn dict(&mut self, b: &[u8]) -> Result<(), DecodeError> {
        let (id, used) = varint(b)?.ok_or(DecodeError::Short)?;
        let id = u32::try_from(id).map_err(|_| DecodeError::BadDict("id over 32 bits".into()))?;
        let dict = &b[used..];
        if id == 0 || dict.len() > MAX_DICT {
            return Err(DecodeError::BadDict(format!(
                "id {id}, {} bytes",
                dict.len()
            )));
        }
        self.add(id, dict)?;
        if let Some(h) = &self.held {
            h.keep(content_id(dict), dict);
        }
        Ok(())
    }

    /// Dictionary `id` of this stream is `dict`.
    fn add(&mut self, id: u32, dict: &[u8]) -> Result<(), DecodeError> {
        self.dicts.retain(|(i, _)| *i != id);
        if self.dicts.len() >= MAX_DICTS {
            return Err(DecodeError::TooManyDicts);
        }
        let d = decompressor(dict).map_err(|e| DecodeError::BadDict(e.to_string()))?;
        self.dicts.push((id, d));
        Ok(())
    }

    /// A `4` frame: dictionary `id` of this stream is one it claimed.
    fn held(&mut self, b: &[u8]) -> Result<(), DecodeError> {
        let (id, used) = varint(b)?.ok_or(DecodeError::Short)?;
        let id = u32::try_from(id)
            .ok()
            .filter(|i| *i != 0)
            .ok_or_else(|| DecodeError::BadDict(format!("number {id}")))?;
        let content: [u8; 8] = b[used..].try_into().map_err(|_| DecodeError::Short)?;
        let content = u64::from_le_bytes(content);
        let dict = self
            .claimed
            .iter()
            .find(|(c, _)| *c == content)
            .map(|(_, d)| d.clone())
            .ok_or(DecodeError::NotHeld(content))?;
        self.add(id, &dict)?;
        if let Some(h) = &self.held {
            h.touch(content);
        }
        Ok(())
    }

    fn event(&mut self, b: &[u8]) -> Result<Decoded, DecodeError> {
        let (&ty, b) = b.split_first().ok_or(DecodeError::Short)?;
        let ty = *EvType::ALL
            .get(usize::from(ty))
            .ok_or(DecodeError::UnknownType(ty))?;
        let (id, used) = varint(b)?.ok_or(DecodeError::Short)?;
        let b = &b[used..];
        let (size, used) = varint(b)?.ok_or(DecodeError::Short)?;
        let data = &b[used..];
        if size > MAX_OBJECT as u64 {
            return Err(DecodeError::ObjectTooLarge(size));
        }
        let d = if id == 0 {
            match &mut self.plain {
                Some(d) => d,
                empty => empty
                    .insert(decompressor(&[]).map_err(|e| DecodeError::BadDict(e.to_string()))?),
            }
        } else {
            let id32 = u32::try_from(id).unwrap_or(u32::MAX);
            &mut self
                .dicts
                .iter_mut()
                .find(|(i, _)| *i == id32)
                .ok_or(DecodeError::UnknownDict(id32))?
                .1
        };
        // Room for the declared size only: an object larger fails here.
        let mut out = Vec::with_capacity(size as usize);
        let corrupt = |why: String| DecodeError::Corrupt {
            declared: size,
            why,
        };
        let n = d
            .decompress_to_buffer(data, &mut out)
            .map_err(|e| corrupt(e.to_string()))?;
        if n as u64 != size {
            return Err(corrupt(format!("{n} bytes")));
        }
        Ok(Decoded::Event(ty, out))
    }
}

#[cfg(test)]
mod tests;
