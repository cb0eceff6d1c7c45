//! Streaming merge of the old tree with the memtable, for compaction.
//!
//! The old tree is never collected in memory: [`MergeStream`] walks the leaf level in file order
//! (leaves are contiguous, docs/FORMAT.md) through one large-buffer cursor and reads values
//! through a second one, so a dense tree is read in two sequential sweeps. A value pointer that
//! goes backwards (a non-dense or foreign tree) is served by a positioned read instead. A first,
//! cheap pass over the leaf keys alone gives the exact entry count [`crate::build_tree`] needs.
//!
//! Every pointer read from disk is validated; a bad one is `CorruptNode` naming its offset.

use std::iter::Peekable;

use crate::aligned::AlignedBuf;
use crate::format::{NodeView, FILE_MASK, NODE_TYPE_LEAF, VALUE_BYTES};
use crate::limits::COMPACT_READ_BYTES;
use crate::memtable::Memtable;
use crate::store::Store;
use crate::KvError;

/// A forward cursor over `[lo, hi)` of the store's file with one big aligned buffer.
struct SeqReader<'s> {
    store: &'s Store,
    hi: u64,
    buf: AlignedBuf,
    /// File offset of `buf[0]` and bytes valid in `buf`.
    buf_off: u64,
    buf_len: usize,
    /// One node-size block for positioned reads behind the buffer.
    block: AlignedBuf,
    /// Buffer refills and positioned (backward) reads, for tests and reports.
    refills: u64,
    backward_reads: u64,
}

impl<'s> SeqReader<'s> {
    fn new(store: &'s Store, hi: u64) -> Self {
        let nb = store.node_size().bytes();
        Self {
            store,
            hi,
            buf: AlignedBuf::new(COMPACT_READ_BYTES),
            buf_off: 0,
            buf_len: 0,
            block: AlignedBuf::new(nb),
            refills: 0,
            backward_reads: 0,
        }
    }

    /// `len` bytes at `off`; `[off, off + len)` must lie in one node-size block below `hi`.
    fn get(&mut self, off: u64, len: usize) -> Result<&[u8], KvError> {
        let nb = self.store.node_size().bytes() as u64;
        debug_assert!(off / nb == (off + len as u64 - 1) / nb, "read within one block");
        debug_assert!(off + len as u64 <= self.hi, "read below the cursor's end");
        let end = self.buf_off + self.buf_len as u64;
        if off >= self.buf_off && off + len as u64 <= end {
            let at = usize::try_from(off - self.buf_off).expect("inside the buffer");
            return Ok(&self.buf[at..at + len]);
        }
        let start = off / nb * nb;
        if off < self.buf_off {
            // Behind the buffer: one positioned read, the sweep's buffer stays where it is.
            self.backward_reads += 1;
            self.store.read_block(&mut self.block, start)?;
            let at = usize::try_from(off - start).expect("within a block");
            return Ok(&self.block[at..at + len]);
        }
        let n = usize::try_from((self.hi - start).min(COMPACT_READ_BYTES as u64)).expect("small");
        debug_assert!(n.is_multiple_of(nb as usize), "cursor ends are block-aligned");
        self.store.read_block(&mut self.buf[..n], start)?;
        self.refills += 1;
        self.buf_off = start;
        self.buf_len = n;
        let at = usize::try_from(off - start).expect("inside the buffer");
        Ok(&self.buf[at..at + len])
    }
}

/// Walks the used slots of the leaf level in order, validating each leaf.
struct LeafWalk<'s> {
    store: &'s Store,
    reader: SeqReader<'s>,
    /// Offset of the current leaf, and the next slot in it.
    leaf: u64,
    slot: usize,
    leaf_hi: u64,
    prev_key: Option<u64>,
}

impl<'s> LeafWalk<'s> {
    fn new(store: &'s Store) -> Self {
        let (lo, hi) = store.leaf_range();
        Self {
            store,
            reader: SeqReader::new(store, hi),
            leaf: lo,
            slot: 0,
            leaf_hi: hi,
            prev_key: None,
        }
    }

