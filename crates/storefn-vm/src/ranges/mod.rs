//! Range analysis of each function: which registers hold a pointer into the context, the xrp
//! `data` block, `scratch` or the function's own frame at a bounded offset, and which hold a
//! scalar in a known unsigned range. `proofs.rs` turns the states reaching each access into
//! proofs. A function is analysed from the states it may start in: the entry from
//! [`State::entry`], a BPF-to-BPF callee from the states at its call sites
//! ([`State::callee_entry`]; `callees.rs` orders the functions, callers first).
//!
//! Abstract interpretation, path-sensitive up to a point: each slot keeps up to
//! [`STATES_PER_SLOT`] distinct states (a loop with a constant trip count is followed iteration
//! by iteration, so a pointer stepping in lockstep with its counter keeps an exact offset);
//! past that the slot's states are joined into one summary, and after [`WIDEN_AFTER`] growths
//! of a summary at a backward jump's target every bound still moving is widened, to the next
//! of the program's compare constants or `% K` / `& K` limits (or one below it, in the
//! value's congruence class) or else its extreme, so the analysis ends (every cycle passes
//! such a target). Scalars carry a power-of-two congruence ([`Scal`]), so a counter stepping
//! by `c` up to an exit test `== N` is bounded by `N - c` inside the loop. A
//! state arriving at a slot is dropped when one already kept there contains it (its
//! continuations are covered). Branches refine the ranges they compare on each edge; an edge
//! whose refined range is empty is not followed. More than [`MAX_ARRIVALS`] arrivals in all
//! (over the program's functions) and the analysis gives up: nothing is proved in the function
//! it was in nor in any analysed after it (every access there keeps its check).
//!
//! A state also links scalar registers (`rX == rY + c`, refined together by branches) and
//! tracks a few scalars and pointers spilled to the analysed function's own frame ([`State`],
//! `state.rs`).
//!
//! Every fact is about the value a register holds at run time on every path that reaches the
//! slot: `Ptr(Data, [a, b])` means the register equals `ctx.data + k` for some `a <= k <= b`
//! (run_xrp sets `ctx.data` to the data slice and the program cannot write that field, which
//! lies outside the context's writable fields); `Scalar([lo, hi])` means `lo <= value <= hi`
//! as u64. `Scalar(FULL)` is "anything", pointers included, so every operation on a scalar is
//! computed for arbitrary 64-bit values.

use crate::cfg::Cfg;
use crate::insn::{
    Insn, BPF_ADD, BPF_ALU, BPF_ALU64, BPF_AND, BPF_ATOMIC, BPF_CALL, BPF_DIV, BPF_END, BPF_EXIT,
    BPF_JA, BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JLE, BPF_JLT, BPF_JMP, BPF_JMP32, BPF_JNE, BPF_JSGE,
    BPF_JSGT, BPF_JSLE, BPF_JSLT, BPF_LD, BPF_LDX, BPF_LSH, BPF_MEM, BPF_MOD, BPF_MOV, BPF_MUL,
    BPF_RSH, BPF_ST, BPF_STX, BPF_SUB, BPF_X,
};
use crate::interp::size_bytes;
use crate::program::{ProgType, Program};
use crate::xrp::{XRP_OFF_DATA, XRP_OFF_SCRATCH, XRP_SCRATCH_BYTES};

mod state;

pub(crate) use state::State;

/// Distinct states a slot keeps before it joins them into one summary: enough for a loop of
/// this many iterations to be followed exactly (BPF-KV's 31-key node scan needs 31).
pub(crate) const STATES_PER_SLOT: usize = 40;
/// Growths of a slot's summary before its moving bounds are widened to their extremes.
const WIDEN_AFTER: u32 = 8;
/// Widenings of one summary that may stop at a compare constant; later ones go to the
/// extremes. Without this bound a loop in a program with many constants would climb through
/// them one by one, re-running its body each time (verification time quadratic in size).
const THRESHOLD_STEPS: u32 = 4;
/// States queued in all before the analysis gives up: bounds verification time and memory (the
/// queue and the kept states hold at most this many states of [`STATE_BYTES`] or less,
/// ~120 MB, transiently).
/// BPF-KV's fan-out lookup (`progs/bpfkv_get_fanout`) needs between 100 000 and 200 000.
pub(crate) const MAX_ARRIVALS: usize = 200_000;
/// The size of a [`State`] is at most this (registers, links, frame slots): with
/// [`MAX_ARRIVALS`], what bounds the analysis' memory.
pub(crate) const STATE_BYTES: usize = 600;
const _: () = assert!(std::mem::size_of::<State>() <= STATE_BYTES);

/// What a pointer points into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Base {
    /// The program type's context (the entry's r1).
    Ctx,
    /// The xrp `data` block (`ctx.data`).
    Data,
    /// The xrp `scratch` buffer (`ctx.scratch`).
    Scratch,
    /// The analysed function's own frame: offsets from its r10 (the top of the frame).
    Stack,
}

