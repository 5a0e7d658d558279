//! Receiving and sending UDP datagrams in batches. [`Datagrams`] is what a
//! UDP serving loop needs; Linux has `recvmmsg`/`sendmmsg` ([`super::mmsg`]),
//! everything else (and a test on Linux) the portable [`OneByOne`].

use std::io;
use std::net::{SocketAddr, UdpSocket};

/// A receive buffer for up to [`Datagrams::capacity`] datagrams and a way
/// to send replies.
pub trait Datagrams {
    /// How many datagrams one [`Datagrams::recv`] may return.
    fn capacity(&self) -> usize;
    /// Block until at least one datagram arrives (or the socket's read
    /// timeout passes), then take what else is queued, up to the capacity.
    fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize>;
    /// The `i`th datagram of the last receive and its sender (`None` for
    /// an address family we do not serve).
    fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>);
    /// Send each `(bytes, to)`; a datagram the kernel refuses is skipped,
    /// as a failed `send_to` would be. Returns how many went out.
    fn send(&mut self, socket: &UdpSocket, msgs: &[(&[u8], SocketAddr)]) -> usize;
    /// The socket's running count of datagrams the kernel dropped (its
    /// receive queue was full), as the last receive reported it; `None`
    /// until a receive has reported one, or where the OS does not (only
    /// Linux's batch does, from `SO_RXQ_OVFL`). Wraps at 2^32.
    fn dropped(&self) -> Option<u32> {
        None
    }
}

/// Receive buffer per datagram; a longer query is cut, fails to parse and
/// gets FORMERR.
pub const MAX_QUERY: usize = 4096;

/// One `recv_from` and one `send_to` per datagram: portable, and the
/// reference the batched version is tested against (built on Linux for
/// that test alone).
#[cfg(any(test, not(target_os = "linux")))]
pub struct OneByOne {
    buf: Vec<u8>,
    len: usize,
    from: Option<SocketAddr>,
}

#[cfg(any(test, not(target_os = "linux")))]
impl Default for OneByOne {
    fn default() -> Self {
        Self {
            buf: vec![0; MAX_QUERY],
            len: 0,
            from: None,
        }
    }
}

#[cfg(any(test, not(target_os = "linux")))]
impl Datagrams for OneByOne {
    fn capacity(&self) -> usize {
        1
    }

    fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        let (len, from) = socket.recv_from(&mut self.buf)?;
        self.len = len;
        self.from = Some(from);
        Ok(1)
    }

    fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        debug_assert_eq!(i, 0);
        (&self.buf[..self.len], self.from)
    }

    fn send(&mut self, socket: &UdpSocket, msgs: &[(&[u8], SocketAddr)]) -> usize {
        msgs.iter()
            .filter(|(bytes, to)| socket.send_to(bytes, to).is_ok())
            .count()
    }
}
