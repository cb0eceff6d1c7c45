//! WiredTiger two ways: alone through its C API ([`NativeStore`]), and with reads by the storefn
//! function over its newest checkpoint ([`FnStore`]): writes, scans and the keys written since
//! that checkpoint stay with WiredTiger, so every read sees every acknowledged write.

mod writers;

use super::epochs::{Epochs, ReaderSlot};
use super::periodic::{Periodic, Ticker};
use crate::error::YcsbError;
use crate::limits::{WT_CACHE_PER_MILLE, WT_FN_BLOCK_CACHE_PER_MILLE, WT_FN_CACHE_PER_MILLE};
use crate::store::{OpenOptions, Session, Store};
use crate::workload::{Key, RecordShape};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use storefn_wiredtiger::native::{Connection, Cursor, Session as WtSession};
use storefn_wiredtiger::{Outcome, Table, TreeCache, WtError, XrpOptions, XrpTree};
use writers::Writers;

/// WiredTiger's cache when no budget is given: its own default.
const DEFAULT_CACHE_BYTES: u64 = 100 << 20;
/// Longest a reader waits for a checkpoint in progress to be published before it reports the
/// damage it saw: checkpoints of a run's writes take well under this.
const CHECKPOINT_WAIT: Duration = Duration::from_secs(60);
/// Retries of one read while checkpoints move under it, before its error is reported.
const MAX_RETRIES: u32 = 16;
/// The table every store creates: string keys (`user<hash>`), raw records, WiredTiger's
/// default page sizes (internal 4 KiB, leaf 32 KiB), which the storefn function reads.
const TABLE_CONFIG: &str = "key_format=S,value_format=u";

/// The configuration a run opens WiredTiger with: its cache `per_mille` of the budget, and the
/// log synced at every commit, so an update is durable when it returns (as BPF-KV's are).
#[must_use]
pub fn run_config(opts: &OpenOptions, per_mille: u64) -> String {
    let cache = opts.memory_limit.map_or(DEFAULT_CACHE_BYTES, |m| m / 1000 * per_mille);
    format!(
        "cache_size={},log=(enabled=true),transaction_sync=(enabled=true,method=fsync)",
        cache.max(1 << 20)
    )
}

/// A session with one cursor on the table, kept open for the thread's whole run.
struct Handle<'c> {
    /// Declared first and dropped by hand first: WiredTiger closes a session's cursors with it.
    cursor: ManuallyDrop<Cursor<'static>>,
    session: ManuallyDrop<WtSession<'c>>,
    key: Vec<u8>,
    found_key: Vec<u8>,
    value: Vec<u8>,
}

impl<'c> Handle<'c> {
    fn open(conn: &'c Connection, uri: &str) -> Result<Self, YcsbError> {
        let session = conn.session()?;
        let cursor = session.cursor(uri, "")?;
        // SAFETY: the cursor borrows `session` only to be closed before it; this struct keeps
        // both, never hands the cursor out, and closes the cursor first in Drop. The cursor
        // holds WiredTiger's own pointer, not a reference into `session`, so moving `session`
        // into the struct moves nothing the cursor points at.
        let cursor = unsafe { std::mem::transmute::<Cursor<'_>, Cursor<'static>>(cursor) };
        Ok(Handle {
            cursor: ManuallyDrop::new(cursor),
            session: ManuallyDrop::new(session),
            key: Vec::new(),
            found_key: Vec::new(),
            value: Vec::new(),
        })
    }

    fn set_key(&mut self, key: &Key) {
        self.key.clear();
        self.key.extend_from_slice(key.name.as_bytes());
        self.key.push(0);
    }

    fn get(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        self.set_key(key);
        let found = self.cursor.search(&self.key, out)?;
        self.cursor.reset()?;
        Ok(found)
    }

    fn put(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.set_key(key);
        self.cursor.insert(&self.key, record)?;
        Ok(())
    }

    fn scan(&mut self, start: &Key, count: usize) -> Result<usize, YcsbError> {
        self.set_key(start);
        let mut n = 0;
        let mut more = self.cursor.seek_ge(&self.key, &mut self.found_key, &mut self.value)?;
        while more && n < count {
            n += 1;
            if n < count {
                more = self.cursor.next(&mut self.found_key, &mut self.value)?;
            }
        }
        self.cursor.reset()?;
        Ok(n)
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        // SAFETY: each field is dropped exactly once, here, cursor before session.
        unsafe {
            ManuallyDrop::drop(&mut self.cursor);
            ManuallyDrop::drop(&mut self.session);
        }
    }
}

