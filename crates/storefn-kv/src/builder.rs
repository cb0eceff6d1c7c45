//! Bulk creation of BPF-KV trees from any sorted `(key, value)` stream.
//!
//! Layout (docs/FORMAT.md): internal levels from offset 0, then the leaves, then the value log.
//! Leaves and values are streamed out through two large aligned buffers as entries arrive; the
//! internal levels need only every leaf's first key and are written last. Data is fsynced before
//! the sidecar is written (and the old sidecar is removed first), so a crash never leaves a
//! sidecar describing a half-written file.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::aligned::AlignedBuf;
use crate::format::{
    bpfkv_value, meta_path, put_node_header, put_slot, Meta, NodeSize, FILE_MASK, META_BYTES,
    NODE_TYPE_INTERNAL, NODE_TYPE_LEAF, UNUSED_KEY, UNUSED_LEAF_PTR, VALUE_BYTES,
};
use crate::limits::{BUILD_CHUNK_BYTES, MAX_CREATE_LAYERS};
use crate::storage::{parent_dir, Storage, StorageFile};
use crate::KvError;

/// A progress callback: `(bytes_written, total_bytes)`.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Buffers per region: one being filled while the other is written.
const BUFFERS_PER_REGION: usize = 2;
/// Writes queued to the writer thread.
const WRITE_QUEUE: usize = 4;

struct Job {
    buf: AlignedBuf,
    len: usize,
    offset: u64,
    ret: SyncSender<AlignedBuf>,
}

/// A thread doing the file writes, so filling the next buffer overlaps the current write.
/// The storage layer takes O_DIRECT where it can and redoes a write O_DIRECT refuses (a
/// 512 B-aligned tail on a 4 KiB-block device) buffered; the final sync makes either durable.
struct Writer {
    tx: Option<SyncSender<Job>>,
    handle: Option<JoinHandle<Result<Box<dyn StorageFile>, KvError>>>,
    /// Bytes written so far; Relaxed: read only for the progress display.
    written: Arc<AtomicU64>,
    /// Set once a write failed; Relaxed: producers only use it to stop early, the error itself
    /// travels through the join.
    failed: Arc<AtomicBool>,
    total: u64,
}

impl Writer {
    fn start(file: Box<dyn StorageFile>, path: &Path, total: u64) -> Writer {
        let (tx, rx) = sync_channel::<Job>(WRITE_QUEUE);
        let written = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let (w, f, path) = (Arc::clone(&written), Arc::clone(&failed), path.to_path_buf());
        let handle = std::thread::spawn(move || {
            let mut err = None;
            for job in rx {
                if err.is_none() {
                    if let Err(e) = file.write_at(&job.buf[..job.len], job.offset) {
                        err = Some(KvError::io(&path, "write", e));
                        f.store(true, Ordering::Relaxed);
                    }
                    w.fetch_add(job.len as u64, Ordering::Relaxed);
                }
                // The region may already be gone after an error: nothing to return to.
                let _ = job.ret.send(job.buf);
            }
            err.map_or(Ok(file), Err)
        });
        Writer { tx: Some(tx), handle: Some(handle), written, failed, total }
    }

    /// Waits for every queued write; returns the file for the fsync.
    fn finish(mut self) -> Result<Box<dyn StorageFile>, KvError> {
        drop(self.tx.take());
        self.handle.take().expect("joined once").join().expect("writer thread panicked")
    }

    fn report(&self, progress: Progress) {
        progress(self.written.load(Ordering::Relaxed), self.total);
    }
}

/// Sequential filler of one region of the file.
struct Region<'w> {
    w: &'w Writer,
    buf: Option<AlignedBuf>,
    fill: usize,
    offset: u64,
    free: Receiver<AlignedBuf>,
    ret: SyncSender<AlignedBuf>,
}

impl<'w> Region<'w> {
    fn new(w: &'w Writer, offset: u64) -> Self {
        let (ret, free) = sync_channel(BUFFERS_PER_REGION);
        for _ in 1..BUFFERS_PER_REGION {
            ret.send(AlignedBuf::new(BUILD_CHUNK_BYTES)).expect("channel has room");
        }
        let buf = Some(AlignedBuf::new(BUILD_CHUNK_BYTES));
        Self { w, buf, fill: 0, offset, free, ret }
    }

