//! An open BPF-KV database: sidecar-checked shape, the file, and the cached top levels.
//!
//! Every lookup path drives the same state machine: [`Store::start`] walks the cached levels and
//! names the first block to read; [`Store::on_node`] turns each node read into the next [`Step`].
//! Every pointer is validated against the shape before it is followed, so a corrupt file yields
//! `CorruptNode` with its offset, never a wild read or a loop.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::aligned::{open_direct, AlignedBuf};
use crate::format::{
    meta_path, put_ptr, Meta, NodeSize, NodeView, FILE_MASK, NODE_TYPE_INTERNAL, NODE_TYPE_LEAF,
    VALUE_BYTES,
};
use crate::limits::IO_ALIGN;
use crate::KvError;

thread_local! {
    /// Aligned window for reads O_DIRECT cannot take as asked (see [`Store::read_block`]).
    static WINDOW: std::cell::RefCell<Option<AlignedBuf>> = const { std::cell::RefCell::new(None) };
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns the bytes read.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The O_DIRECT offset alignment statx reports for `file`; the I/O alignment when it reports
/// none (the file opened with O_DIRECT, so some alignment works).
fn dio_align(file: &File, path: &Path) -> Result<u64, KvError> {
    let (_, align) = storefn_io::statx_size_align(file, path)
        .map_err(|e| KvError::io(path, "statx", std::io::Error::other(e.to_string())))?;
    Ok(if align == 0 { IO_ALIGN as u64 } else { u64::from(align) })
}

/// The shape of a BPF-KV file that has no sidecar, as BPF-KV's `create` makes it: F^L keys for
/// some node size and depth L (`layers`, when given, is the only depth tried). A candidate must
/// match the file's size exactly, and its root and first leaf must read back as that shape
/// would write them (node types, the root's first child pointer, key 0 and its value pointer).
///
/// # Errors
/// `ShapeUnknown` when no shape, or more than one, fits; I/O errors.
pub fn infer_meta(path: &Path, layers: Option<u32>) -> Result<Meta, KvError> {
    use crate::format::{NODE_OFF_NEXT, NODE_OFF_TYPE};
    let file = File::open(path).map_err(|e| KvError::io(path, "open", e))?;
    let size = file.metadata().map_err(|e| KvError::io(path, "stat", e))?.len();
    let depths = layers.map_or(1..=crate::limits::MAX_CREATE_LAYERS, |l| l..=l);
    let mut fits = Vec::new();
    for ns in [NodeSize::B512, NodeSize::B4096] {
        for l in depths.clone() {
            let Some(n) = (ns.fanout() as u64).checked_pow(l) else { continue };
            let Ok(m) = Meta::plan(ns, n) else { continue };
            if m.file_bytes != size || m.layers != l {
                continue;
            }
            let nb = ns.bytes();
            let leaf_off = m.level_starts()[l as usize - 1] * nb as u64;
            let (mut root, mut leaf) = (vec![0u8; nb], vec![0u8; nb]);
            file.read_exact_at(&mut root, 0).map_err(|e| KvError::io(path, "pread", e))?;
            file.read_exact_at(&mut leaf, leaf_off).map_err(|e| KvError::io(path, "pread", e))?;
            let (rv, lv) = (NodeView::new(&root, ns), NodeView::new(&leaf, ns));
            let u64_at =
                |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
            let root_ok = if l == 1 {
                u64_at(&root, NODE_OFF_TYPE) == NODE_TYPE_LEAF
            } else {
                u64_at(&root, NODE_OFF_TYPE) == NODE_TYPE_INTERNAL
                    && u64_at(&root, NODE_OFF_NEXT) == 0
                    && rv.ptr(0) == FILE_MASK | nb as u64
            };
            let leaf_ok = lv.node_type() == NODE_TYPE_LEAF
                && lv.key(0) == 0
                && lv.ptr(0) == FILE_MASK | m.value_log_offset;
            if root_ok && leaf_ok {
                fits.push(m);
            }
        }
    }
    match fits.as_slice() {
        [m] => Ok(*m),
        [] => Err(KvError::ShapeUnknown {
            path: path.to_owned(),
            size,
            reason: format!(
                "no BPF-KV `create` shape{} has this size and root",
                layers.map_or_else(String::new, |l| format!(" of {l} layers"))
            ),
        }),
        _ => Err(KvError::ShapeUnknown {
            path: path.to_owned(),
            size,
            reason: format!("{} shapes fit; give --layers", fits.len()),
        }),
    }
}

/// What a lookup does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Read the node at this file offset, on this level (0 = root).
    Node { offset: u64, level: u32 },
    /// Read the value at this file offset (read the node-size block containing it).
    Value { offset: u64 },
    /// Finished: the value, or a miss.
    Done(Option<[u8; VALUE_BYTES]>),
}

