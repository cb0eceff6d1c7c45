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
//! The face: [`Db`] and its writes (a WAL, a memtable, compaction), [`Store`] (an open tree and
//! the lookup state machine every path drives: [`Step`], [`Shape`]), the lookup paths
//! ([`open_path`] by name, [`ReadPath`], [`UringPath`], [`XrpPath`]), ranges and aggregates
//! ([`range`], [`range_xrp`]), programs ([`ProgSource`]) and BPF-KV's remote client
//! ([`RemoteKv`]). Byte layouts are public modules checked against docs/FORMAT.md: [`format`]
//! (node layout, the `.meta` sidecar), [`abi`] (scratch layouts), [`wal`] (the log); every
//! bound is in [`limits`]. The benchmark harnesses behind `storefn kv bench` live in `harness`
//! (feature `bench`), the fuzz properties in `fuzz` (feature `fuzz`).

pub mod abi;
mod aligned;
mod builder;
mod compact;
mod db;
mod error;
pub mod format;
#[cfg(feature = "fuzz")]
pub mod fuzz;
#[cfg(feature = "bench")]
pub mod harness;
pub mod limits;
mod lock;
mod memtable;
mod open;
mod path;
mod program;
mod query;
mod range;
mod remote;
mod store;
// The write storage layer is the platform's (storefn-io); the store names it crate::storage.
use storefn_io::storage;
pub mod wal;
mod xrp_paths;
mod xrp_range;

pub use abi::Abi;
pub use builder::{build_tree, create_bpfkv, create_bpfkv_in};
pub use db::{
    create_db, logged_memtable, logged_value, open_read, recover, recover_db, Db, DbError,
    DbOptions, MARKER_SUFFIX, NEW_SUFFIX,
};
pub use error::KvError;
pub use format::{Meta, NodeSize};
pub use memtable::{Memtable, ENTRY_BYTES};
pub use open::{open_path, PathOptions, LOOKUP_PATHS};
pub use path::{BlockLru, Lookup, LookupPath, PathStats, ReadPath};
pub use program::{engine_used, instance, ProgSource};
pub use query::{multiget, range, DbPath, RangeVia};
pub use range::{aggregate, Agg, RangeScan};
pub use remote::{PushSent, RemoteKv, RemoteKvError, RemotePath};
pub use store::{Shape, Step, Store};
pub use xrp_paths::{ChainOptions, EngineChain, UringPath, XrpPath};
pub use xrp_range::{range_xrp, RangeOutcome};
