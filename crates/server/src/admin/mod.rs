//! Operations: Prometheus metrics ([`metrics`]) and the admin HTTP
//! endpoints ([`http`]).

pub mod http;
pub mod metrics;

pub use http::Health;
pub use metrics::Metrics;
