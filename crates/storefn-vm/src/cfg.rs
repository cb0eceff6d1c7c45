//! The control flow of a linked program, computed once by the verifier and shared by the
//! verifier (dataflow), the JIT (one Cranelift block per basic block) and the interpreter:
//! `lddw` halves, function starts, jump targets, basic blocks, successors, and where the
//! instruction budget is charged.
//!
//! Basic blocks: a block starts at every function start, every jump target and the slot after
//! every jump-class instruction (jumps, `call`, `exit`).
//!
//! Budget charge points: every function start and every target of a backward jump (target <=
//! the jump's index). Every cycle of the control flow contains a backward jump (forward jumps
//! and fall-through only raise the index; calls return to the next slot and the call graph is
//! acyclic), so between two charge points control runs through an acyclic region. A charge point
//! charges the longest path, in instructions (an `lddw` counts one; a `call` one, its callee
//! charges itself), from it to the next charge point or `exit`. So every executed instruction is
//! paid for before it runs (a run may stop before spending all it paid for), loops pay once per
//! iteration at their header, and both engines, reading the same table, stop at the same
//! instruction (docs/design/vm.md, "Budget"). The exception: a counted loop
//! ([`crate::loops`], whose header runs at most `trips` times per entry) is paid for as a whole
//! by the charge point before it ([`Cfg::precharge`]), and its header charges nothing.

use crate::insn::{Insn, BPF_CALL, BPF_EXIT, BPF_JA, BPF_JMP, BPF_JMP32, BPF_PSEUDO_CALL};
use crate::loops::BlockLoop;
pub use crate::loops::{CountedLoop, MAX_EXACT_LOOP_PRECHARGE_INSNS, MAX_LOOP_PRECHARGE_INSNS};
use crate::verifier::VerifyError;

/// No loop charged whole holds this slot ([`Cfg::longest_paths`]).
const NO_LOOP: u32 = u32::MAX;

fn err<T>(insn: usize, reason: impl Into<String>) -> Result<T, VerifyError> {
    Err(VerifyError { insn, reason: reason.into() })
}

/// Control flow of a program whose jumps and calls the verifier accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cfg {
    /// `second[pc]`: slot `pc` is the second half of an `lddw`.
    second: Vec<bool>,
    /// Function start slots, sorted; the entry (0) first.
    funcs: Vec<usize>,
    /// `leader[pc]`: a basic block starts at slot `pc`.
    leader: Vec<bool>,
    /// Instructions charged when control reaches this slot; 0 = not a charge point.
    charge: Vec<u32>,
    /// Loops charged as a whole before they run ([`Cfg::precharge`]); their headers are not
    /// charge points.
    counted: Vec<CountedLoop>,
    /// Loops whose body is a set of blocks ([`crate::loops::block_loops`]) charged as a whole
    /// before they run; no slot of their body is a charge point.
    blocks: Vec<CountedLoop>,
    /// Loops with a proved trip bound that [`Cfg::precharge`] left charged per iteration
    /// ([`Cfg::bounded_loops`]).
    bounded: Vec<CountedLoop>,
}

impl Cfg {
    /// Control flow of `insns`, given its `lddw` halves ([`lddw_halves`]). Checks that calls
    /// and jumps land on instruction starts inside the program (jumps: inside their own
    /// function) and that no function falls through its end.
    ///
    /// # Errors
    /// The first violation, as the verifier reports it.
    pub(crate) fn new(insns: &[Insn], second: Vec<bool>) -> Result<Self, VerifyError> {
        let funcs = functions(insns, &second)?;
        let mut leader = vec![false; insns.len()];
        for f in 0..funcs.len() {
            check_function(insns, &second, &funcs, f, &mut leader)?;
        }
        let mut cfg = Self {
            second,
            funcs,
            leader,
            charge: vec![0; insns.len()],
            counted: Vec::new(),
            blocks: Vec::new(),
            bounded: Vec::new(),
        };
        cfg.charge = cfg.charges_for(insns, &[], &[]).expect("no counted loops: charges fit");
        Ok(cfg)
    }