    /// A zeroed `len`-byte slot at the end of the buffer, flushing first if full.
    fn slot(&mut self, path: &Path, len: usize, progress: Progress) -> Result<&mut [u8], KvError> {
        debug_assert!(BUILD_CHUNK_BYTES.is_multiple_of(len));
        if self.fill == BUILD_CHUNK_BYTES {
            self.flush(path, progress)?;
        }
        let s = &mut self.buf.as_mut().expect("buffer in hand")[self.fill..self.fill + len];
        s.fill(0);
        self.fill += len;
        Ok(s)
    }

    fn flush(&mut self, path: &Path, progress: Progress) -> Result<(), KvError> {
        let stopped = || KvError::io(path, "write", std::io::Error::other("writer stopped"));
        if self.w.failed.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        if self.fill > 0 {
            let buf = self.buf.take().expect("buffer in hand");
            let job = Job { buf, len: self.fill, offset: self.offset, ret: self.ret.clone() };
            self.w.tx.as_ref().expect("writer running").send(job).map_err(|_| stopped())?;
            self.buf = Some(self.free.recv().map_err(|_| stopped())?);
            self.offset += self.fill as u64;
            self.fill = 0;
            self.w.report(progress);
        }
        Ok(())
    }
}

/// Builds a tree at `path` from `entries` (strictly increasing keys) and writes `path.meta`.
///
/// The entry count is taken from `size_hint` when it is exact (ranges, `Vec` iterators,
/// `ExactSizeIterator`s); otherwise the stream is first collected in memory. A stream that
/// yields a different count than it announced is an error.
///
/// Unused slots of a partial last node: key `u64::MAX`; internal pointer = the last used
/// pointer, leaf pointer = 0 (bit 63 clear: a miss). Value-log padding slots hold
/// `sprintf("%63lu", slot)` as BPF-KV's `create` does.
///
/// # Errors
/// Unsorted or duplicate keys, I/O errors (naming the path), a count mismatch.
pub fn build_tree(
    path: &Path,
    node_size: NodeSize,
    entries: impl Iterator<Item = (u64, [u8; 64])>,
    progress: Progress,
) -> Result<Meta, KvError> {
    build_tree_in(&crate::storage::RealStorage, path, node_size, entries, progress)
}

/// [`build_tree`] through `storage`. Before writing, compares the bytes the tree and sidecar
/// take with the free space of the file system (`NoSpace` with both figures); on any failure
/// it removes what it wrote.
///
/// # Errors
/// As [`build_tree`], and `NoSpace`.
pub fn build_tree_in(
    storage: &dyn Storage,
    path: &Path,
    node_size: NodeSize,
    entries: impl Iterator<Item = (u64, [u8; 64])>,
    progress: Progress,
) -> Result<Meta, KvError> {
    let (lo, hi) = entries.size_hint();
    if hi == Some(lo) {
        build_counted(storage, path, node_size, lo as u64, entries, progress)
    } else {
        let v: Vec<_> = entries.collect();
        build_counted(storage, path, node_size, v.len() as u64, v.into_iter(), progress)
    }
}

/// BPF-KV's `create`: keys `0 .. F^layers`, value of key k = `sprintf("%63lu", k)`.
///
/// # Errors
/// As [`build_tree`]; `layers` outside 1..=8 is `Invalid`.
pub fn create_bpfkv(
    path: &Path,
    node_size: NodeSize,
    layers: u32,
    progress: Progress,
) -> Result<Meta, KvError> {
    create_bpfkv_in(&crate::storage::RealStorage, path, node_size, layers, progress)
}

/// [`create_bpfkv`] through `storage` (free space checked first, see [`build_tree_in`]).
///
/// # Errors
/// As [`build_tree_in`]; `layers` outside 1..=8 is `Invalid`.
pub fn create_bpfkv_in(
    storage: &dyn Storage,
    path: &Path,
    node_size: NodeSize,
    layers: u32,
    progress: Progress,
) -> Result<Meta, KvError> {
    if !(1..=MAX_CREATE_LAYERS).contains(&layers) {
        return Err(KvError::Invalid(format!(
            "--layers {layers}: must be 1..={MAX_CREATE_LAYERS}"
        )));
    }
    let n = (node_size.fanout() as u64).checked_pow(layers).ok_or(KvError::TooLarge {
        what: "layers",
        value: u64::from(layers),
        limit: 7,
    })?;
    build_tree_in(storage, path, node_size, (0..n).map(|k| (k, bpfkv_value(k))), progress)
}

