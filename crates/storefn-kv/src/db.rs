//! A writable BPF-KV database: the immutable tree + a memtable made durable by the WAL.
//!
//! `put` appends to `DB.wal` (group commit, see [`crate::wal`]) and then updates the memtable;
//! `get` consults the memtable before the tree; `compact` merges both into a new tree and swaps
//! it in. Crash safety of the swap (docs/FORMAT.md "WAL and compaction"):
//!
//! 1. build `DB.new` + `DB.new.meta` (the builder fsyncs data before writing the sidecar);
//!    fsync the directory;
//! 2. create the marker `DB.compacting`, fsync it and the directory: from here the new tree is
//!    complete and *must* be installed;
//! 3. rename `DB.new.meta` -> `DB.meta`, then `DB.new` -> `DB`; fsync the directory;
//! 4. empty the WAL (its records are all in the new tree);
//! 5. remove the marker; fsync the directory.
//!
//! Recovery (run by [`Db::open`] and [`recover`], only by the holder of the writer's lock,
//! [`crate::lock`]) rolls a marked swap forward (renaming whichever of the two files is still
//! there), or, without a marker, deletes a half-built `DB.new*`. Tree and sidecar can mismatch only
//! while the marker exists; readers ([`open_read`]) never repair, they read around it. WAL records
//! already merged are harmless if replayed: puts are blind overwrites applied in order.
//!
//! Every write goes through a [`Storage`] (the file system, or the crash model in tests).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::builder::{build_tree_in, create_bpfkv_in, write_meta};
use crate::compact::{merged_count, MergeStream};
use crate::format::{meta_path, NodeSize, VALUE_BYTES};
use crate::limits::DEFAULT_MEMTABLE_LIMIT_BYTES;
use crate::lock::{DbLock, LockError, SwapLock};
use crate::memtable::Memtable;
use crate::path::{LookupPath, ReadPath};
use crate::storage::{parent_dir, Storage, StorageRef};
use crate::store::Store;
use crate::wal::{self, Replay, Wal, WalError};
use crate::{KvError, Meta};

/// Suffix of the tree being built by compaction (`DB.new`).
pub const NEW_SUFFIX: &str = ".new";
/// Suffix of the marker that says the new tree is complete and being installed.
pub const MARKER_SUFFIX: &str = ".compacting";

/// A database operation failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(
        "{path}: a compaction failed while installing its tree ({reason}); this handle takes no \
         more writes: reopen the database (recovery finishes the install)"
    )]
    Closed { path: PathBuf, reason: String },
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
}

fn io_err(path: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> DbError {
    let path = path.to_owned();
    move |source| DbError::Io { path, op, source }
}

fn suffixed(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn fsync_dir(storage: &dyn Storage, db: &Path) -> Result<(), DbError> {
    let dir = parent_dir(db);
    storage.sync_dir(&dir).map_err(io_err(&dir, "fsync directory"))
}

fn remove_if_present(storage: &dyn Storage, p: &Path) -> Result<bool, DbError> {
    match storage.remove(p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(p, "remove")(e)),
    }
}

fn rename_if_present(storage: &dyn Storage, from: &Path, to: &Path) -> Result<bool, DbError> {
    match storage.rename(from, to) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(from, "rename")(e)),
    }
}

/// Finishes or undoes a compaction interrupted by a crash (see the module comment); the caller
/// holds the writer's lock. Returns true if anything was repaired.
fn recover_locked(storage: &dyn Storage, db: &Path) -> Result<bool, DbError> {
    let new = suffixed(db, NEW_SUFFIX);
    let marker = suffixed(db, MARKER_SUFFIX);
    if marker.exists() {
        rename_if_present(storage, &meta_path(&new), &meta_path(db))?;
        rename_if_present(storage, &new, db)?;
        fsync_dir(storage, db)?;
        remove_if_present(storage, &marker)?;
        fsync_dir(storage, db)?;
        return Ok(true);
    }
    let a = remove_if_present(storage, &meta_path(&new))?;
    let b = remove_if_present(storage, &new)?;
    let mut tmp = meta_path(&new).into_os_string();
    tmp.push(".tmp");
    let c = remove_if_present(storage, Path::new(&tmp))?;
    if a || b || c {
        fsync_dir(storage, db)?;
    }
    Ok(a || b || c)
}

