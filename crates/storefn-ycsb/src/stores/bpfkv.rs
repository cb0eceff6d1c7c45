//! BPF-KV (`bpfkv:DB`) through storefn-kv: reads by its storage function (one chain per
//! lookup), updates and inserts through its WAL and memtable, scans by its range function.
//!
//! BPF-KV's keys are integers and its values 64 bytes: a YCSB record is keyed by its record
//! number (so a scan walks consecutive records, as YCSB's ordered key names would) and
//! stores its first 64 bytes.

use crate::error::YcsbError;
use crate::store::{Session, Store};
use crate::workload::{Key, RecordShape};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use storefn_kv::layout::tree::VALUE_BYTES;
use storefn_kv::{ChainOptions, XrpPath};
use storefn_kv::{Db, LookupPath, NodeSize, ProgSource, RangeVia};

fn err(db: &Path, e: impl std::fmt::Display) -> YcsbError {
    YcsbError::BpfKv { db: db.into(), what: e.to_string() }
}

/// The first 64 bytes of a record, space-padded: what BPF-KV keeps of it.
#[must_use]
pub fn value_of(record: &[u8]) -> [u8; VALUE_BYTES] {
    let mut v = [b' '; VALUE_BYTES];
    let n = record.len().min(VALUE_BYTES);
    v[..n].copy_from_slice(&record[..n]);
    v
}

/// Builds a new BPF-KV tree (512 B nodes) holding records `0..records`.
///
/// # Errors
/// The file exists, or BPF-KV's build error.
pub fn load(db: &Path, records: u64, shape: RecordShape) -> Result<(), YcsbError> {
    if db.exists() {
        return Err(err(db, "exists already (load builds a new database)"));
    }
    let mut rec = Vec::new();
    let entries = (0..records).map(move |n| {
        shape.fill(n, 0, &mut rec);
        (n, value_of(&rec))
    });
    storefn_kv::build_tree(db, NodeSize::B512, entries, &mut |_, _| {}).map_err(|e| err(db, e))?;
    Ok(())
}

/// An open BPF-KV database.
#[derive(Debug)]
pub struct BpfKvStore {
    path: PathBuf,
    db: Db,
}

impl BpfKvStore {
    /// # Errors
    /// BPF-KV's open error (no database, its lock held).
    pub fn open(path: &Path) -> Result<Self, YcsbError> {
        let db = Db::open(path).map_err(|e| err(path, e))?;
        Ok(BpfKvStore { path: path.into(), db })
    }
}

struct BpfKvSession<'a> {
    store: &'a BpfKvStore,
    /// The chain path over the tree it was built for; rebuilt when a compaction swaps it.
    path: Option<(Arc<storefn_kv::Store>, XrpPath)>,
}

impl Session for BpfKvSession<'_> {
    fn get(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        let p = &self.store.path;
        let slot = &mut self.path;
        let v = self
            .store
            .db
            .get_with(key.num, |store, k| {
                if slot.as_ref().is_none_or(|(s, _)| !Arc::ptr_eq(s, store)) {
                    let x = XrpPath::new(
                        Arc::clone(store),
                        &ProgSource::BuiltIn,
                        ChainOptions::default(),
                    )?;
                    *slot = Some((Arc::clone(store), x));
                }
                slot.as_mut().expect("built above").1.get(k)
            })
            .map_err(|e| err(p, e))?;
        out.clear();
        if let Some(v) = v {
            out.extend_from_slice(&v);
        }
        Ok(v.is_some())
    }
    fn update(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.store.db.put(key.num, &value_of(record)).map_err(|e| err(&self.store.path, e))
    }
    fn insert(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.update(key, record)
    }
    fn scan(&mut self, start: &Key, count: usize) -> Result<usize, YcsbError> {
        let end = start.num.saturating_add(count.saturating_sub(1) as u64);
        let r = self
            .store
            .db
            .range(start.num, end, None, &RangeVia::default_for(NodeSize::B512))
            .map_err(|e| err(&self.store.path, e))?;
        Ok(r.entries.len().min(count))
    }
}

impl Store for BpfKvStore {
    fn spec(&self) -> String {
        format!("bpfkv:{}", self.path.display())
    }
    fn session(&self) -> Result<Box<dyn Session + '_>, YcsbError> {
        Ok(Box::new(BpfKvSession { store: self, path: None }))
    }
    fn stored(&self, full: &[u8]) -> Vec<u8> {
        value_of(full).to_vec()
    }
}
