//! BPF stack slots kept in SSA variables. clang spills under register pressure (matmul's
//! inner loop reloads eight row values and its counters from `r10 - 8 .. - 88`); a load of a
//! spilled value is then a register read instead of a trip through memory.
//!
//! A slot `(off, len)` of a function's frame is *promoted* when every access of that
//! function touching one of its bytes is a plain (`BPF_MEM`, not sign-extending, not atomic)
//! load or store `r10 + off` of exactly `len` bytes, some load of it is inside a loop (see
//! [`plan`]), and no function of the program lets r10 escape: r10 appears only as the base
//! of a fixed-offset load, store or atomic (never copied, added, compared or stored), so no
//! pointer into any frame exists except r10 itself.
//!
//! What the translation keeps true, so a promoted load returns exactly what the interpreter's
//! load returns (the slot's bytes in memory, zero-extended):
//! - the variable is loaded from memory when the function (or an inlined callee) starts, so a
//!   slot read before this call writes it reads what memory holds (the stack is not zeroed per
//!   call: an earlier call's bytes, as on the interpreter);
//! - stores still go to memory too (write-through): memory is always the interpreter's, at a
//!   fault and after the run, and the variable holds the stored value truncated to `len`;
//! - whatever else may write the frame makes the variables be loaded again: a store or atomic
//!   whose check was not elided (its address is whatever the program computed: it may land in
//!   the stack region, which both region sets grant), and any call (a helper may write memory,
//!   a callee may make such stores). A store proved in bounds that is not an `r10 + off`
//!   access is proved against the context, data or scratch (a stack pointer is a copy of r10,
//!   which no function has), so it cannot reach a frame, and the other `r10 + off` accesses
//!   of the function touch no byte of a promoted slot (the condition above). Callees' own
//!   `r10 + off` accesses stay in their own frames (the verifier bounds them to 512 bytes).
//!
//! Promoted accesses are `r10 + off` accesses, which the verifier proved inside the frame:
//! they never fault, so no check and no fault is lost.

use super::translate::Tx;
use super::*;

/// Cap on (promoted slots of a function) x (places that load them again), so a program of
/// many calls or checked stores cannot make compilation slow by asking for many reloads: a
/// function past it keeps its slots in memory.
const MAX_SLOT_RELOADS: usize = 2048;

/// Which stack accesses use promoted slots.
pub(super) struct SlotPlan {
    /// Per slot of the program: a load or store of a promoted stack slot.
    pub(super) at: Vec<bool>,
    /// Per function (start, its promoted slots `(off, len)` sorted by offset); functions
    /// without any are left out.
    pub(super) slots: Vec<(usize, Vec<(i16, u8)>)>,
}

impl SlotPlan {
    /// The promoted slots of the function starting at `start`.
    pub(super) fn of(&self, start: usize) -> &[(i16, u8)] {
        self.slots.iter().find(|(s, _)| *s == start).map_or(&[], |(_, v)| v)
    }
}

/// How an instruction uses r10.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FrameUse {
    None,
    /// `r10 + off`, `len` bytes; `plain`: a `BPF_MEM` load or store (may be promoted).
    Access {
        off: i16,
        len: u8,
        plain: bool,
    },
    /// r10 used otherwise (copied, added, compared, stored): a frame pointer may escape.
    Escape,
}

fn frame_use(i: Insn) -> FrameUse {
    let len = match i.op & 0x18 {
        BPF_B => 1,
        BPF_H => 2,
        BPF_W => 4,
        _ => 8,
    };
    let mode = i.op & 0xe0;
    match i.class() {
        BPF_LDX if i.src == FRAME_REG => {
            FrameUse::Access { off: i.off, len, plain: mode == BPF_MEM }
        }
        BPF_STX if i.src == FRAME_REG => FrameUse::Escape,
        BPF_ST | BPF_STX if i.dst == FRAME_REG => {
            FrameUse::Access { off: i.off, len, plain: mode == BPF_MEM }
        }
        BPF_ALU | BPF_ALU64 | BPF_JMP | BPF_JMP32
            if (i.op & BPF_X != 0 && i.src == FRAME_REG) || i.dst == FRAME_REG =>
        {
            FrameUse::Escape
        }
        BPF_LD | BPF_LDX if i.dst == FRAME_REG => FrameUse::Escape,
        _ => FrameUse::None,
    }
}