/// Loads `records` records into a new table: sorted by key name through a bulk cursor, then
/// one checkpoint, which is what the storefn function reads.
///
/// # Errors
/// The table exists and holds data, or WiredTiger's error.
pub fn load(dir: &Path, table: &str, records: u64, shape: RecordShape) -> Result<(), YcsbError> {
    std::fs::create_dir_all(dir).map_err(|source| YcsbError::Io {
        path: dir.into(),
        op: "create_dir",
        source,
    })?;
    let conn = Connection::open(dir, "create,cache_size=256MB,log=(enabled=true)")?;
    let session = conn.session()?;
    let uri = format!("table:{table}");
    session.create(&uri, TABLE_CONFIG)?;
    let mut keys: Vec<(String, u64)> = (0..records).map(|n| (Key::new(n).name, n)).collect();
    keys.sort_unstable();
    {
        let mut c = session.cursor(&uri, "bulk").map_err(|e| {
            YcsbError::Invalid(format!(
                "{}: table {table:?}: {e} (load into a new table)",
                dir.display()
            ))
        })?;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for (name, n) in keys {
            k.clear();
            k.extend_from_slice(name.as_bytes());
            k.push(0);
            shape.fill(n, 0, &mut v);
            c.insert(&k, &v)?;
        }
    }
    session.checkpoint()?;
    Ok(())
}

/// WiredTiger alone (`wiredtiger-native:DIR:TABLE`).
pub struct NativeStore {
    spec: String,
    uri: String,
    conn: Connection,
}

impl std::fmt::Debug for NativeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeStore").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl NativeStore {
    /// # Errors
    /// WiredTiger's error (no database, the table missing).
    pub fn open(dir: &Path, table: &str, opts: &OpenOptions) -> Result<Self, YcsbError> {
        let conn = Connection::open(dir, &run_config(opts, WT_CACHE_PER_MILLE))?;
        let uri = format!("table:{table}");
        drop(conn.session()?.cursor(&uri, "")?);
        Ok(NativeStore { spec: format!("wiredtiger-native:{}:{table}", dir.display()), uri, conn })
    }
}

struct NativeSession<'c>(Handle<'c>);

impl Session for NativeSession<'_> {
    fn get(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        self.0.get(key, out)
    }
    fn update(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.0.put(key, record)
    }
    fn insert(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.0.put(key, record)
    }
    fn scan(&mut self, start: &Key, count: usize) -> Result<usize, YcsbError> {
        self.0.scan(start, count)
    }
}

impl Store for NativeStore {
    fn spec(&self) -> String {
        self.spec.clone()
    }
    fn session(&self) -> Result<Box<dyn Session + '_>, YcsbError> {
        Ok(Box::new(NativeSession(Handle::open(&self.conn, &self.uri)?)))
    }
}

/// What the writers, the checkpointer and the readers of an [`FnStore`] share.
///
/// The checkpointer bumps the epoch (every write tagged below it has returned), checkpoints
/// (so the checkpoint holds all of them), then publishes it: a reader on the checkpoint
/// published as p asks WiredTiger for every key written at or after p ([`Epochs`]).
#[derive(Debug, Default)]
struct Shared {
    epochs: Epochs,
    checkpoints: AtomicU64,
    function_reads: AtomicU64,
    dirty_reads: AtomicU64,
    fallbacks: AtomicU64,
    retries: AtomicU64,
    engine_opens: AtomicU64,
    failure: Mutex<Option<String>>,
}

/// WiredTiger with reads by the storefn function (`wiredtiger:DIR:TABLE`).
pub struct FnStore {
    spec: String,
    dir: PathBuf,
    table: String,
    uri: String,
    conn: Arc<Connection>,
    shared: Arc<Shared>,
    /// The function's block cache of the table's file, shared by every session's reader.
    cache: Arc<Mutex<TreeCache>>,
    /// Declared last: dropped (stopped and joined) after the store's other fields.
    _checkpointer: Periodic,
}

