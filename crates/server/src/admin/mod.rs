//! Operations: Prometheus metrics ([`metrics`]), the admin HTTP
//! endpoints ([`http`]) and, with `--admin-debug`, why a name answers what
//! it does ([`explain`]).

pub mod explain;
pub mod http;
pub mod metrics;

pub use http::Health;
pub use metrics::Metrics;
