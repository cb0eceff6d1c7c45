//! Bounded loops run behind one budget guard: a loop whose trip bound the range analysis
//! proved ([`crate::cfg::Cfg::bounded_loops`]) but which stays charged per iteration (an early
//! exit and too many trips to charge it whole before it runs, like grep's scan) is emitted
//! twice: the ordinary checked loop, and a ring of copies whose headers subtract their charge
//! without testing it, entered when the budget left covers every iteration the loop can run
//! (docs/design/vm.md, "Guarded loops").
//!
//! Why this is exact: the loop's header `h` is its body's only charge point (the body holds no
//! other backward jump and no call, [`crate::loops`]) with charge `c`, and it runs at most
//! `T` times per entry of the loop. At the entry, with `left >= T * c` (computed at compile
//! time, no overflow), each of the at most `T` charges at `h` finds at least `c` left, so the
//! checked loop's test would never fire; the unchecked copies subtract the same `c` at the
//! same points, so after any exit, fault or return the budget is what the checked loop (and
//! the interpreter) leaves. Otherwise the checked loop runs and stops where the interpreter
//! does. Every copy is the loop's own control flow (each exit in each copy), so the ring
//! rests on no proof beyond the bound.
//!
//! Layout: in a scan (`for (...) if (d[i] != p0) continue; ... break;`) the header's block
//! ends with a jump forward to the latch test's block (the next iteration), and that jump
//! is the likely one; the blocks it skips go to the end of the function in the ring's
//! copies, so one position's code is straight-line and a ring of copies takes one taken
//! branch.

use super::translate::Tx;
use super::*;
use crate::cfg::CountedLoop;

/// Copies in the unchecked ring of a loop body of at most [`RING_MAX_BODY_SLOTS`] slots
/// (longer bodies get one copy).
const RING_COPIES: usize = 4;
const RING_MAX_BODY_SLOTS: u64 = 24;
/// Guard no loop whose whole charge passes this: a budget that large is not a run's (the
/// default is 2^20), and the copies would only cost compile time.
const MAX_GUARDED_CHARGE: u64 = 1 << 32;

/// A loop emitted behind a guard ([`Tx::guarded_loop_at`]).
pub(super) struct Guarded {
    l: CountedLoop,
    /// `trips * c`: the budget the unchecked copies need at the entry.
    whole: u64,
    copies: usize,
    /// Body slots whose blocks the ring lays out of line (module documentation).
    unlikely: std::ops::Range<usize>,
    /// The slots outside the body that the body jumps or falls to.
    exits: Vec<usize>,
}

impl Guarded {
    pub(super) fn latch(&self) -> usize {
        self.l.latch
    }
}

impl Tx<'_, '_> {
    /// The bounded loop starting at `pc` that gets a guard, if any, within what is left of
    /// the function's allowance of copied slots (taken from it).
    pub(super) fn guarded_loop_at(&mut self, pc: usize) -> Option<Guarded> {
        let bounded = self.cfg.bounded_loops();
        let l = bounded[bounded.binary_search_by_key(&pc, |l| l.header).ok()?];
        let c = u64::from(self.charges[l.header]);
        let whole = l.trips.checked_mul(c).filter(|&w| c > 0 && w <= MAX_GUARDED_CHARGE)?;
        let body = (l.latch + 1 - l.header) as u64;
        let copies = if body <= RING_MAX_BODY_SLOTS { RING_COPIES } else { 1 };
        // The ring and the checked copy.
        let slots = body * (copies as u64 + 1);
        if slots > self.unroll_left {
            return None;
        }
        self.unroll_left -= slots;
        self.guarded_loops += 1;
        let unlikely = unlikely_slots(self.insns, self.cfg, l);
        let exits = exits(self.insns, self.cfg, l);
        Some(Guarded { l, whole, copies, unlikely, exits })
    }

