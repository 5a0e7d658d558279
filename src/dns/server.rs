//! Sockets. UDP: several `SO_REUSEPORT` sockets, each with its own receive
//! loop that answers in place (no task per query). TCP: hickory-server,
//! which handles framing, idle timeouts and per-connection ordering.
//! Servers take already-bound sockets and a shutdown token.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Header, Message, ResponseCode};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

use crate::admin::Metrics;
use crate::admin::metrics::{RcodeLabels, RequestLabels, qtype_label, rcode_label};

use super::answer::{Answerer, Reply, Transport};

/// How long an idle TCP connection is kept.
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bind `n` UDP sockets to one address with `SO_REUSEPORT`, so the kernel
/// spreads queries over them. With port 0 the first socket picks the port
/// and the rest join it.
pub fn bind_udp(addr: SocketAddr, n: usize) -> std::io::Result<Vec<UdpSocket>> {
    let mut out = Vec::with_capacity(n.max(1));
    let mut addr = addr;
    for _ in 0..n.max(1) {
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_reuse_port(true)?;
        if addr.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        sock.set_nonblocking(true)?;
        sock.bind(&addr.into())?;
        let std_sock: std::net::UdpSocket = sock.into();
        addr = std_sock.local_addr()?;
        out.push(UdpSocket::from_std(std_sock)?);
    }
    Ok(out)
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

fn count(metrics: &Metrics, reply: &Reply, transport: Transport, started: Instant) {
    metrics
        .requests
        .get_or_create(&RequestLabels {
            qtype: qtype_label(reply.qtype),
            proto: transport.label(),
        })
        .inc();
    metrics
        .responses
        .get_or_create(&RcodeLabels {
            rcode: rcode_label(reply.rcode),
        })
        .inc();
    if reply.truncated {
        metrics.truncated.inc();
    }
    metrics
        .request_duration
        .observe(started.elapsed().as_secs_f64());
}

/// One UDP loop on a thread of its own: a blocking receive, the answer
/// built in place, a blocking send; no task, no waker, no epoll round per
/// query. Stops within [`UDP_POLL`] of `shutdown`.
pub fn run_udp_blocking(
    socket: std::net::UdpSocket,
    answerer: Arc<Answerer>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    if let Err(error) = socket
        .set_nonblocking(false)
        .and_then(|()| socket.set_read_timeout(Some(UDP_POLL)))
    {
        tracing::error!(%error, "udp socket setup failed");
        return;
    }
    let mut buf = vec![0u8; 4096];
    while !shutdown.is_cancelled() {
        let (len, src) = match socket.recv_from(&mut buf) {
            Ok(v) => v,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(error) => {
                tracing::debug!(%error, "udp receive failed");
                continue;
            }
        };
        let started = Instant::now();
        let Some(reply) = answerer.handle(&buf[..len], Transport::Udp) else {
            continue;
        };
        count(&metrics, &reply, Transport::Udp, started);
        if let Err(error) = socket.send_to(&reply.bytes, src) {
            tracing::debug!(%error, %src, "udp send failed");
        }
    }
}

/// How often a blocking UDP loop looks at the shutdown token when idle.
pub const UDP_POLL: Duration = Duration::from_millis(100);

/// One UDP receive loop: receive, answer, send, until shutdown.
pub async fn run_udp(
    socket: UdpSocket,
    answerer: Arc<Answerer>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut buf = vec![0u8; 4096];
    loop {
        let (len, src) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(v) => v,
                Err(error) => {
                    tracing::debug!(%error, "udp receive failed");
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let started = Instant::now();
        let Some(reply) = answerer.handle(&buf[..len], Transport::Udp) else {
            continue;
        };
        count(&metrics, &reply, Transport::Udp, started);
        if let Err(error) = socket.send_to(&reply.bytes, src).await {
            tracing::debug!(%error, %src, "udp send failed");
        }
    }
}

/// The TCP side, through hickory-server.
struct TcpHandler {
    answerer: Arc<Answerer>,
    metrics: Metrics,
}

#[async_trait::async_trait]
impl RequestHandler for TcpHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let started = Instant::now();
        let resp = match Message::from_vec(request.as_slice()) {
            Ok(m) => self.answerer.answer(&m),
            Err(_) => Message::error_msg(
                request.metadata.id,
                request.metadata.op_code,
                ResponseCode::FormErr,
            ),
        };
        let reply = Reply {
            bytes: Vec::new(),
            rcode: resp.metadata.response_code,
            qtype: resp.queries.first().map(|q| q.query_type()),
            truncated: false,
        };
        count(&self.metrics, &reply, Transport::Tcp, started);
        let mut builder = MessageResponseBuilder::new(&request.queries, None);
        if let Some(edns) = &resp.edns {
            builder.edns(edns);
        }
        let msg = builder.build(
            resp.metadata,
            resp.answers.iter(),
            resp.authorities.iter(),
            std::iter::empty(),
            resp.additionals.iter(),
        );
        match response_handle.send_response(msg).await {
            Ok(info) => info,
            Err(error) => {
                tracing::debug!(%error, "tcp send failed");
                let mut metadata =
                    hickory_proto::op::Metadata::response_from_request(&request.metadata);
                metadata.response_code = ResponseCode::ServFail;
                Header {
                    metadata,
                    counts: Default::default(),
                }
                .into()
            }
        }
    }
}

/// Serve TCP on `listener` until `shutdown`, then stop accepting.
pub async fn run_tcp(
    listener: TcpListener,
    answerer: Arc<Answerer>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut server = Server::new(TcpHandler { answerer, metrics });
    server.register_listener(listener, TCP_IDLE_TIMEOUT, 64 * 1024);
    shutdown.cancelled().await;
    if let Err(error) = server.shutdown_gracefully().await {
        tracing::debug!(%error, "tcp server stopped with an error");
    }
}
