//! podns: authoritative DNS for Kubernetes training jobs, answered from a
//! direct watch on Pods.
//!
//! Data flows one way:
//!
//! ```text
//! kube API ──watch Pods/Services──▶ k8s/    slim serde types, conversion, watchers
//!                                     │ Update::{Apply, Delete, Reset}
//!                                     ▼
//!                                   index/  one writer; names → record data (DashMap)
//!                                     │ lookup (sync, never blocks on the writer)
//!                                     ▼
//!                                   dns/answer  pure: question → response
//!                                     │
//!                                   dns/server  UDP (SO_REUSEPORT loops) and TCP (capped, own framing)
//! admin/ (/metrics /healthz /readyz)   sim/ (Kubernetes API simulator, no DNS path depends on it)
//! ```
//!
//! - [`k8s`]: what we read from the API server and how it becomes index input.
//! - [`index`]: the in-memory name table and its single writer.
//! - [`dns`]: record rules ([`dns::answer`]) and sockets ([`dns::server`]).
//! - [`admin`]: Prometheus metrics and health endpoints.
//! - [`sim`]: an in-memory Kubernetes API server for tests, demos and benches.
//! - [`serve`], [`demo`]: the wiring of the subcommands.
//! - [`zonefile`]: one list → the index → RFC 1035 zone text (`podns zonefile`).

// No unsafe code, except the batched UDP system calls of `dns::mmsg`
// (a measured win: BENCHMARKS.md), which say why each block is sound.
#![deny(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod demo;
pub mod dns;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod k8s;
pub mod serve;
pub mod sim;
pub mod zonefile;
