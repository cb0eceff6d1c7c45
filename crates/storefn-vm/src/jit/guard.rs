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
//!
//! Latch tests: when the latch is `if r < B goto header` (or `r != B`) with `r += step` the body's only
//! write of `r` and `B` not written in the body ([`LatchSkip`]), a test in front of the ring
//! enters it only while `r + (copies - 1) * step < B` (without wrapping), so the tests of all
//! its copies but the last would jump back: they become jumps. Else (the last few trips) a
//! rolled unchecked copy that keeps its test runs. Only the outcome of tests proved to jump
//! back changes; every other exit stays in every copy.

use super::translate::Tx;
use super::unroll::Layout;
use super::*;
use crate::cfg::CountedLoop;
use crate::insn::BPF_K;

/// Copies in the unchecked ring, of a loop body of at most [`RING_MAX_BODY_SLOTS`] slots.
/// A longer body gets no guard: the ring is what pays (grep with the guard and one unchecked
/// copy ran as fast as without the guard, 1,800 ns; with a ring of 2, 1,330; of 4, 1,000;
/// of 8, 990), and a long body's copies cost compile time.
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
    /// The latch's test when the ring may skip it ([`latch_skip`]).
    skip: Option<LatchSkip>,
}

/// A latch `if r < B goto header` or `if r != B goto header` (64-bit, `<` unsigned; `B` a
/// constant or a register the body does not write) whose only write of `r` in the body is
/// `r += step` (64-bit, `step >= 1`; the body makes no call): entered at the ring's first
/// header with `r + (copies - 1) * step < B`, the tests of all copies but the last see values
/// in `r .. r + (copies - 1) * step` (the add may be skipped on some path, never undone), all
/// below `B` (no wrap: below `B`), so all differ from `B` and each test jumps back; the ring
/// drops them. Used by guarded rings and by counted loops' rings ([`super::unroll`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LatchSkip {
    counter: u8,
    step: u64,
    /// `Ok(register)` or `Err(constant)`.
    bound: Result<u8, u64>,
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
        if body > RING_MAX_BODY_SLOTS {
            return None;
        }
        let copies = RING_COPIES;
        // The ring, the rolled unchecked copy behind the latch skip, and the checked copy.
        let slots = body * (copies as u64 + 2);
        if slots > self.unroll_left {
            return None;
        }
        self.unroll_left -= slots;
        self.counts.guarded_loops += 1;
        let unlikely = unlikely_slots(self.insns, self.cfg, l);
        let exits = exit_targets(self.insns, self.cfg, l);
        let skip = latch_skip(self.insns, self.cfg, l);
        Some(Guarded { l, whole, copies, unlikely, exits, skip })
    }

    /// Emits `g`: the guard in the header's block (where every entry of the loop arrives),
    /// the unchecked ring, then the checked loop out of line. Control never falls out of the
    /// latch (a loop's back edge), so returns `false` (no open block).
    pub(super) fn guarded(&mut self, g: &Guarded, open: bool) -> Result<bool, JitError> {
        let l = g.l;
        let guard = self.enter_header(l, open);
        // Every predecessor is emitted: the back edges go to the copies' headers.
        self.b.seal_block(guard);
        let left = self.b.use_var(self.budget);
        let whole = i64::try_from(g.whole).expect("at most MAX_GUARDED_CHARGE");
        let fits = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, whole);
        let ring: Vec<Block> = (0..g.copies).map(|_| self.b.create_block()).collect();
        let checked = self.cold_block();
        let test = g.skip.map(|_| self.b.create_block());
        self.b.ins().brif(fits, test.unwrap_or(ring[0]), &[], checked, &[]);
        self.unchecked_header = Some(l.header);
        let r = self.unchecked(g, &ring, test);
        self.unchecked_header = None;
        r?;
        self.loop_copies(l, &[checked], checked, Layout::Cold)?;
        *self.block_slot(l.header) = Some(guard);
        Ok(false)
    }

    /// The unchecked copies: the ring, and with a [`LatchSkip`] a test in front of it that
    /// enters it only while its copies' latch tests cannot leave (else a rolled copy that
    /// keeps its test, out of line; the ring's last copy returns to the test).
    fn unchecked(
        &mut self,
        g: &Guarded,
        ring: &[Block],
        test: Option<Block>,
    ) -> Result<(), JitError> {
        let hot = Layout::Hot { unlikely: &g.unlikely, exits: &g.exits };
        let (Some(skip), Some(test)) = (g.skip, test) else {
            return self.loop_copies(g.l, ring, ring[0], hot);
        };
        let rolled = self.cold_block();
        self.b.switch_to_block(test);
        self.ring_test(skip, g.copies, ring[0], rolled);
        self.skip_latch = Some(g.l.latch);
        let r = self.loop_copies(g.l, ring, test, hot);
        self.skip_latch = None;
        r?;
        self.loop_copies(g.l, &[rolled], rolled, Layout::Cold)?;
        self.b.seal_block(test);
        Ok(())
    }

    /// Ends the current block with [`LatchSkip`]'s test in front of a ring of `copies`:
    /// to `ring` while the counter has room for `copies - 1` more steps below its bound (the
    /// tests of all copies but the last then jump back), else to `rolled`.
    pub(super) fn ring_test(&mut self, skip: LatchSkip, copies: usize, ring: Block, rolled: Block) {
        let v = self.b.use_var(self.regs[usize::from(skip.counter)]);
        let span = i64::try_from(skip.step * (copies as u64 - 1)).expect("small");
        let bound = match skip.bound {
            Ok(r) => self.b.use_var(self.regs[usize::from(r)]),
            Err(k) => self.iconst(k.cast_signed()),
        };
        // `v + span < bound` without wrapping: `bound > span && v < bound - span`.
        let room = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, bound, span);
        let limit = self.b.ins().iadd_imm_s(bound, -span);
        let below = self.b.ins().icmp(IntCC::UnsignedLessThan, v, limit);
        let go = self.b.ins().band(room, below);
        self.b.ins().brif(go, ring, &[], rolled, &[]);
    }

    /// The unchecked charge of a guarded loop's header: `c` off the budget, which the guard
    /// proved holds it ([`Tx::guarded`]).
    pub(super) fn free_charge(&mut self, len: u32) {
        let left = self.b.use_var(self.budget);
        let rest = self.b.ins().iadd_imm_s(left, -i64::from(len));
        self.b.def_var(self.budget, rest);
    }
}

