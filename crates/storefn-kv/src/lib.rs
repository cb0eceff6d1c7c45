//! storefn-kv: BPF-KV, the B+-tree store XRP was evaluated on, byte-compatible.
//!
//! - [`format`]: node layout, constants, the `.meta` sidecar (docs/FORMAT.md).
//! - [`builder`]: bulk creation from any sorted stream ([`build_tree`], [`create_bpfkv`]).
//! - [`store`]: an open database and the lookup state machine every path drives.
//! - [`path`]: the [`LookupPath`] trait and the `read` path; [`range`]: range and aggregates.

pub mod aligned;
pub mod bench;
pub mod builder;
pub mod chain;
pub mod compact;
pub mod compare;
pub mod db;
pub mod device;
mod error;
pub mod format;
pub mod lock;
pub mod memtable;
pub mod path;
pub mod range;
pub mod storage;
pub mod store;
pub mod wal;
pub mod xrp_paths;
pub mod xrp_range;

pub use builder::{build_tree, create_bpfkv};
pub use error::KvError;
pub use format::{Meta, NodeSize};
pub use path::{LookupPath, PathStats, ReadPath};
pub use store::{Step, Store};
