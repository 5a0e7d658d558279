//! DNS: served zones ([`zone`]), the record rules ([`resolve`]: question
//! → answer plan), the encoders of a plan ([`answer`] through
//! hickory-proto, `fast` straight into bytes) and the sockets
//! ([`server`]).

pub mod answer;
mod datagrams;
mod fast;
#[cfg(target_os = "linux")]
mod mmsg;
pub mod resolve;
pub mod rrl;
pub mod server;
pub mod zone;

pub use zone::{Zone, check_zones};