/// A tree's shape and the checks every lookup path applies to a node it read, local or
/// remote: the node's type for its level, children inside the next level, value pointers in
/// the log. One set of checks turns a node into the next [`Step`].
#[derive(Debug, Clone)]
pub struct Shape {
    path: PathBuf,
    meta: Meta,
    starts: Vec<u64>,
    counts: Vec<u64>,
}

impl Shape {
    /// The shape `meta` describes, for the file `path` (named in errors).
    #[must_use]
    pub fn new(path: &Path, meta: Meta) -> Self {
        Self {
            path: path.to_path_buf(),
            meta,
            starts: meta.level_starts(),
            counts: meta.level_counts(),
        }
    }

    #[must_use]
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    fn corrupt(&self, offset: u64, reason: String) -> KvError {
        KvError::CorruptNode { path: self.path.clone(), offset, reason }
    }

    pub(crate) fn check_type(
        &self,
        view: &NodeView,
        offset: u64,
        level: u32,
    ) -> Result<(), KvError> {
        let want = if level + 1 == self.meta.layers { NODE_TYPE_LEAF } else { NODE_TYPE_INTERNAL };
        if view.node_type() != want {
            return Err(self.corrupt(
                offset,
                format!("type {} on level {level}, expected {want}", view.node_type()),
            ));
        }
        Ok(())
    }

    /// Validates an on-disk child pointer of the node at `from`: bit 63 set, aligned, on `level`.
    pub(crate) fn child_offset(&self, ptr: u64, from: u64, level: usize) -> Result<u64, KvError> {
        let nb = self.meta.node_size.bytes() as u64;
        if ptr & FILE_MASK == 0 {
            return Err(self.corrupt(from, format!("child pointer {ptr:#x} lacks bit 63")));
        }
        let off = ptr & !FILE_MASK;
        let lo = self.starts[level] * nb;
        let hi = lo + self.counts[level] * nb;
        if !off.is_multiple_of(nb) || off < lo || off >= hi {
            return Err(self.corrupt(
                from,
                format!("child pointer {off} outside level {level} [{lo}, {hi}) or unaligned"),
            ));
        }
        Ok(off)
    }

    /// The step after reading the node at `offset` on `level` (`block` = its bytes).
    ///
    /// # Errors
    /// `CorruptNode` with the offset when the node is inconsistent with the shape.
    pub fn on_node(
        &self,
        key: u64,
        offset: u64,
        level: u32,
        block: &[u8],
    ) -> Result<Step, KvError> {
        if level >= self.meta.layers {
            return Err(self.corrupt(offset, format!("level {level} beyond {}", self.meta.layers)));
        }
        self.decide(key, level, &NodeView::new(block, self.meta.node_size), offset)
    }

    pub(crate) fn decide(
        &self,
        key: u64,
        level: u32,
        view: &NodeView,
        offset: u64,
    ) -> Result<Step, KvError> {
        self.check_type(view, offset, level)?;
        if view.node_type() == NODE_TYPE_INTERNAL {
            let off = self.child_offset(view.child_ptr(key), offset, level as usize + 1)?;
            return Ok(Step::Node { offset: off, level: level + 1 });
        }
        match view.leaf_value_ptr(key) {
            None => Ok(Step::Done(None)),
            Some(p) => Ok(Step::Value { offset: self.value_offset(p, offset)? }),
        }
    }

