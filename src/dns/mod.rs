//! DNS: the record rules ([`answer`]) and the sockets ([`server`]).

pub mod answer;
pub mod rrl;
pub mod server;