/// Takes the writer's lock and finishes or undoes an interrupted compaction.
///
/// # Errors
/// [`LockError::Held`] when a writer is running; I/O errors.
pub fn recover(db: &Path) -> Result<bool, DbError> {
    let _lock = DbLock::acquire(db, None)?;
    recover_locked(&crate::storage::RealStorage, db)
}

/// `storefn kv recover DB [--point-in-time]`: as a writer (taking the lock, waiting up to
/// `wait`), finishes an interrupted compaction, then, with `point_in_time`, cuts the WAL at a
/// corrupt batch and everything after it ([`wal::cut_at_corruption`]). Without it, a corrupt WAL
/// is an error. Returns whether a compaction was repaired and what was dropped.
///
/// # Errors
/// Lock, I/O and WAL errors.
pub fn recover_db(
    db: &Path,
    point_in_time: bool,
    wait: Option<Duration>,
) -> Result<(bool, Option<wal::Dropped>), DbError> {
    let storage = crate::storage::RealStorage;
    let _lock = DbLock::acquire(db, wait)?;
    let repaired = recover_locked(&storage, db)?;
    let wp = wal::wal_path(db);
    let dropped = if point_in_time { wal::cut_at_corruption(&storage, &wp)? } else { None };
    let replay = wal::replay(&wp)?;
    // Cut a torn tail too, as opening for writing would.
    if replay.torn_bytes > 0 {
        drop(Wal::open(&storage, &wp, &replay)?);
    }
    Ok((repaired, dropped))
}

/// Creates BPF-KV's database at `db` (`storefn kv create`) as a writer: takes the lock, removes
/// a previous database's log and compaction leftovers, and builds the tree (free space checked
/// first; a failed build removes what it wrote).
///
/// # Errors
/// Lock errors, and as [`crate::create_bpfkv`].
pub fn create_db(
    db: &Path,
    node_size: NodeSize,
    layers: u32,
    wait: Option<Duration>,
    progress: crate::builder::Progress,
) -> Result<Meta, DbError> {
    let storage = crate::storage::RealStorage;
    // Checked before the lock too, so a refused create leaves no file at all behind.
    if let Some(n) = (node_size.fanout() as u64).checked_pow(layers) {
        let meta = Meta::plan(node_size, n)?;
        crate::builder::check_space(
            &storage,
            db,
            meta.file_bytes + crate::format::META_BYTES as u64,
        )?;
    }
    let _lock = DbLock::acquire(db, wait)?;
    let mut removed = false;
    for s in [".wal", MARKER_SUFFIX, NEW_SUFFIX, ".new.meta"] {
        removed |= remove_if_present(&storage, &suffixed(db, s))?;
    }
    if removed {
        fsync_dir(&storage, db)?;
    }
    Ok(create_bpfkv_in(&storage, db, node_size, layers, progress)?)
}

/// What a read-only command sees: the tree and the logged puts not yet compacted into it.
#[derive(Debug)]
pub struct ReadView {
    pub store: Store,
    /// The newest committed value of every key put since the last compaction; commands that
    /// read the tree directly lay these over its answers.
    pub mem: Memtable,
}

/// Opens `db` for reading without writing, creating or deleting anything. Holds the log's
/// swap lock shared while it reads the log and opens the tree, so a concurrent compaction is
/// seen wholly before or wholly after. A torn WAL tail (a writer mid-append, or a crash) is
/// ignored; an interrupted compaction is read as recovery would finish it (the marker present:
/// the new tree and sidecar wherever they are; absent: `DB.new*` ignored).
///
/// # Errors
/// As [`Store::open_as`] and [`wal::replay`].
pub fn open_read(db: &Path, cache_levels: u32, layers: Option<u32>) -> Result<ReadView, DbError> {
    let wp = wal::wal_path(db);
    let _swap = SwapLock::take(&wp, false)?;
    // Read-only: never compacted, so no limit applies.
    let mem = memtable_of(&wal::replay(&wp)?, usize::MAX);
    let (mut tree, mut meta) = (db.to_owned(), meta_path(db));
    if suffixed(db, MARKER_SUFFIX).exists() {
        let new = suffixed(db, NEW_SUFFIX);
        if new.exists() {
            tree = new.clone();
        }
        if meta_path(&new).exists() {
            meta = meta_path(&new);
        }
    }
    let store = Store::open_as(&tree, &meta, layers, cache_levels)?;
    Ok(ReadView { store, mem })
}