impl std::fmt::Debug for FnStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnStore").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl FnStore {
    /// Opens WiredTiger for writes, checks the function can read the table, and starts the
    /// checkpointer.
    ///
    /// # Errors
    /// WiredTiger's error, or the storefn reader refusing the table.
    pub fn open(dir: &Path, table: &str, opts: &OpenOptions) -> Result<Self, YcsbError> {
        // WiredTiger serves only writes, scans and keys written since the checkpoint: a small
        // cache. The function reads with O_DIRECT into its own block cache (upper levels
        // parsed, leaves whole), which gets the budget WiredTiger alone gives its cache less
        // WiredTiger's share here: the two stores keep the same bytes as caches.
        let conn = Arc::new(Connection::open(dir, &run_config(opts, WT_FN_CACHE_PER_MILLE))?);
        let uri = format!("table:{table}");
        drop(conn.session()?.cursor(&uri, "")?);
        let alloc = Table::open(dir, table)?.tree().allocation_size();
        let cache_bytes = opts
            .memory_limit
            .map_or(DEFAULT_CACHE_BYTES, |m| m / 1000 * WT_FN_BLOCK_CACHE_PER_MILLE);
        let cache = Arc::new(Mutex::new(TreeCache::new(cache_bytes, alloc)));
        let shared = Arc::new(Shared::default());
        let checkpointer = {
            let (conn, shared) = (Arc::clone(&conn), Arc::clone(&shared));
            let every = opts.checkpoint_interval;
            Periodic::spawn(move |t| checkpoint_loop(&conn, &shared, t, every))
        };
        Ok(FnStore {
            spec: format!("wiredtiger:{}:{table}", dir.display()),
            dir: dir.into(),
            table: table.into(),
            uri,
            conn,
            shared,
            cache,
            _checkpointer: checkpointer,
        })
    }

    /// A checkpoint now (tests use it to move readers to the function's path).
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn checkpoint_now(&self) -> Result<(), YcsbError> {
        let s = self.conn.session()?;
        checkpoint_once(&s, &self.shared)?;
        Ok(())
    }

    /// The checkpointer's error, if it stopped on one.
    #[must_use]
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

fn checkpoint_once(s: &WtSession<'_>, shared: &Shared) -> Result<(), WtError> {
    let e = shared.epochs.bump();
    s.checkpoint()?;
    shared.checkpoints.fetch_add(1, Ordering::Relaxed);
    shared.epochs.publish(e);
    Ok(())
}

fn checkpoint_loop(conn: &Connection, shared: &Shared, ticker: &Ticker, every: Duration) {
    let fail = |e: String| {
        *shared.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
    };
    let s = match conn.session() {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    while ticker.wait(every) {
        if let Err(e) = checkpoint_once(&s, shared) {
            return fail(e.to_string());
        }
    }
}

/// Writes `key` through `h`, tagged with the epoch it belongs to (see [`Shared`]).
fn tagged_write(
    sh: &Shared,
    h: &mut Handle<'_>,
    key: &Key,
    record: &[u8],
) -> Result<(), YcsbError> {
    sh.epochs.tagged(key.num, || h.put(key, record))
}

/// A reader on one checkpoint: the table's metadata and the function's chain engine.
struct Reader {
    epoch: u64,
    table: Table,
    xrp: XrpTree,
    /// The file size of the checkpoint the chain engine was opened on.
    xrp_size: u64,
}

struct FnSession<'a> {
    store: &'a FnStore,
    wt: Handle<'a>,
    reader: Option<Reader>,
    slot: ReaderSlot<'a>,
    key: Vec<u8>,
    /// A batch's stored-form keys, the batch indices they stand for, and the indices left to
    /// the one-at-a-time path (kept between batches: no allocation per batch).
    batch_keys: Vec<Vec<u8>>,
    picked: Vec<usize>,
    redo: Vec<usize>,
    /// Started by the first batch with updates (`--batch-updates`).
    writers: Option<Writers>,
}

