//! Read-modify-write triples: `rX = *(uN *)(rA + off); rX op= s; *(uN *)(rA + off) = rX`
//! (a counter bump like histogram's `h[d[i] >> 4]++`) emitted so that Cranelift can lower
//! them to one x86 instruction on memory (`add $1, (mem)`) when `rX` is dead after the store
//! (docs/design/vm.md, "Read-modify-write triples").
//!
//! Why this is exact: the three slots sit in one block (no jump lands on the second or the
//! third, neither is a charge point), so they always run together and in order. The load's
//! region check (if not proved) runs first and faults at the load's slot; the store's runs
//! next, before any memory is touched, and faults at the store's slot: between them only
//! register arithmetic, which nothing observes once a run faults. Then one load, the operation
//! at the width of the access (a 32-bit access takes a 32-bit ALU op, whose result the BPF
//! register holds zero-extended, as the interpreter leaves it; a 64-bit one a 64-bit op), and
//! one store of the result to the same address: the values the interpreter reads and writes.
//! `rX` is defined as that result. Only the Cranelift types change (`load.i32`/`iadd.i32`/
//! `store.i32` instead of `uload32`/`ireduce`/`istore32`), which Cranelift's x64 backend
//! matches; when `rX` is live after the store it computes the same thing in registers.

use super::memcheck::Access;
use super::translate::{Flow, Tx};
use super::*;
use cranelift_codegen::ir::{InstructionData, Opcode, ValueDef};

/// A triple at some slot `pc` ([`Tx::rmw_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rmw {
    /// Bytes accessed: 4 (32-bit op) or 8 (64-bit op).
    len: u64,
    /// The BPF ALU operation (`BPF_ADD`, ...).
    op: u8,
    /// `Ok(register)` or `Err(immediate)`.
    src: Result<u8, i32>,
}

/// The triple starting at `pc` of `insns`, judged on the instructions alone: a load
/// `rX = *(uN *)(rA + off)` (N 32 or 64, `X != A`), an ALU op on `rX` of the access's width
/// (`+ - & | ^`, an immediate or a register other than `rX`), a store `*(uN *)(rA + off) = rX`.
pub(super) fn triple(insns: &[Insn], pc: usize) -> Option<Rmw> {
    let [ld, alu, st] = *insns.get(pc..pc + 3)? else { return None };
    let len = match ld.op {
        o if o == BPF_LDX | BPF_MEM | BPF_W => 4,
        o if o == BPF_LDX | BPF_MEM | BPF_DW => 8,
        _ => return None,
    };
    let (x, a) = (ld.dst, ld.src);
    let store_ok = st.op == BPF_STX | BPF_MEM | (ld.op & 0x18)
        && (st.dst, st.src, st.off) == (a, x, ld.off)
        && x != a;
    let class = if len == 4 { BPF_ALU } else { BPF_ALU64 };
    let op = alu.op & 0xf0;
    let alu_ok = alu.class() == class
        && alu.dst == x
        && alu.off == 0
        && matches!(op, BPF_ADD | BPF_SUB | BPF_AND | BPF_OR | BPF_XOR);
    let src = if alu.op & BPF_X != 0 { Ok(alu.src) } else { Err(alu.imm) };
    (store_ok && alu_ok && src != Ok(x)).then_some(Rmw { len, op, src })
}

impl Tx<'_, '_> {
    /// The triple at `pc` that is emitted fused ([`triple`]): its three slots in this
    /// function and in one block (no jump lands on the second or third, no charge there), the
    /// load neither checked out of line nor on a stack slot kept in a variable
    /// ([`super::slots`]), nor the store.
    pub(super) fn rmw_at(&self, pc: usize) -> Option<Rmw> {
        if pc + 2 >= self.func_range.1 || self.out_of_line[pc] {
            return None;
        }
        let inner = [pc + 1, pc + 2];
        let joined = inner
            .iter()
            .all(|&p| !self.is_target[p] && !self.cfg.is_block_start(p) && self.block(p).is_none());
        let plain = !self.slot_plan.at[pc] && !self.slot_plan.at[pc + 2];
        let free = inner.iter().all(|&p| self.charges[p] == 0);
        if !(joined && plain && free) {
            return None;
        }
        triple(self.insns, pc)
    }

