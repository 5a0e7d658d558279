//! The in-memory name table and its single writer.

pub mod types;

pub use types::*;
