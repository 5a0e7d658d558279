//! The index's general containers, used by both its sides: the hash-map
//! aliases, [`SmallSet`], the [`maps::MapLike`]/[`maps::SetLike`] pair behind
//! [`remove_from`], and [`Interned`] values. They know nothing of names,
//! pods or the table.

mod interned;
mod maps;
mod small_set;

pub(crate) use interned::Interned;
pub(crate) use maps::{HashMap, HashSet, remove_from};
pub(crate) use small_set::SmallSet;
