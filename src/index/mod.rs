//! The in-memory name table ([`table::Table`], read by DNS without
//! blocking) and its single [`writer::Writer`], fed by the watchers.

mod model;
pub mod names;
pub mod table;
#[doc(hidden)]
pub mod testing;
pub mod types;
pub mod writer;

pub use table::{Lookup, Rrs, Srv, Table};
pub use types::*;
pub use writer::{Policy, SyncNeeds, Writer};

#[cfg(test)]
mod props_tests;
