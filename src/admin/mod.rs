//! Operations: Prometheus metrics and health endpoints.

pub mod metrics;

pub use metrics::Metrics;
