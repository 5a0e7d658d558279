//! Batched UDP I/O on Linux: `recvmmsg(2)` and `sendmmsg(2)` move up to
//! [`BATCH`] datagrams per system call. Under load most of a DNS server's
//! time is the kernel's per-call cost (the profile in
//! benches/results/notes/2026-12-03-index-history.md: two
//! thirds of podns's CPU was one `recvfrom` and one `sendto` per query);
//! NSD and Knot batch the same way.
//!
//! Each received datagram also carries the socket's count of datagrams the
//! kernel dropped (`SO_RXQ_OVFL`, see [`enable_drop_count`]) in its
//! ancillary data, so the drops are counted without a system call of
//! their own.
//!
//! This module is the one place in podns with `unsafe` code (the crate is
//! `deny(unsafe_code)`, allowed here only): two system calls, the reading
//! of the socket addresses and ancillary data the kernel fills in, and
//! `setsockopt` for the options socket2 lacks. `nix` wraps both
//! calls, but learning how many datagrams its `sendmmsg` sent means
//! iterating results that read never-initialised address slots, so the
//! calls are made here directly, with every pointer's provenance stated.
//! The headers are built on the stack before each call and point only
//! into buffers that outlive it.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;

use super::datagrams::Datagrams;

/// Datagrams per system call.
pub const BATCH: usize = 32;
pub use super::datagrams::MAX_QUERY;

/// Ancillary data room per datagram: one `SO_RXQ_OVFL` message (a u32)
/// takes `CMSG_SPACE(4)`, 24 bytes on 64-bit Linux; u64s keep it aligned
/// for a `cmsghdr`.
const CONTROL_WORDS: usize = 4;

/// Receive buffers, the addresses of the last batch's senders and the
/// socket's drop count the kernel reported with them.
pub struct Batch {
    bufs: Vec<u8>,
    lens: [usize; BATCH],
    addrs: [libc::sockaddr_storage; BATCH],
    control: [[u64; CONTROL_WORDS]; BATCH],
    dropped: Option<u32>,
}

impl Default for Batch {
    fn default() -> Self {
        Self {
            bufs: vec![0; BATCH * MAX_QUERY],
            lens: [0; BATCH],
            // SAFETY: sockaddr_storage is plain old data; all zeroes is a
            // valid value (family AF_UNSPEC).
            addrs: unsafe { zeroed() },
            control: [[0; CONTROL_WORDS]; BATCH],
            dropped: None,
        }
    }
}

impl Datagrams for Batch {
    fn capacity(&self) -> usize {
        BATCH
    }

    /// Block until at least one datagram arrives (or the socket's read
    /// timeout passes), then take whatever else is queued, up to [`BATCH`].
    /// Returns how many were received.
    fn recv(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        // SAFETY: iovec and mmsghdr are plain old data; zeroed is valid.
        let mut iov: [libc::iovec; BATCH] = unsafe { zeroed() };
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
        for (i, (chunk, (v, h))) in self
            .bufs
            .chunks_mut(MAX_QUERY)
            .zip(iov.iter_mut().zip(hdrs.iter_mut()))
            .enumerate()
        {
            v.iov_base = chunk.as_mut_ptr().cast();
            v.iov_len = chunk.len();
            h.msg_hdr.msg_name = (&raw mut self.addrs[i]).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.control[i].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = size_of::<[u64; CONTROL_WORDS]>() as _;
        }
        // SAFETY: each header points at its own iovec (alive on this stack
        // frame), whose buffer is a distinct MAX_QUERY slice of self.bufs,
        // at its own sockaddr_storage in self.addrs and its own control
        // buffer in self.control, each with its right length; nothing else
        // borrows them during the call. The kernel writes at most iov_len
        // bytes, msg_namelen address bytes and msg_controllen control bytes.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (n as usize).min(BATCH);
        for (len, h) in self.lens.iter_mut().zip(&hdrs).take(n) {
            *len = (h.msg_len as usize).min(MAX_QUERY);
        }
        // The count is the socket's running total when each datagram was
        // queued, so the newest datagram that carries one has the latest.
        // The kernel attaches it only once the total is above 0.
        if let Some(d) = hdrs[..n].iter().rev().find_map(|h| drop_count(&h.msg_hdr)) {
            self.dropped = Some(d);
        }
        Ok(n)
    }

    fn dropped(&self) -> Option<u32> {
        self.dropped
    }