/// Whether the instruction at `pc` may write memory other than through `r10 + off` or a
/// proved store (a checked store or atomic, a call): promoted slots are loaded again after it.
pub(super) fn may_write_frames(i: Insn, in_bounds: bool) -> bool {
    match i.class() {
        BPF_ST | BPF_STX => !in_bounds && i.dst != FRAME_REG,
        BPF_JMP => i.op & 0xf0 == BPF_CALL,
        _ => false,
    }
}

/// Finds the promoted slots of every function (none when some function lets r10 escape).
/// Only slots loaded inside a loop (`in_loop`, per slot of the program) are worth it: a
/// variable is live from its store to its last load, and one that lives across a hot loop
/// it is not used in takes a register there (grep's result pointer, stored before its scan
/// and loaded after it, made the scan spill: 1,280 -> 1,850 ns per call).
pub(super) fn plan(verified: &VerifiedProgram, in_loop: &[bool]) -> SlotPlan {
    let (insns, cfg) = (&verified.insns, verified.cfg());
    let mut plan = SlotPlan { at: vec![false; insns.len()], slots: Vec::new() };
    let live = |pc: &usize| !cfg.is_second_half(*pc);
    if (0..insns.len()).filter(live).any(|pc| frame_use(insns[pc]) == FrameUse::Escape) {
        return plan;
    }
    for f in 0..cfg.functions().len() {
        let (start, end) = cfg.func_range(f);
        let mut slots = promotable(&insns[start..end], |pc| live(&(start + pc)));
        let mut in_loops: Vec<(i16, u8)> = (start..end)
            .filter(|&pc| live(&pc) && in_loop[pc] && insns[pc].class() == BPF_LDX)
            .filter_map(|pc| match frame_use(insns[pc]) {
                FrameUse::Access { off, len, plain: true } => Some((off, len)),
                _ => None,
            })
            .collect();
        in_loops.sort_unstable();
        slots.retain(|s| in_loops.binary_search(s).is_ok());
        let reloads = (start..end)
            .filter(|&pc| live(&pc) && may_write_frames(insns[pc], verified.in_bounds()[pc]));
        // Each reload site, and the function's start, loads every slot.
        if slots.is_empty() || slots.len() * (reloads.count() + 1) > MAX_SLOT_RELOADS {
            continue;
        }
        for pc in (start..end).filter(live) {
            if let FrameUse::Access { off, len, .. } = frame_use(insns[pc]) {
                plan.at[pc] = slots.binary_search(&(off, len)).is_ok();
            }
        }
        plan.slots.push((start, slots));
    }
    plan
}

/// The slots `(off, len)` of one function's frame that every access touching them uses
/// plainly and at exactly that offset and length.
fn promotable(insns: &[Insn], live: impl Fn(usize) -> bool) -> Vec<(i16, u8)> {
    const FRAME: usize = STACK_FRAME_BYTES;
    let mut owner: Vec<Option<(i16, u8)>> = vec![None; FRAME];
    let mut bad = vec![false; FRAME];
    let mut seen = Vec::new();
    for (_, &i) in insns.iter().enumerate().filter(|&(pc, _)| live(pc)) {
        let FrameUse::Access { off, len, plain, .. } = frame_use(i) else { continue };
        // The verifier keeps r10 accesses inside the frame; anything else is left alone.
        let Some(lo) = usize::try_from(i64::from(off) + FRAME as i64).ok() else { continue };
        let hi = lo + usize::from(len);
        if hi > FRAME {
            continue;
        }
        for b in lo..hi {
            if !plain || owner[b].is_some_and(|o| o != (off, len)) {
                bad[b] = true;
            }
            owner[b] = Some((off, len));
        }
        if plain {
            seen.push((off, len));
        }
    }
    seen.sort_unstable();
    seen.dedup();
    seen.retain(|&(off, len)| {
        let lo = (i64::from(off) + FRAME as i64) as usize;
        !bad[lo..lo + usize::from(len)].iter().any(|&x| x)
    });
    seen
}

impl Tx<'_, '_> {
    /// Declares this function's (or inlined callee's) promoted slots and loads them from the
    /// frame at `r10` ([`plan`]); returns the variables to use while its slots are translated.
    pub(super) fn start_slots(&mut self, start: usize) -> Vec<(i16, u8, Variable)> {
        let slots: Vec<(i16, u8, Variable)> = self
            .slot_plan
            .of(start)
            .iter()
            .map(|&(off, len)| (off, len, self.b.declare_var(I64)))
            .collect();
        let saved = std::mem::replace(&mut self.slot_vars, slots);
        self.reload_slots();
        saved
    }