    /// Charges each of `loops` (proved by [`crate::loops`]; `blocks`, loops whose body is a
    /// set of blocks, by [`crate::loops::block_loops`]) as a whole where control enters it:
    /// its header stops being a charge point (for `blocks`, every slot of its body), and a path
    /// through the loop counts `(trips - 1)` times its longest iteration (header to back edge)
    /// plus its longest pass (an iteration, or the way out). A loop whose `(trips - 1)` extra
    /// iterations would charge more than [`MAX_LOOP_PRECHARGE_INSNS`]
    /// ([`MAX_EXACT_LOOP_PRECHARGE_INSNS`] for a loop that leaves only through its counter's
    /// test) stays charged per iteration; if the charges would not fit the table, `blocks`
    /// are left per iteration, and if they still do not fit, nothing changes.
    pub(crate) fn precharge(
        &mut self,
        insns: &[Insn],
        loops: &[CountedLoop],
        blocks: &[BlockLoop],
    ) {
        let fits = |l: &CountedLoop, iteration: u64| {
            let extra = (l.trips - 1).checked_mul(iteration);
            let most =
                if l.exact { MAX_EXACT_LOOP_PRECHARGE_INSNS } else { MAX_LOOP_PRECHARGE_INSNS };
            extra.is_some_and(|x| x <= most)
        };
        let keep: Vec<CountedLoop> =
            loops.iter().filter(|l| fits(l, self.longest_iteration(insns, l))).copied().collect();
        let mut whole: Vec<&BlockLoop> =
            blocks.iter().filter(|b| fits(&b.l, b.iteration)).collect();
        let mut charge = self.charges_for(insns, &keep, &whole);
        if charge.is_none() && !whole.is_empty() {
            whole.clear();
            charge = self.charges_for(insns, &keep, &whole);
        }
        if let Some(charge) = charge {
            self.charge = charge;
            self.counted = keep;
            self.blocks = whole.iter().map(|b| b.l).collect();
        }
        // Every loop not charged whole keeps its header a charge point (the table without
        // any counted loop makes every backward target one). Loops of `blocks` left per
        // iteration are not listed: their body may hold other charge points.
        let kept = |l: &CountedLoop| self.counted.binary_search_by_key(&l.header, |k| k.header);
        self.bounded = loops.iter().filter(|l| kept(l).is_err()).copied().collect();
    }

    /// The longest path from `l`'s header to its back edge, both included (its body is
    /// acyclic once the back edge is cut; [`crate::loops`]).
    fn longest_iteration(&self, insns: &[Insn], l: &CountedLoop) -> u64 {
        let mut cycle = vec![None::<u64>; l.latch - l.header + 1];
        for pc in (l.header..=l.latch).rev().filter(|&pc| !self.second[pc]) {
            let mut best = None;
            for s in self.successors(insns, pc).into_iter().flatten() {
                if pc == l.latch && s == l.header {
                    best = best.max(Some(0));
                } else if s > pc && s <= l.latch {
                    best = best.max(cycle[s - l.header]);
                }
            }
            cycle[pc - l.header] = best.map(|c| c + 1);
        }
        cycle[0].unwrap_or(0)
    }

    /// The loops charged as a whole ([`Cfg::precharge`]).
    #[must_use]
    pub fn counted_loops(&self) -> &[CountedLoop] {
        &self.counted
    }

    /// Loops whose body is a set of blocks rather than a slot range (several back edges to
    /// one header, or entered mid-range: [`crate::loops::block_loops`]) charged as a whole
    /// before they run. `latch` is the highest slot of the body, not necessarily a back edge.
    /// Sorted by header.
    #[must_use]
    pub fn block_loops(&self) -> &[CountedLoop] {
        &self.blocks
    }

    /// Loops whose trip bound [`crate::loops`] proved but which stay charged per iteration
    /// (their charge would pass [`MAX_LOOP_PRECHARGE_INSNS`] or
    /// [`MAX_EXACT_LOOP_PRECHARGE_INSNS`]): their header is a charge point, reached at most
    /// `trips` times per entry of the loop, and the only one in the body. Sorted by header.
    #[must_use]
    pub fn bounded_loops(&self) -> &[CountedLoop] {
        &self.bounded
    }

    /// The charge of every charge point (see the module documentation), with `counted` and
    /// `blocks` loops charged as a whole; `None` when a charge does not fit in a `u32` (or
    /// the loops leave a cycle without a charge point, which their proofs exclude).
    fn charges_for(
        &self,
        insns: &[Insn],
        counted: &[CountedLoop],
        blocks: &[&BlockLoop],
    ) -> Option<Vec<u32>> {
        let (longest, point) = self.longest_paths(insns, counted, blocks)?;
        (0..insns.len())
            .map(|pc| if point[pc] { u32::try_from(longest[pc]).ok() } else { Some(0) })
            .collect()
    }

