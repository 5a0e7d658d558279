//! DNS: served zones ([`zone`]), the record rules ([`resolve`]: question
//! → answer plan), the encoders of a plan ([`answer`] through
//! hickory-proto, `fast` straight into bytes) and the sockets
//! ([`server`], their buffer sizes in [`buffers`]).

#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod agreement;
pub mod answer;
pub mod buffers;
mod datagrams;
mod fast;
#[cfg(target_os = "linux")]
mod mmsg;
pub mod resolve;
pub mod rrl;
pub mod server;
pub mod zone;

#[cfg(test)]
mod plan_tests;

pub use zone::{Zone, check_zones};