/// An inclusive range; unsigned for scalars, signed byte offsets for pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span<T> {
    pub(crate) lo: T,
    pub(crate) hi: T,
}

/// A scalar's values: `lo <= v <= hi` (unsigned) and `v == lo (mod 2^m)` (`m` = 0: any
/// value in the range; `m` >= 64: only `lo`). Both ends are in the congruence class, so a
/// counter stepping by 8 from 0 is `[0, 4088]` with `m` = 3, and its exit test `!= 4096`
/// right after `+= 8` leaves it there (the class's last value below 4096 is 4088).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scal {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) m: u32,
}

/// The abstract value of one register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Val {
    Scalar(Scal),
    Ptr(Base, Span<i64>),
}

const FULL: Val = Val::Scalar(Scal { lo: 0, hi: u64::MAX, m: 0 });
const U32_MAX: u64 = u32::MAX as u64;
/// `m` of a constant.
const EXACT: u32 = 64;

/// The low `m` bits set (all of them for `m` >= 64).
fn low_mask(m: u32) -> u64 {
    if m >= 64 {
        u64::MAX
    } else {
        (1u64 << m) - 1
    }
}

impl Scal {
    /// `[lo, hi]` in the class of `lo` mod 2^m (`hi` rounded down into it).
    fn new(lo: u64, hi: u64, m: u32) -> Scal {
        debug_assert!(lo <= hi);
        let m = m.min(EXACT);
        let hi = hi - ((hi - lo) & low_mask(m));
        if lo == hi {
            Scal { lo, hi, m: EXACT }
        } else {
            Scal { lo, hi, m }
        }
    }

    /// The values of `self` inside `[lo, hi]` (ends moved into the class); `None`: none.
    fn clamp(self, lo: u64, hi: u64) -> Option<Scal> {
        let mask = low_mask(self.m);
        let lo = lo.max(self.lo);
        let hi = hi.min(self.hi);
        if lo > hi {
            return None;
        }
        // Round `lo` up into the class: it may pass `hi` (no value left) or wrap (none).
        let up = self.lo.wrapping_sub(lo) & mask;
        let lo = lo.checked_add(up).filter(|&l| l <= hi)?;
        Some(Scal::new(lo, hi, self.m))
    }

    fn join(self, o: Scal) -> Scal {
        let diff = self.lo.wrapping_sub(o.lo).trailing_zeros();
        Scal::new(self.lo.min(o.lo), self.hi.max(o.hi), self.m.min(o.m).min(diff))
    }

    fn contains(self, o: Scal) -> bool {
        self.lo <= o.lo
            && o.hi <= self.hi
            && o.m >= self.m
            && o.lo.wrapping_sub(self.lo) & low_mask(self.m) == 0
    }
}

fn scalar(lo: u64, hi: u64) -> Val {
    Val::Scalar(Scal::new(lo, hi, 0))
}

fn scalar_m(lo: u64, hi: u64, m: u32) -> Val {
    Val::Scalar(Scal::new(lo, hi, m))
}

fn konst(v: u64) -> Val {
    scalar(v, v)
}

impl Val {
    fn span(self) -> Option<Scal> {
        match self {
            Val::Scalar(s) => Some(s),
            Val::Ptr(..) => None,
        }
    }

    fn contains(self, other: Val) -> bool {
        match (self, other) {
            (Val::Scalar(a), _) if a.lo == 0 && a.hi == u64::MAX && a.m == 0 => true,
            (Val::Scalar(a), Val::Scalar(b)) => a.contains(b),
            (Val::Ptr(x, a), Val::Ptr(y, b)) => x == y && a.lo <= b.lo && b.hi <= a.hi,
            _ => false,
        }
    }

    fn join(self, other: Val) -> Val {
        match (self, other) {
            (Val::Scalar(a), Val::Scalar(b)) => Val::Scalar(a.join(b)),
            (Val::Ptr(x, a), Val::Ptr(y, b)) if x == y => {
                Val::Ptr(x, Span { lo: a.lo.min(b.lo), hi: a.hi.max(b.hi) })
            }
            _ => FULL,
        }
    }

    /// `self` joined with `new`, every bound `new` moved outward pushed to the next of
    /// `thresholds` (sorted; the program's compare constants) or its extreme.
    fn widen(self, new: Val, thresholds: &[u64]) -> Val {
        match (self, self.join(new)) {
            (Val::Scalar(a), Val::Scalar(b)) => {
                let lo = if b.lo < a.lo { widen_lo(b, thresholds) } else { b.lo };
                let hi = if b.hi > a.hi { widen_hi(b, thresholds) } else { b.hi };
                scalar_m(lo, hi, b.m)
            }
            (Val::Ptr(_, a), Val::Ptr(x, b)) if a == b => Val::Ptr(x, b),
            // A pointer whose offset keeps moving: nothing provable remains.
            _ => FULL,
        }
    }
}