/// The logged puts of `db` ([`ReadView::mem`]) alone, read-only.
///
/// # Errors
/// As [`wal::replay`].
pub fn logged_memtable(db: &Path) -> Result<Memtable, DbError> {
    let wp = wal::wal_path(db);
    let _swap = SwapLock::take(&wp, false)?;
    Ok(memtable_of(&wal::replay(&wp)?, usize::MAX))
}

/// The memtable a replayed log rebuilds: the newest record of every key.
fn memtable_of(replay: &Replay, limit_bytes: usize) -> Memtable {
    let mut mem = Memtable::new(limit_bytes);
    for r in &replay.records {
        mem.insert(r.key, r.seq, r.value);
    }
    mem
}

/// [`logged_memtable`]'s value for `key`, or None to look in the tree.
///
/// # Errors
/// As [`logged_memtable`].
pub fn logged_value(db: &Path, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, DbError> {
    Ok(logged_memtable(db)?.get(key).copied())
}

/// The tree's entries of `[begin, end]` (sorted, from a range scan) with the memtable's entries
/// of the same range laid over them: a logged key replaces the tree's value or is inserted.
#[must_use]
pub fn overlay_range(
    tree: Vec<(u64, [u8; VALUE_BYTES])>,
    mem: &Memtable,
    begin: u64,
    end: u64,
) -> Vec<(u64, [u8; VALUE_BYTES])> {
    let mut logged = mem.range(begin, end).peekable();
    if logged.peek().is_none() {
        return tree;
    }
    let mut out = Vec::with_capacity(tree.len() + mem.len());
    let mut t = tree.into_iter().peekable();
    loop {
        let take_tree = match (t.peek(), logged.peek()) {
            (Some(&(tk, _)), Some(&(mk, _))) => {
                if tk == mk {
                    t.next(); // replaced by the logged value
                    false
                } else {
                    tk < mk
                }
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_tree {
            out.push(t.next().expect("peeked"));
        } else {
            let (k, v) = logged.next().expect("peeked");
            out.push((k, *v));
        }
    }
    debug_assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "overlay sorted, unique");
    out
}

#[derive(Debug)]
struct Inner {
    store: Arc<Store>,
    mem: Mutex<Memtable>,
    /// None inside `compact`, and for good once an install failed (then `failed` says why).
    wal: Option<Wal>,
    failed: Option<String>,
}

/// How [`Db::open_opts`] opens a database.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// Memtable bytes that trigger a compaction.
    pub memtable_limit_bytes: usize,
    /// How long to wait for another writer's lock (None: fail at once).
    pub wait_lock: Option<Duration>,
    /// Depth of a sidecar-less BPF-KV file (None: inferred; see [`crate::store::infer_meta`]).
    pub layers: Option<u32>,
    /// Where writes go: the file system, or a crash model in tests.
    pub storage: StorageRef,
}

impl Default for DbOptions {
    fn default() -> Self {
        Self {
            memtable_limit_bytes: DEFAULT_MEMTABLE_LIMIT_BYTES,
            wait_lock: None,
            layers: None,
            storage: crate::storage::real(),
        }
    }
}

/// An open writable database; holds the writer's lock until dropped.
#[derive(Debug)]
pub struct Db {
    path: PathBuf,
    memtable_limit_bytes: usize,
    storage: StorageRef,
    /// Read-locked by put/get (so puts share group commits), write-locked by compaction.
    inner: RwLock<Inner>,
    /// Dropped last (fields drop in order): the log is closed before the lock goes.
    _lock: DbLock,
}

impl Db {
    /// Opens `path` (created by `storefn kv create`) with the default options.
    ///
    /// # Errors
    /// As [`Db::open_opts`].
    pub fn open(path: &Path) -> Result<Db, DbError> {
        Self::open_opts(path, DbOptions::default())
    }

    /// Opens `path` with the default options but this memtable limit.
    ///
    /// # Errors
    /// As [`Db::open_opts`].
    pub fn open_with(path: &Path, memtable_limit_bytes: usize) -> Result<Db, DbError> {
        Self::open_opts(path, DbOptions { memtable_limit_bytes, ..DbOptions::default() })
    }

    /// Opens `path` as its one writer: takes the lock (`DB.lock`), finishes an interrupted
    /// compaction, writes the sidecar of a BPF-KV file that has none, opens the tree, replays the
    /// WAL and cuts its torn tail.
    ///
    /// # Errors
    /// [`LockError::Held`] naming the holder's pid; a missing or corrupt tree/sidecar, a WAL
    /// corrupt in the middle, I/O errors.
    pub fn open_opts(path: &Path, opts: DbOptions) -> Result<Db, DbError> {
        if !path.exists() && !suffixed(path, MARKER_SUFFIX).exists() {
            // Checked before the lock so a mistyped name leaves no `DB.lock` behind.
            let e = std::io::Error::from(std::io::ErrorKind::NotFound);
            return Err(io_err(path, "open")(e));
        }
        let lock = DbLock::acquire(path, opts.wait_lock)?;
        let storage = opts.storage;
        recover_locked(storage.as_ref(), path)?;
        if !meta_path(path).exists() {
            let meta = crate::store::infer_meta(path, opts.layers)?;
            write_meta(storage.as_ref(), path, &meta)?;
        }
        let store = Arc::new(Store::open_as(path, &meta_path(path), opts.layers, 0)?);
        let wp = wal::wal_path(path);
        let replay = wal::replay(&wp)?;
        let mem = memtable_of(&replay, opts.memtable_limit_bytes);
        let wal = Wal::open(storage.as_ref(), &wp, &replay)?;
        let inner = Inner { store, mem: Mutex::new(mem), wal: Some(wal), failed: None };
        Ok(Db {
            path: path.to_owned(),
            memtable_limit_bytes: opts.memtable_limit_bytes,
            storage,
            inner: RwLock::new(inner),
            _lock: lock,
        })
    }

    /// Makes `key = value` durable, then visible; compacts when the memtable is full.
    ///
    /// # Errors
    /// WAL failures, and compaction failures.
    pub fn put(&self, key: u64, value: &[u8; VALUE_BYTES]) -> Result<(), DbError> {
        self.put_batch(&[(key, *value)])
    }

    /// Puts many entries with one wait: all are submitted, then the last is waited for, so the
    /// WAL syncs them in as few group commits as possible. Returns once all are durable.
    ///
    /// # Errors
    /// As [`Db::put`].
    pub fn put_batch(&self, entries: &[(u64, [u8; VALUE_BYTES])]) -> Result<(), DbError> {
        let full = {
            let inner = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            let wal = inner.wal.as_ref().ok_or_else(|| self.closed(&inner))?;
            let mut tickets = Vec::with_capacity(entries.len());
            for (k, v) in entries {
                tickets.push(wal.submit(*k, v)?);
            }
            if let Some(last) = tickets.last() {
                wal.wait(*last)?;
            }
            let mut mem = inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for ((k, v), t) in entries.iter().zip(&tickets) {
                mem.insert(*k, t.0, *v);
            }
            mem.is_full()
        };
        if full {
            self.compact()?;
        }
        Ok(())
    }

    /// Memtable first, then the tree through `lookup` (any lookup path over the current store).
    ///
    /// # Errors
    /// Whatever `lookup` returns.
    pub fn get_with<E>(
        &self,
        key: u64,
        lookup: impl FnOnce(&Arc<Store>, u64) -> Result<Option<[u8; VALUE_BYTES]>, E>,
    ) -> Result<Option<[u8; VALUE_BYTES]>, E> {
        let inner = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let hit =
            inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).copied();
        match hit {
            Some(v) => Ok(Some(v)),
            None => lookup(&inner.store, key),
        }
    }

    /// [`Db::get_with`] through the `read` path.
    ///
    /// # Errors
    /// I/O errors, corrupt nodes.
    pub fn get(&self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        self.get_with(key, |store, k| ReadPath::new(Arc::clone(store), 0).get(k))
    }

    /// Runs `f` over the current tree and memtable together (a compaction cannot swap the tree
    /// between them; puts wait for the memtable until `f` returns).
    pub fn with_memtable<T>(&self, f: impl FnOnce(Arc<Store>, &Memtable) -> T) -> T {
        let inner = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mem = inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(Arc::clone(&inner.store), &mem)
    }

    /// Entries in the memtable.
    #[must_use]
    pub fn memtable_len(&self) -> usize {
        let inner = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len();
        n
    }

    /// The current tree.
    #[must_use]
    pub fn store(&self) -> Arc<Store> {
        let inner = self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&inner.store)
    }

    /// Merges tree + memtable into a new tree and installs it (module comment: steps 1-5).
    /// Puts wait for it (write lock); readers wait only for steps 2-5 (the swap lock).
    ///
    /// # Errors
    /// I/O errors (`NoSpace` before writing anything), corrupt tree nodes.
    pub fn compact(&self) -> Result<(), DbError> {
        let st = self.storage.as_ref();
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if inner.wal.is_none() {
            return Err(self.closed(&inner));
        }
        let mem = inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if mem.is_empty() {
            return Ok(());
        }
        let node_size = inner.store.node_size();
        let new = suffixed(&self.path, NEW_SUFFIX);
        // Step 1: two sequential sweeps of the old tree (keys to count, then the merge). A
        // failed build removed what it wrote; the old tree and the WAL are untouched.
        build_merged(st, &inner.store, &mem, &new, node_size)?;
        fsync_dir(st, &self.path)?;
        if let Err(e) = self.install(&mut inner, &new) {
            // Past step 2 the files say "roll forward"; the old tree and log this handle holds
            // must take no more writes. Reopening finishes the install.
            inner.failed = Some(e.to_string());
            drop(inner.wal.take());
            return Err(e);
        }
        Ok(())
    }

    fn closed(&self, inner: &Inner) -> DbError {
        let reason = inner.failed.clone().unwrap_or_else(|| "unknown".to_owned());
        DbError::Closed { path: self.path.clone(), reason }
    }

    /// Compaction steps 2-5 (module comment), under the swap lock.
    fn install(&self, inner: &mut Inner, new: &Path) -> Result<(), DbError> {
        let st = self.storage.as_ref();
        let wal_path = wal::wal_path(&self.path);
        let swap = SwapLock::take(&wal_path, true)?;
        // Step 2.
        let marker = suffixed(&self.path, MARKER_SUFFIX);
        st.create(&marker, false)
            .and_then(|f| f.sync())
            .map_err(io_err(&marker, "create marker"))?;
        fsync_dir(st, &self.path)?;
        // Step 3.
        st.rename(&meta_path(new), &meta_path(&self.path))
            .map_err(io_err(&meta_path(new), "rename"))?;
        st.rename(new, &self.path).map_err(io_err(new, "rename"))?;
        fsync_dir(st, &self.path)?;
        // Step 4: close the log (drains its syncer), empty it, reopen at sequence 0.
        drop(inner.wal.take());
        wal::truncate(st, &wal_path)?;
        let empty = Replay { exists: true, ..Replay::default() };
        inner.wal = Some(Wal::open(st, &wal_path, &empty)?);
        // Step 5.
        st.remove(&marker).map_err(io_err(&marker, "remove marker"))?;
        fsync_dir(st, &self.path)?;
        drop(swap);
        inner.store = Arc::new(Store::open(&self.path, 0)?);
        *inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Memtable::new(self.memtable_limit_bytes);
        Ok(())
    }
}

