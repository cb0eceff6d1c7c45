//! RocksDB two ways: alone through its C API ([`RocksNativeStore`]), and with reads by the
//! storefn function over RocksDB's own files ([`RocksFnStore`]): writes and scans stay with
//! RocksDB, and the keys written since the reader's snapshot are read from RocksDB, so every
//! read sees every acknowledged write.

use super::epochs::{Epochs, ReaderSlot};
use super::periodic::{Periodic, Ticker};
use crate::error::YcsbError;
use crate::limits::{
    MAX_SESSION_CHAINS, ROCKS_CACHE_PER_MILLE, ROCKS_FN_CACHE_PER_MILLE,
    ROCKS_FN_DATA_CACHE_PER_MILLE,
};
use crate::store::{OpenOptions, Session, Store};
use crate::workload::{Key, RecordShape};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use storefn_rocksdb::{
    DataCache, Db, Lookup, Native, NativeOptions, RocksError, Source, XrpConfig, XrpDb,
};

/// RocksDB's block cache when no budget is given (RocksDB's own default is 8 MiB too... but
/// the C API's default table options have none configured: this is that default made explicit).
const DEFAULT_CACHE_BYTES: u64 = 8 << 20;
/// Opens of a snapshot tried while RocksDB's background work changes the MANIFEST under it.
const SNAPSHOT_TRIES: u32 = 32;
/// Records per write batch during a load.
const LOAD_BATCH: usize = 1000;

/// The options a run opens RocksDB with: the block cache a share of the budget (index and
/// filter blocks charged to it), no compression, 4 KiB blocks, 10 bloom bits per key, writes
/// synced to the WAL before they return (durable, as the other stores' are).
#[must_use]
pub fn run_options(opts: &OpenOptions) -> NativeOptions {
    options_with_share(opts, ROCKS_CACHE_PER_MILLE)
}

/// [`run_options`] with the block cache `per_mille` of the budget.
fn options_with_share(opts: &OpenOptions, per_mille: u64) -> NativeOptions {
    let cache = opts.memory_limit.map_or(DEFAULT_CACHE_BYTES, |m| m / 1000 * per_mille);
    NativeOptions {
        create: false,
        read_only: false,
        block_cache_bytes: cache.max(1 << 20) as usize,
        ..NativeOptions::default()
    }
}

/// Loads `records` records into a new database in `dir`: sorted batches without the WAL, then
/// a flush (RocksDB's own compactions shape the levels).
///
/// # Errors
/// A database exists there already, or RocksDB's error.
pub fn load(dir: &Path, records: u64, shape: RecordShape) -> Result<(), YcsbError> {
    if dir.join("CURRENT").exists() {
        return Err(YcsbError::Invalid(format!(
            "{}: a RocksDB database exists already (load into a new directory)",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|source| YcsbError::Io {
        path: dir.into(),
        op: "create_dir",
        source,
    })?;
    let o = NativeOptions { create: true, read_only: false, ..NativeOptions::default() };
    let n = Native::open(dir, &o)?;
    let mut keys: Vec<(String, u64)> = (0..records).map(|k| (Key::new(k).name, k)).collect();
    keys.sort_unstable();
    let mut vals: Vec<Vec<u8>> = vec![Vec::new(); LOAD_BATCH];
    for chunk in keys.chunks(LOAD_BATCH) {
        for ((_, k), v) in chunk.iter().zip(vals.iter_mut()) {
            shape.fill(*k, 0, v);
        }
        n.put_unlogged(chunk.iter().zip(&vals).map(|((name, _), v)| (name.as_bytes(), &v[..])))?;
    }
    n.flush()?;
    Ok(())
}

/// RocksDB alone (`rocksdb-native:DIR`).
#[derive(Debug)]
pub struct RocksNativeStore {
    spec: String,
    native: Native,
}

impl RocksNativeStore {
    /// # Errors
    /// RocksDB's error (no database, the directory locked by another process).
    pub fn open(dir: &Path, opts: &OpenOptions) -> Result<Self, YcsbError> {
        let native = Native::open(dir, &run_options(opts))?;
        Ok(RocksNativeStore { spec: format!("rocksdb-native:{}", dir.display()), native })
    }
}

struct NativeSession<'a>(&'a Native);

impl Session for NativeSession<'_> {
    fn get(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        Ok(self.0.get(key.name.as_bytes(), out)?)
    }
    fn get_batch(
        &mut self,
        keys: &[Key],
        out: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<(), YcsbError> {
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.name.as_bytes()).collect();
        Ok(self.0.multi_get(&refs, out, found)?)
    }
    fn update(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        Ok(self.0.put(key.name.as_bytes(), record)?)
    }
    fn insert(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        Ok(self.0.put(key.name.as_bytes(), record)?)
    }
    fn scan(&mut self, start: &Key, count: usize) -> Result<usize, YcsbError> {
        Ok(self.0.scan(start.name.as_bytes(), count)?)
    }
}

impl Store for RocksNativeStore {
    fn spec(&self) -> String {
        self.spec.clone()
    }
    fn session(&self) -> Result<Box<dyn Session + '_>, YcsbError> {
        Ok(Box::new(NativeSession(&self.native)))
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("block_cache_bytes", self.native.cache_usage() as u64)]
    }
}