/// The smallest value of `s`'s class at or above `s.hi` that is a threshold `t` or `t - 1`
/// rounded down into the class (the last value a loop test `!= t`, `< t` or `<= t - 1`
/// lets through), else the class' largest value.
fn widen_hi(s: Scal, thresholds: &[u64]) -> u64 {
    let mask = low_mask(s.m);
    let down = |v: u64| v.checked_sub(s.lo).map(|d| v - (d & mask));
    let from = thresholds.partition_point(|&t| t < s.hi);
    thresholds[from..]
        .iter()
        .flat_map(|&t| [t.checked_sub(1).and_then(down), down(t)])
        .flatten()
        .filter(|&v| v >= s.hi)
        .min()
        .or_else(|| down(u64::MAX))
        .unwrap_or(u64::MAX)
}

/// The largest value of `s`'s class at or below `s.lo` that is a threshold `t` or `t + 1`
/// rounded up into the class (the last value a falling counter's test `!= t`, `> t` or
/// `>= t + 1` lets through: `for (n = 1024; n != 0; n--)` stays at or above 1), else the
/// class' smallest value.
fn widen_lo(s: Scal, thresholds: &[u64]) -> u64 {
    let mask = low_mask(s.m);
    let up = |v: u64| v.checked_add(s.lo.wrapping_sub(v) & mask);
    let to = thresholds.partition_point(|&t| t <= s.lo);
    thresholds[..to]
        .iter()
        .flat_map(|&t| [t.checked_add(1).and_then(up), up(t)])
        .flatten()
        .filter(|&v| v <= s.lo)
        .max()
        .unwrap_or(s.lo & mask)
}

/// Where [`Val::widen`] stops a growing bound before giving up on it, sorted: the constants
/// the program's conditional jumps compare with (64- and 32-bit readings), and one past the
/// largest result of each `% K` and `& K` by a constant: a loop counter compared with a
/// *register* (`for (i = 0; i < at; i++)` with `at = arg % 4000`) is bounded by that
/// register's range, which such an operation set, and no compare constant says where it
/// ends. Any threshold set is sound (a widened bound only grows; the fixpoint still holds
/// every state that reaches a slot); these only make the bound found tighter.
fn compare_constants(insns: &[Insn]) -> Vec<u64> {
    let jumps = insns
        .iter()
        .filter(|i| matches!(i.class(), BPF_JMP | BPF_JMP32) && i.op & BPF_X == 0)
        .flat_map(|i| [i64::from(i.imm).cast_unsigned(), u64::from(i.imm.cast_unsigned())]);
    let limits = insns
        .iter()
        .filter(|i| matches!(i.class(), BPF_ALU | BPF_ALU64) && i.op & BPF_X == 0 && i.off == 0)
        .filter_map(|i| match (i.op & 0xf0, u64::try_from(i.imm)) {
            (BPF_MOD, Ok(k)) if k > 0 => Some(k),
            (BPF_AND, Ok(k)) => Some(k + 1),
            _ => None,
        });
    let mut v: Vec<u64> = jumps.chain(limits).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The analysis of one program, one function at a time ([`Analysis::function`]), callers
/// before callees (`crate::callees`).
pub(crate) struct Analysis<'a> {
    prog: &'a Program,
    cfg: &'a Cfg,
    /// [`compare_constants`] of the whole program: a callee's counter may be compared with a
    /// value its caller bounded.
    thresholds: Vec<u64>,
    /// Arrivals so far over all functions analysed, against [`MAX_ARRIVALS`].
    arrivals: usize,
}

impl<'a> Analysis<'a> {
    pub(crate) fn new(prog: &'a Program, cfg: &'a Cfg) -> Self {
        Analysis { prog, cfg, thresholds: compare_constants(&prog.insns), arrivals: 0 }
    }

    /// Fills `kept` (function `f`'s slots, from its first; empty on entry) with the states
    /// that reach each slot, starting from `entries` (every way into `f` starts in a state
    /// one of them contains); `None` when the analysis gave up (the arrivals of all functions
    /// analysed so far passed [`MAX_ARRIVALS`]; then `kept` means nothing). An empty list: no
    /// path reaches the slot. `at_call(pc, st)` sees every state reaching a BPF-to-BPF call
    /// of `f` (before the call), so its callee's entry states can be made from them. Into the
    /// caller's table: a second table per program, copied over, doubled the page faults of
    /// verifying a 4,096-slot program (glibc returns the freed top of the heap each time).
    pub(crate) fn function(
        &mut self,
        f: usize,
        entries: &[State],
        at_call: &mut dyn FnMut(usize, &State),
        kept: &mut [Vec<State>],
    ) -> Option<()> {
        let ctx = (&self.thresholds[..], &mut self.arrivals);
        analyze(self.prog, self.cfg, f, entries, ctx, at_call, kept)
    }
}

