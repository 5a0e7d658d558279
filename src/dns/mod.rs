//! DNS: the record rules ([`answer`]) and the sockets ([`server`]).

pub mod answer;
mod fast;
mod mmsg;
pub mod rrl;
pub mod server;