    /// Validates a leaf's value pointer (the leaf at `from`): inside the value log, on a value
    /// boundary (so the value lies within one node-size block). Every reader of a leaf's
    /// pointers goes through it: lookups, range scans, compaction.
    ///
    /// # Errors
    /// [`KvError::CorruptNode`] naming the leaf and the pointer.
    pub fn value_offset(&self, ptr: u64, from: u64) -> Result<u64, KvError> {
        let off = ptr & !FILE_MASK;
        let lo = self.meta.value_log_offset;
        let hi = lo + self.meta.key_count * VALUE_BYTES as u64;
        if off < lo || off >= hi || !(off - lo).is_multiple_of(VALUE_BYTES as u64) {
            return Err(self.corrupt(from, format!("value pointer {off} outside [{lo}, {hi})")));
        }
        Ok(off)
    }
}

/// An open database. Shared by threads (`&Store` is all a lookup path needs).
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    meta: Meta,
    file: File,
    direct: bool,
    /// O_DIRECT offset and length alignment (statx `STATX_DIOALIGN`): the device's logical
    /// block, e.g. 4096 on zram; 1 when the file is buffered.
    dio_align: u64,
    shape: Shape,
    cache_levels: u32,
    /// Levels 0..cache_levels, node after node; internal pointers to cached children are
    /// rewritten to node indices with bit 63 clear (as BPF-KV's cache does).
    cache: Vec<u8>,
}

impl Store {
    /// Opens `path` after checking its sidecar `path.meta` and the file size; without a sidecar
    /// (a file made by BPF-KV's own tool) infers and checks the shape ([`infer_meta`]).
    ///
    /// # Errors
    /// `MetaCorrupt`, `SizeMismatch`, `ShapeUnknown`, I/O errors, or `CorruptNode` for a bad
    /// cached level.
    pub fn open(path: &Path, cache_levels: u32) -> Result<Store, KvError> {
        Self::open_as(path, &meta_path(path), None, cache_levels)
    }

