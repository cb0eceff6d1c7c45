//! storefn-wiredtiger: read-only point lookups over WiredTiger's own B-tree files.
//!
//! [`Table::open`] follows `WiredTiger.turtle` to the metadata B-tree and from there to a
//! table's file and its newest checkpoint; [`Table::get`] walks root -> internal pages -> leaf
//! with plain reads, checking every block's checksum. What it does not read (overflow items,
//! compressed pages, ...) comes back as [`Outcome::Fallback`] for WiredTiger's own API
//! (the `native` feature) to answer. Nothing in the database directory is written or locked.
//! Layouts: docs/FORMAT.md, "WiredTiger".

#[cfg(feature = "bench")]
pub mod bench;
mod cache;
mod db;
mod error;
pub mod format;
pub mod limits;
mod lookup;
mod page;
mod remote;
mod tree;
mod xrp;

pub use cache::{CacheStats, Route, TreeCache};
pub use db::{Format, Table, SUPPORTED_VERSIONS};
pub use error::WtError;
pub use lookup::{Answer, ChainOptions, LookupStats, Lookups, ReadPath, STALE_CHECK};
pub use page::{search_internal, search_leaf, Child, Fallback, LeafHit};
pub use remote::{RemotePath, RemoteStats, RemoteTable};
pub use tree::{Outcome, Tree};
pub use xrp::{
    abi as xrp_abi, ChainEnd, ChainStart, XrpOptions, XrpTree, BATCH_CHAINS, FLAG_VERIFY,
    HOP_BYTES, PROGRAM,
};
#[cfg(feature = "native")]
pub mod native;