fn analyze(
    prog: &Program,
    cfg: &Cfg,
    f: usize,
    entries: &[State],
    (thresholds, arrivals): (&[u64], &mut usize),
    at_call: &mut dyn FnMut(usize, &State),
    kept: &mut [Vec<State>],
) -> Option<()> {
    let (start, end) = cfg.func_range(f);
    debug_assert_eq!(kept.len(), end - start);
    let mut growths = vec![0u32; end - start];
    // Widening only where a backward jump lands: every cycle passes one, so the analysis
    // still ends, and the slots of a loop body keep the exact offsets derived from the
    // header's (widened) ranges instead of widening them again.
    let mut widens = vec![false; end - start];
    for pc in (start..end).filter(|&pc| !cfg.is_second_half(pc)) {
        for t in cfg.successors(&prog.insns, pc).into_iter().flatten() {
            if t <= pc && t >= start {
                widens[t - start] = true;
            }
        }
    }
    // States are kept (and arrivals pruned) only where a block starts, which every join
    // and every cycle passes, and at memory accesses, whose states the proofs read; within a
    // block the state is stepped in place (copying 240-byte states in and out of the work
    // list at every slot was most of the analysis' time).
    let keep_at: Vec<bool> = (start..end)
        .map(|pc| {
            cfg.is_block_start(pc) || matches!(prog.insns[pc].class(), BPF_LDX | BPF_ST | BPF_STX)
        })
        .collect();
    let mut work: Vec<(usize, State)> = entries.iter().map(|&e| (start, e)).collect();
    // Counted when queued or stepped into, so the queue and the kept states both stay within
    // the bound.
    *arrivals += work.len();
    while let Some((mut pc, mut st)) = work.pop() {
        loop {
            if keep_at[pc - start] {
                let slot = &mut kept[pc - start];
                if slot.iter().any(|k| k.contains(&st)) {
                    break;
                }
                if slot.len() < STATES_PER_SLOT {
                    // Most slots keep one state: room for exactly one first (a fresh
                    // allocation of four per slot was a page fault every few slots).
                    if slot.capacity() == 0 {
                        slot.reserve_exact(1);
                    }
                    slot.push(st);
                } else {
                    // Summary mode: one state, grown (and eventually widened) by every arrival.
                    let old = slot.iter().skip(1).fold(slot[0], |acc, s| acc.merge(s, None));
                    growths[pc - start] += 1;
                    let g = growths[pc - start];
                    st = if widens[pc - start] && g > WIDEN_AFTER {
                        let t: &[u64] =
                            if g > WIDEN_AFTER + THRESHOLD_STEPS { &[] } else { thresholds };
                        old.merge(&st, Some(t))
                    } else {
                        old.merge(&st, None)
                    };
                    slot.clear();
                    slot.push(st);
                }
            }
            let next = if matches!(prog.insns[pc].class(), BPF_JMP | BPF_JMP32) {
                None
            } else {
                let [next, _] = cfg.successors(&prog.insns, pc);
                next
            };
            // Straight on within the block: the state stepped in place.
            if let Some(n) = next.filter(|&n| n < end && !keep_at[n - start]) {
                transfer(prog, pc, &mut st);
                pc = n;
                *arrivals += 1;
                if *arrivals > MAX_ARRIVALS {
                    return None;
                }
                continue;
            }
            if crate::cfg::is_pseudo_call(prog.insns[pc]) {
                at_call(pc, &st);
            }
            let before = work.len();
            step(prog, cfg, pc, &st, &mut work);
            // Successors outside the function (or on an lddw's second slot: the verifier
            // refused those jumps) are not followed.
            let mut k = before;
            while k < work.len() {
                let succ = work[k].0;
                if (start..end).contains(&succ) && !cfg.is_second_half(succ) {
                    k += 1;
                } else {
                    work.swap_remove(k);
                }
            }
            *arrivals += work.len() - before;
            if *arrivals > MAX_ARRIVALS {
                return None;
            }
            break;
        }
    }
    Some(())
}

