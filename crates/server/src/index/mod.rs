//! The in-memory name table ([`table::Table`], read by DNS without
//! blocking), its single [`writer::Writer`], fed by the watchers, and the
//! publishing [`Policy`] the writer applies.

mod by_name;
mod headless;
mod interned;
mod model;
pub mod names;
mod paged;
pub mod policy;
pub mod table;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod types;
pub mod writer;

pub use policy::{Duplicates, Hostnames, Policy, Publish};
pub use table::{Lookup, Rrs, Srv, SrvSet, Table, Value};
pub use types::*;
pub use writer::{SyncNeeds, Writer, set_release_memory};

#[cfg(test)]
mod props_tests;