    /// Per slot, the longest path in instructions (an `lddw` counts one, a `call` one) from it
    /// to the next charge point or `exit`, `pc` included, a counted loop's header standing for
    /// its whole charge; and which slots are charge points. Slots are visited successors
    /// first: from the last slot down when only range loops are charged whole (only backward
    /// jumps go down, and their targets are charge points or counted loops' headers, whose back
    /// edge ends the path it is on), else in a depth-first postorder of the same graph
    /// ([`Cfg::postorder`]), since a loop made of blocks jumps backward inside its body.
    fn longest_paths(
        &self,
        insns: &[Insn],
        counted: &[CountedLoop],
        blocks: &[&BlockLoop],
    ) -> Option<(Vec<u64>, Vec<bool>)> {
        let n = insns.len();
        let mut point = vec![false; n];
        for &f in &self.funcs {
            point[f] = true;
        }
        for pc in (0..n).filter(|&pc| !self.second[pc]) {
            if let Some(t) = jump_rel(insns[pc]).and_then(|rel| rel_target(insns, pc, rel)) {
                if t <= pc {
                    point[t] = true;
                }
            }
        }
        // Per slot of a body charged whole, its loop in `heads` (header, trips); its body's
        // slots are no charge points.
        let mut heads: Vec<(usize, u64)> = Vec::with_capacity(counted.len() + blocks.len());
        let mut member = vec![NO_LOOP; n];
        for l in counted {
            debug_assert!(point[l.header] && l.header <= l.latch);
            point[l.header] = false;
            member[l.header..=l.latch].fill(u32::try_from(heads.len()).ok()?);
            heads.push((l.header, l.trips));
        }
        for b in blocks {
            for &pc in &b.body {
                point[pc] = false;
                member[pc] = u32::try_from(heads.len()).ok()?;
            }
            heads.push((b.l.header, b.l.trips));
        }
        let order: Vec<usize> = if blocks.is_empty() {
            (0..n).rev().filter(|&pc| !self.second[pc]).collect()
        } else {
            self.postorder(insns, &point, &member, &heads)?
        };
        // Per slot of a body: the longest path from it that ends by taking a back edge.
        let mut cycles = vec![None::<u64>; n];
        let mut longest = vec![0u64; n];
        for pc in order {
            let k = member[pc];
            let inside = heads.get(k as usize).copied();
            let (mut out, mut cycle): (Option<u64>, Option<u64>) = (None, None);
            let mut no_successor = true;
            for s in self.successors(insns, pc).into_iter().flatten() {
                no_successor = false;
                if let Some((header, _)) = inside {
                    if s == header {
                        cycle = cycle.max(Some(0));
                        continue;
                    }
                    if member[s] == k {
                        cycle = cycle.max(cycles[s]);
                    }
                }
                out = out.max(Some(if point[s] { 0 } else { longest[s] }));
            }
            if no_successor {
                out = Some(0);
            }
            let out = out.map(|o| o + 1);
            let cycle = cycle.map(|c| c + 1);
            cycles[pc] = cycle;
            longest[pc] = match inside {
                // The header: `trips - 1` iterations back to it, then one more pass.
                Some((header, trips)) if pc == header => {
                    let c = cycle.unwrap_or(0);
                    (trips - 1).checked_mul(c)?.checked_add(c.max(out.unwrap_or(0)))?
                }
                _ => out.unwrap_or(0),
            };
        }
        Some((longest, point))
    }

