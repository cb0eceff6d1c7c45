//! storefn-kv: BPF-KV, the B+-tree store XRP was evaluated on, byte-compatible.
//!
//! The store is [`Db`]: [`Db::open`], [`Db::get`], [`Db::multiget`], [`Db::range`],
//! [`Db::put`], [`Db::compact`]. Lookups can run on any lookup path ([`LookupPath`]: plain
//! reads, io_uring reads, or storage-function chains on the io engine, [`xrp_paths`]), with
//! programs written for storefn's scratch layout or BPF-KV's own ([`Abi`]).
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
//! assert_eq!(storefn_kv::value_text(&v).trim_start(), "42"); // "%63lu"
//!
//! let mut new = [0u8; 64];
//! new[..5].copy_from_slice(b"hello");
//! db.put(42, &new)?; // durable when it returns
//! assert_eq!(db.multiget(&[41, 42, 5000])?, vec![Some(storefn_kv::bpfkv_value(41)), Some(new), None]);
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
//! ([`RemoteKv`]). Byte layouts are constants in [`layout`], checked against docs/FORMAT.md:
//! [`layout::tree`] (node layout, the `.meta` sidecar, the programs' scratch),
//! [`layout::abi`] (BPF-KV's own programs' scratch), [`layout::wal`] (the log); every
//! bound is in [`limits`]. The benchmark harnesses behind `storefn kv bench` live in `harness`
//! (feature `bench`), the fuzz properties in `fuzz` (feature `fuzz`).

mod abi;
mod aligned;
mod builder;
mod compact;
mod db;
mod error;
mod format;
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
/// The write storage layer is the platform's (storefn-io); the store names it crate::storage.
mod storage {
    pub(crate) use storefn_io::{
        parent_dir, real_storage as real, RealStorage, Storage, StorageFile, StorageRef,
    };
}
mod wal;
mod xrp_paths;
mod xrp_range;

pub use abi::{fill_sg_query, rq_is_empty, sg_value, Abi};
pub use builder::{build_tree, create_bpfkv, create_bpfkv_in};
pub use db::{
    create_db, logged_memtable, logged_value, open_read, recover, recover_db, Db, DbError,
    DbOptions, MARKER_SUFFIX, NEW_SUFFIX,
};
pub use error::KvError;
pub use format::{
    bpfkv_value, fnv1a64, meta_path, put_node_header, put_ptr, put_slot, value_text, Meta,
    NodeSize, NodeView,
};
pub use memtable::{Memtable, ENTRY_BYTES};
pub use open::{open_path, PathOptions, LOOKUP_PATHS};
pub use path::{BlockLru, Lookup, LookupPath, PathStats, ReadPath};
pub use program::{engine_used, instance, ProgSource};
pub use query::{multiget, range, DbPath, RangeVia};
pub use range::{aggregate, Agg, RangeScan};
pub use remote::{PushSent, RemoteKv, RemoteKvError, RemotePath};
pub use store::{Shape, Step, Store};
pub use wal::{
    cut_at_corruption as cut_wal_at_corruption, replay as replay_wal, scan as scan_wal,
    truncate as truncate_wal, wal_path, Dropped as WalDropped, Record as WalRecord,
    Replay as WalReplay, Scan as WalScan, Ticket as WalTicket, Wal, WalError,
};
pub use xrp_paths::{ChainOptions, EngineChain, UringPath, XrpPath};
pub use xrp_range::{range_xrp, RangeOutcome};

/// The byte layouts BPF-KV shares with its programs and its files (docs/FORMAT.md; the
/// `format_doc` and `abi_doc` tests check them against it).
pub mod layout {
    /// The tree file, its meta file and the lookup and range programs' scratch.
    pub mod tree {
        pub use crate::format::{
            FILE_MASK, KEY_BYTES, LOOKUP_OFF_FOUND, LOOKUP_OFF_KEY, LOOKUP_OFF_STATE,
            LOOKUP_OFF_VALUE, META_BYTES, META_MAGIC, META_OFF_CHECKSUM, META_OFF_FANOUT,
            META_OFF_FILE_BYTES, META_OFF_KEY_COUNT, META_OFF_LAYERS, META_OFF_MAGIC,
            META_OFF_NODE_SIZE, META_OFF_TOTAL_NODES, META_OFF_VALUE_LOG, META_OFF_VERSION,
            META_SUFFIX, META_VERSION, NODE_OFF_KEYS, NODE_OFF_NEXT, NODE_OFF_TYPE,
            NODE_TYPE_INTERNAL, NODE_TYPE_LEAF, PTR_BYTES, RANGE_FLAG_DONE, RANGE_FLAG_RESUME,
            RANGE_OFF_AGG, RANGE_OFF_AGG_N, RANGE_OFF_AGG_VALUE, RANGE_OFF_BEGIN, RANGE_OFF_COUNT,
            RANGE_OFF_END, RANGE_OFF_FLAGS, RANGE_OFF_INDEX, RANGE_OFF_LEAF, RANGE_OFF_LEAF_COPY,
            RANGE_OFF_PHASE, RANGE_OFF_RESULTS, RANGE_RESULT_BYTES, UNUSED_KEY, UNUSED_LEAF_PTR,
            VALUE_BYTES,
        };
    }
    /// The scratch of BPF-KV's own XRP programs (scatter-gather lookup, range query).
    pub mod abi {
        pub use crate::abi::{
            RQ_AGG_NONE, RQ_AGG_SUM, RQ_BEGIN_EXCLUSIVE, RQ_BYTES, RQ_END_INCLUSIVE, RQ_KEYS,
            RQ_KV_BYTES, RQ_OFF_AGG_OP, RQ_OFF_AGG_VALUE, RQ_OFF_BEGIN, RQ_OFF_CURRENT_NODE,
            RQ_OFF_END, RQ_OFF_FLAGS, RQ_OFF_KV, RQ_OFF_LEN, RQ_OFF_NODE_KEY_IX,
            RQ_OFF_RESUME_FROM_LEAF, RQ_OFF_STATE, RQ_STATE_FAILED, RQ_STATE_READ_NODE,
            RQ_STATE_READ_VALUE, RQ_STATE_RESUME, RQ_STATE_TRAVERSE, SG_BYTES, SG_FLAG_FAILED,
            SG_KEYS, SG_MAYBE_VALUE_BYTES, SG_OFF_CURRENT_INDEX, SG_OFF_KEYS, SG_OFF_N_KEYS,
            SG_OFF_ROOT_POINTER, SG_OFF_STATE_FLAGS, SG_OFF_VALUES, SG_OFF_VALUE_PTR,
        };
    }
    /// The write-ahead log.
    pub mod wal {
        pub use crate::wal::{
            BATCH_MAGIC, COMMIT_BYTES, COMMIT_MAGIC, COMMIT_OFF_CRC, COMMIT_OFF_LAST_SEQ,
            HDR_OFF_COUNT, HDR_OFF_CRC, HDR_OFF_FIRST_SEQ, HDR_OFF_PAYLOAD_BYTES, HDR_OFF_ZERO,
            HEADER_BYTES, MAX_BATCH_BYTES, RECORD_BYTES, VALUE_BYTES,
        };
    }
}
