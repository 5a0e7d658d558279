//! Forwarding to upstream podns servers ("relays").
//!
//! A node instance keeps in its index only the scope of the pods on its
//! node, so that its watches and memory stay small however large the
//! cluster is; yet the pods on the node ask about any name in the zone.
//! The forwarder closes that gap: every question the node instance cannot
//! answer from its index goes to the relays, and their answer goes back to
//! the client unchanged (rcode, records, flags, AA and TC included) but for
//! the client's own message ID. The node instance thus serves the whole
//! zone while holding only its pods' scope.
//!
//! UDP goes through one shared socket per address family, read by one
//! task that hands each reply to the query waiting for its ID: no socket
//! or task per query. Every forwarded query carries a fresh random ID, and
//! a reply is taken only from the address the query went to, with that ID
//! and the same question, which is what an off-path spoofer would have to
//! guess. TCP opens a connection per query: TCP queries are the rare
//! retries after a truncated UDP answer, not worth a pool.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Queries forwarded at once, past which `forward` gives up at once: a
/// flood of names the node does not hold must not grow memory without
/// bound, and it keeps the ID space (65 536 per socket) sparse enough that
/// a free random ID is found in a try or two.
pub const MAX_PENDING: usize = 4096;

/// The DNS header's length, before the question section.
const HEADER: usize = 12;

/// The largest UDP payload there can be: an upstream answering with EDNS
/// may send more than 512 bytes, and a cut reply would be malformed.
const MAX_UDP: usize = 65_535;

/// Forwards queries to upstream podns servers. Cheap to share: one
/// instance per process, behind the `Arc` that [`Forwarder::new`] returns.
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
    /// Index in `upstreams` of the one that answered last: a dead relay
    /// then costs one timeout, not one per query.
    preferred: AtomicUsize,
    v4: Option<Arc<Udp>>,
    v6: Option<Arc<Udp>>,
    receivers: Vec<JoinHandle<()>>,
    in_flight: AtomicUsize,
    max_pending: usize,
    forwarded: AtomicU64,
    answered: AtomicU64,
    failed: AtomicU64,
}

/// One shared UDP socket and the queries waiting for a reply on it.
struct Udp {
    socket: UdpSocket,
    pending: Mutex<HashMap<u16, Waiter>>,
}

struct Waiter {
    upstream: SocketAddr,
    /// The query's question section (its first question), to match the
    /// reply's against.
    question: Box<[u8]>,
    /// Taken when a reply is delivered; the entry itself stays until the
    /// query is done with it, so that its ID is not handed out again while
    /// its owner may still remove it.
    reply: Option<oneshot::Sender<Vec<u8>>>,
}

impl Forwarder {
    /// A forwarder to these upstreams (tried in order, starting from the one that answered last), each try waiting `timeout`.
    pub async fn new(upstreams: Vec<SocketAddr>, timeout: Duration) -> io::Result<Arc<Self>> {
        Self::with_limit(upstreams, timeout, MAX_PENDING).await
    }

    async fn with_limit(
        upstreams: Vec<SocketAddr>,
        timeout: Duration,
        max_pending: usize,
    ) -> io::Result<Arc<Self>> {
        // `register` finds a free ID quickly only while few of the 65 536
        // are taken.
        let max_pending = max_pending.min(MAX_PENDING);
        let v4 = Udp::bind(&upstreams, false).await?;
        let v6 = Udp::bind(&upstreams, true).await?;
        let receivers = [&v4, &v6]
            .into_iter()
            .flatten()
            .map(|udp| tokio::spawn(receive(Arc::clone(udp))))
            .collect();
        Ok(Arc::new(Self {
            upstreams,
            timeout,
            preferred: AtomicUsize::new(0),
            v4,
            v6,
            receivers,
            in_flight: AtomicUsize::new(0),
            max_pending,
            forwarded: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }))
    }

    /// Forward one query (the client's bytes as received). `tcp`: the client asked over TCP (then ask upstream over TCP, so a large answer is not truncated); over UDP, ask upstream over UDP and if the upstream's UDP answer has TC=1, pass it on as is (the client retries over TCP). Returns the reply bytes with the client's ID, or None when no upstream answered (the caller then answers SERVFAIL).
    pub async fn forward(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        self.forwarded.fetch_add(1, Ordering::Relaxed);
        let reply = self.try_upstreams(query, tcp).await;
        let outcome = if reply.is_some() {
            &self.answered
        } else {
            &self.failed
        };
        outcome.fetch_add(1, Ordering::Relaxed);
        reply
    }

