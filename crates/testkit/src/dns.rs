//! DNS questions over real sockets: the message, the transports, and what
//! tests read from an answer.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

/// The zone the suites serve.
pub const ZONE: &str = "cluster.local";

/// `name` under [`ZONE`] unless it ends with a dot.
pub fn fqdn(name: &str) -> String {
    if name.ends_with('.') {
        name.to_string()
    } else {
        format!("{name}.{ZONE}.")
    }
}

/// A query for `name` (as given: see [`fqdn`]) with a fresh ID, and an OPT
/// record offering `edns` bytes when given.
pub fn query(name: &str, qtype: RecordType, edns: Option<u16>) -> Message {
    let mut m = Message::new(fresh_id(), MessageType::Query, OpCode::Query);
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m
}

/// An ID no other query of this process has had lately.
fn fresh_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static N: AtomicU16 = AtomicU16::new(0);
    // Start where another process's test would not: by the process ID.
    let n = N.fetch_add(1, Ordering::Relaxed);
    (std::process::id() as u16).wrapping_mul(31).wrapping_add(n)
}

/// A message as TCP frames it: a 2-byte length, then the message.
fn framed(bytes: &[u8]) -> Vec<u8> {
    let mut v = (bytes.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(bytes);
    v
}

/// The address a test asks `server` from: loopback for loopback; for a
/// server on a network of the test's own (a pod, a ClusterIP on the real
/// node) the host's address there.
fn local_for(server: SocketAddr) -> &'static str {
    if server.ip().is_loopback() {
        "127.0.0.1:0"
    } else {
        "0.0.0.0:0"
    }
}

/// One UDP query, sent again on each 1 s timeout, up to 5 times (UDP may
/// drop); panics without an answer.
pub async fn udp(addr: SocketAddr, msg: &Message) -> Message {
    let sock = tokio::net::UdpSocket::bind(local_for(addr)).await.unwrap();
    let bytes = msg.to_vec().unwrap();
    let mut buf = vec![0u8; 65535];
    for _ in 0..5 {
        sock.send_to(&bytes, addr).await.unwrap();
        if let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(1), sock.recv_from(&mut buf)).await
        {
            let r = Message::from_vec(&buf[..n]).expect("server sends valid messages");
            assert_eq!(r.metadata.id, msg.metadata.id);
            return r;
        }
    }
    panic!("no UDP answer from {addr}");
}

/// One TCP query (2-byte length framing), 5 s to connect and to answer.
pub async fn tcp(addr: SocketAddr, msg: &Message) -> Message {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .expect("tcp connect in time")
        .unwrap();
    s.write_all(&framed(&msg.to_vec().unwrap())).await.unwrap();
    let mut len = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut len))
        .await
        .expect("tcp answer in time")
        .unwrap();
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

/// Ask for `name` (relative names get the zone) over UDP, EDNS 1232.
pub async fn ask(addr: SocketAddr, name: &str, qtype: RecordType) -> Message {
    udp(addr, &query(&fqdn(name), qtype, Some(1232))).await
}

pub fn rcode(m: &Message) -> ResponseCode {
    m.metadata.response_code
}

/// The addresses in the answer section, sorted, as strings.
pub fn addrs(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

/// The PTR targets in the answer section, in order.
pub fn ptrs(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::PTR(p) => Some(p.0.to_ascii()),
            _ => None,
        })
        .collect()
}

pub mod blocking {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream, UdpSocket};
    use std::time::Duration;

    use hickory_proto::op::Message;
    use hickory_proto::rr::RecordType;

    use super::{fqdn, framed, local_for, query};

    /// One question for `name` (relative names get the zone) over UDP,
    /// EDNS 1232, no recursion wanted, sent again on each 500 ms timeout
    /// up to 6 times; over TCP when the answer is truncated.
    pub fn ask(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
        try_ask(server, name, qtype).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ask`], with what went wrong as an error: for waits on a server
    /// that may not be up yet.
    pub fn try_ask(server: SocketAddr, name: &str, qtype: RecordType) -> Result<Message, String> {
        let mut m = query(&fqdn(name), qtype, Some(1232));
        m.metadata.recursion_desired = false;
        let bytes = m.to_vec().unwrap();
        let local = local_for(server);
        let sock = UdpSocket::bind(local).map_err(|e| format!("bind {local}: {e}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = vec![0u8; 65535];
        for _ in 0..6 {
            sock.send_to(&bytes, server)
                .map_err(|e| format!("send to {server}: {e}"))?;
            if let Ok((n, _)) = sock.recv_from(&mut buf) {
                let r = Message::from_vec(&buf[..n]).map_err(|e| {
                    format!("{server} answered {name} {qtype} with a bad message: {e}")
                })?;
                if r.metadata.truncation {
                    return tcp(server, &bytes);
                }
                return Ok(r);
            }
        }
        Err(format!("no answer from {server} for {name} {qtype}"))
    }

    fn tcp(server: SocketAddr, query: &[u8]) -> Result<Message, String> {
        let tcp = |e: std::io::Error| format!("TCP to {server}: {e}");
        let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(2)).map_err(tcp)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(tcp)?;
        s.write_all(&framed(query)).map_err(tcp)?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).map_err(tcp)?;
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).map_err(tcp)?;
        Message::from_vec(&buf)
            .map_err(|e| format!("{server} answered over TCP with a bad message: {e}"))
    }
}
