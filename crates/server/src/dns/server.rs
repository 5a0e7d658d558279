//! Sockets. UDP: several `SO_REUSEPORT` sockets, each with its own receive
//! loop that answers in place (no task per query). TCP: a task per
//! connection under a connection cap, an idle timeout and a query cap.
//! Servers take already-bound sockets and a shutdown token.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::metrics::{
    ActionLabels, HistogramShard, RcodeLabels, RequestLabels, qtype_label, rcode_label,
};
use prometheus_client::metrics::counter::Counter;

use super::answer::Answerer;
use super::buffers::{self, Granted, UdpBuffers};
use super::datagrams::Datagrams;
use super::reply::{ReplyMeta, Transport};
use super::rrl::{self, Rrl, Verdict};

/// How long an idle TCP connection is kept (default of `--tcp-idle-timeout`).
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bind `n` UDP sockets to one address with `SO_REUSEPORT`, so the kernel
/// spreads queries over them, with the default buffer sizes. With port 0
/// the first socket picks the port and the rest join it.
pub fn bind_udp(addr: SocketAddr, n: usize) -> std::io::Result<Vec<UdpSocket>> {
    bind_udp_with(addr, n, UdpBuffers::default()).map(|(socks, _)| socks)
}

/// [`bind_udp`] with the socket buffers asked in `bufs`; returns what the
/// kernel granted the stingiest socket. Each socket reports its drops
/// (`SO_RXQ_OVFL`) from the moment it is bound.
pub fn bind_udp_with(
    addr: SocketAddr,
    n: usize,
    bufs: UdpBuffers,
) -> std::io::Result<(Vec<UdpSocket>, Granted)> {
    let mut out = Vec::with_capacity(n.max(1));
    let mut granted: Option<Granted> = None;
    let mut addr = addr;
    for _ in 0..n.max(1) {
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_reuse_port(true)?;
        if addr.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        sock.set_nonblocking(true)?;
        let g = buffers::apply(&sock, bufs)?;
        granted = Some(granted.map_or(g, |all| all.min(g)));
        #[cfg(target_os = "linux")]
        super::mmsg::enable_drop_count(&sock)?;
        sock.bind(&addr.into())?;
        let std_sock: std::net::UdpSocket = sock.into();
        addr = std_sock.local_addr()?;
        out.push(UdpSocket::from_std(std_sock)?);
    }
    Ok((out, granted.expect("at least one socket")))
}

/// Bind the TCP listener (on the UDP sockets' port when `addr` has port 0).
pub fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    TcpListener::from_std(sock.into())
}