/// Pushes the successor states of `pc` onto `out` (at most two; an infeasible branch edge is
/// left out). Into the work list directly: the analysis steps up to `MAX_ARRIVALS` times, and
/// an allocation, then the copies of 240-byte states, were most of its time.
fn step(prog: &Program, cfg: &Cfg, pc: usize, st: &State, out: &mut Vec<(usize, State)>) {
    let insns = &prog.insns;
    let i = insns[pc];
    let [a, b] = cfg.successors(insns, pc);
    if matches!(i.class(), BPF_JMP | BPF_JMP32)
        && !matches!(i.op & 0xf0, BPF_JA | BPF_EXIT | BPF_CALL)
    {
        let (Some(target), Some(fall)) = (a, b) else { return };
        if let Some(s) = branch(i, *st, true) {
            out.push((target, s));
        }
        if let Some(s) = branch(i, *st, false) {
            out.push((fall, s));
        }
        return;
    }
    let mut st = *st;
    transfer(prog, pc, &mut st);
    out.extend([a, b].into_iter().flatten().map(|s| (s, st)));
}

/// The effect of the instruction at `pc` (not a conditional jump) on `st`.
fn transfer(prog: &Program, pc: usize, st: &mut State) {
    let insns = &prog.insns;
    let i = insns[pc];
    let d = usize::from(i.dst).min(9);
    match i.class() {
        BPF_ALU | BPF_ALU64 if i.dst < 10 => st.assign(d, alu(i, st), link(i, st)),
        BPF_LD if i.dst < 10 => {
            let hi = insns.get(pc + 1).map_or(0, |h| h.imm);
            // A relocated lddw is a globals address: not tracked (FULL).
            let v = (u64::from(hi.cast_unsigned()) << 32) | u64::from(i.imm.cast_unsigned());
            let relocated = prog.global_relocs.binary_search_by_key(&pc, |&(at, _)| at).is_ok();
            st.assign(d, if i.src == 0 && !relocated { konst(v) } else { FULL }, None);
        }
        BPF_LDX if i.dst < 10 => st.assign(d, load(i, st, prog.prog_type), None),
        BPF_ST | BPF_STX => {
            store(i, st, prog.prog_type);
            if i.op & 0xe0 == BPF_ATOMIC {
                // Fetching atomics write src; cmpxchg writes r0.
                st.assign(usize::from(i.src).min(9), FULL, None);
                st.assign(0, FULL, None);
            }
        }
        BPF_JMP if i.op == BPF_JMP | BPF_CALL => st.clobber_call(),
        _ => {}
    }
}

/// The second operand of an ALU or jump instruction, as a value.
fn operand(i: Insn, st: &State, is64: bool) -> Val {
    if i.op & BPF_X != 0 {
        if i.src == 10 {
            // This function's own frame pointer (pointers into a caller's frame are
            // forgotten at the call: `State::callee_entry`).
            return Val::Ptr(Base::Stack, Span { lo: 0, hi: 0 });
        }
        if i.src > 10 {
            return FULL;
        }
        st[usize::from(i.src)]
    } else if is64 {
        konst(i64::from(i.imm).cast_unsigned())
    } else {
        konst(u64::from(i.imm.cast_unsigned()))
    }
}

fn alu(i: Insn, st: &State) -> Val {
    let is64 = i.class() == BPF_ALU64;
    let op = i.op & 0xf0;
    let dst = st[usize::from(i.dst)];
    let src = operand(i, st, is64);
    if op == BPF_END {
        return FULL; // be64 in the 32-bit class yields 64 bits
    }
    if op == BPF_MOV && i.off == 0 {
        return if is64 { src } else { trunc32(src) };
    }
    if i.off != 0 {
        return FULL; // signed moves and divisions
    }
    if is64 {
        alu64(op, i, dst, src)
    } else if let Some(v) = add32_neg_k(op, i, dst) {
        v
    } else {
        alu32(op, dst, src)
    }
}

/// `wX += -c` (clang's `n--` on a 32-bit counter): for every value at least `c` the 32-bit
/// sum `v + 2^32 - c` wraps to exactly `v - c`, so it is a subtraction, not "any u32".
fn add32_neg_k(op: u8, i: Insn, dst: Val) -> Option<Val> {
    if op != BPF_ADD || i.op & BPF_X != 0 || i.imm >= 0 {
        return None;
    }
    let c = u64::from(i.imm.unsigned_abs());
    let a = trunc32(dst).span().filter(|a| a.lo >= c)?;
    Some(sub_span(a, Scal { lo: c, hi: c, m: EXACT }))
}

fn alu64(op: u8, i: Insn, dst: Val, src: Val) -> Val {
    // `rX += -c` is a subtraction by c, not an overflowing add of 2^64 - c.
    let k = i.op & BPF_X == 0;
    let neg_k = k && i.imm < 0;
    match (op, dst, src) {
        (BPF_ADD, Val::Ptr(b, o), _) if k => ptr_off(b, o, i64::from(i.imm)),
        (BPF_SUB, Val::Ptr(b, o), _) if k => ptr_off(b, o, -i64::from(i.imm)),
        (BPF_ADD, Val::Ptr(b, o), Val::Scalar(s)) | (BPF_ADD, Val::Scalar(s), Val::Ptr(b, o)) => {
            ptr_add(b, o, s, false)
        }
        (BPF_SUB, Val::Ptr(b, o), Val::Scalar(s)) => ptr_add(b, o, s, true),
        (_, Val::Scalar(a), Val::Scalar(s)) => {
            if neg_k && op == BPF_ADD {
                let c = i64::from(i.imm).unsigned_abs();
                return sub_span(a, Scal { lo: c, hi: c, m: EXACT });
            }
            scalar_op(op, a, s)
        }
        _ => FULL,
    }
}

