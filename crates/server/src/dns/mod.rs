//! DNS: served zones ([`zone`]), the record rules ([`answer`]) and the
//! sockets ([`server`]).

pub mod answer;
mod datagrams;
mod fast;
#[cfg(target_os = "linux")]
mod mmsg;
pub mod rrl;
pub mod server;
pub mod zone;

pub use zone::{Zone, check_zones};
