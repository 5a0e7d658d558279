//! Response rate limiting (`--rrl`): at most N UDP responses a second per
//! client prefix (/24 for IPv4, /56 for IPv6), so a spoofed source cannot
//! turn podns into an amplifier aimed at one network. Off by default: a
//! training job's pods share a /24 and ask in bursts at start-up.
//!
//! Over the rate, every other response is dropped and the rest "slip" as a
//! TC=1 reply with the question only (BIND's slip=2): smaller than the
//! query's own answer, and a real client behind a spoofed-at network
//! retries over TCP, which cannot be spoofed.

use std::collections::HashMap;

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Prefixes tracked before stale ones are swept (and all, if none is stale).
const MAX_PREFIXES: usize = 1 << 16;

/// What to do with one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Send a TC=1 reply with the question only.
    Slip,
    Drop,
}

struct Bucket {
    tokens: f64,
    last: Instant,
    limited: u64,
}

pub struct Rrl {
    rate: f64,
    buckets: Mutex<HashMap<u128, Bucket>>,
}

impl Rrl {
    /// `rate` responses a second per prefix, with a burst of one second's worth.
    pub fn new(rate: u32) -> Self {
        Self {
            rate: f64::from(rate.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// The client's network: /24 of IPv4, /56 of IPv6.
    fn prefix(ip: IpAddr) -> u128 {
        match ip {
            IpAddr::V4(v4) => u128::from(u32::from(v4) & 0xffff_ff00),
            // A bit above any IPv4 key so the two never meet.
            IpAddr::V6(v6) => (u128::from(v6) & !((1u128 << 72) - 1)) | 1,
        }
    }

    pub fn check(&self, ip: IpAddr, now: Instant) -> Verdict {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_PREFIXES {
            // Forget prefixes idle long enough to have a full bucket again.
            let full = Duration::from_secs(1);
            buckets.retain(|_, b| now.saturating_duration_since(b.last) < full);
            if buckets.len() >= MAX_PREFIXES {
                buckets.clear();
            }
        }
        let b = buckets.entry(Self::prefix(ip)).or_insert(Bucket {
            tokens: self.rate,
            last: now,
            limited: 0,
        });
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate).min(self.rate);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Verdict::Send;
        }
        b.limited += 1;
        if b.limited % 2 == 1 {
            Verdict::Slip
        } else {
            Verdict::Drop
        }
    }
}

/// The slip reply for an encoded response: the same header and question,
/// TC=1, nothing else (the TC=1 shape of [`super::resolve::Plan::truncate`]).
pub fn slip(reply: &[u8]) -> Option<Vec<u8>> {
    super::answer::slip(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_gets_its_rate_then_slips_and_drops_in_turn() {
        let rrl = Rrl::new(10);
        let t = Instant::now();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        for _ in 0..10 {
            assert_eq!(rrl.check(ip, t), Verdict::Send);
        }
        // Same /24, another host: same bucket.
        let neighbour: IpAddr = "192.0.2.200".parse().unwrap();
        assert_eq!(rrl.check(neighbour, t), Verdict::Slip);
        assert_eq!(rrl.check(ip, t), Verdict::Drop);
        assert_eq!(rrl.check(ip, t), Verdict::Slip);
        // Another /24 is untouched.
        assert_eq!(rrl.check("192.0.3.1".parse().unwrap(), t), Verdict::Send);
        // A tenth of a second later, one more token.
        let later = t + Duration::from_millis(100);
        assert_eq!(rrl.check(ip, later), Verdict::Send);
        assert_ne!(rrl.check(ip, later), Verdict::Send);
    }

    #[test]
    fn ipv6_clients_share_a_56() {
        let rrl = Rrl::new(1);
        let t = Instant::now();
        assert_eq!(
            rrl.check("2001:db8:0:ff::1".parse().unwrap(), t),
            Verdict::Send
        );
        assert_ne!(
            rrl.check("2001:db8:0:ab::2".parse().unwrap(), t),
            Verdict::Send
        );
        assert_eq!(
            rrl.check("2001:db8:0:100::1".parse().unwrap(), t),
            Verdict::Send
        );
    }

    #[test]
    fn the_table_stays_bounded_under_spoofed_sources() {
        let rrl = Rrl::new(5);
        let t = Instant::now();
        for i in 0..(MAX_PREFIXES as u32 + 10) {
            rrl.check(IpAddr::V4((i << 8).into()), t);
        }
        assert!(rrl.buckets.lock().unwrap().len() <= MAX_PREFIXES);
    }
}