    /// The slots in a depth-first postorder (every slot after its successors) of the control
    /// flow without its edges into charge points and its back edges of loops charged whole
    /// (`member`, `heads` as in [`Cfg::longest_paths`]); `None` if those edges still make a
    /// cycle.
    fn postorder(
        &self,
        insns: &[Insn],
        point: &[bool],
        member: &[u32],
        heads: &[(usize, u64)],
    ) -> Option<Vec<usize>> {
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let n = insns.len();
        let mut state = vec![NEW; n];
        let mut order = Vec::with_capacity(n);
        let mut stack: Vec<(usize, usize)> = Vec::new();
        let cut = |pc: usize, s: usize| {
            point[s] || heads.get(member[pc] as usize).is_some_and(|&(h, _)| h == s)
        };
        for root in (0..n).rev().filter(|&pc| !self.second[pc]) {
            if state[root] != NEW {
                continue;
            }
            state[root] = OPEN;
            stack.push((root, 0));
            while let Some(&mut (pc, ref mut k)) = stack.last_mut() {
                if *k == 2 {
                    state[pc] = DONE;
                    order.push(pc);
                    stack.pop();
                    continue;
                }
                let next = self.successors(insns, pc)[*k];
                *k += 1;
                match next.filter(|&s| !cut(pc, s)) {
                    Some(s) if state[s] == NEW => {
                        state[s] = OPEN;
                        stack.push((s, 0));
                    }
                    Some(s) if state[s] == OPEN => return None,
                    _ => {}
                }
            }
        }
        Some(order)
    }

    /// Function start slots, sorted, entry first.
    #[must_use]
    pub fn functions(&self) -> &[usize] {
        &self.funcs
    }

    /// Slots `[start, end)` of function `f`.
    #[must_use]
    pub fn func_range(&self, f: usize) -> (usize, usize) {
        (self.funcs[f], self.funcs.get(f + 1).copied().unwrap_or(self.second.len()))
    }

    /// The function holding slot `pc`.
    #[must_use]
    pub fn func_of(&self, pc: usize) -> usize {
        self.funcs.partition_point(|&s| s <= pc) - 1
    }

    /// Is slot `pc` the second half of an `lddw`?
    #[must_use]
    pub fn is_second_half(&self, pc: usize) -> bool {
        self.second[pc]
    }

    /// Instructions charged to the budget when control reaches `pc`; 0 when `pc` is not a
    /// charge point.
    #[must_use]
    pub fn charge(&self, pc: usize) -> u32 {
        self.charge[pc]
    }

    /// Per-slot charges (see [`Cfg::charge`]), for the engines' hot paths.
    #[must_use]
    pub(crate) fn charges(&self) -> &[u32] {
        &self.charge
    }

    /// Does a basic block start at `pc`?
    #[must_use]
    pub fn is_block_start(&self, pc: usize) -> bool {
        self.leader[pc]
    }

    /// Where control may go after the instruction at `pc` within its function (a call's
    /// successor is the slot after it; `exit` has none).
    #[must_use]
    pub fn successors(&self, insns: &[Insn], pc: usize) -> [Option<usize>; 2] {
        let i = insns[pc];
        if i.op == BPF_JMP | BPF_EXIT {
            return [None, None];
        }
        if let Some(rel) = jump_rel(i) {
            let t = rel_target(insns, pc, rel);
            let fall = (i.op & 0xf0 != BPF_JA).then_some(pc + 1);
            return [t, fall];
        }
        [Some(pc + if i.is_lddw() { 2 } else { 1 }), None]
    }
}

/// Jumps, calls and `exit`: the instructions that end a basic block.
fn is_jump_class(i: Insn) -> bool {
    i.class() == BPF_JMP || i.class() == BPF_JMP32
}

/// Marks the second slot of every `lddw` and checks the pairs.
///
/// # Errors
/// A truncated or malformed pair.
pub(crate) fn lddw_halves(insns: &[Insn]) -> Result<Vec<bool>, VerifyError> {
    let mut second = vec![false; insns.len()];
    let mut pc = 0;
    while pc < insns.len() {
        if insns[pc].is_lddw() {
            let Some(hi) = insns.get(pc + 1) else {
                return err(pc, "lddw is missing its second slot");
            };
            if hi.op != 0 || hi.dst != 0 || hi.src != 0 || hi.off != 0 {
                return err(pc + 1, "malformed second slot of lddw");
            }
            second[pc + 1] = true;
            pc += 2;
        } else {
            pc += 1;
        }
    }
    Ok(second)
}

/// Target of the jump or call at `pc` with relative offset `rel`, if it is a valid slot.
#[must_use]
pub fn rel_target(insns: &[Insn], pc: usize, rel: i64) -> Option<usize> {
    let t = i64::try_from(pc).ok()? + rel + 1;
    usize::try_from(t).ok().filter(|&t| t < insns.len())
}

