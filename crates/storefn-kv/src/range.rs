//! Range queries and aggregates over `[begin, end]` (both inclusive), resumable like BPF-KV's
//! range function: each call buffers at most [`RANGE_BATCH`] results and returns its resume
//! state (leaf offset + slot index); the caller calls again until `done`.
//!
//! `sum` is over the first 8 bytes of each value read as a little-endian u64 (wrapping), as
//! BPF-KV does; for BPF-KV's own values those bytes are ASCII spaces and digits.

use std::str::FromStr;

use crate::aligned::AlignedBuf;
use crate::format::{NodeView, FILE_MASK, VALUE_BYTES};
use crate::limits::RANGE_BATCH;
use crate::store::Store;
use crate::KvError;

/// Aggregate operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    Sum,
    Min,
    Max,
    Count,
}

impl FromStr for Agg {
    type Err = KvError;
    fn from_str(s: &str) -> Result<Agg, KvError> {
        match s {
            "sum" => Ok(Agg::Sum),
            "min" => Ok(Agg::Min),
            "max" => Ok(Agg::Max),
            "count" => Ok(Agg::Count),
            _ => Err(KvError::Invalid(format!("--agg {s}: expected sum|min|max|count"))),
        }
    }
}

impl Agg {
    /// Wire code in the range scratch (docs/FORMAT.md, "Range scratch ABI").
    #[must_use]
    pub fn code(self) -> u64 {
        match self {
            Agg::Sum => 1,
            Agg::Min => 2,
            Agg::Max => 3,
            Agg::Count => 4,
        }
    }
}

/// The u64 an aggregate reads from a value: its first 8 bytes, little-endian.
#[must_use]
pub fn agg_word(v: &[u8; VALUE_BYTES]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))
}

/// Folds values into an aggregate; `None` for min/max of an empty range.
#[must_use]
pub fn aggregate<'a>(agg: Agg, values: impl Iterator<Item = &'a [u8; VALUE_BYTES]>) -> Option<u64> {
    let words = values.map(agg_word);
    match agg {
        Agg::Sum => Some(words.fold(0u64, u64::wrapping_add)),
        Agg::Count => Some(words.count() as u64),
        Agg::Min => words.min(),
        Agg::Max => words.max(),
    }
}

/// Where a range scan resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeState {
    pub leaf_offset: u64,
    pub index: u32,
    pub done: bool,
    /// The last key the scan passed (produced or below `begin`): keys along the leaf chain
    /// must rise strictly, which is also what bounds a scan of a corrupt file whose `next`
    /// links form a cycle (a revisited leaf repeats a key).
    pub last_key: Option<u64>,
}

/// Range scans through pread, one resumable call at a time.
#[derive(Debug)]
pub struct RangeScan<'s> {
    store: &'s Store,
    leaf: AlignedBuf,
    block: AlignedBuf,
    /// Block reads issued.
    pub ios: u64,
}

impl<'s> RangeScan<'s> {
    #[must_use]
    pub fn new(store: &'s Store) -> Self {
        let nb = store.node_size().bytes();
        Self { store, leaf: AlignedBuf::new(nb), block: AlignedBuf::new(nb), ios: 0 }
    }

    /// The state a scan of `[begin, ..]` starts from.
    ///
    /// # Errors
    /// I/O errors, corrupt nodes.
    pub fn begin(&mut self, begin: u64) -> Result<RangeState, KvError> {
        let leaf_offset = self.store.find_leaf(begin, &mut self.leaf)?;
        Ok(RangeState { leaf_offset, index: 0, done: false, last_key: None })
    }

    /// One call: appends up to [`RANGE_BATCH`] results with keys in `[begin, end]`.
    ///
    /// # Errors
    /// I/O errors, corrupt nodes (a `next` link off the leaf level).
    pub fn call(
        &mut self,
        begin: u64,
        end: u64,
        mut st: RangeState,
        out: &mut Vec<(u64, [u8; VALUE_BYTES])>,
    ) -> Result<RangeState, KvError> {
        let (lo, hi) = self.store.leaf_range();
        let nb = self.store.node_size().bytes() as u64;
        let f = self.store.node_size().fanout();
        let mut produced = 0;
        while !st.done {
            if st.leaf_offset < lo || st.leaf_offset >= hi || !st.leaf_offset.is_multiple_of(nb) {
                return Err(KvError::CorruptNode {
                    path: self.store.path().to_path_buf(),
                    offset: st.leaf_offset,
                    reason: format!("leaf link outside the leaf level [{lo}, {hi})"),
                });
            }
            self.store.read_block(&mut self.leaf, st.leaf_offset)?;
            self.ios += 1;
            let view = NodeView::new(&self.leaf, self.store.node_size());
            while (st.index as usize) < f {
                let i = st.index as usize;
                let (key, ptr) = (view.key(i), view.ptr(i));
                if ptr & FILE_MASK == 0 || key > end {
                    st.done = true;
                    return Ok(st);
                }
                if st.last_key.is_some_and(|last| key <= last) {
                    return Err(KvError::CorruptNode {
                        path: self.store.path().to_path_buf(),
                        offset: st.leaf_offset,
                        reason: format!(
                            "key {key} at slot {i} does not follow {} along the leaf chain (a \
                             misordered leaf or a cycle of next links)",
                            st.last_key.unwrap_or(0)
                        ),
                    });
                }
                if produced == RANGE_BATCH {
                    return Ok(st);
                }
                st.index += 1;
                st.last_key = Some(key);
                if key >= begin {
                    let voff = self.store.value_offset(ptr, st.leaf_offset)?;
                    let (blk, _) = self.store.value_block(voff);
                    self.store.read_block(&mut self.block, blk)?;
                    self.ios += 1;
                    out.push((key, self.store.value_from_block(voff, &self.block)));
                    produced += 1;
                }
            }
            let next = view.next();
            if next == 0 {
                st.done = true;
            } else {
                st = RangeState { leaf_offset: next, index: 0, ..st };
            }
        }
        Ok(st)
    }

    /// Every entry in `[begin, end]`, by repeated calls.
    ///
    /// # Errors
    /// As [`RangeScan::call`].
    pub fn collect(&mut self, begin: u64, end: u64) -> Result<Vec<(u64, [u8; 64])>, KvError> {
        let mut out = Vec::new();
        if begin > end {
            return Ok(out);
        }
        let mut st = self.begin(begin)?;
        while !st.done {
            st = self.call(begin, end, st, &mut out)?;
        }
        Ok(out)
    }
}