    /// Counters for metrics: (forwarded, answered, failed).
    ///
    /// Every call of `forward` counts as forwarded, then as answered or
    /// failed when it returns (malformed and over-the-cap queries fail); a
    /// call dropped before it returns counts only as forwarded.
    pub fn stats(&self) -> (u64, u64, u64) {
        (
            self.forwarded.load(Ordering::Relaxed),
            self.answered.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    async fn try_upstreams(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let end = question_end(query)?;
        let _slot = self.reserve()?;
        let question = &query[HEADER..end];
        let count = self.upstreams.len();
        let first = self.preferred.load(Ordering::Relaxed);
        for i in 0..count {
            let at = (first + i) % count;
            let upstream = self.upstreams[at];
            let reply = if tcp {
                self.ask_tcp(upstream, query, question).await
            } else {
                self.ask_udp(upstream, query, question).await
            };
            if let Some(mut reply) = reply {
                self.preferred.store(at, Ordering::Relaxed);
                reply[..2].copy_from_slice(&query[..2]);
                return Some(reply);
            }
        }
        None
    }

    fn reserve(&self) -> Option<Slot<'_>> {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.max_pending {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(&self.in_flight))
    }

    async fn ask_udp(
        &self,
        upstream: SocketAddr,
        query: &[u8],
        question: &[u8],
    ) -> Option<Vec<u8>> {
        let udp = match upstream {
            SocketAddr::V4(_) => self.v4.as_deref()?,
            SocketAddr::V6(_) => self.v6.as_deref()?,
        };
        let (tx, rx) = oneshot::channel();
        let waiting = udp.register(upstream, question, tx);
        let mut out = query.to_vec();
        out[..2].copy_from_slice(&waiting.id.to_be_bytes());
        let exchange = async {
            udp.socket.send_to(&out, upstream).await.ok()?;
            rx.await.ok()
        };
        tokio::time::timeout(self.timeout, exchange).await.ok()?
    }

    async fn ask_tcp(
        &self,
        upstream: SocketAddr,
        query: &[u8],
        question: &[u8],
    ) -> Option<Vec<u8>> {
        let len = u16::try_from(query.len()).ok()?;
        // Over TCP no off-path reply can slip in, but a fresh ID costs
        // nothing and keeps the client's IDs from reaching the relays.
        let id = fastrand::u16(..);
        let mut out = Vec::with_capacity(2 + query.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&query[2..]);
        let exchange = async {
            let mut stream = TcpStream::connect(upstream).await.ok()?;
            stream.write_all(&out).await.ok()?;
            let len = stream.read_u16().await.ok()?;
            let mut reply = vec![0; usize::from(len)];
            stream.read_exact(&mut reply).await.ok()?;
            Some(reply)
        };
        let reply = tokio::time::timeout(self.timeout, exchange).await.ok()??;
        (reply_id(&reply) == Some(id) && answers(&reply, question)).then_some(reply)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        // The receive tasks hold their sockets; without this they would
        // keep them open, waiting for replies no one wants.
        for task in &self.receivers {
            task.abort();
        }
    }
}

/// A place among the `MAX_PENDING` queries in flight, given back on drop
/// (a query done, or its future dropped by a client gone).
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Udp {
    /// One socket for the upstreams of one family, or none if there are
    /// none. Loopback upstreams (tests, a relay on the same host) get a
    /// loopback socket, so nothing listens beyond the host for no reason.
    async fn bind(upstreams: &[SocketAddr], v6: bool) -> io::Result<Option<Arc<Self>>> {
        let mut family = upstreams.iter().filter(|a| a.is_ipv6() == v6).peekable();
        if family.peek().is_none() {
            return Ok(None);
        }
        let loopback = family.all(|a| a.ip().is_loopback());
        let ip: IpAddr = match (v6, loopback) {
            (false, true) => Ipv4Addr::LOCALHOST.into(),
            (false, false) => Ipv4Addr::UNSPECIFIED.into(),
            (true, true) => Ipv6Addr::LOCALHOST.into(),
            (true, false) => Ipv6Addr::UNSPECIFIED.into(),
        };
        let socket = UdpSocket::bind((ip, 0)).await?;
        Ok(Some(Arc::new(Self {
            socket,
            pending: Mutex::default(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u16, Waiter>> {
        // Nothing panics under this lock, and the map stays consistent
        // whatever a panic would interrupt.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pick a random ID no query on this socket is waiting for and wait
    /// for it: a reused ID could hand one query's answer to another.
    fn register(
        &self,
        upstream: SocketAddr,
        question: &[u8],
        reply: oneshot::Sender<Vec<u8>>,
    ) -> Registered<'_> {
        let mut pending = self.lock();
        let waiter = Waiter {
            upstream,
            question: question.into(),
            reply: Some(reply),
        };
        // At most `MAX_PENDING` of the 65 536 IDs are taken, so this ends
        // after a try or two.
        loop {
            let id = fastrand::u16(..);
            if let Entry::Vacant(slot) = pending.entry(id) {
                slot.insert(waiter);
                return Registered { udp: self, id };
            }
        }
    }

    /// Hand a datagram to the query it answers, if any: same ID, from the
    /// address that query went to, with the same question. Anything else is
    /// a late reply, a duplicate, garbage or a spoofing attempt, all
    /// dropped alike.
    fn deliver(&self, reply: &[u8], from: SocketAddr) {
        let Some(id) = reply_id(reply) else { return };
        let mut pending = self.lock();
        let Some(waiter) = pending.get_mut(&id) else {
            return;
        };
        // IP and port only: a v6 source may carry a flow label or scope
        // the configured address does not.
        if waiter.upstream.ip() != from.ip()
            || waiter.upstream.port() != from.port()
            || !answers(reply, &waiter.question)
        {
            return;
        }
        if let Some(tx) = waiter.reply.take() {
            drop(pending);
            // The query may have timed out meanwhile: then no one wants it.
            let _ = tx.send(reply.to_vec());
        }
    }
}

/// A query's ID on a UDP socket, freed when the query is done with it
/// (answered, timed out, or its future dropped).
struct Registered<'a> {
    udp: &'a Udp,
    id: u16,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.udp.lock().remove(&self.id);
    }
}

async fn receive(udp: Arc<Udp>) {
    let mut buf = vec![0u8; MAX_UDP];
    loop {
        match udp.socket.recv_from(&mut buf).await {
            Ok((len, from)) => udp.deliver(&buf[..len], from),
            // Errors on an unconnected UDP socket concern one datagram (an
            // ICMP error, on some systems): the socket goes on. Yield so
            // that a burst of them cannot starve the runtime's other tasks.
            Err(_) => tokio::task::yield_now().await,
        }
    }
}

/// The end of the first question (past its QTYPE and QCLASS), or None
/// when there is none or it is cut short. Its name cannot be compressed:
/// a pointer points back, and before the first question there is only the
/// header.
fn question_end(msg: &[u8]) -> Option<usize> {
    if msg.len() < HEADER || u16::from_be_bytes([msg[4], msg[5]]) == 0 {
        return None;
    }
    let mut at = HEADER;
    loop {
        let len = usize::from(*msg.get(at)?);
        if len & 0xC0 != 0 {
            return None;
        }
        at += 1 + len;
        if len == 0 {
            break;
        }
    }
    // RFC 1035 2.3.4: 255 octets at most, to keep what we copy and compare
    // small whatever a client sends.
    if at - HEADER > 255 {
        return None;
    }
    let end = at + 4;
    (end <= msg.len()).then_some(end)
}

/// The ID of a message that is a reply (QR=1) and has a header; None
/// otherwise, so that a query reflected at us is never taken for an answer.
fn reply_id(msg: &[u8]) -> Option<u16> {
    (msg.len() >= HEADER && msg[2] & 0x80 != 0).then(|| u16::from_be_bytes([msg[0], msg[1]]))
}

/// Whether `reply` answers the question `question` (the query's first
/// question section, as bytes). The name compares case-insensitively, as
/// a server may answer with the case the zone has rather than the one
/// asked (DNS 0x20); type and class compare exactly, as an ASCII-blind
/// comparison would take type 65 for type 97. The length octets (at most
/// 63) are no letters, so the names' structure compares exactly too.
fn answers(reply: &[u8], question: &[u8]) -> bool {
    let Some(got) = reply.get(HEADER..HEADER + question.len()) else {
        return false;
    };
    let name = question.len() - 4;
    u16::from_be_bytes([reply[4], reply[5]]) != 0
        && got[..name].eq_ignore_ascii_case(&question[..name])
        && got[name..] == question[name..]
}