    /// Emits `g`: the guard in the header's block (where every entry of the loop arrives),
    /// the unchecked ring, then the checked loop out of line. Control never falls out of the
    /// latch (a loop's back edge), so returns `false` (no open block).
    pub(super) fn guarded(&mut self, g: Guarded, open: bool) -> Result<bool, JitError> {
        let l = g.l;
        let guard = self.block(l.header).expect("a loop header starts a block");
        if open {
            self.flush_pending();
            self.b.ins().jump(guard, &[]);
        }
        self.bytes.clear();
        // Every predecessor is emitted: the back edges go to the copies' headers.
        self.enter(guard);
        let left = self.b.use_var(self.budget);
        let whole = i64::try_from(g.whole).expect("at most MAX_GUARDED_CHARGE");
        let fits = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, whole);
        let ring: Vec<Block> = (0..g.copies).map(|_| self.b.create_block()).collect();
        let checked = self.cold_block();
        self.b.ins().brif(fits, ring[0], &[], checked, &[]);
        self.unchecked_header = Some(l.header);
        let r = self.loop_copies(l, &ring, Some((&g.unlikely, &g.exits)));
        self.unchecked_header = None;
        r?;
        self.loop_copies(l, &[checked], None)?;
        *self.block_slot(l.header) = Some(guard);
        Ok(false)
    }

    /// Emits `l` once per header in `headers`, copy k's back edge entering copy k + 1 and
    /// the last copy's the first. `hot`: body slots whose blocks go out of line and the
    /// loop's exits, left through blocks of the copy's own laid out of line (`None`: every
    /// block of the copies is out of line).
    ///
    /// Why the exits' blocks: the registers a copy leaves with differ from the other copies',
    /// so Cranelift splits each exit edge into a block of moves, which it places right after
    /// the branch's block and which then stands between a copy and the next one (a taken
    /// jump per copy); out of line, the next copy falls through.
    fn loop_copies(
        &mut self,
        l: CountedLoop,
        headers: &[Block],
        hot: Option<(&std::ops::Range<usize>, &[usize])>,
    ) -> Result<(), JitError> {
        let unlikely = hot.map(|h| h.0);
        let exits = hot.map_or(&[][..], |h| h.1);
        for k in 0..headers.len() {
            let outer: Vec<(usize, Block, Block)> = exits
                .iter()
                .map(|&t| {
                    let to = self.block(t).expect("a jump target starts a block");
                    let via = self.cold_block();
                    *self.block_slot(t) = Some(via);
                    (t, to, via)
                })
                .collect();
            *self.block_slot(l.header) = Some(headers[k]);
            // Fresh blocks for this copy's interior: jumps inside the body only go forward and
            // nothing outside enters past the header, so all are created before use.
            for pc in l.header + 1..=l.latch {
                if self.block(pc).is_some() {
                    let cold = unlikely.is_none_or(|u| u.contains(&pc));
                    let blk = if cold { self.cold_block() } else { self.b.create_block() };
                    *self.block_slot(pc) = Some(blk);
                }
            }
            let (mut pc, mut open) = (l.header, false);
            while pc <= l.latch {
                if pc == l.latch {
                    *self.block_slot(l.header) = Some(headers[(k + 1) % headers.len()]);
                }
                (open, pc) = self.step(pc, open)?;
            }
            if open {
                return Err(invalid(l.latch, "a loop's back edge that falls through"));
            }
            for (t, to, via) in outer {
                *self.block_slot(t) = Some(to);
                self.enter(via);
                self.b.ins().jump(to, &[]);
            }
        }
        Ok(())
    }

    /// The unchecked charge of a guarded loop's header: `c` off the budget, which the guard
    /// proved holds it ([`Tx::guarded`]).
    pub(super) fn free_charge(&mut self, len: u32) {
        let left = self.b.use_var(self.budget);
        let rest = self.b.ins().iadd_imm_s(left, -i64::from(len));
        self.b.def_var(self.budget, rest);
    }
}

/// The slots outside `l`'s body that its slots jump or fall to, sorted, once each.
fn exits(insns: &[Insn], cfg: &Cfg, l: CountedLoop) -> Vec<usize> {
    let mut out: Vec<usize> = (l.header..=l.latch)
        .filter(|&pc| !cfg.is_second_half(pc))
        .flat_map(|pc| cfg.successors(insns, pc).into_iter().flatten())
        .filter(|s| !(l.header..=l.latch).contains(s))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The body slots a scan rarely runs: when the header's block ends with a conditional jump
/// forward to the block of the latch's test (the next iteration), the slots it skips
/// (module documentation); else none.
fn unlikely_slots(insns: &[Insn], cfg: &Cfg, l: CountedLoop) -> std::ops::Range<usize> {
    let none = l.header..l.header;
    let test = crate::loops::latch_test(insns, cfg, l.header, l.latch);
    let Some(next) = (l.header..=test).rev().find(|&pc| cfg.is_block_start(pc)) else {
        return none;
    };
    // The header block's last slot: the one before the next block start.
    let Some(end) = (l.header + 1..=l.latch).find(|&pc| cfg.is_block_start(pc)) else {
        return none;
    };
    let jump = if cfg.is_second_half(end - 1) { end - 2 } else { end - 1 };
    match cfg.successors(insns, jump) {
        [Some(t), Some(fall)] if t == next && fall < next => fall..next,
        _ => none,
    }
}

#[cfg(test)]
mod tests;
