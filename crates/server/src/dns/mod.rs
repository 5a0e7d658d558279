//! DNS: served zones ([`zone`]), the record rules ([`resolve`]: question
//! → answer plan), the encoders of a plan ([`answer`] through
//! hickory-proto, `fast` straight into bytes), what a reply is to the
//! server ([`reply`]: both encoders make theirs there) and the sockets
//! ([`server`], their buffer sizes in [`buffers`]).

#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod agreement;
pub mod answer;
pub mod buffers;
mod datagrams;
mod fast;
pub mod forward;
#[cfg(target_os = "linux")]
mod mmsg;
pub mod reply;
pub mod resolve;
pub mod rrl;
pub mod server;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod zone;

#[cfg(test)]
mod tests;

pub use zone::{Zone, check_zones};

/// TTL of positive answers unless `--ttl` says otherwise, in seconds:
/// short, as pods come and go.
pub const DEFAULT_TTL: u32 = 5;
/// TTL of negative answers (the SOA MINIMUM, RFC 2308 §4) unless
/// `--negative-ttl` says otherwise, in seconds.
pub const DEFAULT_NEGATIVE_TTL: u32 = 1;