    /// Translates slot `pc`, or the fused triple starting there ([`Tx::rmw_at`]).
    pub(super) fn insn_or_rmw(&mut self, pc: usize) -> Result<Flow, JitError> {
        match self.rmw_at(pc) {
            Some(r) => self.rmw(pc, r).map(|()| Flow::SkipTo(pc + 3)),
            None => self.insn(pc),
        }
    }

    /// Emits the triple `r` at `pc` (module documentation); the next slot to translate is
    /// `pc + 3`.
    pub(super) fn rmw(&mut self, pc: usize, r: Rmw) -> Result<(), JitError> {
        let ld = self.insns[pc];
        // A store follows: the fault test of an earlier out-of-line check, and no byte facts
        // across it (as `Tx::insn` does before any store).
        self.flush_pending();
        self.bytes.clear();
        let ty = if r.len == 4 { I32 } else { I64 };
        let src = match r.src {
            Ok(s) => {
                let v = self.reg(pc + 1, s)?;
                if r.len == 4 {
                    self.b.ins().ireduce(I32, v)
                } else {
                    v
                }
            }
            Err(k) if r.len == 4 => self.b.ins().iconst(I32, i64::from(k.cast_unsigned())),
            Err(k) => self.iconst(i64::from(k)),
        };
        let addr = self.addr(pc, ld.src, ld.off)?;
        self.check_unless_proved(pc, addr, r.len, Access::Read);
        self.check_unless_proved(pc + 2, addr, r.len, Access::Write);
        let f = MemFlagsData::new().with_notrap();
        let (addr, disp) = self.displaced(addr);
        let old = self.b.ins().load(ty, f, addr, disp);
        let new = self.combine(r.op, old, src);
        self.b.ins().store(f, new, addr, disp);
        let x = if r.len == 4 { self.b.ins().uextend(I64, new) } else { new };
        self.set_reg(pc + 1, ld.dst, x)?;
        if super::slots::may_write_frames(self.insns[pc + 2], self.in_bounds[pc + 2]) {
            self.reload_slots();
        }
        self.counts.rmw_triples += 1;
        Ok(())
    }
}

impl Tx<'_, '_> {
    /// `addr` as `(base, k)` with `base + k == addr`, the constant moved out of one level of
    /// adds (`(r + k) + q` as `r + q` and `k`; `r + k` as `r` and `k`): the load and the store
    /// then carry `k` as their displacement, and Cranelift's backend, which builds the
    /// address mode twice for a folded load (once for the load it then drops), does not leave
    /// `r + k` computed into a register for nothing each time.
    fn displaced(&mut self, addr: Value) -> (Value, i32) {
        let dfg = &self.b.func.dfg;
        let konst = |v: Value| match dfg.value_def(dfg.resolve_aliases(v)) {
            ValueDef::Result(i, _) => match dfg.insts[i] {
                InstructionData::UnaryImm { opcode: Opcode::Iconst, imm } => {
                    i32::try_from(imm.bits()).ok()
                }
                _ => None,
            },
            ValueDef::Param(..) | ValueDef::Union(..) => None,
        };
        let add = |v: Value| match dfg.value_def(dfg.resolve_aliases(v)) {
            ValueDef::Result(i, _) => match dfg.insts[i] {
                InstructionData::Binary { opcode: Opcode::Iadd, args } => Some(args),
                _ => None,
            },
            ValueDef::Param(..) | ValueDef::Union(..) => None,
        };
        let Some([p, q]) = add(addr) else { return (addr, 0) };
        if let Some(k) = konst(q) {
            return (p, k);
        }
        let split = |v: Value| add(v).and_then(|[r, c]| Some((r, konst(c)?)));
        match (split(p), split(q)) {
            (Some((r, k)), _) => {
                let base = self.b.ins().iadd(r, q);
                (base, k)
            }
            (None, Some((r, k))) => {
                let base = self.b.ins().iadd(p, r);
                (base, k)
            }
            (None, None) => (addr, 0),
        }
    }
}

#[cfg(test)]
mod tests;
