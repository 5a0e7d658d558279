//! Operations: the admin HTTP endpoints ([`http`]: `/metrics` from
//! [`crate::metrics`], `/healthz`, `/readyz`) and, with `--admin-debug`,
//! why a name answers what it does ([`explain`]).

pub mod explain;
pub mod http;

pub use http::Health;