/// `l`'s latch test, if the ring may skip it ([`LatchSkip`]).
pub(super) fn latch_skip(insns: &[Insn], cfg: &Cfg, l: CountedLoop) -> Option<LatchSkip> {
    let t = insns[l.latch];
    let header_ok = jump_target(l.latch, &t, insns.len()).ok()? == Some(l.header);
    let test_ok = [BPF_JMP | BPF_JLT, BPF_JMP | BPF_JNE].contains(&(t.op & !BPF_X));
    // Mid-block (no block starts at the latch) and not the header itself: the latch's slot
    // is only its test, reached by falling from the slot before it.
    if !test_ok || !header_ok || cfg.is_block_start(l.latch) {
        return None;
    }
    let body = (l.header..=l.latch).filter(|&pc| !cfg.is_second_half(pc));
    // A call writes r1-r5, which `written` does not list (the loops found refuse calls;
    // checked here too, so the proof stands on its own).
    if body.clone().any(|pc| insns[pc].is_call()) {
        return None;
    }
    let writes =
        |r: u8| body.clone().filter(move |&pc| crate::loops::written(insns[pc]).contains(&Some(r)));
    let [at] = writes(t.dst).collect::<Vec<_>>()[..] else { return None };
    let i = insns[at];
    if i.op != BPF_ALU64 | BPF_ADD | BPF_K || i.off != 0 || i.imm < 1 {
        return None;
    }
    let bound = if t.op & BPF_X != 0 {
        (t.src != t.dst && writes(t.src).next().is_none()).then_some(Ok(t.src))?
    } else {
        // A 64-bit compare sign-extends its immediate.
        Err(i64::from(t.imm).cast_unsigned())
    };
    Some(LatchSkip { counter: t.dst, step: u64::from(i.imm.unsigned_abs()), bound })
}

/// The slots outside `l`'s body that its slots jump or fall to, sorted, once each.
fn exit_targets(insns: &[Insn], cfg: &Cfg, l: CountedLoop) -> Vec<usize> {
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