/// The relative offset of a (conditional or unconditional) jump; `None` for anything else.
#[must_use]
pub fn jump_rel(i: Insn) -> Option<i64> {
    let op = i.op & 0xf0;
    if !is_jump_class(i) || op == BPF_CALL || op == BPF_EXIT {
        return None;
    }
    Some(if i.class() == BPF_JMP32 && op == BPF_JA { i64::from(i.imm) } else { i64::from(i.off) })
}

/// A BPF-to-BPF call (`call` with src = 1).
#[must_use]
pub fn is_pseudo_call(i: Insn) -> bool {
    i.op == BPF_JMP | BPF_CALL && i.src == BPF_PSEUDO_CALL
}

/// Function boundaries: entry at 0 plus every BPF-to-BPF call target; sorted start slots.
fn functions(insns: &[Insn], second: &[bool]) -> Result<Vec<usize>, VerifyError> {
    let mut starts = vec![0];
    for (pc, i) in insns.iter().enumerate() {
        if second[pc] || !is_pseudo_call(*i) {
            continue;
        }
        let Some(t) = rel_target(insns, pc, i64::from(i.imm)) else {
            return err(pc, "call target is outside the program");
        };
        if second[t] {
            return err(pc, format!("call into the middle of lddw at #{}", t - 1));
        }
        starts.push(t);
    }
    starts.sort_unstable();
    starts.dedup();
    Ok(starts)
}

/// Jumps stay inside the function; the last instruction does not fall through. Marks the
/// function's block starts in `leader`.
fn check_function(
    insns: &[Insn],
    second: &[bool],
    funcs: &[usize],
    f: usize,
    leader: &mut [bool],
) -> Result<(), VerifyError> {
    let (start, end) = (funcs[f], funcs.get(f + 1).copied().unwrap_or(insns.len()));
    leader[start] = true;
    for pc in start..end {
        let i = insns[pc];
        if second[pc] {
            continue;
        }
        if is_jump_class(i) && pc + 1 < end {
            leader[pc + 1] = true;
        }
        if let Some(rel) = jump_rel(i) {
            let t = rel_target(insns, pc, rel).filter(|&t| t >= start && t < end);
            let Some(t) = t else {
                return err(
                    pc,
                    format!("jump target {} is outside the function", pc as i64 + rel + 1),
                );
            };
            if second[t] {
                return err(pc, format!("jump into the middle of lddw at #{}", t - 1));
            }
            leader[t] = true;
        }
    }
    let last = if second[end - 1] { end - 2 } else { end - 1 };
    let i = insns[last];
    let ends = i.op == BPF_JMP | BPF_EXIT || (jump_rel(i).is_some() && i.op & 0xf0 == BPF_JA);
    if !ends {
        return err(last, "falls through past the end of the function");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::{BPF_ADD, BPF_ALU64, BPF_JNE, BPF_K, BPF_MOV};

    fn ins(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { op, dst, src, off, imm }
    }

    #[test]
    fn charges_at_entries_and_loop_headers_cover_the_longest_path() {
        let p = [
            ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0), // 0: block 0..=2
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 0, 0, 0, 1), // 1
            ins(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, 3), // 2: -> 6
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 0, 0, 0, 1), // 3: block 3..=4 (after the call)
            ins(BPF_JMP | BPF_JNE | BPF_K, 0, 0, -4, 9),  // 4: -> 1
            ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),          // 5: block
            ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),          // 6: function
        ];
        let second = lddw_halves(&p).unwrap();
        let cfg = Cfg::new(&p, second).unwrap();
        let starts: Vec<usize> = (0..p.len()).filter(|&pc| cfg.is_block_start(pc)).collect();
        assert_eq!(starts, [0, 1, 3, 5, 6]);
        // Entry: just insn 0 (1 is a loop header); loop header 1: 1, 2 (call), 3, 4, 5 (exit);
        // the callee: its exit.
        assert_eq!(cfg.charges(), &[1, 5, 0, 0, 0, 0, 1]);
        assert_eq!(cfg.functions(), &[0, 6]);
        assert_eq!(cfg.successors(&p, 4), [Some(1), Some(5)]);
        assert_eq!(cfg.successors(&p, 2), [Some(3), None]);
        assert_eq!(cfg.successors(&p, 5), [None, None]);
    }
}