impl FnSession<'_> {
    /// Moves to the newest checkpoint when one was published since this reader opened.
    fn refresh(&mut self, force: bool) -> Result<&mut Reader, YcsbError> {
        // The metadata read below is at least as new as checkpoint `p` (`Epochs::published`).
        let p = self.store.shared.epochs.published();
        if force || self.reader.as_ref().is_none_or(|r| r.epoch < p) {
            let table = Table::open(&self.store.dir, &self.store.table)?;
            // The chain engine and its verified function outlive checkpoints (a lookup takes
            // the checkpoint's root from the table it is given) while the file is no longer
            // than the checkpoint the engine was opened on says: its reads stop there.
            // `force` (after an error) opens a new one.
            let size = table.tree().checkpoint().file_size;
            let (xrp, xrp_size) = match self.reader.take() {
                Some(r) if !force && size <= r.xrp_size => (r.xrp, r.xrp_size),
                _ => {
                    self.store.shared.engine_opens.fetch_add(1, Ordering::Relaxed);
                    let opts =
                        XrpOptions { cache: Some(Arc::clone(&self.store.cache)), direct: true };
                    (XrpTree::open_with(table.tree(), opts)?, size)
                }
            };
            self.slot.moved(p);
            self.reader = Some(Reader { epoch: p, table, xrp, xrp_size });
        }
        Ok(self.reader.as_mut().expect("opened above"))
    }

    /// Waits until checkpoint `epoch` is published; `Err` when the checkpointer stopped.
    fn wait_published(&self, epoch: u64) -> Result<(), ()> {
        let sh = &self.store.shared;
        let give_up = std::time::Instant::now() + CHECKPOINT_WAIT;
        // The metadata the caller reads next is at least that checkpoint's.
        while sh.epochs.published() < epoch {
            if std::time::Instant::now() > give_up || self.store.failure().is_some() {
                return Err(());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    fn dirty_since(&self, num: u64, epoch: u64) -> bool {
        self.store.shared.epochs.tags().since(num, epoch)
    }

    /// The function's answer; `None` when it handed the key back.
    fn by_function(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<Option<bool>, WtError> {
        let r = self.reader.as_mut().expect("refreshed by the caller");
        r.table.key_format.encode(key.name.as_bytes(), &mut self.key)?;
        let o = match r.xrp.get(r.table.tree(), &self.key, out)? {
            Outcome::Fallback(_) => r.table.get(key.name.as_bytes(), out)?,
            o => o,
        };
        Ok(match o {
            Outcome::Found => Some(true),
            Outcome::NotFound => Some(false),
            Outcome::Fallback(_) => None,
        })
    }

    fn write(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        tagged_write(&self.store.shared, &mut self.wt, key, record)
    }
}

impl Session for FnSession<'_> {
    fn get(&mut self, key: &Key, out: &mut Vec<u8>) -> Result<bool, YcsbError> {
        let epoch = self.refresh(false)?.epoch;
        let sh = &self.store.shared;
        if self.dirty_since(key.num, epoch) {
            sh.dirty_reads.fetch_add(1, Ordering::Relaxed);
            return self.wt.get(key, out);
        }
        let mut epoch = epoch;
        let mut attempts = 0;
        let answer = loop {
            let e = match self.by_function(key, out) {
                Ok(a) => break a,
                Err(e) => e,
            };
            // A checkpoint that began after this reader opened frees the blocks of the one it
            // reads, and WiredTiger may reuse them before the new one is published: the
            // checksum check caught that. Or the file grew past what the engine knows. Retry
            // on a new engine and the newest checkpoint while checkpoints keep moving (a slow
            // lookup can straddle several); damage that persists is reported.
            sh.retries.fetch_add(1, Ordering::Relaxed);
            attempts += 1;
            let moved = sh.epochs.current() > epoch;
            if attempts > MAX_RETRIES || (attempts > 1 && !moved) {
                return Err(e.into());
            }
            if moved {
                self.wait_published(epoch + 1).map_err(|()| e)?;
            }
            epoch = self.refresh(true)?.epoch;
            if self.dirty_since(key.num, epoch) {
                sh.dirty_reads.fetch_add(1, Ordering::Relaxed);
                return self.wt.get(key, out);
            }
        };
        match answer {
            Some(found) => {
                sh.function_reads.fetch_add(1, Ordering::Relaxed);
                Ok(found)
            }
            None => {
                sh.fallbacks.fetch_add(1, Ordering::Relaxed);
                self.wt.get(key, out)
            }
        }
    }
    /// Batched chains (`xrp-batch`): the keys not written since the checkpoint go to the
    /// function together; keys written since, fallbacks and lookups that hit damage (a
    /// checkpoint moving under them) take [`Session::get`]'s path, with its retries.
    fn get_batch(
        &mut self,
        keys: &[Key],
        out: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<(), YcsbError> {
        let epoch = self.refresh(false)?.epoch;
        let (mut picked, mut redo) =
            (std::mem::take(&mut self.picked), std::mem::take(&mut self.redo));
        picked.clear();
        redo.clear();
        {
            let tags = self.store.shared.epochs.tags();
            for (i, k) in keys.iter().enumerate() {
                if tags.since(k.num, epoch) {
                    redo.push(i);
                } else {
                    picked.push(i);
                }
            }
        }
        let batched = self.chains(keys, &picked, out, found, &mut redo);
        let r = batched.and_then(|()| {
            redo.iter().try_for_each(|&i| {
                found[i] = self.get(&keys[i], &mut out[i])?;
                Ok(())
            })
        });
        (self.picked, self.redo) = (picked, redo);
        r
    }
    fn overlaps_updates(&self) -> bool {
        true
    }
    /// The updates go to the session's writer threads while the reads run here as batched
    /// chains; a read of a key updated in the same batch sees either record.
    fn run_batch(
        &mut self,
        reads: &[Key],
        out: &mut [Vec<u8>],
        found: &mut [bool],
        updates: &[Key],
        records: &[Vec<u8>],
    ) -> Result<(), YcsbError> {
        if updates.is_empty() {
            return self.get_batch(reads, out, found);
        }
        let mut w = match self.writers.take() {
            Some(w) => w,
            None => Writers::start(self.store)?,
        };
        let r = w.run(updates, records, || self.get_batch(reads, out, found));
        self.writers = Some(w);
        r
    }
    fn update(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.write(key, record)
    }
    fn insert(&mut self, key: &Key, record: &[u8]) -> Result<(), YcsbError> {
        self.write(key, record)
    }
    fn scan(&mut self, start: &Key, count: usize) -> Result<usize, YcsbError> {
        self.wt.scan(start, count)
    }
}

impl FnSession<'_> {
    /// Runs the chains of `keys[picked]`; what they do not settle is pushed to `redo`.
    fn chains(
        &mut self,
        keys: &[Key],
        picked: &[usize],
        out: &mut [Vec<u8>],
        found: &mut [bool],
        redo: &mut Vec<usize>,
    ) -> Result<(), YcsbError> {
        let r = self.reader.as_mut().expect("refreshed by the caller");
        if self.batch_keys.len() < picked.len() {
            self.batch_keys.resize_with(picked.len(), Vec::new);
        }
        for (j, &i) in picked.iter().enumerate() {
            r.table.key_format.encode(keys[i].name.as_bytes(), &mut self.batch_keys[j])?;
        }
        let mut settled = 0u64;
        let before = redo.len();
        let run = r.xrp.get_batch(r.table.tree(), &self.batch_keys[..picked.len()], |j, o, v| {
            let i = picked[j];
            match o {
                Ok(Outcome::Found) => {
                    out[i].clear();
                    out[i].extend_from_slice(v);
                    found[i] = true;
                    settled += 1;
                }
                Ok(Outcome::NotFound) => {
                    found[i] = false;
                    settled += 1;
                }
                Ok(Outcome::Fallback(_)) | Err(_) => redo.push(i),
            }
        });
        if run.is_err() {
            // The engine itself failed: every key of the batch goes the one-at-a-time way,
            // which opens a new engine.
            redo.truncate(before);
            redo.extend_from_slice(picked);
            self.reader = None;
            return Ok(());
        }
        self.store.shared.function_reads.fetch_add(settled, Ordering::Relaxed);
        Ok(())
    }
}

impl Store for FnStore {
    fn spec(&self) -> String {
        self.spec.clone()
    }
    fn session(&self) -> Result<Box<dyn Session + '_>, YcsbError> {
        let wt = Handle::open(&self.conn, &self.uri)?;
        let (slot, ()) = self.shared.epochs.join(|| ());
        let mut s = FnSession {
            store: self,
            wt,
            reader: None,
            slot,
            key: Vec::new(),
            batch_keys: Vec::new(),
            picked: Vec::new(),
            redo: Vec::new(),
            writers: None,
        };
        s.refresh(false)?;
        Ok(Box::new(s))
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let sh = &self.shared;
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).stats;
        vec![
            ("leaf_hits", cache.leaf_hits),
            ("leaf_misses", cache.leaf_misses),
            ("leaf_rejected", cache.leaf_rejected),
            ("internal_pages_parsed", cache.internal_parsed),
            ("function_reads", c(&sh.function_reads)),
            ("dirty_reads", c(&sh.dirty_reads)),
            ("fallbacks", c(&sh.fallbacks)),
            ("retries", c(&sh.retries)),
            ("checkpoints", c(&sh.checkpoints)),
            ("engine_opens", c(&sh.engine_opens)),
        ]
    }
}