/// The per-query metrics of one serving loop: counters looked up in their
/// families once per label set and then kept (a family lookup takes a
/// shared lock and hashes the labels), and the loop's own shard of the
/// request-duration histogram (one shared `Histogram` locks per
/// observation). Nothing here takes a lock per query (`--rrl` itself does:
/// its buckets are one map behind a mutex).
struct Counters {
    metrics: Metrics,
    requests: Vec<(RequestLabels, Counter)>,
    responses: Vec<(&'static str, Counter)>,
    rate_limited: Vec<(&'static str, Counter)>,
    duration: HistogramShard,
    /// The socket's drop count at the last report, already counted.
    dropped: u32,
}

/// The counter for `key` in a loop's cache, looked up in the family on
/// first use only.
fn cached<K: PartialEq>(
    cache: &mut Vec<(K, Counter)>,
    key: K,
    lookup: impl FnOnce(&K) -> Counter,
) -> &Counter {
    let i = match cache.iter().position(|(k, _)| *k == key) {
        Some(i) => i,
        None => {
            let counter = lookup(&key);
            cache.push((key, counter));
            cache.len() - 1
        }
    };
    &cache[i].1
}

impl Counters {
    fn new(metrics: &Metrics) -> Self {
        Self {
            metrics: metrics.clone(),
            requests: Vec::new(),
            responses: Vec::new(),
            rate_limited: Vec::new(),
            duration: metrics.request_duration.shard(),
            dropped: 0,
        }
    }

    /// Count the datagrams the kernel dropped on this loop's socket since
    /// the last report (`total` is the socket's running count, which the
    /// kernel reports with the received datagrams: no system call here).
    fn dropped(&mut self, total: u32) {
        if total != self.dropped {
            let new = total.wrapping_sub(self.dropped);
            self.metrics.udp_receive_dropped.inc_by(u64::from(new));
            self.dropped = total;
        }
    }

    /// Count a query received: every one, a forwarded one too (a node
    /// instance forwards what is outside its scope; its answer is counted
    /// by `podns_dns_forwarded_total{result}`, not here).
    fn received(&mut self, reply: &ReplyMeta, transport: Transport) {
        let labels = RequestLabels {
            qtype: qtype_label(reply.qtype),
            proto: transport.label(),
        };
        let family = &self.metrics.requests;
        cached(&mut self.requests, labels, |labels| {
            family.get_or_create(labels).clone()
        })
        .inc();
    }

    /// Count a query received and answered here.
    fn count(&mut self, reply: &ReplyMeta, transport: Transport, started: Instant) {
        self.received(reply, transport);
        let rcode = rcode_label(reply.rcode);
        let family = &self.metrics.responses;
        cached(&mut self.responses, rcode, |&rcode| {
            family.get_or_create(&RcodeLabels { rcode }).clone()
        })
        .inc();
        if reply.truncated {
            self.metrics.truncated.inc();
        }
        self.duration.observe(started.elapsed().as_secs_f64());
    }

    /// Count a response withheld by `--rrl`: under a flood that is every
    /// query, so it is counted on the loop's cached counters too.
    fn rate_limited(&mut self, action: &'static str) {
        let family = &self.metrics.rate_limited;
        cached(&mut self.rate_limited, action, |&action| {
            family.get_or_create(&ActionLabels { action }).clone()
        })
        .inc();
    }
}

/// Apply `--rrl` to a UDP reply in `bytes`: true to send it as it is now
/// (the reply, or its slip: TC=1, question only), false to drop it.
fn rate_limited(
    rrl: Option<&Rrl>,
    counters: &mut Counters,
    bytes: &mut Vec<u8>,
    src: SocketAddr,
) -> bool {
    let Some(rrl) = rrl else {
        return true;
    };
    let action = match rrl.check(src.ip(), Instant::now()) {
        Verdict::Send => return true,
        Verdict::Slip => "slip",
        Verdict::Drop => "drop",
    };
    counters.rate_limited(action);
    match (action, rrl::slip(bytes)) {
        ("slip", Some(slipped)) => {
            *bytes = slipped;
            true
        }
        _ => false,
    }
}

/// One UDP loop on a thread of its own: a blocking receive of up to 32
/// queries, each answered in place into a buffer kept between batches,
/// and one send for all the replies (Linux; elsewhere one datagram per
/// call). No task, no waker, no epoll round per query. Datagrams the
/// kernel dropped on the socket (its receive buffer full) are counted in
/// `podns_udp_receive_dropped_total` from what each batch reports (Linux).
/// Stops within [`UDP_POLL`] of `shutdown`.
pub fn run_udp_blocking(
    socket: std::net::UdpSocket,
    answerer: Arc<Answerer>,
    metrics: Metrics,
    rrl: Option<Arc<Rrl>>,
    shutdown: CancellationToken,
) {
    run_udp_with(
        NativeDatagrams::default(),
        socket,
        answerer,
        metrics,
        rrl,
        shutdown,
    )
}

/// The best batched I/O this OS has.
#[cfg(target_os = "linux")]
type NativeDatagrams = super::mmsg::Batch;
#[cfg(not(target_os = "linux"))]
type NativeDatagrams = super::datagrams::OneByOne;

fn run_udp_with(
    mut batch: impl Datagrams,
    socket: std::net::UdpSocket,
    answerer: Arc<Answerer>,
    metrics: Metrics,
    rrl: Option<Arc<Rrl>>,
    shutdown: CancellationToken,
) {
    if let Err(error) = socket
        .set_nonblocking(false)
        .and_then(|()| socket.set_read_timeout(Some(UDP_POLL)))
    {
        tracing::error!(%error, "udp socket setup failed");
        return;
    }
    // Sockets from bind_udp report drops already; one bound elsewhere
    // does from here on.
    #[cfg(target_os = "linux")]
    if let Err(error) = super::mmsg::enable_drop_count(&socket) {
        tracing::warn!(%error, "udp drops on this socket will not be counted");
    }
    // Forwarded replies (a node instance's) leave from this socket too,
    // sent by the runtime when the relays answer.
    let reply_socket = socket.try_clone().ok().map(Arc::new);
    let cap = batch.capacity();
    let mut outs: Vec<Vec<u8>> = (0..cap).map(|_| Vec::with_capacity(512)).collect();
    let mut ready: Vec<(usize, SocketAddr)> = Vec::with_capacity(cap);
    let mut counters = Counters::new(&metrics);
    while !shutdown.is_cancelled() {
        let n = match batch.recv(&socket) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(error) => {
                tracing::debug!(%error, "udp receive failed");
                continue;
            }
        };
        if let Some(total) = batch.dropped() {
            counters.dropped(total);
        }
        ready.clear();
        for (i, out) in outs.iter_mut().enumerate().take(n) {
            let (query, src) = batch.get(i);
            let Some(src) = src else { continue };
            let started = Instant::now();
            let Some(meta) = answerer.handle_into(query, Transport::Udp, out) else {
                continue;
            };
            if meta.forward {
                counters.received(&meta, Transport::Udp);
                if let Some(socket) = &reply_socket {
                    answerer.forward_udp(query.to_vec(), src, socket.clone());
                }
                continue;
            }
            counters.count(&meta, Transport::Udp, started);
            if rate_limited(rrl.as_deref(), &mut counters, out, src) {
                ready.push((i, src));
            }
        }
        let msgs: Vec<(&[u8], SocketAddr)> =
            ready.iter().map(|&(i, src)| (&outs[i][..], src)).collect();
        batch.send(&socket, &msgs);
        // A reply that grew a buffer past a normal size (a TC=1 set, a big
        // SRV answer) gives the memory back.
        for out in outs.iter_mut().take(n) {
            if out.capacity() > 4096 {
                *out = Vec::with_capacity(512);
            }
        }
    }
}

/// How often a blocking UDP loop looks at the shutdown token when idle.
pub const UDP_POLL: Duration = Duration::from_millis(100);

/// Limits on the TCP side, which is where a public port gets abused:
/// connections that hold a slot and send nothing, or a byte a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpLimits {
    /// Connections served at once; one past this is accepted and closed at
    /// once (not left in the backlog, where it would wait for a slot).
    pub max_connections: usize,
    /// How long a connection may take to deliver its next whole query
    /// (idle time plus the time to read it), and to take an answer.
    pub idle_timeout: Duration,
    /// Queries answered on one connection before it is closed.
    pub max_queries: usize,
}

