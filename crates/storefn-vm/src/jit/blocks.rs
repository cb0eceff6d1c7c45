//! Fewer Cranelift blocks in the quick tier: there, compile time per block (the SSA
//! builder's lookups, the single-pass register allocator's spills and reloads of every value
//! live across a block boundary) dominates large programs with many branches.
//!
//! A forward jump target that only one jump lands on, where that jump is emitted as
//! conditional moves ([`Tx::if_convert`]), has both its predecessors (the fall-through and the
//! converted jump) in the block being built: it continues that block instead of starting one
//! of its own (the `branchy` shape at 4,096 slots: 2,052 blocks -> 4).

use super::translate::Tx;
use super::*;

/// Per slot of `verified`: exactly one jump lands there, a forward one, so the block starting
/// there may continue its predecessor's when that jump is if-converted. All false outside
/// the quick tier (`quick`), whose code is left as it is.
pub(super) fn mergeable(verified: &VerifiedProgram, quick: bool) -> Vec<bool> {
    let (insns, cfg) = (&verified.insns, verified.cfg());
    let n = insns.len();
    if !quick {
        return vec![false; n];
    }
    // Per slot: forward jumps landing there (saturating at 2); 2 when a backward one does.
    let mut landings = vec![0u8; n];
    for pc in (0..n).filter(|&pc| !cfg.is_second_half(pc)) {
        if let Ok(Some(t)) = jump_target(pc, &insns[pc], n) {
            landings[t] = if t <= pc { 2 } else { landings[t].saturating_add(1) };
        }
    }
    landings.iter().map(|&l| l == 1).collect()
}

impl Tx<'_, '_> {
    /// `target`, where an if-converted jump lands, continues the current block when no
    /// other jump lands there ([`mergeable`]): its only other predecessor is the fall-through
    /// from the converted slots, also in this block.
    pub(super) fn merge_converted_target(&mut self, target: usize) {
        if self.mergeable[target] {
            *self.block_slot(target) = None;
        }
    }
}
