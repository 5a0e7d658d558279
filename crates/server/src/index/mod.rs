//! The in-memory name table ([`table::Table`], read by DNS without
//! blocking), its single [`writer::Writer`], fed by the watchers, and the
//! publishing [`Policy`] the writer applies.
//!
//! Two sides, and what both use:
//! - the read side: [`table`] (what DNS looks up), `paged` (numbered
//!   names kept in pages by number) and [`names`] (the spelling of every
//!   name and the one grammar, [`names::QName`], that every reader parses
//!   a name with);
//! - the write side: [`writer`], one file per resource (`pods.rs`,
//!   `services.rs`, `ranks.rs` for Jobs) and per derived view
//!   (`headless.rs`, `by_name.rs`, `rank_view.rs`, `build.rs` for the
//!   names, `publish.rs` for the publication rules), and `explain/`,
//!   which reads the model without changing it;
//! - `containers`: the general containers both sides hold (hash-map
//!   aliases, `SmallSet`, `Interned`).
//!
//! Imports point one way: `writer` → read side → `containers`, never back.

mod containers;
pub mod names;
mod paged;
pub mod policy;
pub mod reverse;
pub mod table;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod types;
pub mod writer;

pub use policy::{Duplicates, Hostnames, Policy, Publish};
pub use table::{Lookup, Rrs, Scope, Srv, SrvSet, Table, Value};
pub use types::*;
pub use writer::{SyncNeeds, Writer, set_release_memory};

#[cfg(test)]
mod tests;
