//! The `podns` command line: flags ([`cli`]) mapped into the typed configs
//! of [`podns_server`], and the demo ([`demo`]), which runs the simulator
//! of [`podns_sim`] beside a server, and the DNS-only gang waiter
//! ([`wait`]) for init containers and launchers, and [`explain`], which asks
//! a running server why a name answers what it does, and [`manual`]: shell
//! completion and man pages from the clap definitions. The work is done by the libraries;
//! `main.rs` only parses, starts logging and maps errors to exit codes.

pub mod cli;
#[cfg(feature = "sim")]
pub mod demo;
pub mod explain;
pub mod manual;
pub mod wait;