    /// Opens the tree `path` described by the sidecar `meta_file`, or, when that does not exist,
    /// by the shape inferred from the file (with `layers`, only that depth is considered; with
    /// a sidecar, `layers` must agree with it). Opens read-only and writes nothing.
    ///
    /// # Errors
    /// As [`Store::open`]; `Invalid` when `layers` disagrees with the sidecar.
    pub fn open_as(
        path: &Path,
        meta_file: &Path,
        layers: Option<u32>,
        cache_levels: u32,
    ) -> Result<Store, KvError> {
        let meta = match std::fs::read(meta_file) {
            Ok(bytes) => {
                let meta = Meta::decode(&bytes, meta_file)?;
                if let Some(l) = layers.filter(|&l| l != meta.layers) {
                    return Err(KvError::Invalid(format!(
                        "--layers {l}, but {} says {} layers",
                        meta_file.display(),
                        meta.layers
                    )));
                }
                meta
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => infer_meta(path, layers)?,
            Err(source) => return Err(KvError::MetaMissing { path: meta_file.to_owned(), source }),
        };
        let (file, direct) = open_direct(path, false)?;
        let actual = file.metadata().map_err(|e| KvError::io(path, "stat", e))?.len();
        if actual != meta.file_bytes {
            return Err(KvError::SizeMismatch {
                path: path.to_path_buf(),
                expected: meta.file_bytes,
                actual,
            });
        }
        let dio_align = if direct { dio_align(&file, path)? } else { 1 };
        let mut s = Store {
            path: path.to_path_buf(),
            meta,
            file,
            direct,
            dio_align,
            shape: Shape::new(path, meta),
            cache_levels: cache_levels.min(meta.layers),
            cache: Vec::new(),
        };
        s.load_cache()?;
        Ok(s)
    }

    #[must_use]
    pub fn meta(&self) -> &Meta {
        &self.meta
    }
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
    #[must_use]
    pub fn file(&self) -> &File {
        &self.file
    }
    /// Whether the file is open with O_DIRECT (false where the file system refuses it).
    #[must_use]
    pub fn is_direct(&self) -> bool {
        self.direct
    }
    #[must_use]
    pub fn cache_levels(&self) -> u32 {
        self.cache_levels
    }
    #[must_use]
    pub fn node_size(&self) -> NodeSize {
        self.meta.node_size
    }
    /// Cached nodes with pointers rewritten (see the field comment), node after node.
    #[must_use]
    pub fn cached_nodes(&self) -> &[u8] {
        &self.cache
    }

    /// O_DIRECT alignment of offsets and lengths (1 when buffered).
    #[must_use]
    pub fn dio_align(&self) -> u64 {
        self.dio_align
    }

    /// Reads `buf.len()` bytes at `offset`. A read that O_DIRECT cannot take as it is (a 512 B
    /// node on a device with 4 KiB logical blocks) reads the aligned window around it into this
    /// thread's window buffer and copies the bytes out (no allocation once the buffer is grown).
    ///
    /// # Errors
    /// `Io` naming the path and offset; a range past the end of the file is an `Io` error too.
    pub fn read_block(&self, buf: &mut [u8], offset: u64) -> Result<(), KvError> {
        let a = self.dio_align;
        let len = buf.len() as u64;
        let fits = a <= 1
            || offset.is_multiple_of(a)
                && len.is_multiple_of(a)
                && (buf.as_ptr() as usize).is_multiple_of(IO_ALIGN);
        if fits {
            return self.file.read_exact_at(buf, offset).map_err(|e| self.read_err(offset, &e));
        }
        let (lo, hi) = storefn_io::widen(offset, len, a);
        let span = usize::try_from(hi - lo).expect("a window the caller's buffer bounds");
        WINDOW.with_borrow_mut(|w| {
            if w.as_ref().is_none_or(|w| w.len() < span) {
                *w = Some(AlignedBuf::new(span));
            }
            let w = &mut w.as_mut().expect("grown above")[..span];
            let got = read_up_to(&self.file, w, lo).map_err(|e| self.read_err(offset, &e))?;
            let skip = usize::try_from(offset - lo).expect("within the window");
            if got < skip + buf.len() {
                let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                return Err(self.read_err(offset, &eof));
            }
            buf.copy_from_slice(&w[skip..skip + buf.len()]);
            Ok(())
        })
    }

    fn read_err(&self, offset: u64, e: &std::io::Error) -> KvError {
        KvError::Io {
            path: self.path.clone(),
            op: "pread",
            source: std::io::Error::new(e.kind(), format!("offset {offset}: {e}")),
        }
    }

    fn load_cache(&mut self) -> Result<(), KvError> {
        let k = self.cache_levels as usize;
        if k == 0 {
            return Ok(());
        }
        let nb = self.meta.node_size.bytes();
        let nodes = self.shape.starts.get(k).copied().unwrap_or(self.meta.total_nodes);
        let bytes = usize::try_from(nodes).unwrap() * nb;
        let mut buf = AlignedBuf::new(bytes);
        self.read_block(&mut buf, 0)?;
        let f = self.meta.node_size.fanout();
        for level in 0..k.saturating_sub(1) {
            for m in 0..self.shape.counts[level] {
                let idx = usize::try_from(self.shape.starts[level] + m).unwrap();
                let off = (idx * nb) as u64;
                let view = NodeView::new(&buf[idx * nb..(idx + 1) * nb], self.meta.node_size);
                self.shape.check_type(&view, off, u32::try_from(level).unwrap())?;
                let mut mem = [0u64; 255];
                for (i, slot) in mem.iter_mut().enumerate().take(f) {
                    let child = self.shape.child_offset(view.ptr(i), off, level + 1)?;
                    *slot = child / nb as u64;
                }
                for (i, p) in mem.iter().enumerate().take(f) {
                    put_ptr(&mut buf[idx * nb..(idx + 1) * nb], self.meta.node_size, i, *p);
                }
            }
        }
        self.cache = buf.to_vec();
        Ok(())
    }

    /// The first step of a lookup: walks the cached levels in memory.
    ///
    /// # Errors
    /// `CorruptNode` if a cached node is inconsistent.
    pub fn start(&self, key: u64) -> Result<Step, KvError> {
        if self.cache_levels == 0 {
            return Ok(Step::Node { offset: 0, level: 0 });
        }
        let nb = self.meta.node_size.bytes();
        let mut idx = 0usize;
        for level in 0..self.cache_levels {
            let view = NodeView::new(&self.cache[idx * nb..(idx + 1) * nb], self.meta.node_size);
            if level + 1 < self.cache_levels {
                // Memory index, validated when the cache was built.
                idx = usize::try_from(view.child_ptr(key)).unwrap();
            } else {
                return self.shape.decide(key, level, &view, (idx * nb) as u64);
            }
        }
        unreachable!("the loop returns on the last cached level")
    }

    /// The step after reading the node at `offset` on `level` (`block` = its bytes).
    ///
    /// # Errors
    /// `CorruptNode` with the offset when the node is inconsistent with the shape.
    pub fn on_node(
        &self,
        key: u64,
        offset: u64,
        level: u32,
        block: &[u8],
    ) -> Result<Step, KvError> {
        self.shape.on_node(key, offset, level, block)
    }

    /// Validates a leaf's value pointer ([`Shape::value_offset`]).
    ///
    /// # Errors
    /// [`KvError::CorruptNode`] naming the leaf and the pointer.
    pub fn value_offset(&self, ptr: u64, from: u64) -> Result<u64, KvError> {
        self.shape.value_offset(ptr, from)
    }

    /// The checks every lookup path applies to a node it read.
    #[must_use]
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The node-size block holding the value at `offset`, and the value's position in it.
    #[must_use]
    pub fn value_block(&self, offset: u64) -> (u64, usize) {
        let nb = self.meta.node_size.bytes() as u64;
        (offset / nb * nb, usize::try_from(offset % nb).unwrap())
    }

    /// The value bytes out of its block.
    #[must_use]
    pub fn value_from_block(&self, offset: u64, block: &[u8]) -> [u8; VALUE_BYTES] {
        let (_, within) = self.value_block(offset);
        block[within..within + VALUE_BYTES].try_into().expect("64 bytes")
    }

    /// Offset of the leaf that would hold `key`, reading nodes with pread.
    ///
    /// # Errors
    /// As [`Store::on_node`], I/O errors.
    pub fn find_leaf(&self, key: u64, buf: &mut [u8]) -> Result<u64, KvError> {
        let leaf_level = self.meta.layers - 1;
        let nb = self.meta.node_size.bytes();
        if self.cache_levels == self.meta.layers {
            let mut idx = 0usize;
            for _ in 0..leaf_level {
                let view = NodeView::new(&self.cache[idx * nb..(idx + 1) * nb], self.node_size());
                idx = usize::try_from(view.child_ptr(key)).unwrap();
            }
            return Ok((idx * nb) as u64);
        }
        let mut step = self.start(key)?;
        loop {
            match step {
                Step::Node { offset, level } if level == leaf_level => return Ok(offset),
                Step::Node { offset, level } => {
                    self.read_block(buf, offset)?;
                    step = self.on_node(key, offset, level, buf)?;
                }
                _ => unreachable!("internal levels only lead to nodes"),
            }
        }
    }

    /// Level of the leaves and their offset range, for scans.
    #[must_use]
    pub fn leaf_range(&self) -> (u64, u64) {
        let nb = self.meta.node_size.bytes() as u64;
        let (starts, counts) = (&self.shape.starts, &self.shape.counts);
        let l = starts.len() - 1;
        (starts[l] * nb, (starts[l] + counts[l]) * nb)
    }
}
