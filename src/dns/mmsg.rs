//! Batched UDP I/O on Linux: `recvmmsg(2)` and `sendmmsg(2)` move up to
//! [`BATCH`] datagrams per system call. Under load most of a DNS server's
//! time is the kernel's per-call cost (the profile in BENCHMARKS.md: two
//! thirds of podns's CPU was one `recvfrom` and one `sendto` per query);
//! NSD and Knot batch the same way. The calls go through `nix`, so podns
//! itself stays `forbid(unsafe_code)`.

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg};

/// Datagrams per system call.
pub const BATCH: usize = 32;
/// Receive buffer per datagram; a longer query is cut, fails to parse and
/// gets FORMERR, as with a single `recv`.
pub const MAX_QUERY: usize = 4096;

/// Receive buffers and headers, allocated once per UDP loop.
pub struct Batch {
    bufs: Vec<u8>,
    got: Vec<(usize, Option<SocketAddr>)>,
    recv_hdrs: MultiHeaders<SockaddrStorage>,
    send_hdrs: MultiHeaders<SockaddrStorage>,
}

impl Default for Batch {
    fn default() -> Self {
        Self {
            bufs: vec![0; BATCH * MAX_QUERY],
            got: Vec::with_capacity(BATCH),
            recv_hdrs: MultiHeaders::preallocate(BATCH, None),
            send_hdrs: MultiHeaders::preallocate(BATCH, None),
        }
    }
}

impl Batch {
    /// Block until at least one datagram arrives (or the socket's read
    /// timeout passes), then take whatever else is queued, up to [`BATCH`].
    /// Returns how many were received.
    pub fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        self.got.clear();
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
            .bufs
            .chunks_mut(MAX_QUERY)
            .map(|b| [IoSliceMut::new(b)])
            .collect();
        let results = recvmmsg(
            socket.as_raw_fd(),
            &mut self.recv_hdrs,
            iovs.iter_mut(),
            MsgFlags::MSG_WAITFORONE,
            None,
        )
        .map_err(io::Error::from)?;
        for r in results {
            self.got
                .push((r.bytes.min(MAX_QUERY), r.address.and_then(socket_addr)));
        }
        Ok(self.got.len())
    }

    /// The `i`th datagram of the last [`Self::recv`] and its sender
    /// (`None` for an address family we do not serve).
    pub fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        let (len, from) = self.got[i];
        let start = i * MAX_QUERY;
        (&self.bufs[start..start + len], from)
    }

    /// Send each `(bytes, to)` in as few `sendmmsg` calls as the kernel
    /// allows. A datagram the kernel refuses (unreachable, no buffer) is
    /// skipped, as a failed `send_to` would be; returns how many went out.
    pub fn send(&mut self, socket: &UdpSocket, msgs: &[(&[u8], SocketAddr)]) -> usize {
        let mut sent = 0;
        for chunk in msgs.chunks(BATCH) {
            let slices: Vec<[IoSlice<'_>; 1]> =
                chunk.iter().map(|(b, _)| [IoSlice::new(b)]).collect();
            let addrs: Vec<Option<SockaddrStorage>> = chunk
                .iter()
                .map(|(_, to)| Some(SockaddrStorage::from(*to)))
                .collect();
            let mut from = 0;
            while from < chunk.len() {
                let r = sendmmsg(
                    socket.as_raw_fd(),
                    &mut self.send_hdrs,
                    &slices[from..],
                    &addrs[from..],
                    [],
                    MsgFlags::empty(),
                );
                match r.map(|results| results.count()) {
                    Ok(0) => from += 1,
                    Ok(n) => {
                        sent += n;
                        from += n;
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(error) => {
                        tracing::debug!(%error, to = %chunk[from].1, "udp send failed");
                        from += 1; // skip the one the kernel refused
                    }
                }
            }
        }
        sent
    }
}

fn socket_addr(s: SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::from(*v4));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_is_received_and_answered_in_batches_with_sender_addresses() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let clients: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for (i, c) in clients.iter().enumerate() {
            for j in 0..20u8 {
                c.send_to(&[i as u8, j], server.local_addr().unwrap())
                    .unwrap();
            }
        }
        let mut batch = Batch::default();
        let mut got = Vec::new();
        while got.len() < 60 {
            let n = batch.recv(&server).unwrap();
            assert!((1..=BATCH).contains(&n));
            for i in 0..n {
                let (bytes, from) = batch.get(i);
                got.push((bytes.to_vec(), from.unwrap()));
            }
        }
        // Every datagram, from the right sender, in order per sender.
        for (i, c) in clients.iter().enumerate() {
            let mine: Vec<u8> = got
                .iter()
                .filter(|(_, from)| *from == c.local_addr().unwrap())
                .map(|(b, _)| {
                    assert_eq!(b[0], i as u8);
                    b[1]
                })
                .collect();
            assert_eq!(mine, (0..20).collect::<Vec<u8>>());
        }
        // Echo all 60 back in one call; each client gets its own 20.
        let msgs: Vec<(&[u8], SocketAddr)> = got.iter().map(|(b, a)| (&b[..], *a)).collect();
        assert_eq!(batch.send(&server, &msgs), 60);
        for (i, c) in clients.iter().enumerate() {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 16];
            for j in 0..20u8 {
                let n = c.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], &[i as u8, j]);
            }
        }
    }

    #[test]
    fn ipv6_senders_are_decoded() {
        let Ok(server) = UdpSocket::bind("[::1]:0") else {
            eprintln!("skipped: no IPv6 loopback");
            return;
        };
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let c = UdpSocket::bind("[::1]:0").unwrap();
        c.send_to(b"hi", server.local_addr().unwrap()).unwrap();
        let mut batch = Batch::default();
        assert_eq!(batch.recv(&server).unwrap(), 1);
        assert_eq!(batch.get(0), (&b"hi"[..], Some(c.local_addr().unwrap())));
    }
}
