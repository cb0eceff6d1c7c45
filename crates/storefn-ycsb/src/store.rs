//! What the driver needs of a store, and the `--store` specifications.
//!
//! A store is opened once per run ([`open`]) and hands each driver thread its own
//! [`Session`]. To add a store: implement [`Store`] and [`Session`] in `stores/`, add a [`StoreSpec`] variant with its
//! parse rule, and route it in [`open`] and [`load`]. Every read must see every write the
//! store acknowledged, whatever path serves it.

use crate::error::YcsbError;
use crate::workload::{Key, RecordShape};
use std::path::PathBuf;

/// One driver thread's handle on a store: not shared between threads.
pub trait Session {
    /// Copies the record of `key` into `out`; `false` when absent.
    ///
    /// # Errors
    /// The store's error.
    fn get(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError>;

    /// Looks many keys up; `found[i]` says whether `keys[i]` was present, its record in
    /// `out[i]`. Stores that keep many lookups in flight (batched chains) override this.
    ///
    /// # Errors
    /// The store's error.
    fn get_batch(
        &mut self,
        keys: &[Key],
        out: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<(), YcsbError> {
        for ((k, o), f) in keys.iter().zip(out.iter_mut()).zip(found.iter_mut()) {
            *f = self.get(k, o)?;
        }
        Ok(())
    }

    /// Whether [`Session::run_batch`] keeps a batch's updates in flight with its reads (then
    /// the driver, asked to, hands it updates with the reads). Default: no.
    fn overlaps_updates(&self) -> bool {
        false
    }

    /// Reads and updates handed over together, in flight at once with no order among them (as
    /// a client with that many requests outstanding sees them); all are done (the updates
    /// durable) on return, and every later read sees the updates. `found[i]`/`out[i]` answer
    /// `reads[i]`; `records[j]` is `updates[j]`'s new record. Default: the reads
    /// ([`Session::get_batch`]), then the updates one by one.
    ///
    /// # Errors
    /// The store's error.
    fn run_batch(
        &mut self,
        reads: &[Key],
        out: &mut [Vec<u8>],
        found: &mut [bool],
        updates: &[Key],
        records: &[Vec<u8>],
    ) -> Result<(), YcsbError> {
        self.get_batch(reads, out, found)?;
        for (k, r) in updates.iter().zip(records) {
            self.update(k, r)?;
        }
        Ok(())
    }

    /// Replaces the record of an existing key; durable (as the store defines it) on return.
    ///
    /// # Errors
    /// The store's error.
    fn update(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError>;

    /// Writes the record of a new key.
    ///
    /// # Errors
    /// The store's error.
    fn insert(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError>;

    /// Up to `count` records from `start` in the store's key order; returns how many.
    ///
    /// # Errors
    /// The store's error.
    fn scan(&mut self, start: &Key, count: usize) -> Result<usize, YcsbError>;
}

/// A store opened for a run.
pub trait Store: Sync {
    /// The `--store` text it was opened from.
    fn spec(&self) -> String;

    /// A session for one driver thread.
    ///
    /// # Errors
    /// The store's error.
    fn session(&self) -> Result<Box<dyn Session + '_>, YcsbError>;

    /// The record shape this store keeps: BPF-KV keeps the first 64 bytes of each record (its
    /// fixed value size); the others keep the whole record.
    fn stored(&self, full: &[u8]) -> Vec<u8> {
        full.to_vec()
    }

    /// Store-specific counters for the summary and JSON (fallbacks, checkpoints, ...).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A `--store` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `bpfkv:DB`: BPF-KV through storefn-kv, reads by its storage function.
    BpfKv { db: PathBuf },
    /// `wiredtiger:DIR:TABLE`: reads by the storefn function over WiredTiger's checkpoint,
    /// writes, scans and keys written since that checkpoint by WiredTiger's own API.
    WiredTiger { dir: PathBuf, table: String },
    /// `wiredtiger-native:DIR:TABLE`: WiredTiger alone, through its C API.
    WiredTigerNative { dir: PathBuf, table: String },
    /// `rocksdb:DIR`: reads by the storefn function over RocksDB's own files, writes, scans
    /// and keys written since the reader's snapshot by RocksDB's C API.
    RocksDb { dir: PathBuf },
    /// `rocksdb-native:DIR`: RocksDB alone, through its C API.
    RocksDbNative { dir: PathBuf },
}

impl std::str::FromStr for StoreSpec {
    type Err = YcsbError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| YcsbError::Invalid(format!("--store {s:?}: {why}"));
        let (kind, rest) = s.split_once(':').ok_or_else(|| {
            bad("expected bpfkv:DB, wiredtiger:DIR:TABLE, wiredtiger-native:DIR:TABLE, \
                 rocksdb:DIR or rocksdb-native:DIR")
        })?;
        let dir_table = || -> Result<(PathBuf, String), YcsbError> {
            let (dir, table) = rest.rsplit_once(':').ok_or_else(|| bad("expected DIR:TABLE"))?;
            if dir.is_empty() || table.is_empty() || table.contains(['/', '\0']) {
                return Err(bad("expected DIR:TABLE with a non-empty directory and table name"));
            }
            Ok((dir.into(), table.into()))
        };
        match kind {
            "bpfkv" if !rest.is_empty() => Ok(StoreSpec::BpfKv { db: rest.into() }),
            "bpfkv" => Err(bad("expected bpfkv:DB")),
            "wiredtiger" => dir_table().map(|(dir, table)| StoreSpec::WiredTiger { dir, table }),
            "wiredtiger-native" => {
                dir_table().map(|(dir, table)| StoreSpec::WiredTigerNative { dir, table })
            }
            "rocksdb" if !rest.is_empty() => Ok(StoreSpec::RocksDb { dir: rest.into() }),
            "rocksdb-native" if !rest.is_empty() => {
                Ok(StoreSpec::RocksDbNative { dir: rest.into() })
            }
            "rocksdb" | "rocksdb-native" => Err(bad("expected rocksdb:DIR or rocksdb-native:DIR")),
            other => Err(bad(&format!("unknown store kind {other:?}"))),
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::BpfKv { db } => write!(f, "bpfkv:{}", db.display()),
            StoreSpec::WiredTiger { dir, table } => {
                write!(f, "wiredtiger:{}:{table}", dir.display())
            }
            StoreSpec::WiredTigerNative { dir, table } => {
                write!(f, "wiredtiger-native:{}:{table}", dir.display())
            }
            StoreSpec::RocksDb { dir } => write!(f, "rocksdb:{}", dir.display()),
            StoreSpec::RocksDbNative { dir } => write!(f, "rocksdb-native:{}", dir.display()),
        }
    }
}

impl StoreSpec {
    /// The store's kind, as the JSON's `store` key names it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            StoreSpec::BpfKv { .. } => "bpfkv",
            StoreSpec::WiredTiger { .. } => "wiredtiger",
            StoreSpec::WiredTigerNative { .. } => "wiredtiger-native",
            StoreSpec::RocksDb { .. } => "rocksdb",
            StoreSpec::RocksDbNative { .. } => "rocksdb-native",
        }
    }

    /// The files whose page cache a run drops first, so the budget starts honest (pages cached
    /// before the run would be charged to no group).
    #[must_use]
    pub fn data_path(&self) -> PathBuf {
        match self {
            StoreSpec::BpfKv { db } => db.clone(),
            StoreSpec::WiredTiger { dir, .. } | StoreSpec::WiredTigerNative { dir, .. } => {
                dir.clone()
            }
            StoreSpec::RocksDb { dir } | StoreSpec::RocksDbNative { dir } => dir.clone(),
        }
    }
}

/// How a store is opened for a run.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// The memory budget the process runs in; WiredTiger's cache is sized from it.
    pub memory_limit: Option<u64>,
    /// How often `wiredtiger` checkpoints, so the function's view follows the writes.
    pub checkpoint_interval: std::time::Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { memory_limit: None, checkpoint_interval: std::time::Duration::from_secs(1) }
    }
}