/// 32-bit ALU: exact when the 64-bit result of the operands fits in 32 bits, else any u32.
fn alu32(op: u8, dst: Val, src: Val) -> Val {
    let (Some(a), Some(b)) = (trunc32(dst).span(), trunc32(src).span()) else {
        return scalar(0, U32_MAX);
    };
    let b = if op == BPF_LSH || op == BPF_RSH { shift_amount(b, 31) } else { Some(b) };
    match b.map(|b| scalar_op(op, a, b)).and_then(Val::span) {
        Some(r) if r.hi <= U32_MAX => Val::Scalar(r),
        _ => scalar(0, U32_MAX),
    }
}

fn trunc32(v: Val) -> Val {
    match v {
        Val::Scalar(s) if s.hi <= U32_MAX => v,
        _ => scalar(0, U32_MAX),
    }
}

/// A constant shift amount masked as the ISA masks it; `None` when it is not a constant.
fn shift_amount(b: Scal, mask: u64) -> Option<Scal> {
    (b.lo == b.hi).then_some(Scal { lo: b.lo & mask, hi: b.lo & mask, m: EXACT })
}

/// `a - b`. Without wrap every difference is `a.lo - b.lo` plus multiples of the coarser of
/// the two moduli.
fn sub_span(a: Scal, b: Scal) -> Val {
    if a.lo >= b.hi {
        let d = a.lo - b.lo;
        let lo = a.lo - b.hi;
        let m = a.m.min(b.m).min(lo.wrapping_sub(d).trailing_zeros());
        scalar_m(lo, a.hi - b.lo, m)
    } else {
        FULL
    }
}

// Congruences: `a + b`, `a * b` keep the coarser modulus (the representatives are `a.lo`
// and `b.lo`, whose sum and product are the new low ends); a multiplier or shift by a
// constant `2^k * odd` refines it by `k`; `>> k` keeps `m - k` bits (the low `k` bits of every
// value are those of `lo`, so no carry crosses); everything else forgets it.
fn scalar_op(op: u8, a: Scal, b: Scal) -> Val {
    match op {
        BPF_ADD => match (a.lo.checked_add(b.lo), a.hi.checked_add(b.hi)) {
            (Some(lo), Some(hi)) => scalar_m(lo, hi, a.m.min(b.m)),
            _ => FULL,
        },
        BPF_SUB => sub_span(a, b),
        BPF_MUL => match (a.lo.checked_mul(b.lo), a.hi.checked_mul(b.hi)) {
            (Some(lo), Some(hi)) if b.m >= EXACT => {
                scalar_m(lo, hi, a.m.saturating_add(b.lo.trailing_zeros()))
            }
            (Some(lo), Some(hi)) => scalar_m(lo, hi, a.m.min(b.m)),
            _ => FULL,
        },
        BPF_AND => scalar(0, a.hi.min(b.hi)),
        BPF_DIV if b.lo > 0 => scalar(a.lo / b.hi, a.hi / b.lo),
        BPF_MOD if b.lo > 0 => scalar(0, a.hi.min(b.hi - 1)),
        BPF_LSH => match shift_amount(b, 63) {
            Some(k) if u64::from(a.hi.leading_zeros()) >= k.lo => {
                let k = k.lo as u32;
                scalar_m(a.lo << k, a.hi << k, a.m.saturating_add(k))
            }
            _ => FULL,
        },
        BPF_RSH => match shift_amount(b, 63) {
            Some(k) => {
                let k = k.lo as u32;
                let m = a.m.saturating_sub(k);
                scalar_m(a.lo >> k, a.hi >> k, m)
            }
            None => scalar(0, a.hi),
        },
        _ => FULL,
    }
}

/// `ptr + delta` for a constant `delta`.
fn ptr_off(b: Base, o: Span<i64>, delta: i64) -> Val {
    match (o.lo.checked_add(delta), o.hi.checked_add(delta)) {
        (Some(lo), Some(hi)) => Val::Ptr(b, Span { lo, hi }),
        _ => FULL,
    }
}

