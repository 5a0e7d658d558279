//! What the relay serves from: each kind's objects and its history of
//! changes, keyed by the API server's own resourceVersions ([`cache`]),
//! the label keys a relay serves ([`labels`]), and which namespaces and
//! gangs a node may read ([`scope`]). The feed writes it, the HTTP side
//! reads it; it knows neither.

pub mod cache;
pub mod labels;
pub mod scope;