/// Compaction step 1's build: the old tree's entries merged with `mem`, streamed into `new`.
fn build_merged(
    storage: &dyn Storage,
    old: &Store,
    mem: &Memtable,
    new: &Path,
    node_size: NodeSize,
) -> Result<(), DbError> {
    let count = merged_count(old, mem)?;
    let mut stream = MergeStream::new(old, mem.iter(), count);
    let built = build_tree_in(storage, new, node_size, &mut stream, &mut |_, _| {});
    // The stream's own error is the cause of a short stream: report it first.
    if let Some(e) = stream.error.take() {
        return Err(e.into());
    }
    built?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_replaces_and_inserts_only_inside_the_range() {
        let tree = vec![(1, [1u8; 64]), (3, [3u8; 64]), (5, [5u8; 64])];
        let mut mem = Memtable::new(DEFAULT_MEMTABLE_LIMIT_BYTES);
        mem.insert(0, 1, [9; 64]); // below the range
        mem.insert(3, 2, [8; 64]); // update
        mem.insert(4, 3, [7; 64]); // insert
        mem.insert(9, 4, [6; 64]); // above the range
        let out = overlay_range(tree.clone(), &mem, 1, 5);
        assert_eq!(out, vec![(1, [1; 64]), (3, [8; 64]), (4, [7; 64]), (5, [5; 64])]);
        assert_eq!(overlay_range(tree.clone(), &mem, 6, 8), tree, "no logged key inside");
        assert_eq!(overlay_range(vec![], &mem, 9, 9), vec![(9, [6; 64])]);
        assert!(overlay_range(vec![], &mem, 5, 1).is_empty(), "begin > end");
    }
}