/// `ptr ± s` for a scalar range `s`.
fn ptr_add(b: Base, o: Span<i64>, s: Scal, sub: bool) -> Val {
    let (Ok(lo), Ok(hi)) = (i64::try_from(s.lo), i64::try_from(s.hi)) else { return FULL };
    let r = if sub {
        o.lo.checked_sub(hi).zip(o.hi.checked_sub(lo))
    } else {
        o.lo.checked_add(lo).zip(o.hi.checked_add(hi))
    };
    r.map_or(FULL, |(lo, hi)| Val::Ptr(b, Span { lo, hi }))
}

fn load(i: Insn, st: &State, t: ProgType) -> Val {
    let n = size_bytes(i.op);
    if i.op & 0xe0 != BPF_MEM {
        return FULL; // sign-extending loads
    }
    if let Some(v) = frame_place(i.src, i.off, st)
        .and_then(|(lo, hi)| (lo == hi).then(|| st.slot(lo, n as u8)).flatten())
    {
        return v;
    }
    let base = if i.src < 10 { st[usize::from(i.src)] } else { FULL };
    if let (ProgType::Xrp, Val::Ptr(Base::Ctx, o)) = (t, base) {
        let field = o.lo == o.hi && n == 8;
        let at = o.lo.checked_add(i64::from(i.off));
        if field && at == Some(XRP_OFF_DATA as i64) {
            return Val::Ptr(Base::Data, Span { lo: 0, hi: 0 });
        }
        if field && at == Some(XRP_OFF_SCRATCH as i64) {
            return Val::Ptr(Base::Scratch, Span { lo: 0, hi: 0 });
        }
    }
    match n {
        1 => scalar(0, 0xff),
        2 => scalar(0, 0xffff),
        4 => scalar(0, U32_MAX),
        _ => FULL,
    }
}

/// The state on the taken (`taken`) or fall-through edge of a conditional jump; `None` when
/// the refined ranges say the edge cannot be taken.
fn branch(i: Insn, mut st: State, taken: bool) -> Option<State> {
    let is64 = i.class() == BPF_JMP;
    let op = i.op & 0xf0;
    if i.dst >= 10 {
        return Some(st);
    }
    let (Some(mut a), Some(mut b)) = (st[usize::from(i.dst)].span(), operand(i, &st, is64).span())
    else {
        return Some(st);
    };
    // A 32-bit compare is the 64-bit one when both sides fit in 32 bits; a signed compare is
    // the unsigned one when both are non-negative.
    let fits = |s: Scal| is64 || s.hi <= U32_MAX;
    let nonneg = |s: Scal| s.hi <= if is64 { i64::MAX as u64 } else { i32::MAX as u64 };
    let signed = matches!(op, BPF_JSGT | BPF_JSGE | BPF_JSLT | BPF_JSLE);
    if !fits(a) || !fits(b) || (signed && (!nonneg(a) || !nonneg(b))) {
        return Some(st);
    }
    // Normalise to `a OP b` holding on this edge.
    let op = match (op, taken) {
        (BPF_JEQ, true) | (BPF_JNE, false) => BPF_JEQ,
        (BPF_JEQ, false) | (BPF_JNE, true) => BPF_JNE,
        (BPF_JGT | BPF_JSGT, true) | (BPF_JLE | BPF_JSLE, false) => BPF_JGT,
        (BPF_JGE | BPF_JSGE, true) | (BPF_JLT | BPF_JSLT, false) => BPF_JGE,
        (BPF_JLT | BPF_JSLT, true) | (BPF_JGE | BPF_JSGE, false) => BPF_JLT,
        (BPF_JLE | BPF_JSLE, true) | (BPF_JGT | BPF_JSGT, false) => BPF_JLE,
        _ => return Some(st), // JSET: no range fact
    };
    match op {
        BPF_JEQ => {
            a = a.clamp(b.lo, b.hi)?;
            b = b.clamp(a.lo, a.hi)?;
            a = a.clamp(b.lo, b.hi)?;
        }
        BPF_JNE => {
            if a.lo == a.hi && b.lo == b.hi && a.lo == b.lo {
                return None;
            }
            // Only a constant at an end of the other range shrinks it.
            if b.lo == b.hi {
                a = shave(a, b.lo)?;
            }
            if a.lo == a.hi {
                b = shave(b, a.lo)?;
            }
        }
        BPF_JGT => (a, b) = less(b, a, 1)?.swap(),
        BPF_JGE => (a, b) = less(b, a, 0)?.swap(),
        BPF_JLT => (a, b) = less(a, b, 1)?,
        _ => (a, b) = less(a, b, 0)?, // JLE
    }
    st.refine(usize::from(i.dst), a)?;
    if i.op & BPF_X != 0 && i.src < 10 {
        st.refine(usize::from(i.src), b)?;
    }
    Some(st)
}

/// Refines `x + gap <= y` (gap 1: `x < y`; 0: `x <= y`); `None` when impossible.
fn less(x: Scal, y: Scal, gap: u64) -> Option<(Scal, Scal)> {
    let x_hi = y.hi.checked_sub(gap)?;
    let y_lo = x.lo.checked_add(gap)?;
    Some((x.clamp(x.lo, x_hi)?, y.clamp(y_lo, y.hi)?))
}

