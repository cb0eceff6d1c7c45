//! Bulk creation of BPF-KV trees from any sorted `(key, value)` stream.
//!
//! Layout (docs/FORMAT.md): internal levels from offset 0, then the leaves, then the value log.
//! Leaves and values are streamed out through two large aligned buffers as entries arrive; the
//! internal levels need only every leaf's first key and are written last. Data is fsynced before
//! the sidecar is written (and the old sidecar is removed first), so a crash never leaves a
//! sidecar describing a half-written file.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::aligned::{open_direct, AlignedBuf};
use crate::format::{
    bpfkv_value, meta_path, put_node_header, put_slot, Meta, NodeSize, FILE_MASK,
    NODE_TYPE_INTERNAL, NODE_TYPE_LEAF, UNUSED_KEY, UNUSED_LEAF_PTR, VALUE_BYTES,
};
use crate::KvError;

/// Bytes per write: large enough to reach the disk's sequential bandwidth, a multiple of both
/// node sizes and of the 4 KiB alignment O_DIRECT needs.
pub const BUILD_CHUNK_BYTES: usize = 4 << 20;

/// A progress callback: `(bytes_written, total_bytes)`.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// Sequential writer of one region of the file through an aligned buffer.
struct Region<'f> {
    file: &'f mut DbFile,
    buf: AlignedBuf,
    fill: usize,
    offset: u64,
}

/// The output file; falls back to buffered writes if O_DIRECT rejects an unaligned tail.
struct DbFile {
    file: File,
    direct: bool,
    written: u64,
    total: u64,
}

impl DbFile {
    fn write_at(&mut self, path: &Path, data: &[u8], offset: u64) -> Result<(), KvError> {
        match self.file.write_all_at(data, offset) {
            Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                // A block size the device cannot take directly (e.g. 512 B tail on a 4 KiB
                // device): continue buffered; fsync at the end still makes it durable.
                self.file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| KvError::io(path, "reopen buffered", e))?;
                self.direct = false;
                self.file.write_all_at(data, offset).map_err(|e| KvError::io(path, "write", e))
            }
            r => r.map_err(|e| KvError::io(path, "write", e)),
        }?;
        self.written += data.len() as u64;
        Ok(())
    }
}

impl<'f> Region<'f> {
    fn new(file: &'f mut DbFile, offset: u64) -> Self {
        Self { file, buf: AlignedBuf::new(BUILD_CHUNK_BYTES), fill: 0, offset }
    }

    /// A zeroed `len`-byte slot at the end of the buffer, flushing first if full.
    fn slot(&mut self, path: &Path, len: usize, progress: Progress) -> Result<&mut [u8], KvError> {
        debug_assert!(BUILD_CHUNK_BYTES.is_multiple_of(len));
        if self.fill == BUILD_CHUNK_BYTES {
            self.flush(path, progress)?;
        }
        let s = &mut self.buf[self.fill..self.fill + len];
        s.fill(0);
        self.fill += len;
        Ok(s)
    }

    fn flush(&mut self, path: &Path, progress: Progress) -> Result<(), KvError> {
        if self.fill > 0 {
            self.file.write_at(path, &self.buf[..self.fill], self.offset)?;
            self.offset += self.fill as u64;
            self.fill = 0;
            progress(self.file.written, self.file.total);
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
    let (lo, hi) = entries.size_hint();
    if hi == Some(lo) {
        build_counted(path, node_size, lo as u64, entries, progress)
    } else {
        let v: Vec<_> = entries.collect();
        build_counted(path, node_size, v.len() as u64, v.into_iter(), progress)
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
    /// Deepest database `create` makes: 8 levels of 31 is 852 TB already.
    const MAX_CREATE_LAYERS: u32 = 8;
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
    build_tree(path, node_size, (0..n).map(|k| (k, bpfkv_value(k))), progress)
}

fn build_counted(
    path: &Path,
    node_size: NodeSize,
    n: u64,
    mut entries: impl Iterator<Item = (u64, [u8; 64])>,
    progress: Progress,
) -> Result<Meta, KvError> {
    let meta = Meta::plan(node_size, n)?;
    let mp = meta_path(path);
    match std::fs::remove_file(&mp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(KvError::io(&mp, "remove old sidecar", e));
        }
        _ => {}
    }
    let (file, direct) = open_direct(path, true)?;
    let mut out = DbFile { file, direct, written: 0, total: meta.file_bytes };
    let nb = node_size.bytes();
    let f = node_size.fanout();
    let starts = meta.level_starts();
    let leaf_level = starts.len() - 1;
    let leaf_count = meta.level_counts()[leaf_level];
    let leaf_start = starts[leaf_level];

    // Phase 1: leaves (in one region) and values (in another), streamed.
    let mut leaf_first_keys: Vec<u64> = Vec::with_capacity(usize::try_from(leaf_count).unwrap());
    {
        let mut leaves = Region::new(&mut out, leaf_start * nb as u64);
        let mut vals_file = DbFile {
            file: leaves.file.file.try_clone().map_err(|e| KvError::io(path, "dup", e))?,
            direct: leaves.file.direct,
            written: 0,
            total: meta.file_bytes,
        };
        let mut values = Region::new(&mut vals_file, meta.value_log_offset);
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
        let vw = values.file.written;
        leaves.file.written += vw;
        leaves.flush(path, &mut noop)?;
    }

    // Phase 2: internal levels, root first. Node m at height h covers entries from m * F^h; the
    // smallest key of child c (height h-1) is the first key of leaf c * F^(h-2).
    {
        let mut internal = Region::new(&mut out, 0);
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
    assert_eq!(out.written, meta.file_bytes, "every byte of the file written once");
    progress(out.written, meta.file_bytes);
    out.file.sync_all().map_err(|e| KvError::io(path, "fsync", e))?;
    write_meta(path, &meta)?;
    Ok(meta)
}

/// Writes the sidecar atomically: temp file, fsync, rename, fsync of the directory.
fn write_meta(path: &Path, meta: &Meta) -> Result<(), KvError> {
    let mp = meta_path(path);
    let mut tmp = mp.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(|e| KvError::io(&tmp, "create", e))?;
    f.write_all(&meta.encode()).map_err(|e| KvError::io(&tmp, "write", e))?;
    f.sync_all().map_err(|e| KvError::io(&tmp, "fsync", e))?;
    std::fs::rename(&tmp, &mp).map_err(|e| KvError::io(&mp, "rename", e))?;
    let dir = mp.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| KvError::io(dir, "fsync directory", e))?;
    Ok(())
}
