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
//! [`recover`] (run by [`Db::open`]) rolls a marked swap forward (renaming whichever of the two
//! files is still there), or, without a marker, deletes a half-built `DB.new*`. Tree and sidecar
//! can mismatch only while the marker exists, and nothing reads the tree before `recover`. WAL
//! records already merged are harmless if replayed: puts are blind overwrites applied in order.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::compact::{merged_count, MergeStream};
use crate::format::{meta_path, VALUE_BYTES};
use crate::memtable::{Memtable, DEFAULT_MEMTABLE_LIMIT_BYTES};
use crate::path::{LookupPath, ReadPath};
use crate::store::Store;
use crate::wal::{self, Wal, WalError};
use crate::{build_tree, KvError};

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

fn fsync_dir(db: &Path) -> Result<(), DbError> {
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(io_err(&dir, "fsync directory"))
}

fn remove_if_present(p: &Path) -> Result<bool, DbError> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(p, "remove")(e)),
    }
}

fn rename_if_present(from: &Path, to: &Path) -> Result<bool, DbError> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(from, "rename")(e)),
    }
}

/// Finishes or undoes a compaction interrupted by a crash (see the module comment). Readers that
/// open the tree directly must call this first. Returns true if anything was repaired.
///
/// # Errors
/// I/O errors.
pub fn recover(db: &Path) -> Result<bool, DbError> {
    let new = suffixed(db, NEW_SUFFIX);
    let marker = suffixed(db, MARKER_SUFFIX);
    if marker.exists() {
        rename_if_present(&meta_path(&new), &meta_path(db))?;
        rename_if_present(&new, db)?;
        fsync_dir(db)?;
        remove_if_present(&marker)?;
        fsync_dir(db)?;
        return Ok(true);
    }
    let a = remove_if_present(&meta_path(&new))?;
    let b = remove_if_present(&new)?;
    if a || b {
        fsync_dir(db)?;
    }
    Ok(a || b)
}

/// For read-only commands: finishes an interrupted compaction ([`recover`]), then returns what
/// the memtable would hold: the newest logged value of every key put since the last compaction.
/// Commands that read the tree directly must overlay these on its answers.
///
/// # Errors
/// As [`recover`] and [`wal::replay`].
pub fn logged_memtable(db: &Path) -> Result<Memtable, DbError> {
    recover(db)?;
    let replay = wal::replay(&wal::wal_path(db))?;
    // Read-only: never compacted, so no limit applies.
    let mut mem = Memtable::new(usize::MAX);
    for r in &replay.records {
        mem.insert(r.key, r.seq, r.value);
    }
    Ok(mem)
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
    /// None only transiently inside `compact`.
    wal: Option<Wal>,
}

/// An open writable database.
#[derive(Debug)]
pub struct Db {
    path: PathBuf,
    memtable_limit_bytes: usize,
    /// Read-locked by put/get (so puts share group commits), write-locked by compaction.
    inner: RwLock<Inner>,
}

impl Db {
    /// Opens `path` (created by `storefn kv create`) with the default memtable limit.
    ///
    /// # Errors
    /// As [`Db::open_with`].
    pub fn open(path: &Path) -> Result<Db, DbError> {
        Self::open_with(path, DEFAULT_MEMTABLE_LIMIT_BYTES)
    }

    /// Opens `path`: finishes an interrupted compaction, opens the tree, replays the WAL.
    ///
    /// # Errors
    /// A missing or corrupt tree/sidecar, a WAL corrupt in the middle, I/O errors.
    pub fn open_with(path: &Path, memtable_limit_bytes: usize) -> Result<Db, DbError> {
        recover(path)?;
        let store = Arc::new(Store::open(path, 0)?);
        let replay = wal::replay(&wal::wal_path(path))?;
        let mut mem = Memtable::new(memtable_limit_bytes);
        for r in &replay.records {
            mem.insert(r.key, r.seq, r.value);
        }
        let last = replay.records.last().map_or(0, |r| r.seq);
        let wal = Wal::open(&wal::wal_path(path), last)?;
        let inner = Inner { store, mem: Mutex::new(mem), wal: Some(wal) };
        Ok(Db { path: path.to_owned(), memtable_limit_bytes, inner: RwLock::new(inner) })
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
            let wal = inner.wal.as_ref().expect("wal is open outside compaction");
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
    /// Puts wait for it (write lock).
    ///
    /// # Errors
    /// I/O errors, corrupt tree nodes.
    pub fn compact(&self) -> Result<(), DbError> {
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mem = inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if mem.is_empty() {
            return Ok(());
        }
        let node_size = inner.store.node_size();
        let new = suffixed(&self.path, NEW_SUFFIX);
        // Step 1: two sequential sweeps of the old tree (keys to count, then the merge).
        let built = build_merged(&inner.store, &mem, &new, node_size);
        if let Err(e) = built {
            // Without a marker the half-built tree is garbage (recover would delete it too);
            // the old tree and the WAL are untouched, so the database stays as it was.
            let _ = remove_if_present(&meta_path(&new));
            let _ = remove_if_present(&new);
            return Err(e);
        }
        fsync_dir(&self.path)?;
        // Step 2.
        let marker = suffixed(&self.path, MARKER_SUFFIX);
        std::fs::File::create(&marker)
            .and_then(|f| f.sync_all())
            .map_err(io_err(&marker, "create marker"))?;
        fsync_dir(&self.path)?;
        // Step 3.
        std::fs::rename(meta_path(&new), meta_path(&self.path))
            .map_err(io_err(&meta_path(&new), "rename"))?;
        std::fs::rename(&new, &self.path).map_err(io_err(&new, "rename"))?;
        fsync_dir(&self.path)?;
        // Step 4: close the log (drains its syncer), empty it, reopen at sequence 0.
        drop(inner.wal.take());
        let wal_path = wal::wal_path(&self.path);
        wal::truncate(&wal_path)?;
        inner.wal = Some(Wal::open(&wal_path, 0)?);
        // Step 5.
        std::fs::remove_file(&marker).map_err(io_err(&marker, "remove marker"))?;
        fsync_dir(&self.path)?;
        inner.store = Arc::new(Store::open(&self.path, 0)?);
        *inner.mem.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Memtable::new(self.memtable_limit_bytes);
        Ok(())
    }
}

/// Compaction step 1's build: the old tree's entries merged with `mem`, streamed into `new`.
fn build_merged(
    old: &Store,
    mem: &Memtable,
    new: &Path,
    node_size: crate::NodeSize,
) -> Result<(), DbError> {
    let count = merged_count(old, mem)?;
    let mut stream = MergeStream::new(old, mem.iter(), count);
    let built = build_tree(new, node_size, &mut stream, &mut |_, _| {});
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