trait Swap {
    fn swap(self) -> Self;
}

impl<T> Swap for (T, T) {
    fn swap(self) -> Self {
        (self.1, self.0)
    }
}

/// `s` without the value `v` when `v` is one of its ends (the next value of its class
/// becomes the end).
fn shave(s: Scal, v: u64) -> Option<Scal> {
    if s.lo == v && s.hi == v {
        None
    } else if s.lo == v {
        s.clamp(v + 1, s.hi)
    } else if s.hi == v {
        s.clamp(s.lo, v - 1)
    } else {
        Some(s)
    }
}

/// `(q, c)` when the ALU instruction `i` leaves `dst == q + c` (mod 2^64) on every path:
/// `rX = rY` (32-bit only when `rY` fits in 32 bits) and `rX += c` / `rX -= c` (32-bit only
/// when no value wraps).
fn link(i: Insn, st: &State) -> Option<(usize, i64)> {
    let is64 = i.class() == BPF_ALU64;
    if i.off != 0 {
        return None;
    }
    let k = i64::from(i.imm);
    let d = usize::from(i.dst);
    match (i.op & 0xf0, i.op & BPF_X != 0) {
        (BPF_MOV, true) if i.src < 10 => {
            let s = usize::from(i.src);
            let fits = matches!(st[s], Val::Scalar(x) if x.hi <= U32_MAX);
            (is64 || fits).then_some((s, 0))
        }
        (BPF_ADD | BPF_SUB, false) => {
            let c = if i.op & 0xf0 == BPF_ADD { k } else { -k };
            (is64 || state::add32_exact(st[d], c)).then_some((d, c))
        }
        _ => None,
    }
}

/// The offsets from the entry's r10 an access through `base + off` may start at, when `base`
/// is r10 or a pointer into the analysed function's own frame.
fn frame_place(base: u8, off: i16, st: &State) -> Option<(i64, i64)> {
    let off = i64::from(off);
    if base == 10 {
        return Some((off, off));
    }
    match st[usize::from(base).min(9)] {
        Val::Ptr(Base::Stack, s) => Some((s.lo.checked_add(off)?, s.hi.checked_add(off)?)),
        _ => None,
    }
}

/// The end offset in `scratch` of the store (or atomic) `i` when every byte it may write lies
/// inside the scratch view. The analysis takes such a store not to touch the frame: on the
/// JIT, the only engine its proofs serve, `scratch` is at least as long as every such end
/// (proofs.rs counts them into the scratch bytes the JIT requires), so the store lands inside
/// the scratch buffer. (Without that, a checked store past a short buffer could land in the
/// stack, which is a region too.)
pub(crate) fn scratch_store_end(i: Insn, st: &State) -> Option<i64> {
    let Val::Ptr(Base::Scratch, s) = st[usize::from(i.dst).min(9)] else { return None };
    let off = i64::from(i.off);
    let (lo, end) = (s.lo.checked_add(off)?, s.hi.checked_add(off + size_bytes(i.op) as i64)?);
    (i.dst < 10 && lo >= 0 && end <= XRP_SCRATCH_BYTES as i64).then_some(end)
}

/// A store's (or atomic's) effect on the tracked frame slots: those it may overlap are
/// forgotten, all of them when it may land anywhere. A store inside the context cannot reach
/// the stack (another object), nor one inside the scratch view ([`scratch_store_end`]); one
/// through a `data` pointer might (a checked store past a short buffer).
fn store(i: Insn, st: &mut State, t: ProgType) {
    let n = size_bytes(i.op) as u8;
    let place = frame_place(i.dst, i.off, st);
    if place.is_none() && i.dst < 10 {
        if scratch_store_end(i, st).is_some() {
            return;
        }
        if let Val::Ptr(Base::Ctx, s) = st[usize::from(i.dst)] {
            let (off, n) = (i64::from(i.off), i64::from(n));
            let end = s.hi.saturating_add(off + n);
            if s.lo.saturating_add(off) >= 0 && end <= crate::proofs::ctx_bytes(t) {
                return;
            }
        }
    }
    let mask = if n >= 8 { u64::MAX } else { (1u64 << (8 * u32::from(n))) - 1 };
    let v = match i.class() {
        _ if i.op & 0xe0 != BPF_MEM => None,
        BPF_STX if i.src == 10 => Some(Val::Ptr(Base::Stack, Span { lo: 0, hi: 0 })),
        BPF_STX => Some(st[usize::from(i.src).min(9)]),
        _ => Some(konst(i64::from(i.imm).cast_unsigned() & mask)),
    };
    st.store(place, n, v);
}
