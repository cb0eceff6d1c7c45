//! The thread's range buffers. A READ's answer and a λ's range land in one (one range read of
//! the engine each, straight into it): a READ answer is then sent from it, a λ function runs
//! over it in place. A buffer belongs to one job from its submission until the read's
//! completion was delivered (the engine's contract), then to the connection's send queue
//! (READ) until sent, then back here.

use storefn_io::limits::{range_buf_bytes, MAX_BLOCK_ALIGN};
use storefn_io::{EngineError, RangeBuf};

use storefn_wire::limits::MAX_READ_BYTES;

/// The largest buffer a request needs: a whole READ with its answer's head in front.
pub(crate) const LARGEST_RANGE_BUF: usize =
    range_buf_bytes(MAX_READ_BYTES as usize) + MAX_BLOCK_ALIGN;

/// Capacities buffers are allocated at (the smallest that fits), so they are reused across
/// requests of different lengths: BPF-KV's 4 KiB reads, pages up to 64 KiB, whole ranges.
const CLASSES: [usize; 3] = [16 << 10, 128 << 10, LARGEST_RANGE_BUF];

/// Spare buffers kept per class (the rest are freed, so the thread shrinks after a burst).
pub(crate) const SPARE_RANGE_BUFS: [usize; 3] = [64, 16, 8];

/// Bytes the spares of every class can hold at most.
pub(crate) const SPARE_RANGE_BUF_BYTES: usize = CLASSES[0] * SPARE_RANGE_BUFS[0]
    + CLASSES[1] * SPARE_RANGE_BUFS[1]
    + CLASSES[2] * SPARE_RANGE_BUFS[2];

/// Where `len` bytes at file `offset` land in a buffer with `head` bytes reserved in front of
/// them: `at` is congruent to the offset modulo 4 KiB (the engine's placement rule) and at least
/// `head`; returns `(at, capacity needed)` (the aligned cover's end).
pub(super) fn place(offset: u64, len: u32, head: usize) -> (usize, usize) {
    let mut at = usize::try_from(offset % MAX_BLOCK_ALIGN as u64).expect("below 4096");
    if at < head {
        at += MAX_BLOCK_ALIGN;
    }
    (at, (at + len as usize).next_multiple_of(MAX_BLOCK_ALIGN))
}

/// Spare buffers by class.
#[derive(Debug, Default)]
pub(super) struct RangePool {
    spare: [Vec<RangeBuf>; 3],
}

impl RangePool {
    /// The capacity a buffer of at least `need` bytes has (its class).
    pub(super) fn class_of(need: usize) -> usize {
        *CLASSES.iter().find(|&&c| c >= need).expect("need <= LARGEST_RANGE_BUF")
    }

    /// A buffer of at least `need` bytes (at most [`LARGEST_RANGE_BUF`]).
    pub(super) fn take(&mut self, need: usize) -> Result<RangeBuf, EngineError> {
        let k = CLASSES.iter().position(|&c| c >= need).expect("need <= LARGEST_RANGE_BUF");
        match self.spare[k].pop() {
            Some(b) => Ok(b),
            None => RangeBuf::new(CLASSES[k]),
        }
    }

    /// Keeps `b` for reuse, or frees it.
    pub(super) fn give(&mut self, b: RangeBuf) {
        if let Some(k) = CLASSES.iter().position(|&c| c == b.capacity()) {
            if self.spare[k].len() < SPARE_RANGE_BUFS[k] {
                self.spare[k].push(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_is_congruent_leaves_the_head_and_fits_the_largest_class() {
        for (offset, len, head) in
            [(0u64, 4096u32, 56usize), (55, 1, 56), (56, 10, 56), (4095, MAX_READ_BYTES, 56)]
        {
            let (at, need) = place(offset, len, head);
            assert_eq!(at as u64 % 4096, offset % 4096);
            assert!(at >= head && at + len as usize <= need && need % 4096 == 0);
            assert!(need <= LARGEST_RANGE_BUF, "{offset} {len}");
        }
        assert_eq!(place(8192 + 100, 10, 0), (100, 4096));
    }
}