    /// Loads every promoted slot of the current frame from memory (at its start, and after
    /// anything that may have written the frame behind the variables' back).
    pub(super) fn reload_slots(&mut self) {
        if self.slot_vars.is_empty() {
            return;
        }
        let fp = self.b.use_var(self.regs[usize::from(FRAME_REG)]);
        let f = MemFlagsData::new().with_notrap();
        for k in 0..self.slot_vars.len() {
            let (off, len, var) = self.slot_vars[k];
            let off = i32::from(off);
            let ins = self.b.ins();
            let v = match len {
                1 => ins.uload8(I64, f, fp, off),
                2 => ins.uload16(I64, f, fp, off),
                4 => ins.uload32(f, fp, off),
                _ => ins.load(I64, f, fp, off),
            };
            self.b.def_var(var, v);
        }
    }

    fn slot_var(&self, pc: usize, off: i16) -> Result<(u8, Variable), JitError> {
        self.slot_vars
            .iter()
            .find(|s| s.0 == off)
            .map(|&(_, len, v)| (len, v))
            .ok_or_else(|| invalid(pc, "promoted stack slot without a variable"))
    }

    /// A load of a promoted slot: the variable (already zero-extended from the slot's size).
    pub(super) fn slot_load(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let (_, var) = self.slot_var(pc, insn.off)?;
        let v = self.b.use_var(var);
        self.set_reg(pc, insn.dst, v)
    }

    /// A store to a promoted slot: the variable takes the value truncated to the slot's size
    /// (what a load of it returns), and memory is written as before (write-through).
    pub(super) fn slot_store(&mut self, pc: usize, insn: Insn, v: Value) -> Result<(), JitError> {
        let (len, var) = self.slot_var(pc, insn.off)?;
        let kept = match len {
            8 => v,
            n => self.b.ins().band_imm_u(v, (1i64 << (8 * u32::from(n))) - 1),
        };
        self.b.def_var(var, kept);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::ins;

    fn stx(len: u8, off: i16) -> Insn {
        ins(BPF_STX | BPF_MEM | len, FRAME_REG, 1, off, 0)
    }
    fn ldx(len: u8, off: i16) -> Insn {
        ins(BPF_LDX | BPF_MEM | len, 2, FRAME_REG, off, 0)
    }

    #[test]
    fn only_slots_every_access_uses_alike_are_promoted() {
        let prog = [
            stx(BPF_DW, -8),
            ldx(BPF_DW, -8),
            stx(BPF_DW, -16),
            ldx(BPF_W, -16), // same start, other size: -16 stays in memory
            stx(BPF_W, -20),
            ldx(BPF_W, -20),
            stx(BPF_DW, -32),
            ldx(BPF_W, -28), // overlaps -32's upper half
            ins(BPF_LDX | BPF_MEMSX | BPF_W, 2, FRAME_REG, -40, 0), // sign-extending
            stx(BPF_W, -40),
            ins(BPF_STX | BPF_ATOMIC | BPF_DW, FRAME_REG, 1, -48, 0), // atomic
            ldx(BPF_DW, -48),
            ins(BPF_ST | BPF_MEM | BPF_B, FRAME_REG, 0, -49, 7),
            ldx(BPF_B, -49),
        ];
        assert_eq!(promotable(&prog, |_| true), vec![(-49, 1), (-20, 4), (-8, 8)]);
    }

    #[test]
    fn an_escaping_frame_pointer_is_seen_in_every_use() {
        let mov = ins(BPF_ALU64 | BPF_MOV | BPF_X, 1, FRAME_REG, 0, 0);
        let add = ins(BPF_ALU64 | BPF_ADD | BPF_X, 1, FRAME_REG, 0, 0);
        let cmp = ins(BPF_JMP | BPF_JGT | BPF_X, 1, FRAME_REG, 0, 0);
        let st = ins(BPF_STX | BPF_MEM | BPF_DW, 1, FRAME_REG, 0, 0);
        for i in [mov, add, cmp, st] {
            assert_eq!(frame_use(i), FrameUse::Escape, "{i:?}");
        }
        assert_eq!(frame_use(ins(BPF_ALU64 | BPF_ADD, 1, 0, 0, 10)), FrameUse::None);
        assert_eq!(frame_use(stx(BPF_H, -2)), FrameUse::Access { off: -2, len: 2, plain: true });
    }
}