    /// The `i`th datagram of the last [`Self::recv`] and its sender
    /// (`None` for an address family we do not serve).
    fn get(&self, i: usize) -> (&[u8], Option<SocketAddr>) {
        let start = i * MAX_QUERY;
        (
            &self.bufs[start..start + self.lens[i]],
            socket_addr(&self.addrs[i]),
        )
    }

    /// Send each `(bytes, to)` in as few `sendmmsg` calls as the kernel
    /// allows. A datagram the kernel refuses (unreachable, no buffer) is
    /// skipped, as a failed `send_to` would be; returns how many went out.
    fn send(&mut self, socket: &UdpSocket, msgs: &[(&[u8], SocketAddr)]) -> usize {
        let mut sent = 0;
        for chunk in msgs.chunks(BATCH) {
            let addrs: Vec<socket2::SockAddr> = chunk
                .iter()
                .map(|(_, to)| socket2::SockAddr::from(*to))
                .collect();
            // SAFETY: plain old data, zeroed is valid.
            let mut iov: [libc::iovec; BATCH] = unsafe { zeroed() };
            let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { zeroed() };
            for ((((bytes, _), addr), v), h) in
                chunk.iter().zip(&addrs).zip(&mut iov).zip(&mut hdrs)
            {
                v.iov_base = bytes.as_ptr().cast_mut().cast();
                v.iov_len = bytes.len();
                h.msg_hdr.msg_name = addr.as_ptr().cast_mut().cast();
                h.msg_hdr.msg_namelen = addr.len();
                h.msg_hdr.msg_iov = v;
                h.msg_hdr.msg_iovlen = 1;
            }
            let mut from = 0;
            while from < chunk.len() {
                // SAFETY: hdrs[from..chunk.len()] point at iovecs on this
                // frame, into `chunk`'s byte slices and into `addrs`, all
                // alive and unmoved until the call returns; the kernel only
                // reads through them (and writes msg_len in the headers).
                let n = unsafe {
                    libc::sendmmsg(
                        socket.as_raw_fd(),
                        hdrs.as_mut_ptr().add(from),
                        (chunk.len() - from) as libc::c_uint,
                        0,
                    )
                };
                if n > 0 {
                    sent += n as usize;
                    from += n as usize;
                    continue;
                }
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    tracing::debug!(%error, to = %chunk[from].1, "udp send failed");
                    from += 1; // skip the one the kernel refused
                }
            }
        }
        sent
    }
}

/// The `SO_RXQ_OVFL` count in a received message's ancillary data.
fn drop_count(h: &libc::msghdr) -> Option<u32> {
    if h.msg_control.is_null() {
        return None;
    }
    // SAFETY: msg_control points at a control buffer of ours (Batch::recv)
    // in which the kernel wrote msg_controllen bytes of cmsghdr-aligned
    // messages; CMSG_FIRSTHDR/CMSG_NXTHDR stay within msg_controllen (null
    // when no whole header is left), and CMSG_DATA of a message whose
    // length covers a u32 points at that u32 (read unaligned to make no
    // claim about its alignment).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SO_RXQ_OVFL
                && (*c).cmsg_len >= libc::CMSG_LEN(size_of::<u32>() as u32) as _
            {
                return Some(libc::CMSG_DATA(c).cast::<u32>().read_unaligned());
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// Ask the kernel to report `socket`'s count of dropped datagrams
/// (receive queue full, and the like) with every datagram received from
/// it: `SO_RXQ_OVFL`. A datagram carries the count as it was when the
/// datagram was queued, so drops before this call are reported too, but
/// only by datagrams queued after it.
pub fn enable_drop_count(socket: &impl AsRawFd) -> io::Result<()> {
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)
}

/// `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE`: a buffer size past
/// `net.core.rmem_max` / `wmem_max`, for a process with `CAP_NET_ADMIN`
/// (`EPERM` otherwise). `receive` picks the buffer.
pub fn force_buffer_size(socket: &impl AsRawFd, receive: bool, bytes: usize) -> io::Result<()> {
    let name = if receive {
        libc::SO_RCVBUFFORCE
    } else {
        libc::SO_SNDBUFFORCE
    };
    let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, name, bytes)
}

fn set_int_option(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int on this stack frame, passed with
    // its size; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The sender address the kernel wrote into `s`.
fn socket_addr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (its family says so);
            // sockaddr_storage is large and aligned enough for any sockaddr.
            let a = unsafe { &*(&raw const *s).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let a = unsafe { &*(&raw const *s).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
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