impl Default for TcpLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            idle_timeout: TCP_IDLE_TIMEOUT,
            max_queries: 1000,
        }
    }
}

/// Serve DNS over TCP (RFC 1035 §4.2.2 framing, RFC 7766) on `listener`
/// until `shutdown`, within `limits`.
///
/// hickory-server's TCP server has an idle timeout but no cap on
/// connections or on queries per connection, and no hook to add one around
/// its accept loop, so this is a small server of our own: a semaphore
/// bounds the connections, and one deadline covers the wait for a query and
/// its reading, so a client that trickles bytes cannot keep a slot longer
/// than an idle one. Queries on one connection are answered in order.
pub async fn run_tcp(
    listener: TcpListener,
    answerer: Arc<Answerer>,
    metrics: Metrics,
    limits: TcpLimits,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut conns = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(error) => {
                    // Out of file descriptors and the like: back off a
                    // little instead of spinning on the error.
                    tracing::debug!(%error, "tcp accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        // Reap finished connections so the set does not grow.
        while conns.try_join_next().is_some() {}
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            metrics.tcp_refused.inc();
            tracing::debug!(%peer, "tcp connection refused: at --tcp-max-connections");
            drop(stream);
            continue;
        };
        let (a, m, stop) = (answerer.clone(), metrics.clone(), shutdown.clone());
        conns.spawn(async move {
            let _permit = permit;
            if let Err(error) = serve_tcp_conn(stream, &a, &m, limits, &stop).await {
                tracing::debug!(%error, %peer, "tcp connection ended");
            }
        });
    }
    // Connections notice the token at their next read; give them a moment
    // to finish the answer they are writing.
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(2), drain)
        .await
        .is_err()
    {
        conns.abort_all();
    }
}

