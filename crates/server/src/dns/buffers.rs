//! UDP socket buffer sizes. A UDP socket's receive buffer is all that
//! holds queries while its loop is not reading (a scheduling hiccup of a
//! few milliseconds on a busy node); the kernel's default
//! (`net.core.rmem_default`, often 208 KiB) holds about 1,000 queries, and
//! a datagram that finds it full is dropped: the client waits a resolver
//! timeout for a name that was there. So podns asks for its own size on
//! every UDP socket: with `SO_RCVBUFFORCE` when the process may
//! (`CAP_NET_ADMIN`), else with `SO_RCVBUF`, which the kernel caps at
//! `net.core.rmem_max`. What was granted is read back, logged and exported.

use std::io;

use socket2::Socket;

/// Default of `--udp-recv-buffer`: 4 MiB, about 20,000 queries queued.
pub const DEFAULT_RECV: usize = 4 << 20;
/// Default of `--udp-send-buffer`: replies leave as fast as they are made
/// on loopback; on a NIC the send buffer bounds what waits in its queue.
pub const DEFAULT_SEND: usize = 1 << 20;
/// The largest size accepted: the kernel keeps sizes as an `int`, doubled.
pub const MAX: usize = 1 << 30;

/// Buffer sizes asked of the kernel for each UDP socket, in bytes; 0
/// leaves the system's default (`net.core.rmem_default`/`wmem_default`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpBuffers {
    pub recv: usize,
    pub send: usize,
}

impl Default for UdpBuffers {
    fn default() -> Self {
        Self {
            recv: DEFAULT_RECV,
            send: DEFAULT_SEND,
        }
    }
}

/// What the kernel granted a socket, in the units asked: Linux doubles a
/// size when it is set, for its bookkeeping, and reports the doubled
/// value, so a granted size here is half of what `getsockopt` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    pub recv: usize,
    pub send: usize,
    /// The sizes were forced past `net.core.{r,w}mem_max` (`CAP_NET_ADMIN`).
    pub forced: bool,
}

impl Granted {
    /// The smaller of two sockets' grants (what every socket has at least).
    pub fn min(self, other: Self) -> Self {
        Self {
            recv: self.recv.min(other.recv),
            send: self.send.min(other.send),
            forced: self.forced && other.forced,
        }
    }
}

/// Ask for `asked` on `sock` and read back what the kernel granted.
pub fn apply(sock: &Socket, asked: UdpBuffers) -> io::Result<Granted> {
    let recv = size(sock, true, asked.recv, true)?;
    let send = size(sock, false, asked.send, true)?;
    Ok(Granted {
        recv: recv.0,
        send: send.0,
        forced: recv.1 && send.1,
    })
}

/// Set one buffer (forcing it past the sysctl cap when `force` and the
/// process may) and return the size granted and whether it was forced.
fn size(sock: &Socket, receive: bool, asked: usize, force: bool) -> io::Result<(usize, bool)> {
    let asked = asked.min(MAX);
    let mut forced = false;
    if asked > 0 {
        #[cfg(target_os = "linux")]
        {
            forced = force && super::mmsg::force_buffer_size(sock, receive, asked).is_ok();
        }
        #[cfg(not(target_os = "linux"))]
        let _ = force;
        if !forced {
            if receive {
                sock.set_recv_buffer_size(asked)?;
            } else {
                sock.set_send_buffer_size(asked)?;
            }
        }
    }
    let reported = if receive {
        sock.recv_buffer_size()?
    } else {
        sock.send_buffer_size()?
    };
    Ok((
        if cfg!(target_os = "linux") {
            reported / 2
        } else {
            reported
        },
        forced,
    ))
}

/// The sysctl that caps an unforced size (Linux), when readable.
pub fn sysctl_cap(receive: bool) -> Option<usize> {
    let name = if receive { "rmem_max" } else { "wmem_max" };
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The one start-up line about the buffers: asked and granted, and when
/// the receive buffer came out smaller than asked, why and what to do.
pub fn describe(asked: UdpBuffers, granted: Granted) -> (bool, String) {
    let how = if granted.forced {
        "SO_RCVBUFFORCE/SO_SNDBUFFORCE"
    } else {
        "SO_RCVBUF/SO_SNDBUF"
    };
    let mut line = format!(
        "udp socket buffers: receive {} bytes granted of {} asked, send {} of {} ({how})",
        granted.recv, asked.recv, granted.send, asked.send
    );
    let short = granted.recv < asked.recv.min(MAX);
    if short {
        let cap = sysctl_cap(true).map_or_else(|| "?".to_string(), |c| c.to_string());
        line.push_str(&format!(
            "; the receive buffer is capped by net.core.rmem_max = {cap}: raise that sysctl \
             or give podns CAP_NET_ADMIN, or queries are dropped in bursts (deploy/README.md)"
        ));
    }
    (short, line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use socket2::{Domain, Protocol, Type};

    fn udp() -> Socket {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        s
    }

    #[cfg(target_os = "linux")]
    fn may_force() -> bool {
        // CAP_NET_ADMIN is bit 12 of the effective capabilities.
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
                u64::from_str_radix(hex, 16).ok()
            })
            .is_some_and(|caps| caps & (1 << 12) != 0)
    }

    /// The size asked is granted exactly when the process may force it;
    /// without the capability it is the sysctl cap when that is lower, and
    /// the start-up line then says so.
    #[test]
    fn the_granted_size_is_the_one_asked_or_the_kernel_cap_and_that_is_said() {
        let asked = UdpBuffers {
            recv: 6 << 20,
            send: 3 << 20,
        };
        let granted = apply(&udp(), asked).unwrap();
        #[cfg(target_os = "linux")]
        {
            let rmem_max = sysctl_cap(true).unwrap();
            let wmem_max = sysctl_cap(false).unwrap();
            assert_eq!(granted.forced, may_force());
            if granted.forced {
                assert_eq!((granted.recv, granted.send), (asked.recv, asked.send));
            } else {
                assert_eq!(granted.recv, asked.recv.min(rmem_max));
                assert_eq!(granted.send, asked.send.min(wmem_max));
            }
            // The unforced path, whatever this process may: capped by the
            // sysctl, and the line names the sysctl and its value.
            let s = udp();
            let (recv, forced) = size(&s, true, rmem_max + 4096, false).unwrap();
            assert!(!forced);
            assert_eq!(recv, rmem_max);
            let capped = Granted {
                recv,
                send: asked.send,
                forced,
            };
            let (short, line) = describe(
                UdpBuffers {
                    recv: rmem_max + 4096,
                    send: asked.send,
                },
                capped,
            );
            assert!(short, "{line}");
            assert!(
                line.contains(&format!("capped by net.core.rmem_max = {rmem_max}")),
                "{line}"
            );
            assert!(line.contains(&format!("receive {rmem_max} bytes granted")));
        }
        let (short, line) = describe(asked, granted);
        assert_eq!(short, granted.recv < asked.recv, "{line}");
        // A size of 0 leaves the default alone (and is not "short").
        let s = udp();
        let before = s.recv_buffer_size().unwrap();
        let g = apply(&s, UdpBuffers { recv: 0, send: 0 }).unwrap();
        assert_eq!(s.recv_buffer_size().unwrap(), before);
        assert!(!describe(UdpBuffers { recv: 0, send: 0 }, g).0);
    }
}