/// Opens the store `spec` names for a run.
///
/// # Errors
/// The store's open error.
pub fn open(spec: &StoreSpec, opts: &OpenOptions) -> Result<Box<dyn Store>, YcsbError> {
    match spec {
        StoreSpec::BpfKv { db } => Ok(Box::new(crate::stores::bpfkv::BpfKvStore::open(db)?)),
        StoreSpec::WiredTiger { dir, table } => {
            Ok(Box::new(crate::stores::wiredtiger::FnStore::open(dir, table, opts)?))
        }
        StoreSpec::WiredTigerNative { dir, table } => {
            Ok(Box::new(crate::stores::wiredtiger::NativeStore::open(dir, table, opts)?))
        }
        StoreSpec::RocksDb { dir } => {
            Ok(Box::new(crate::stores::rocksdb::RocksFnStore::open(dir, opts)?))
        }
        StoreSpec::RocksDbNative { dir } => {
            Ok(Box::new(crate::stores::rocksdb::RocksNativeStore::open(dir, opts)?))
        }
    }
}

/// Loads `records` records (key numbers `0..records`) into a new store `spec` names: YCSB's
/// load phase, in key order where the store loads sorted input faster.
///
/// # Errors
/// The store exists already, or the store's error.
pub fn load(spec: &StoreSpec, records: u64, shape: RecordShape) -> Result<(), YcsbError> {
    match spec {
        StoreSpec::BpfKv { db } => crate::stores::bpfkv::load(db, records, shape),
        StoreSpec::WiredTiger { dir, table } | StoreSpec::WiredTigerNative { dir, table } => {
            crate::stores::wiredtiger::load(dir, table, records, shape)
        }
        StoreSpec::RocksDb { dir } | StoreSpec::RocksDbNative { dir } => {
            crate::stores::rocksdb::load(dir, records, shape)
        }
    }
}
