//! Integration tests: real sockets, the real kube-rs client against
//! `podns sim`, and dig where it is installed.

mod abuse;
mod cli;
mod compact;
mod coredns;
mod daemons;
mod deaf;
mod deploy;
mod dns;
mod dualstack;
mod endpoint_slices;
mod explain;
mod fast_path;
mod fuzz_corpus;
mod image;
mod mux;
mod node_state;
mod prometheus;
mod rank;
mod relay;
mod relay_auth;
mod reliability;
mod resolvers;
mod reverse;
mod soak;
mod support;
mod truncation;
mod unbound;
mod wait;
mod wire;
mod zonefile;
