//! The pod IP pools: addresses handed out as a CNI's host-local IPAM
//! would, fresh ones first, and given back when a pod is deleted.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard};

use super::WorkloadError;

/// A range of addresses handed out in order, then reused oldest-freed first.
struct Pool {
    base: u128,
    size: u128,
    v6: bool,
    next: u128,
    free: VecDeque<u128>,
    warned: bool,
}

impl Pool {
    fn parse(cidr: &str) -> Result<Pool, WorkloadError> {
        let err = || WorkloadError::Cidr(cidr.to_string());
        let (ip, bits) = cidr.split_once('/').ok_or_else(err)?;
        let ip: IpAddr = ip.parse().map_err(|_| err())?;
        let bits: u32 = bits.parse().map_err(|_| err())?;
        let (base, width, v6) = match ip {
            IpAddr::V4(a) => (u32::from(a) as u128, 32, false),
            IpAddr::V6(a) => (u128::from(a), 128, true),
        };
        if bits > width || bits + 2 > width {
            return Err(err());
        }
        let host = width - bits;
        let size = if host >= 127 {
            1u128 << 126
        } else {
            1u128 << host
        };
        let mask = if host >= 128 {
            0
        } else {
            !((1u128 << host) - 1)
        };
        Ok(Pool {
            base: base & mask,
            size,
            v6,
            // Skip the network address (and .1, the gateway by habit).
            next: 2,
            free: VecDeque::new(),
            warned: false,
        })
    }

    fn addr(&self, off: u128) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.base + off))
        } else {
            IpAddr::V4(Ipv4Addr::from((self.base + off) as u32))
        }
    }

    fn alloc(&mut self) -> (u128, IpAddr) {
        // Fresh addresses first, so a restarted pod gets a new IP.
        let last = self.size - 1; // broadcast (v4)
        let off = if self.next < last {
            self.next += 1;
            self.next - 1
        } else if let Some(o) = self.free.pop_front() {
            o
        } else {
            if !self.warned {
                self.warned = true;
                tracing::warn!(
                    size = %self.size,
                    "pod CIDR exhausted: handing out duplicate IPs; pass a larger --pod-cidr"
                );
            }
            self.next = 2;
            self.next += 1;
            2
        };
        (off, self.addr(off))
    }

    fn release(&mut self, off: u128) {
        self.free.push_back(off);
    }
}

/// The pods' addresses: one pool per family, and which offsets each pod
/// holds, to give them back when it is deleted.
pub(super) struct PodIps {
    inner: Mutex<Held>,
    dual_stack: bool,
}

struct Held {
    v4: Pool,
    v6: Option<Pool>,
    by_uid: HashMap<String, (u128, Option<u128>)>,
}

impl PodIps {
    /// Pools of `v4` and, for dual-stack pods, `v6` (CIDRs).
    pub(super) fn new(v4: &str, v6: Option<&str>) -> Result<PodIps, WorkloadError> {
        let v6 = v6.map(Pool::parse).transpose()?;
        Ok(PodIps {
            dual_stack: v6.is_some(),
            inner: Mutex::new(Held {
                v4: Pool::parse(v4)?,
                v6,
                by_uid: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether pods get an IPv6 address too.
    pub(super) fn dual_stack(&self) -> bool {
        self.dual_stack
    }

    /// The addresses of pod `uid`: IPv4, and IPv6 when dual-stack.
    pub(super) fn alloc(&self, uid: &str) -> (IpAddr, Option<IpAddr>) {
        let mut held = self.lock();
        let (o4, a4) = held.v4.alloc();
        let b = held.v6.as_mut().map(|p| p.alloc());
        held.by_uid.insert(uid.to_string(), (o4, b.map(|x| x.0)));
        (a4, b.map(|x| x.1))
    }

    /// Gives pod `uid`'s addresses back.
    pub(super) fn release(&self, uid: &str) {
        let mut held = self.lock();
        if let Some((a, b)) = held.by_uid.remove(uid) {
            held.v4.release(a);
            if let (Some(b), Some(p)) = (b, held.v6.as_mut()) {
                p.release(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hands_out_fresh_then_freed() {
        let mut p = Pool::parse("10.244.0.0/30").unwrap();
        let (o, a) = p.alloc();
        assert_eq!(a, "10.244.0.2".parse::<IpAddr>().unwrap());
        p.release(o);
        // The /30 has one usable fresh address; then the freed one.
        let (_, b) = p.alloc();
        assert_eq!(b, "10.244.0.2".parse::<IpAddr>().unwrap());
        let mut p6 = Pool::parse("fd00:10:244::/64").unwrap();
        assert_eq!(p6.alloc().1, "fd00:10:244::2".parse::<IpAddr>().unwrap());
        assert!(Pool::parse("10.0.0.0").is_err());
        assert!(Pool::parse("10.0.0.0/33").is_err());
    }
}
