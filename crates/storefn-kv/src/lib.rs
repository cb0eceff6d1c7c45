//! storefn-kv: BPF-KV, the B+-tree store XRP was evaluated on, byte-compatible.
//!
//! The store is [`Db`]: [`Db::open`], [`Db::get`], [`Db::multiget`], [`Db::range`],
//! [`Db::put`], [`Db::compact`]. Lookups can run on any lookup path ([`LookupPath`]: plain
//! reads, io_uring reads, or storage-function chains on the io engine, [`xrp_paths`]), with
//! programs written for storefn's scratch layout or BPF-KV's own ([`abi`]).
//!
//! ```
//! use storefn_kv::{create_bpfkv, Db, NodeSize, RangeVia};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("storefn-kv-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("db");
//! // BPF-KV's `create`: 2 levels of 512 B nodes, keys 0..961, values sprintf("%63lu", key).
//! create_bpfkv(&path, NodeSize::B512, 2, &mut |_, _| {})?;
//! let db = Db::open(&path)?;
//! let v = db.get(42)?.expect("created keys are present");
//! assert_eq!(storefn_kv::format::value_text(&v).trim_start(), "42"); // "%63lu"
//!
//! let mut new = [0u8; 64];
//! new[..5].copy_from_slice(b"hello");
//! db.put(42, &new)?; // durable when it returns
//! assert_eq!(db.multiget(&[41, 42, 5000])?, vec![Some(storefn_kv::format::bpfkv_value(41)), Some(new), None]);
//!
//! // A range through the built-in range storage function, the put laid over the tree.
//! let r = db.range(40, 43, None, &RangeVia::default_for(NodeSize::B512))?;
//! assert_eq!(r.entries.iter().map(|e| e.0).collect::<Vec<_>>(), [40, 41, 42, 43]);
//! assert_eq!(r.entries[2].1, new);
//!
//! db.compact()?; // the put moves into a new tree file
//! assert_eq!(db.get(42)?, Some(new));
//! # drop(db);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`format`] (node layout, constants, the `.meta` sidecar; docs/FORMAT.md),
//! [`builder`] (bulk creation), [`store`] (an open tree and the lookup state machine every path
//! drives), [`path`] / [`xrp_paths`] (lookup paths), [`range`] / [`xrp_range`] (ranges and
//! aggregates), [`abi`] (scratch layouts), [`program`] (built-in and user storage functions),
//! [`db`] / [`wal`] / [`memtable`] / [`compact`] (writes). The benchmark harness behind
//! `storefn kv bench` lives in [`harness`], outside this API.

pub mod abi;
pub mod aligned;
pub mod builder;
pub mod compact;
pub mod db;
mod error;
pub mod format;
#[cfg(feature = "fuzz")]
pub mod fuzz;
#[cfg(feature = "bench")]
pub mod harness;
pub mod limits;
pub mod lock;
pub mod memtable;
mod open;
pub mod path;
pub mod program;
pub mod query;
pub mod range;
pub mod remote;
pub mod store;
// The write storage layer is the platform's (storefn-io); the store names it crate::storage.
use storefn_io::storage;
pub mod wal;
pub mod xrp_paths;
pub mod xrp_range;

pub use abi::Abi;
pub use builder::{build_tree, create_bpfkv};
pub use db::{Db, DbError};
pub use error::KvError;
pub use format::{Meta, NodeSize};
pub use open::{open_path, PathOptions, LOOKUP_PATHS};
pub use path::{LookupPath, PathStats, ReadPath};
pub use program::ProgSource;
pub use query::RangeVia;
pub use range::Agg;
pub use remote::{RemoteKv, RemoteKvError, RemotePath};
pub use store::{Shape, Step, Store};
pub use xrp_range::RangeOutcome;
