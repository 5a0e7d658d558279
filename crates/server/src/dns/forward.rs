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
    pub fn new(upstreams: Vec<SocketAddr>, timeout: Duration) -> io::Result<Arc<Self>> {
        Self::with_limit(upstreams, timeout, MAX_PENDING)
    }

    fn with_limit(
        upstreams: Vec<SocketAddr>,
        timeout: Duration,
        max_pending: usize,
    ) -> io::Result<Arc<Self>> {
        // `register` finds a free ID quickly only while few of the 65 536
        // are taken.
        let max_pending = max_pending.min(MAX_PENDING);
        let v4 = Udp::bind(&upstreams, false)?;
        let v6 = Udp::bind(&upstreams, true)?;
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

    #[cfg(test)]
    fn pending(&self) -> usize {
        [&self.v4, &self.v6]
            .into_iter()
            .flatten()
            .map(|udp| udp.lock().len())
            .sum()
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
    fn bind(upstreams: &[SocketAddr], v6: bool) -> io::Result<Option<Arc<Self>>> {
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
        let socket = std::net::UdpSocket::bind((ip, 0))?;
        socket.set_nonblocking(true)?;
        let socket = UdpSocket::from_std(socket)?;
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Instant;

    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{Name, RData, Record, RecordType};
    use tokio::net::TcpListener;

    use super::*;

    /// How long any one forward may take before a test calls it hung.
    const HUNG: Duration = Duration::from_secs(10);
    const TRY: Duration = Duration::from_millis(300);

    /// How the fake upstream answers over UDP.
    #[derive(Clone, Copy)]
    enum Mode {
        /// One answer: AA, an A record.
        Answer,
        /// The answer with TC=1 and no records.
        Truncated,
        /// The answer with the name upper-cased, as a 0x20-minded server
        /// might.
        Shouted,
        /// A reply from the wrong source, one with the wrong ID and one
        /// with the wrong question (all with the address `SPOOF`), then the
        /// true answer.
        Spoofed,
        /// Only the three spoofed replies.
        SpoofOnly,
        /// Wait for this many queries, then answer them last first, so that
        /// replies cross.
        Reversed(usize),
    }

    const SPOOF: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 66);

    /// A fake podns upstream on loopback, UDP and TCP on one port. Over TCP
    /// it always answers with `LARGE` records, more than 512 bytes.
    struct Fake {
        addr: SocketAddr,
        /// Every true answer it sent, in order.
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    const LARGE: usize = 40;

    impl Fake {
        async fn start(mode: Mode) -> Self {
            let (udp, tcp) = bind_pair().await;
            let addr = udp.local_addr().unwrap();
            let sent = Arc::<Mutex<Vec<Vec<u8>>>>::default();
            tokio::spawn(serve_udp(udp, mode, Arc::clone(&sent)));
            tokio::spawn(serve_tcp(tcp, Arc::clone(&sent)));
            Self { addr, sent }
        }

        fn sent(&self) -> Vec<Vec<u8>> {
            self.sent.lock().unwrap().clone()
        }
    }

    /// A UDP socket and a TCP listener on the same loopback port: the
    /// forwarder asks both at one address.
    async fn bind_pair() -> (UdpSocket, TcpListener) {
        for _ in 0..100 {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            if let Ok(tcp) = TcpListener::bind(udp.local_addr().unwrap()).await {
                return (udp, tcp);
            }
        }
        panic!("no loopback port free for both UDP and TCP");
    }

    /// The fake's answer to `query`: AA, `records` A records (192.0.2.i)
    /// or one `SPOOF` record, the query's ID and question.
    fn answer(query: &[u8], records: usize, truncated: bool, spoof: bool) -> Vec<u8> {
        let q = Message::from_vec(query).unwrap();
        let mut m = Message::response(q.metadata.id, OpCode::Query);
        m.metadata.authoritative = true;
        m.metadata.truncation = truncated;
        m.metadata.recursion_desired = q.metadata.recursion_desired;
        m.add_queries(q.queries.clone());
        let name = q.queries[0].name().clone();
        for i in 0..records {
            let ip = if spoof {
                SPOOF
            } else {
                Ipv4Addr::new(192, 0, 2, i as u8)
            };
            m.add_answer(Record::from_rdata(name.clone(), 60, RData::A(A(ip))));
        }
        m.to_vec().unwrap()
    }

    async fn serve_udp(socket: UdpSocket, mode: Mode, sent: Arc<Mutex<Vec<Vec<u8>>>>) {
        let other = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut queued = Vec::new();
        let mut buf = vec![0u8; MAX_UDP];
        loop {
            let (len, from) = socket.recv_from(&mut buf).await.unwrap();
            let query = buf[..len].to_vec();
            let mut replies = Vec::new();
            match mode {
                Mode::Answer => replies.push(answer(&query, 1, false, false)),
                Mode::Truncated => replies.push(answer(&query, 0, true, false)),
                Mode::Shouted => {
                    let mut reply = answer(&query, 1, false, false);
                    let end = question_end(&reply).unwrap();
                    reply[HEADER..end - 4].make_ascii_uppercase();
                    replies.push(reply);
                }
                Mode::Spoofed | Mode::SpoofOnly => {
                    let spoof = answer(&query, 1, false, true);
                    other.send_to(&spoof, from).await.unwrap();
                    let mut wrong_id = spoof.clone();
                    wrong_id[1] ^= 1;
                    socket.send_to(&wrong_id, from).await.unwrap();
                    let mut other_name = Message::from_vec(&query).unwrap();
                    other_name.queries[0].set_name(Name::from_ascii("other.example.").unwrap());
                    let wrong_question = answer(&other_name.to_vec().unwrap(), 1, false, true);
                    socket.send_to(&wrong_question, from).await.unwrap();
                    if matches!(mode, Mode::Spoofed) {
                        replies.push(answer(&query, 1, false, false));
                    }
                }
                Mode::Reversed(n) => {
                    queued.push((query, from));
                    if queued.len() == n {
                        for (query, from) in queued.drain(..).rev() {
                            let reply = answer(&query, 1, false, false);
                            socket.send_to(&reply, from).await.unwrap();
                            sent.lock().unwrap().push(reply);
                        }
                    }
                }
            }
            for reply in replies {
                socket.send_to(&reply, from).await.unwrap();
                sent.lock().unwrap().push(reply);
            }
        }
    }

    async fn serve_tcp(listener: TcpListener, sent: Arc<Mutex<Vec<Vec<u8>>>>) {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let sent = Arc::clone(&sent);
            tokio::spawn(async move {
                while let Ok(len) = stream.read_u16().await {
                    let mut query = vec![0; usize::from(len)];
                    stream.read_exact(&mut query).await.unwrap();
                    let reply = answer(&query, LARGE, false, false);
                    let len = u16::try_from(reply.len()).unwrap().to_be_bytes();
                    stream
                        .write_all(&[&len[..], &reply].concat())
                        .await
                        .unwrap();
                    sent.lock().unwrap().push(reply);
                }
            });
        }
    }

    fn query(id: u16, name: &str) -> Vec<u8> {
        let mut m = Message::new(id, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        m.to_vec().unwrap()
    }

    async fn forward(f: &Forwarder, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        tokio::time::timeout(HUNG, f.forward(query, tcp))
            .await
            .expect("forward hung")
    }

    /// `got` is `sent` with the ID `id`.
    fn assert_same_but_id(got: &[u8], sent: &[u8], id: u16) {
        assert_eq!(got[..2], id.to_be_bytes());
        assert_eq!(got[2..], sent[2..]);
    }

    const NAME: &str = "web-0.web.default.svc.cluster.local.";

    #[tokio::test]
    async fn the_reply_is_the_upstreams_with_the_clients_id() {
        let up = Fake::start(Mode::Answer).await;
        let f = Forwarder::new(vec![up.addr], TRY).unwrap();
        let got = forward(&f, &query(0xBEEF, NAME), false).await.unwrap();
        let sent = up.sent();
        assert_eq!(sent.len(), 1);
        assert_same_but_id(&got, &sent[0], 0xBEEF);
        let m = Message::from_vec(&got).unwrap();
        assert!(m.metadata.authoritative);
        assert_eq!(m.answers.len(), 1);
        assert_eq!(f.stats(), (1, 1, 0));
        assert_eq!(f.pending(), 0);
    }

    #[tokio::test]
    async fn spoofed_replies_are_ignored_for_the_true_one() {
        let up = Fake::start(Mode::Spoofed).await;
        let f = Forwarder::new(vec![up.addr], TRY).unwrap();
        let got = forward(&f, &query(7, NAME), false).await.unwrap();
        assert_same_but_id(&got, &up.sent()[0], 7);
        let m = Message::from_vec(&got).unwrap();
        assert_eq!(m.answers[0].data, RData::A(A::new(192, 0, 2, 0)));
    }

    #[tokio::test]
    async fn spoofed_replies_alone_are_no_answer() {
        let up = Fake::start(Mode::SpoofOnly).await;
        let f = Forwarder::new(vec![up.addr], TRY).unwrap();
        assert_eq!(forward(&f, &query(7, NAME), false).await, None);
        assert_eq!(f.stats(), (1, 0, 1));
        assert_eq!(f.pending(), 0);
    }

    #[tokio::test]
    async fn the_question_may_come_back_in_another_case() {
        let up = Fake::start(Mode::Shouted).await;
        let f = Forwarder::new(vec![up.addr], TRY).unwrap();
        let got = forward(&f, &query(9, NAME), false).await.unwrap();
        assert_same_but_id(&got, &up.sent()[0], 9);
    }

    #[tokio::test]
    async fn a_dead_first_upstream_falls_over_to_the_second() {
        // Bound, so nothing answers with an ICMP error: only the timeout
        // tells it is dead.
        let dead = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let up = Fake::start(Mode::Answer).await;
        let f = Forwarder::new(vec![dead.local_addr().unwrap(), up.addr], TRY).unwrap();
        let start = Instant::now();
        let got = forward(&f, &query(1, NAME), false).await.unwrap();
        assert!(start.elapsed() < 2 * TRY, "took {:?}", start.elapsed());
        assert_same_but_id(&got, &up.sent()[0], 1);
        // The second query starts at the upstream that answered.
        let start = Instant::now();
        let got = forward(&f, &query(2, NAME), false).await.unwrap();
        assert!(start.elapsed() < TRY, "took {:?}", start.elapsed());
        assert_same_but_id(&got, &up.sent()[1], 2);
        assert_eq!(f.stats(), (2, 2, 0));
    }

    #[tokio::test]
    async fn no_upstream_is_none() {
        let none = Forwarder::new(Vec::new(), TRY).unwrap();
        assert_eq!(forward(&none, &query(1, NAME), false).await, None);
        assert_eq!(forward(&none, &query(1, NAME), true).await, None);

        let dead = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let f = Forwarder::new(vec![dead.local_addr().unwrap()], TRY).unwrap();
        let start = Instant::now();
        assert_eq!(forward(&f, &query(1, NAME), false).await, None);
        assert!(start.elapsed() >= TRY);
        // Nothing listens on TCP there: refused at once.
        assert_eq!(forward(&f, &query(1, NAME), true).await, None);
        assert_eq!(f.stats(), (2, 0, 2));
        assert_eq!(f.pending(), 0);
    }

    #[tokio::test]
    async fn tc_passes_through_over_udp() {
        let up = Fake::start(Mode::Truncated).await;
        let f = Forwarder::new(vec![up.addr], TRY).unwrap();
        let got = forward(&f, &query(3, NAME), false).await.unwrap();
        assert_same_but_id(&got, &up.sent()[0], 3);
        assert!(Message::from_vec(&got).unwrap().metadata.truncation);
    }

    #[tokio::test]
    async fn tcp_gets_a_large_answer_whole() {
        let up = Fake::start(Mode::Truncated).await;
        let f = Forwarder::new(vec![up.addr], TRY).unwrap();
        let got = forward(&f, &query(4, NAME), true).await.unwrap();
        assert!(got.len() > 512, "{} bytes", got.len());
        assert_same_but_id(&got, &up.sent()[0], 4);
        let m = Message::from_vec(&got).unwrap();
        assert!(!m.metadata.truncation);
        assert_eq!(m.answers.len(), LARGE);
    }

    #[tokio::test]
    async fn concurrent_forwards_get_their_own_answers() {
        const N: u16 = 100;
        let up = Fake::start(Mode::Reversed(usize::from(N))).await;
        let f = Forwarder::new(vec![up.addr], Duration::from_secs(5)).unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..N {
            let f = Arc::clone(&f);
            tasks.spawn(async move {
                let name = format!("q{i}.example.");
                // All with one client ID, as many clients may pick the same.
                let got = forward(&f, &query(0x1234, &name), false).await.unwrap();
                let m = Message::from_vec(&got).unwrap();
                assert_eq!(m.metadata.id, 0x1234);
                assert_eq!(m.queries[0].name().to_ascii(), name);
                assert_eq!(m.answers[0].name.to_ascii(), name);
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
        assert_eq!(f.stats(), (100, 100, 0));
        assert_eq!(f.pending(), 0);
    }

    #[tokio::test]
    async fn malformed_queries_are_none() {
        let up = Fake::start(Mode::Answer).await;
        let f = Forwarder::new(vec![up.addr], TRY).unwrap();
        let good = query(5, NAME);
        let no_question = {
            let mut q = good[..HEADER].to_vec();
            q[5] = 0;
            q
        };
        let pointer = {
            let mut q = good[..HEADER].to_vec();
            q.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1]);
            q
        };
        let long_name = {
            let mut q = good[..HEADER].to_vec();
            for _ in 0..5 {
                q.push(63);
                q.extend_from_slice(&[b'a'; 63]);
            }
            q.extend_from_slice(&[0, 0, 1, 0, 1]);
            q
        };
        for bad in [
            &[][..],
            &good[..11],
            &good[..HEADER],
            &no_question[..],
            &good[..good.len() - 1],
            &pointer[..],
            &long_name[..],
        ] {
            let start = Instant::now();
            assert_eq!(forward(&f, bad, false).await, None);
            assert_eq!(forward(&f, bad, true).await, None);
            assert!(start.elapsed() < TRY);
        }
        assert!(up.sent().is_empty());
        assert_eq!(f.stats(), (14, 0, 14));
    }

    #[tokio::test]
    async fn past_the_cap_a_query_fails_at_once() {
        let dead = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let f = Forwarder::with_limit(vec![dead.local_addr().unwrap()], HUNG / 2, 1).unwrap();
        let waiting = tokio::spawn({
            let f = Arc::clone(&f);
            async move { f.forward(&query(1, NAME), false).await }
        });
        let deadline = Instant::now() + HUNG;
        while f.pending() == 0 {
            assert!(Instant::now() < deadline, "the first query never went out");
            tokio::task::yield_now().await;
        }
        let start = Instant::now();
        assert_eq!(forward(&f, &query(2, NAME), false).await, None);
        assert!(start.elapsed() < TRY);
        // A query given up by its caller frees its ID and its place.
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(f.pending(), 0);
        assert_eq!(f.in_flight.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn question_end_and_answers() {
        let q = query(1, "a.b.");
        let end = question_end(&q).unwrap();
        assert_eq!(end, HEADER + 5 + 4);
        let mut reply = answer(&q, 1, false, false);
        assert!(answers(&reply, &q[HEADER..end]));
        assert!(!answers(&reply[..end - 1], &q[HEADER..end]));
        // Type 65 (HTTPS) asked, type 97 answered: 'A' and 'a' to an
        // ASCII-blind comparison, not to this one.
        let mut https = q.clone();
        https[end - 3] = 0x41;
        reply[end - 3] = 0x61;
        assert!(!answers(&reply, &https[HEADER..end]));
        reply[end - 3] = 0x41;
        assert!(answers(&reply, &https[HEADER..end]));
        // A query is no reply.
        assert_eq!(reply_id(&q), None);
    }
}