/// The reader's view of the database, opened from RocksDB's files: every write tagged below
/// `epoch` is in it.
#[derive(Debug)]
struct Snapshot {
    epoch: u64,
    db: Db,
}

/// What the writers, the refresher and the readers of a [`RocksFnStore`] share.
///
/// The refresher flushes RocksDB's memtable (so the WAL the reader replays stays short), bumps
/// the epoch (every write tagged below it has returned, its WAL record synced), opens a
/// snapshot from the files and publishes it: a reader on snapshot e asks RocksDB for every key
/// written at or after e ([`Epochs`]).
#[derive(Debug)]
struct Shared {
    epochs: Epochs,
    snapshot: RwLock<Arc<Snapshot>>,
    refreshes: AtomicU64,
    function_reads: AtomicU64,
    dirty_reads: AtomicU64,
    fallbacks: AtomicU64,
    failure: Mutex<Option<String>>,
}

impl Shared {
    fn published(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Opens a snapshot of `dir`, again while the MANIFEST changes during the open: RocksDB may
/// finish a flush (and delete the WAL it replaces) or a compaction between the reader's read of
/// the MANIFEST and of the files it names. With `prev` (the snapshot before), the tables it
/// holds that are still live are shared, not read again ([`Db::reopen`]).
fn open_snapshot(dir: &Path, prev: Option<&Db>) -> Result<Db, YcsbError> {
    let manifest_len = || -> Option<(String, u64)> {
        let cur = std::fs::read_to_string(dir.join("CURRENT")).ok()?;
        let name = cur.trim_end().to_string();
        let len = std::fs::metadata(dir.join(&name)).ok()?.len();
        Some((name, len))
    };
    let mut last: Option<RocksError> = None;
    for _ in 0..SNAPSHOT_TRIES {
        let before = manifest_len();
        let opened = match prev {
            Some(p) => p.reopen(),
            None => Db::open(dir),
        };
        match opened {
            Ok(db) if before.is_some() && manifest_len() == before => return Ok(db),
            Ok(_) => {}
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(match last {
        Some(e) => e.into(),
        None => YcsbError::Invalid(format!(
            "{}: the MANIFEST changed under every one of {SNAPSHOT_TRIES} opens",
            dir.display()
        )),
    })
}

/// RocksDB with reads by the storefn function (`rocksdb:DIR`).
pub struct RocksFnStore {
    spec: String,
    dir: PathBuf,
    native: Arc<Native>,
    shared: Arc<Shared>,
    /// Chains read with O_DIRECT, under a memory budget: the data is then many times the
    /// budget, so a buffered read would mostly miss and pay for the page's insertion (and
    /// readahead) and another page's reclaim besides. Without one, through the page cache.
    direct: bool,
    /// Under a budget, the data blocks the sessions' chains read, shared (a share of the
    /// budget: RocksDB's block cache, for the function's path); none without one (the chains
    /// then read through the page cache).
    cache: Option<DataCache>,
    /// Declared last: dropped (stopped and joined) after the store's other fields.
    _refresher: Periodic,
}

impl std::fmt::Debug for RocksFnStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksFnStore").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl RocksFnStore {
    /// Opens RocksDB for writes, the reader's first snapshot, and starts the refresher (every
    /// `opts.checkpoint_interval`).
    ///
    /// # Errors
    /// RocksDB's error, or the reader refusing the database.
    pub fn open(dir: &Path, opts: &OpenOptions) -> Result<Self, YcsbError> {
        // RocksDB here serves writes, scans and keys written since the snapshot; the function's
        // reads go through the page cache, which the memory group charges and which gets the
        // rest of the budget.
        let native =
            Arc::new(Native::open(dir, &options_with_share(opts, ROCKS_FN_CACHE_PER_MILLE))?);
        let db = open_snapshot(dir, None)?;
        let shared = Arc::new(Shared {
            epochs: Epochs::default(),
            snapshot: RwLock::new(Arc::new(Snapshot { epoch: 1, db })),
            refreshes: AtomicU64::new(0),
            function_reads: AtomicU64::new(0),
            dirty_reads: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            failure: Mutex::new(None),
        });
        let refresher = {
            let (n, sh) = (Arc::clone(&native), Arc::clone(&shared));
            let (dir, every) = (dir.to_path_buf(), opts.checkpoint_interval);
            Periodic::spawn(move |t| refresh_loop(&n, &dir, &sh, t, every))
        };
        Ok(RocksFnStore {
            spec: format!("rocksdb:{}", dir.display()),
            dir: dir.into(),
            native,
            shared,
            direct: opts.memory_limit.is_some(),
            cache: opts
                .memory_limit
                .map(|m| DataCache::new(m / 1000 * ROCKS_FN_DATA_CACHE_PER_MILLE)),
            _refresher: refresher,
        })
    }

    /// A new snapshot now (tests use it to move readers back to the function's path).
    ///
    /// # Errors
    /// RocksDB's or the reader's error.
    pub fn refresh_now(&self) -> Result<(), YcsbError> {
        refresh_once(&self.native, &self.dir, &self.shared)
    }

    /// The refresher's error, if it stopped on one.
    #[must_use]
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

fn refresh_once(native: &Native, dir: &Path, shared: &Shared) -> Result<(), YcsbError> {
    native.flush()?;
    let e = shared.epochs.bump();
    let db = open_snapshot(dir, Some(&shared.published().db))?;
    *shared.snapshot.write().unwrap_or_else(PoisonError::into_inner) =
        Arc::new(Snapshot { epoch: e, db });
    shared.refreshes.fetch_add(1, Ordering::Relaxed);
    shared.epochs.publish(e);
    Ok(())
}

fn refresh_loop(native: &Native, dir: &Path, shared: &Shared, ticker: &Ticker, every: Duration) {
    while ticker.wait(every) {
        if let Err(e) = refresh_once(native, dir, shared) {
            *shared.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
            return;
        }
    }
}

struct FnSession<'a> {
    store: &'a RocksFnStore,
    snapshot: Arc<Snapshot>,
    xrp: XrpDb,
    slot: ReaderSlot<'a>,
    /// A batch's indices the function answers, and its answers (kept between batches).
    picked: Vec<usize>,
    answers: Vec<(Lookup, Source)>,
}

/// The chain engine one session needs: `chains` in flight, hops as long as the snapshot's
/// largest data block (the index is in memory, so a chain reads only data blocks).
/// A session's chain engine for `store`: `chains` in flight, O_DIRECT under a budget, the
/// store's data cache (see [`RocksFnStore`]'s fields).
fn session_engine(store: &RocksFnStore, db: &Db, chains: usize) -> Result<XrpDb, RocksError> {
    let cfg = XrpConfig { direct: store.direct, ..XrpConfig::default() };
    let mut x = XrpDb::new(db, cfg.sized_for(db, chains.clamp(1, MAX_SESSION_CHAINS)))?;
    x.set_data_cache(store.cache.clone());
    Ok(x)
}

impl FnSession<'_> {
    /// Moves to the newest snapshot when one was published since this reader's.
    fn refresh(&mut self) -> Result<(), YcsbError> {
        let p = self.store.shared.published();
        if p.epoch > self.snapshot.epoch {
            // The chain engine and its compiled function outlive snapshots: it keeps files by
            // their number, which RocksDB never reuses, so a file it opened for an older
            // snapshot is the same file in this one. It is rebuilt only when the new
            // snapshot's blocks outgrow its hops.
            let cfg = self.xrp.config();
            if cfg.sized_for(&p.db, cfg.chains).hop_bytes > cfg.hop_bytes {
                self.xrp = session_engine(self.store, &p.db, cfg.chains)?;
            }
            self.slot.moved(p.epoch);
            self.snapshot = p;
        }
        Ok(())
    }

    /// RocksDB's answer for a key the function cannot give (written since the snapshot, or
    /// a fallback).
    fn by_rocksdb(&self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        Ok(self.store.native.get(key.name.as_bytes(), out)?)
    }

    fn dirty_since(&self, num: u64) -> bool {
        self.store.shared.epochs.tags().since(num, self.snapshot.epoch)
    }

    fn write(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        let native = &self.store.native;
        Ok(self.store.shared.epochs.tagged(key.num, || native.put(key.name.as_bytes(), record))?)
    }
}

impl FnSession<'_> {
    /// Settles one key from the function's answer `l`; a fallback goes to RocksDB.
    fn settle(&self, key: &Key, l: Lookup, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        let sh = &self.store.shared;
        match l {
            Lookup::Value(v) => {
                sh.function_reads.fetch_add(1, Ordering::Relaxed);
                // The answer's buffer becomes the caller's: one copy of the value (out of the
                // chain's scratch), not a second into `out`.
                *out = v;
                Ok(true)
            }
            Lookup::NotFound => {
                sh.function_reads.fetch_add(1, Ordering::Relaxed);
                out.clear();
                Ok(false)
            }
            Lookup::Fallback(_) => {
                sh.fallbacks.fetch_add(1, Ordering::Relaxed);
                self.by_rocksdb(key, out)
            }
        }
    }
}

impl Session for FnSession<'_> {
    fn get(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        self.refresh()?;
        if self.dirty_since(key.num) {
            self.store.shared.dirty_reads.fetch_add(1, Ordering::Relaxed);
            return self.by_rocksdb(key, out);
        }
        let (l, _) = self.xrp.get(&self.snapshot.db, key.name.as_bytes())?;
        self.settle(key, l, out)
    }
    /// Batched chains (`xrp-batch`): the keys not written since the snapshot go to the
    /// function together (rounds of one chain per open key); keys written since and
    /// fallbacks go to RocksDB one at a time. The session's engine grows to the batch (up to
    /// [`MAX_SESSION_CHAINS`]) the first time one is larger than it.
    fn get_batch(
        &mut self,
        keys: &[Key],
        out: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<(), YcsbError> {
        self.refresh()?;
        let want = keys.len().min(MAX_SESSION_CHAINS);
        if self.xrp.config().chains < want {
            self.xrp = session_engine(self.store, &self.snapshot.db, want)?;
        }
        let mut picked = std::mem::take(&mut self.picked);
        picked.clear();
        {
            let sh = &self.store.shared;
            let tags = sh.epochs.tags();
            for (i, k) in keys.iter().enumerate() {
                if tags.since(k.num, self.snapshot.epoch) {
                    sh.dirty_reads.fetch_add(1, Ordering::Relaxed);
                    found[i] = self.store.native.get(k.name.as_bytes(), &mut out[i])?;
                } else {
                    picked.push(i);
                }
            }
        }
        let refs: Vec<&[u8]> = picked.iter().map(|&i| keys[i].name.as_bytes()).collect();
        let mut answers = std::mem::take(&mut self.answers);
        let r = self.xrp.multi_get(&self.snapshot.db, &refs, &mut answers).map_err(Into::into);
        let r = r.and_then(|()| {
            for (&i, (l, _)) in picked.iter().zip(answers.drain(..)) {
                found[i] = self.settle(&keys[i], l, &mut out[i])?;
            }
            Ok(())
        });
        (self.picked, self.answers) = (picked, answers);
        r
    }
    fn update(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.write(key, record)
    }
    fn insert(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.write(key, record)
    }
    fn scan(&mut self, start: &Key, count: usize) -> Result<usize, YcsbError> {
        Ok(self.store.native.scan(start.name.as_bytes(), count)?)
    }
}

impl Store for RocksFnStore {
    fn spec(&self) -> String {
        self.spec.clone()
    }
    fn session(&self) -> Result<Box<dyn Session + '_>, YcsbError> {
        let (slot, snapshot) = self.shared.epochs.join(|| self.shared.published());
        match session_engine(self, &snapshot.db, 1) {
            Ok(xrp) => Ok(Box::new(FnSession {
                store: self,
                snapshot,
                xrp,
                slot,
                picked: Vec::new(),
                answers: Vec::new(),
            })),
            Err(e) => Err(e.into()),
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let sh = &self.shared;
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("function_reads", c(&sh.function_reads)),
            ("dirty_reads", c(&sh.dirty_reads)),
            ("fallbacks", c(&sh.fallbacks)),
            ("refreshes", c(&sh.refreshes)),
            ("block_cache_bytes", self.native.cache_usage() as u64),
            ("data_cache_hits", self.cache.as_ref().map_or(0, |d| d.hits_and_misses().0)),
            ("data_cache_bytes", self.cache.as_ref().map_or(0, DataCache::used)),
        ]
    }
}
