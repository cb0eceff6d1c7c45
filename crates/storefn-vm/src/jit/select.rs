//! Conditional jumps over a short run of register arithmetic emitted as conditional moves
//! (docs/design/vm.md, "If-converted branches").

use super::translate::{Flow, Tx};
use super::*;

/// Longest run of register arithmetic a conditional jump may skip and still be emitted as
/// conditional moves ([`Tx::if_convert`]).
const IFCONV_MAX_SLOTS: usize = 4;

impl Tx<'_, '_> {
    /// Whether the conditional jump at `pc` to `target` skips only a short run of register
    /// arithmetic A that nothing else jumps into: `if c goto T; A; T:` or `if c goto T; A;
    /// goto T` (T forward or backward: a loop's second back edge), with A at most
    /// [`IFCONV_MAX_SLOTS`] slots of ALU operations or `lddw`s (no memory access, call, exit
    /// or jump: nothing in A can fault, charge or be seen before T). Returns A's slots and
    /// whether a `goto` ends it.
    pub(super) fn if_convertible(
        &self,
        pc: usize,
        target: usize,
    ) -> Option<(std::ops::Range<usize>, bool)> {
        let mut q = pc + 1;
        while q <= pc + IFCONV_MAX_SLOTS + 1 && q < self.func_range.1 {
            if q == target {
                return (q > pc + 1).then_some((pc + 1..q, false));
            }
            let i = self.insns[q];
            if self.is_target[q] || self.charges[q] != 0 {
                return None;
            }
            match i.class() {
                BPF_ALU | BPF_ALU64 if i.dst < FRAME_REG => q += 1,
                BPF_LD if i.is_lddw() && i.dst < FRAME_REG => q += 2,
                BPF_JMP if i.op == BPF_JMP | BPF_JA => {
                    let to = jump_target(q, &i, self.insns.len()).ok()??;
                    return (to == target && q > pc + 1).then_some((pc + 1..q, true));
                }
                _ => return None,
            }
        }
        None
    }

    /// Emits `side` (pure register arithmetic, see [`Tx::if_convertible`]) unconditionally,
    /// then keeps each register it wrote only where the jump was not taken: `r = c ? old : new`
    /// (a `select`, a conditional move: no branch to mispredict, and blocks fewer). Every
    /// register then holds at `target` what it held there on either path of the branch;
    /// budget charges are at charge points only, none of which is in `side` (`target`'s own
    /// is emitted where its block starts, reached either way), so both engines still charge
    /// exactly the same. Continues at `target` in this block when the side falls into it;
    /// after a `goto` ending the side, jumps to `target` and continues past the `goto`.
    pub(super) fn if_convert(
        &mut self,
        cond: Value,
        (side, goto): (std::ops::Range<usize>, bool),
        target: usize,
    ) -> Result<Flow, JitError> {
        self.counts.if_converted += 1;
        let mut written: Vec<(u8, Value)> = Vec::new();
        let mut q = side.start;
        while q < side.end {
            let i = self.insns[q];
            if !written.iter().any(|&(r, _)| r == i.dst) {
                written.push((i.dst, self.reg(q, i.dst)?));
            }
            self.insn(q)?;
            q += if i.is_lddw() { 2 } else { 1 };
        }
        for (r, old) in written {
            let new = self.reg(side.start, r)?;
            let v = self.b.ins().select(cond, old, new);
            self.set_reg(side.start, r, v)?;
        }
        if goto {
            self.goto(target)?;
            return Ok(Flow::Resume(side.end + 1));
        }
        self.merge_converted_target(target);
        Ok(Flow::SkipTo(target))
    }
}