    fn corrupt(&self, offset: u64, reason: String) -> KvError {
        KvError::CorruptNode { path: self.store.path().to_path_buf(), offset, reason }
    }

    /// The next used slot's key and raw value pointer, or None after the last leaf.
    fn next_slot(&mut self) -> Result<Option<(u64, u64)>, KvError> {
        let ns = self.store.node_size();
        let nb = ns.bytes();
        while self.leaf < self.leaf_hi {
            let leaf = self.leaf;
            let bytes = self.reader.get(leaf, nb)?;
            let view = NodeView::new(bytes, ns);
            if self.slot == 0 {
                let (ty, next) = (view.node_type(), view.next());
                let want_next = if leaf + nb as u64 == self.leaf_hi { 0 } else { leaf + nb as u64 };
                if ty != NODE_TYPE_LEAF || next != want_next {
                    return Err(self.corrupt(
                        leaf,
                        format!("leaf has type {ty} next {next}, expected type 1 next {want_next}"),
                    ));
                }
            }
            while self.slot < ns.fanout() {
                let (key, ptr) = (view.key(self.slot), view.ptr(self.slot));
                self.slot += 1;
                if ptr & FILE_MASK == 0 {
                    continue; // unused slot
                }
                if let Some(p) = self.prev_key.filter(|&p| key <= p) {
                    return Err(self.corrupt(
                        leaf,
                        format!(
                            "key {key} in slot {} not above the previous key {p}",
                            self.slot - 1
                        ),
                    ));
                }
                self.prev_key = Some(key);
                return Ok(Some((key, ptr)));
            }
            self.leaf += nb as u64;
            self.slot = 0;
        }
        Ok(None)
    }
}

/// Entries of the merge of the old tree and `mem`: old entries + memtable keys not in the tree.
///
/// # Errors
/// I/O errors, corrupt leaves.
pub fn merged_count(store: &Store, mem: &Memtable) -> Result<u64, KvError> {
    let mut walk = LeafWalk::new(store);
    let mut m = mem.iter().map(|(k, _)| k).peekable();
    let mut tree_keys = 0u64;
    let mut shared = 0u64;
    while let Some((key, _)) = walk.next_slot()? {
        tree_keys += 1;
        while m.next_if(|&mk| mk < key).is_some() {}
        if m.next_if_eq(&key).is_some() {
            shared += 1;
        }
    }
    Ok(tree_keys + mem.len() as u64 - shared)
}

/// The sorted merge, streamed: the memtable's version wins. An error ends the stream early and
/// is kept in [`MergeStream::error`] (the builder then sees a short stream; report this first).
pub struct MergeStream<'s, M: Iterator<Item = (u64, &'s [u8; VALUE_BYTES])>> {
    store: &'s Store,
    leaves: LeafWalk<'s>,
    values: SeqReader<'s>,
    mem: Peekable<M>,
    tree_head: Option<(u64, u64)>,
    tree_done: bool,
    remaining: u64,
    pub error: Option<KvError>,
}