fn build_counted(
    storage: &dyn Storage,
    path: &Path,
    node_size: NodeSize,
    n: u64,
    entries: impl Iterator<Item = (u64, [u8; 64])>,
    progress: Progress,
) -> Result<Meta, KvError> {
    let meta = Meta::plan(node_size, n)?;
    check_space(storage, path, meta.file_bytes + META_BYTES as u64)?;
    let mp = meta_path(path);
    match storage.remove(&mp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(KvError::io(&mp, "remove old sidecar", e));
        }
        _ => {}
    }
    let file = storage.create(path, true).map_err(|e| KvError::io(path, "create", e))?;
    let result = write_file(storage, path, &meta, file, entries, progress);
    if result.is_err() {
        // Whatever failed (ENOSPC, EIO, bad input), leave nothing half-written behind.
        let _ = storage.remove(&tmp_meta_path(path));
        let _ = storage.remove(path);
    }
    result.map(|()| meta)
}

/// Refuses to start a build of `need_bytes` at `path` the file system has no room for. A file
/// already at `path` is replaced, so its bytes count as free.
pub(crate) fn check_space(
    storage: &dyn Storage,
    path: &Path,
    need_bytes: u64,
) -> Result<(), KvError> {
    let dir = parent_dir(path);
    let free = storage.free_bytes(&dir).map_err(|e| KvError::io(&dir, "statvfs", e))?;
    let replaced = std::fs::metadata(path).map_or(0, |m| m.len());
    if need_bytes > free.saturating_add(replaced) {
        return Err(KvError::NoSpace {
            path: path.to_path_buf(),
            need_bytes,
            free_bytes: free.saturating_add(replaced),
        });
    }
    Ok(())
}

fn write_file(
    storage: &dyn Storage,
    path: &Path,
    meta: &Meta,
    file: Box<dyn StorageFile>,
    entries: impl Iterator<Item = (u64, [u8; 64])>,
    progress: Progress,
) -> Result<(), KvError> {
    // Allocate the whole file first: O_DIRECT writes that extend a file (or fill holes past
    // EOF) are serialised by ext4; writes into allocated space are not.
    file.allocate(meta.file_bytes).map_err(|e| KvError::io(path, "fallocate", e))?;
    let writer = Writer::start(file, path, meta.file_bytes);
    let result = write_tree(path, meta, entries, &writer, progress);
    // Join the writer even on error; its I/O error (if any) is the real cause.
    let written = Arc::clone(&writer.written);
    let file = writer.finish()?;
    result?;
    // Relaxed suffices: the join above ordered every writer store before this load.
    assert_eq!(written.load(Ordering::Relaxed), meta.file_bytes, "every byte written once");
    progress(meta.file_bytes, meta.file_bytes);
    file.sync().map_err(|e| KvError::io(path, "fsync", e))?;
    write_meta(storage, path, meta)
}

