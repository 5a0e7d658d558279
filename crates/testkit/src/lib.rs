//! What podns's test suites share, written once: DNS questions over real
//! sockets ([`dns`]), an HTTP GET ([`http`]), one wait that polls with a
//! deadline ([`wait`]), the rule for a missing tool ([`ci`]) and `podns`
//! as a child process ([`process`]).
//!
//! Each helper has an async form for the tokio tests
//! (`tests/integration/`, `crates/sim/tests/`) and, where a suite is
//! plain threads (`tests/cluster/`, the benches), a blocking one in
//! [`blocking`]; both share the code that decides (the message, the
//! parse, the deadline). Suite-specific helpers stay in their suites.

pub mod ci;
pub mod dns;
pub mod http;
pub mod process;
pub mod wait;

pub use ci::{has, in_ci, need, need_cmd};
pub use dns::{ZONE, addrs, ask, fqdn, ptrs, query, rcode, tcp, udp};
pub use http::get as http_get;
pub use process::{Spawned, output_ok, spawn_serve};
pub use wait::{Check, wait_for};

/// The blocking forms, for suites on plain threads.
pub mod blocking {
    pub use crate::dns::blocking::{ask, try_ask};
    pub use crate::http::blocking::get as http_get;
    pub use crate::wait::blocking::wait_for;
}

/// `Duration::from_secs`, short for limits.
pub fn secs(s: u64) -> std::time::Duration {
    std::time::Duration::from_secs(s)
}
