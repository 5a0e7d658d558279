//! The Kubernetes API as podns serves it, shared by the two servers that
//! speak it: `podns sim` (an API server for tests and demos) and the relay
//! (`podns serve --relay-listen`, a read-only API of slim objects).
//!
//! - [`kind`]: the kinds served and what the API calls them.
//! - [`path`]: the resource paths, parsed into what they name.
//! - [`discovery`]: the discovery and OpenAPI documents, made from the
//!   kinds a server serves.
//! - [`filter`]: what a list or a watch selects (namespace, labels,
//!   fields), matched against any object that says them.
//! - [`selector`]: `labelSelector` and `fieldSelector`, parsed and matched
//!   as kube-apiserver does.
//! - [`pbenc`]: the Protobuf encoder, its envelope and list/watch framing.
//! - [`status`]: errors as `Status` objects.
//! - [`watch`]: watch parameters validated as the API server does, JSON
//!   watch lines, and what a selector sees of a change.

pub mod discovery;
pub mod filter;
pub mod kind;
pub mod path;
pub mod pbenc;
pub mod selector;
pub mod status;
pub mod watch;

pub use kind::{KINDS, Kind};
pub use status::ApiError;
