//! One service CIDR as the apiserver's bitmap allocator hands it out:
//! chosen addresses when free and in range, otherwise the next free one,
//! from above a small static band first.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use super::{Family, ServiceNetError};

/// Why an allocation failed: the allocator's errors, worded as the
/// apiserver words them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum AllocError {
    #[error("the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}")]
    NotInRange { ip: IpAddr, range: IpNet },
    #[error("provided IP is already allocated")]
    Allocated,
    #[error("range is full")]
    Full,
}

/// One service CIDR and the addresses taken from it. Offsets count from
/// the network address; the network address (and, for IPv4, broadcast)
/// are never handed out.
#[derive(Debug)]
pub(super) struct Range {
    pub(super) net: IpNet,
    base: u128,
    last: u128,
    /// Offsets below this are the "static band": dynamic allocation takes
    /// from above it first, so addresses users pick by hand (the
    /// conventional `10.96.0.10` of kube-dns) rarely collide
    /// (KEP-3070, `calculateRangeOffset`).
    band: u128,
    used: BTreeSet<u128>,
    /// Where the next dynamic allocation starts looking: addresses are
    /// handed out in order, fresh ones before released ones.
    next: u128,
}

impl Range {
    pub(super) fn new(net: IpNet) -> Result<Range, ServiceNetError> {
        let net = net.trunc();
        let host = u32::from(net.max_prefix_len() - net.prefix_len());
        // Keep offsets far from overflow; no simulated cluster comes near.
        let size = 1u128 << host.min(64);
        let last = match net {
            IpNet::V4(_) => size.saturating_sub(2),
            IpNet::V6(_) => size - 1,
        };
        if last < 1 {
            return Err(ServiceNetError::TooSmall(net));
        }
        let band = if size <= 16 {
            0
        } else {
            (size / 16).clamp(16, 256)
        };
        let base = match net.network() {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        let next = if band < last { band + 1 } else { 1 };
        Ok(Range {
            net,
            base,
            last,
            band,
            used: BTreeSet::new(),
            next,
        })
    }

    pub(super) fn family(&self) -> Family {
        Family::of(&self.net.network())
    }

    pub(super) fn addr(&self, off: u128) -> IpAddr {
        match self.net {
            IpNet::V4(_) => IpAddr::V4(((self.base + off) as u32).into()),
            IpNet::V6(_) => IpAddr::V6((self.base + off).into()),
        }
    }

    fn offset(&self, ip: &IpAddr) -> Option<u128> {
        if !self.net.contains(ip) {
            return None;
        }
        let n = match ip {
            IpAddr::V4(a) => u128::from(u32::from(*a)),
            IpAddr::V6(a) => u128::from(*a),
        };
        let off = n - self.base;
        (1..=self.last).contains(&off).then_some(off)
    }

    pub(super) fn allocate(&mut self, ip: &IpAddr) -> Result<(), AllocError> {
        let off = self.offset(ip).ok_or(AllocError::NotInRange {
            ip: *ip,
            range: self.net,
        })?;
        if self.used.insert(off) {
            Ok(())
        } else {
            Err(AllocError::Allocated)
        }
    }

    pub(super) fn allocate_next(&mut self) -> Result<IpAddr, AllocError> {
        let upper = (self.band + 1).min(self.last);
        let found = self
            .free_in(self.next.max(upper), self.last)
            .or_else(|| self.free_in(upper, self.next.max(upper)))
            .or_else(|| self.free_in(1, upper));
        let off = found.ok_or(AllocError::Full)?;
        self.used.insert(off);
        self.next = if off >= self.last { upper } else { off + 1 };
        Ok(self.addr(off))
    }

    /// The first free offset in `[from, to]`.
    fn free_in(&self, from: u128, to: u128) -> Option<u128> {
        if from > to {
            return None;
        }
        let mut o = from;
        for &u in self.used.range(from..=to) {
            if u != o {
                break;
            }
            o += 1;
        }
        (o <= to).then_some(o)
    }

    pub(super) fn release(&mut self, ip: &IpAddr) {
        if let Some(off) = self.offset(ip) {
            self.used.remove(&off);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn dynamic_addresses_come_from_above_the_static_band() {
        // A /12 has a band of 256 addresses for hand-picked IPs.
        let mut r = Range::new("10.96.0.0/12".parse().unwrap()).unwrap();
        assert_eq!(r.allocate_next().unwrap(), ip("10.96.1.1"));
        assert_eq!(r.allocate_next().unwrap(), ip("10.96.1.2"));
        r.allocate(&ip("10.96.0.10")).unwrap();
        assert_eq!(r.allocate(&ip("10.96.0.10")), Err(AllocError::Allocated));
        assert_eq!(
            r.allocate(&ip("10.95.0.1")).unwrap_err().to_string(),
            "the provided IP (10.95.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"
        );
        // Network and broadcast addresses are never handed out.
        assert!(matches!(
            r.allocate(&ip("10.96.0.0")),
            Err(AllocError::NotInRange { .. })
        ));
        assert!(matches!(
            r.allocate(&ip("10.111.255.255")),
            Err(AllocError::NotInRange { .. })
        ));
        r.allocate(&ip("10.111.255.254")).unwrap();
    }

    #[test]
    fn fresh_addresses_first_then_released_then_the_band_then_full() {
        // /27: 30 usable addresses, a band of 16.
        let mut r = Range::new("10.0.0.0/27".parse().unwrap()).unwrap();
        let first = r.allocate_next().unwrap();
        assert_eq!(first, ip("10.0.0.17"));
        r.release(&first);
        let mut got = vec![];
        for _ in 0..14 {
            got.push(r.allocate_next().unwrap());
        }
        assert_eq!(got[0], ip("10.0.0.18"), "a released address waits its turn");
        assert_eq!(got[12], ip("10.0.0.30"));
        assert_eq!(got[13], first, "then the released one");
        // Then the static band, low to high.
        assert_eq!(r.allocate_next().unwrap(), ip("10.0.0.1"));
        for _ in 0..15 {
            r.allocate_next().unwrap();
        }
        assert_eq!(r.allocate_next(), Err(AllocError::Full));
        r.release(&ip("10.0.0.5"));
        assert_eq!(r.allocate_next().unwrap(), ip("10.0.0.5"));
    }

    #[test]
    fn ipv6_range_has_no_broadcast() {
        let mut r = Range::new("fd00::/126".parse().unwrap()).unwrap();
        let got: Vec<IpAddr> = (0..3).map(|_| r.allocate_next().unwrap()).collect();
        assert_eq!(got, [ip("fd00::1"), ip("fd00::2"), ip("fd00::3")]);
        assert_eq!(r.allocate_next(), Err(AllocError::Full));
    }
}
