//! podns-server: authoritative DNS for Kubernetes training jobs, answered
//! from a direct watch on Pods. The library behind `podns serve` and
//! `podns zonefile`; it knows nothing of the command line or the simulator.
//!
//! Data flows one way:
//!
//! ```text
//! kube API ──list+watch Pods, Services, Jobs, slices, ranges──▶ k8s/  objects/ (a kind a file), watch loop
//!                                          │ each event to its Tap
//!                       ┌──────────────────┴──────────────────┐
//!                       ▼                                      ▼
//!   k8s::updates (the writer's tap)              relay/feed (with --relay-listen)
//!                       │ Arrival: an Update                   │ relay/ store → relay/http (list+watch
//!                       ▼                                      │ for node instances and kube clients)
//!   index/  one writer; names → record data (DashMap)
//!                       │ lookup (sync, never blocks on the writer)
//!                       ▼
//!   dns/resolve  pure: question → answer plan (the rules, once)
//!                       │
//!   dns/fast · dns/answer  the plan as bytes (wire / hickory-proto)
//!                       │
//!   dns/server  UDP (SO_REUSEPORT loops) and TCP (capped, own framing)
//! admin/ (/metrics /healthz /readyz; /debug/explain with --admin-debug)
//! node/  a node instance (--node): the same watch loop against the relays,
//!        its scope's namespaces only; dns forwards the rest to the relays
//! ```
//!
//! - [`k8s`]: what we read from the API server and how it becomes index input.
//! - [`relay`]: the relay server (`--relay-listen`): the feed it taps the
//!   watches with, its store, its HTTP API. [`node`]: a node instance
//!   (`--node`), a client of the relays. Neither imports the other.
//! - [`index`]: the in-memory name table, its single writer and its [`index::Policy`].
//! - [`dns`]: zones, the record rules ([`dns::resolve`]), their encoders
//!   ([`dns::answer`] and the wire fast path) and sockets ([`dns::server`]).
//! - [`metrics`]: Prometheus metrics; imports nothing of ours, so every
//!   layer may count.
//! - [`labels`]: the label and annotation keys podns reads, spelled once;
//!   imports nothing of ours either.
//! - [`admin`]: the metrics, health endpoints and `/debug/explain` over HTTP.
//! - [`config`]: what `serve` and `zonefile` share: config errors, the kube client.
//! - [`serve`]: the wiring of a server from a [`serve::ServeConfig`].
//! - [`zonefile`]: one list → the index → RFC 1035 zone text, from a
//!   [`zonefile::ZonefileConfig`].
//!
//! Builders for tests (`index::testing`) and the fuzz entry points
//! (`fuzzing`) exist only with the `testing` feature.

// No unsafe code, except the batched UDP system calls of `dns::mmsg`
// (a measured win: BENCHMARKS.md), which say why each block is sound.
#![deny(unsafe_code)]

/// Keyword enums: parsed from and shown as the words the CLI and the
/// deploy manifests use.
macro_rules! keywords {
    ($ty:ident { $($variant:ident = $word:literal),+ $(,)? }) => {
        impl $ty {
            /// The accepted words, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($word),+];

            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $word),+ }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($word => Ok(Self::$variant),)+
                    _ => Err(format!(
                        "invalid value {s:?} (one of: {})",
                        Self::NAMES.join(", ")
                    )),
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod admin;
pub mod config;
pub mod dns;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod k8s;
pub mod labels;
pub mod metrics;
pub mod node;
pub mod relay;
pub mod serve;
pub mod zonefile;