fn write_tree(
    path: &Path,
    meta: &Meta,
    mut entries: impl Iterator<Item = (u64, [u8; 64])>,
    writer: &Writer,
    progress: Progress,
) -> Result<(), KvError> {
    let (node_size, n) = (meta.node_size, meta.key_count);
    let nb = node_size.bytes();
    let f = node_size.fanout();
    let starts = meta.level_starts();
    let leaf_level = starts.len() - 1;
    let leaf_count = meta.level_counts()[leaf_level];
    let leaf_start = starts[leaf_level];

    // Phase 1: leaves (in one region) and values (in another), streamed.
    let mut leaf_first_keys: Vec<u64> = Vec::with_capacity(usize::try_from(leaf_count).unwrap());
    {
        let mut leaves = Region::new(writer, leaf_start * nb as u64);
        let mut values = Region::new(writer, meta.value_log_offset);
        let mut prev: Option<u64> = None;
        let mut noop = |_: u64, _: u64| {};
        for leaf in 0..leaf_count {
            let next = if leaf + 1 < leaf_count { (leaf_start + leaf + 1) * nb as u64 } else { 0 };
            let mut node = vec![0u8; nb];
            put_node_header(&mut node, next, NODE_TYPE_LEAF);
            for slot in 0..f {
                let index = leaf * f as u64 + slot as u64;
                if index >= n {
                    put_slot(&mut node, node_size, slot, UNUSED_KEY, UNUSED_LEAF_PTR);
                    continue;
                }
                let (key, value) =
                    entries.next().ok_or(KvError::CountMismatch { expected: n, actual: index })?;
                if let Some(p) = prev.filter(|&p| key <= p) {
                    return Err(KvError::Unsorted { index, key, prev: p });
                }
                prev = Some(key);
                if slot == 0 {
                    leaf_first_keys.push(key);
                }
                let vptr = meta.value_log_offset + index * VALUE_BYTES as u64;
                put_slot(&mut node, node_size, slot, key, vptr | FILE_MASK);
                values.slot(path, VALUE_BYTES, progress)?.copy_from_slice(&value);
            }
            leaves.slot(path, nb, &mut noop)?.copy_from_slice(&node);
        }
        if entries.next().is_some() {
            return Err(KvError::CountMismatch { expected: n, actual: n + 1 });
        }
        for pad in n..meta.value_slots() {
            values.slot(path, VALUE_BYTES, &mut noop)?.copy_from_slice(&bpfkv_value(pad));
        }
        values.flush(path, progress)?;
        leaves.flush(path, &mut noop)?;
    }

    // Phase 2: internal levels, root first. Node m at height h covers entries from m * F^h; the
    // smallest key of child c (height h-1) is the first key of leaf c * F^(h-2).
    {
        let mut internal = Region::new(writer, 0);
        for level in 0..leaf_level {
            let height = u32::try_from(starts.len() - level).unwrap();
            let count = meta.level_counts()[level];
            let child_count = meta.level_counts()[level + 1];
            let leaves_per_child = (f as u64).pow(height - 2);
            for m in 0..count {
                let next = if m + 1 < count { (starts[level] + m + 1) * nb as u64 } else { 0 };
                let mut node = vec![0u8; nb];
                put_node_header(&mut node, next, NODE_TYPE_INTERNAL);
                let mut last_ptr = 0;
                for slot in 0..f {
                    let child = m * f as u64 + slot as u64;
                    if child >= child_count {
                        put_slot(&mut node, node_size, slot, UNUSED_KEY, last_ptr);
                        continue;
                    }
                    let key = leaf_first_keys[usize::try_from(child * leaves_per_child).unwrap()];
                    last_ptr = ((starts[level + 1] + child) * nb as u64) | FILE_MASK;
                    put_slot(&mut node, node_size, slot, key, last_ptr);
                }
                internal.slot(path, nb, progress)?.copy_from_slice(&node);
            }
        }
        internal.flush(path, progress)?;
    }
    Ok(())
}

fn tmp_meta_path(path: &Path) -> std::path::PathBuf {
    let mut tmp = meta_path(path).into_os_string();
    tmp.push(".tmp");
    tmp.into()
}

/// Writes the sidecar atomically: temp file, fsync, rename, fsync of the directory.
///
/// # Errors
/// I/O errors naming the file.
pub fn write_meta(storage: &dyn Storage, path: &Path, meta: &Meta) -> Result<(), KvError> {
    let mp = meta_path(path);
    let tmp = tmp_meta_path(path);
    let f = storage.create(&tmp, false).map_err(|e| KvError::io(&tmp, "create", e))?;
    f.write_at(&meta.encode(), 0).map_err(|e| KvError::io(&tmp, "write", e))?;
    f.sync().map_err(|e| KvError::io(&tmp, "fsync", e))?;
    storage.rename(&tmp, &mp).map_err(|e| KvError::io(&mp, "rename", e))?;
    let dir = parent_dir(&mp);
    storage.sync_dir(&dir).map_err(|e| KvError::io(&dir, "fsync directory", e))
}