impl<'s, M: Iterator<Item = (u64, &'s [u8; VALUE_BYTES])>> std::fmt::Debug for MergeStream<'s, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeStream")
            .field("path", &self.store.path())
            .field("remaining", &self.remaining)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<'s, M: Iterator<Item = (u64, &'s [u8; VALUE_BYTES])>> MergeStream<'s, M> {
    /// `count` must be [`merged_count`] of the same tree and memtable.
    pub fn new(store: &'s Store, mem: M, count: u64) -> Self {
        let hi = store.meta().file_bytes;
        Self {
            store,
            leaves: LeafWalk::new(store),
            values: SeqReader::new(store, hi),
            mem: mem.peekable(),
            tree_head: None,
            tree_done: false,
            remaining: count,
            error: None,
        }
    }

    /// (refills, backward positioned reads) of the value cursor.
    #[cfg(test)]
    #[must_use]
    pub fn value_reads(&self) -> (u64, u64) {
        (self.values.refills, self.values.backward_reads)
    }

    fn peek_tree(&mut self) -> Result<Option<(u64, u64)>, KvError> {
        if self.tree_head.is_none() && !self.tree_done {
            self.tree_head = self.leaves.next_slot()?;
            self.tree_done = self.tree_head.is_none();
        }
        Ok(self.tree_head)
    }

    /// The value a leaf pointer names, after checking it lies on a value of the log.
    fn value(&mut self, ptr: u64) -> Result<[u8; VALUE_BYTES], KvError> {
        let off = self.store.value_offset(ptr, self.leaves.leaf)?;
        let b = self.values.get(off, VALUE_BYTES)?;
        Ok(b.try_into().expect("64 bytes"))
    }

    fn step(&mut self) -> Result<Option<(u64, [u8; VALUE_BYTES])>, KvError> {
        let tree = self.peek_tree()?;
        let mem = self.mem.peek().map(|&(k, v)| (k, *v));
        match (tree, mem) {
            (Some((tk, ptr)), m) if m.is_none_or(|(mk, _)| tk < mk) => {
                self.tree_head = None;
                Ok(Some((tk, self.value(ptr)?)))
            }
            (t, Some((mk, mv))) => {
                if t.is_some_and(|(tk, _)| tk == mk) {
                    self.tree_head = None; // overwritten: its value is never read
                }
                self.mem.next();
                Ok(Some((mk, mv)))
            }
            (None, None) => Ok(None),
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
}

impl<'s, M: Iterator<Item = (u64, &'s [u8; VALUE_BYTES])>> Iterator for MergeStream<'s, M> {
    type Item = (u64, [u8; VALUE_BYTES]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.error.is_some() {
            return None;
        }
        match self.step() {
            Ok(Some(e)) => {
                // A stream longer than announced is left to the builder's count check.
                self.remaining = self.remaining.saturating_sub(1);
                Some(e)
            }
            Ok(None) => None,
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{bpfkv_value, NodeSize};
    use crate::limits::DEFAULT_MEMTABLE_LIMIT_BYTES;
    use std::os::unix::fs::FileExt;
    use std::path::PathBuf;

    fn tree(name: &str, keys: impl Iterator<Item = u64>) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("storefn-compact-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("db");
        crate::build_tree(&db, NodeSize::B512, keys.map(|k| (k, bpfkv_value(k))), &mut |_, _| {})
            .unwrap();
        db
    }

    fn merge_all(store: &Store, mem: &Memtable) -> Result<Vec<(u64, [u8; 64])>, KvError> {
        let n = merged_count(store, mem)?;
        let mut s = MergeStream::new(store, mem.iter(), n);
        let out: Vec<_> = (&mut s).collect();
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        assert_eq!(out.len() as u64, n, "count pass agrees with the merge");
        Ok(out)
    }

    #[test]
    fn merge_matches_a_btreemap_model() {
        // Even keys 0..4000 over several 1 MiB-free leaves; memtable: updates, inserts at both
        // ends and in between.
        let db = tree("model", (0..2000u64).map(|k| k * 2));
        let store = Store::open(&db, 0).unwrap();
        let mut mem = Memtable::new(DEFAULT_MEMTABLE_LIMIT_BYTES);
        let mut model: std::collections::BTreeMap<u64, [u8; 64]> =
            (0..2000u64).map(|k| (k * 2, bpfkv_value(k * 2))).collect();
        for (seq, k) in [0u64, 1, 2, 999, 1000, 3998, 3999, 5000, 7].into_iter().enumerate() {
            let v = [u8::try_from(seq).unwrap() + 1; 64];
            mem.insert(k, seq as u64, v);
            model.insert(k, v);
        }
        let out = merge_all(&store, &mem).unwrap();
        assert_eq!(out, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn empty_memtable_streams_the_tree_sequentially() {
        let db = tree("seq", 0..30_000u64);
        let store = Store::open(&db, 0).unwrap();
        let mem = Memtable::new(DEFAULT_MEMTABLE_LIMIT_BYTES);
        let n = merged_count(&store, &mem).unwrap();
        assert_eq!(n, 30_000);
        let mut s = MergeStream::new(&store, mem.iter(), n);
        for (i, (k, v)) in (&mut s).enumerate() {
            assert_eq!((k, v), (i as u64, bpfkv_value(i as u64)));
        }
        // 30000 x 64 B of values = 1.9 MB: two refills of 1 MiB, nothing read backwards.
        assert_eq!(s.value_reads(), (2, 0));
        assert!(s.error.is_none());
    }

    /// Offset of leaf slot `i`'s pointer in the first leaf.
    fn first_leaf_ptr_off(store: &Store, i: usize) -> u64 {
        store.leaf_range().0 + (NodeSize::B512.off_ptrs() + i * 8) as u64
    }

    #[test]
    fn backward_value_pointers_fall_back_to_positioned_reads() {
        let db = tree("backward", 0..100u64);
        let store = Store::open(&db, 0).unwrap();
        // Swap the value pointers of keys 0 and 20 (value blocks 0 and 2): the cursor jumps to
        // block 2 for key 0, so keys 1..=15 (blocks 0 and 1) and key 20 point behind it.
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&db).unwrap();
        let (a, b) = (first_leaf_ptr_off(&store, 0), first_leaf_ptr_off(&store, 20));
        let (mut pa, mut pb) = ([0u8; 8], [0u8; 8]);
        f.read_exact_at(&mut pa, a).unwrap();
        f.read_exact_at(&mut pb, b).unwrap();
        f.write_all_at(&pb, a).unwrap();
        f.write_all_at(&pa, b).unwrap();
        drop(f);
        let store = Store::open(&db, 0).unwrap();
        let mem = Memtable::new(DEFAULT_MEMTABLE_LIMIT_BYTES);
        let n = merged_count(&store, &mem).unwrap();
        let mut s = MergeStream::new(&store, mem.iter(), n);
        let out: Vec<_> = (&mut s).collect();
        let want: Vec<_> = (0..100u64)
            .map(|k| {
                (
                    k,
                    bpfkv_value(if k == 0 {
                        20
                    } else if k == 20 {
                        0
                    } else {
                        k
                    }),
                )
            })
            .collect();
        assert_eq!(out, want);
        assert_eq!(s.value_reads().1, 16, "positioned reads for every pointer behind the cursor");
    }

    #[test]
    fn corrupt_pointers_and_keys_are_errors_naming_the_leaf() {
        let db = tree("corrupt", 0..100u64);
        let store = Store::open(&db, 0).unwrap();
        let leaf0 = store.leaf_range().0;
        let f = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        // Value pointer far past the value log.
        f.write_all_at(&(FILE_MASK | (1 << 40)).to_le_bytes(), first_leaf_ptr_off(&store, 3))
            .unwrap();
        let store = Store::open(&db, 0).unwrap();
        let mem = Memtable::new(DEFAULT_MEMTABLE_LIMIT_BYTES);
        let e = merge_all(&store, &mem).unwrap_err().to_string();
        assert!(e.contains(&format!("byte offset {leaf0}")) && e.contains("value pointer"), "{e}");
        // Keys out of order in the second leaf (slot 0 = key 31 rewritten to 5).
        f.write_all_at(&5u64.to_le_bytes(), leaf0 + 512 + 16).unwrap();
        let store = Store::open(&db, 0).unwrap();
        let e = merged_count(&store, &mem).unwrap_err().to_string();
        assert!(e.contains(&format!("byte offset {}", leaf0 + 512)) && e.contains("key 5"), "{e}");
        // A broken next link.
        f.write_all_at(&7u64.to_le_bytes(), leaf0).unwrap();
        let store = Store::open(&db, 0).unwrap();
        let e = merged_count(&store, &mem).unwrap_err().to_string();
        assert!(e.contains(&format!("byte offset {leaf0}")) && e.contains("next 7"), "{e}");
    }
}