/// One TCP connection: read a framed query within the idle timeout, answer
/// it, up to `max_queries` times.
async fn serve_tcp_conn(
    mut stream: TcpStream,
    answerer: &Answerer,
    metrics: &Metrics,
    limits: TcpLimits,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(512);
    let mut counters = Counters::new(metrics);
    for _ in 0..limits.max_queries {
        let read = async {
            let mut len = [0u8; 2];
            stream.read_exact(&mut len).await?;
            buf.resize(usize::from(u16::from_be_bytes(len)), 0);
            stream.read_exact(&mut buf).await
        };
        tokio::select! {
            r = tokio::time::timeout(limits.idle_timeout, read) => match r {
                Ok(Ok(_)) => {}
                // EOF between queries is the normal end of a connection.
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(()), // idle or too slow: close
            },
            _ = shutdown.cancelled() => return Ok(()),
        }
        let started = Instant::now();
        let Some(reply) = answerer.handle(&buf, Transport::Tcp) else {
            continue;
        };
        let meta = reply.meta();
        let reply_bytes = if meta.forward {
            counters.received(&meta, Transport::Tcp);
            match answerer.forwarded(&buf, true).await {
                Some(bytes) => bytes,
                None => continue,
            }
        } else {
            counters.count(&meta, Transport::Tcp, started);
            reply.bytes
        };
        let Ok(len) = u16::try_from(reply_bytes.len()) else {
            continue; // cannot happen: TCP answers are built within 65535
        };
        let mut out = Vec::with_capacity(2 + reply_bytes.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&reply_bytes);
        match tokio::time::timeout(limits.idle_timeout, stream.write_all(&out)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()), // the client does not read: close
        }
    }
    // At --tcp-max-queries: close; the client reconnects (RFC 7766 §6.2.3
    // lets a server close a connection whenever it likes).
    let _ = stream.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::time::Duration;

    use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;
    use crate::dns::answer::AnswerConfig;
    use crate::index::testing::{PodExt, pod};
    use crate::index::{Change, Policy, Update};

    type Loop =
        fn(std::net::UdpSocket, Arc<Answerer>, Metrics, Option<Arc<Rrl>>, CancellationToken);

    /// An answerer over an index holding one pod, `w-0.w.ml`.
    fn one_pod() -> Arc<Answerer> {
        let mut writer = crate::index::testing::synced_writer(Policy::default());
        writer.apply(Update::Pod(Change::Apply(
            pod("ml", "w-0", "10.1.0.7").host("w-0", "w"),
        )));
        Arc::new(Answerer::new(
            writer.table().clone(),
            AnswerConfig::default(),
        ))
    }

    fn a_query(id: u16) -> Vec<u8> {
        let mut m = Message::new(id, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(
            Name::from_ascii("w-0.w.ml.svc.cluster.local.").unwrap(),
            RecordType::A,
        ));
        m.to_vec().unwrap()
    }

    /// Start a UDP loop on loopback over an index holding one pod; ask it a
    /// few questions from one client and return the replies' bytes.
    fn replies(serve: Loop) -> Vec<Vec<u8>> {
        let answerer = one_pod();
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = server.local_addr().unwrap();
        let stop = CancellationToken::new();
        let loop_stop = stop.clone();
        let thread = std::thread::spawn(move || {
            serve(server, answerer, Metrics::new(), None, loop_stop);
        });
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut out = Vec::new();
        for (i, (name, qtype)) in [
            ("w-0.w.ml.svc.cluster.local.", RecordType::A),
            ("w-1.w.ml.svc.cluster.local.", RecordType::A),
            ("cluster.local.", RecordType::SOA),
            ("example.com.", RecordType::A),
        ]
        .into_iter()
        .enumerate()
        {
            let mut m = Message::new(i as u16 + 1, MessageType::Query, OpCode::Query);
            m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
            client.send_to(&m.to_vec().unwrap(), addr).unwrap();
            let mut buf = [0u8; 1500];
            let n = client.recv(&mut buf).expect("a reply");
            out.push(buf[..n].to_vec());
        }
        stop.cancel();
        thread.join().unwrap();
        out
    }

    #[test]
    fn the_portable_loop_answers_as_the_batched_one() {
        // The portable one-datagram-per-call I/O, as on systems without
        // `recvmmsg`, here on Linux too.
        let portable = replies(|socket, answerer, metrics, rrl, stop| {
            run_udp_with(
                crate::dns::datagrams::OneByOne::default(),
                socket,
                answerer,
                metrics,
                rrl,
                stop,
            )
        });
        let rcodes: Vec<ResponseCode> = portable
            .iter()
            .map(|b| Message::from_vec(b).unwrap().response_code)
            .collect();
        assert_eq!(
            rcodes,
            [
                ResponseCode::NoError,
                ResponseCode::NXDomain,
                ResponseCode::NoError,
                ResponseCode::Refused
            ]
        );
        assert_eq!(Message::from_vec(&portable[0]).unwrap().answers.len(), 1);
        assert_eq!(portable, replies(run_udp_blocking));
    }

    /// A socket bound as `podns serve` binds it, with a receive buffer of a
    /// few datagrams, is flooded from loopback before its loop runs (the
    /// loop "paused"). Once the loop drains it, the next query brings the
    /// socket's drop count, and every datagram sent is either answered or
    /// counted as dropped.
    #[cfg(target_os = "linux")]
    #[test]
    fn drops_on_a_socket_flooded_while_its_loop_is_paused_are_counted() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let _rt = rt.enter();
        let small = UdpBuffers {
            recv: 4096,
            send: 0,
        };
        let (socks, granted) = bind_udp_with("127.0.0.1:0".parse().unwrap(), 1, small).unwrap();
        assert_eq!(granted.recv, 4096);
        let server = socks.into_iter().next().unwrap().into_std().unwrap();
        let addr = server.local_addr().unwrap();

        const FLOOD: u16 = 2000;
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        for id in 0..FLOOD {
            client.send_to(&a_query(id), addr).unwrap();
        }

        let metrics = Metrics::new();
        let answered = metrics.requests.get_or_create(&RequestLabels {
            qtype: "A",
            proto: "udp",
        });
        let dropped = metrics.udp_receive_dropped.clone();
        assert_eq!(dropped.get(), 0, "nothing read yet, nothing counted");
        let stop = CancellationToken::new();
        let thread = {
            let (m, stop) = (metrics.clone(), stop.clone());
            std::thread::spawn(move || run_udp_blocking(server, one_pod(), m, None, stop))
        };
        // The loop reads what the buffer held...
        let deadline = Instant::now() + Duration::from_secs(10);
        while answered.get() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        // ...then one query at a time until the count arrives with one of
        // them (bounded: 50 probes, 1 s each at most).
        client
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut probes = 0u64;
        let mut buf = [0u8; 1500];
        while dropped.get() == 0 && probes < 50 && Instant::now() < deadline {
            client.send_to(&a_query(FLOOD + 1), addr).unwrap();
            probes += 1;
            // Replies to the flood's survivors come first; wait for this one.
            let until = Instant::now() + Duration::from_secs(1);
            while Instant::now() < until {
                match client.recv(&mut buf) {
                    Ok(n) if n >= 2 && buf[..2] == (FLOOD + 1).to_be_bytes() => break,
                    _ => {}
                }
            }
        }
        let sent = u64::from(FLOOD) + probes;
        // Every datagram was answered or dropped, and the drops are counted.
        let deadline = Instant::now() + Duration::from_secs(10);
        while answered.get() + dropped.get() < sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.cancel();
        thread.join().unwrap();
        assert!(dropped.get() > 0, "no drops counted after {probes} probes");
        assert_eq!(
            answered.get() + dropped.get(),
            sent,
            "answered {} + dropped {} of {sent} sent",
            answered.get(),
            dropped.get()
        );
        assert!(
            metrics.encode().contains(&format!(
                "podns_udp_receive_dropped_total {}",
                dropped.get()
            )),
            "exported"
        );
    }
}
