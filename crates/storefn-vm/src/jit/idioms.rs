//! Bit-trick idioms found in a function's Cranelift IR once it is built, replaced by the
//! one instruction that computes the same value, or a cheaper form of it
//! (docs/design/vm.md, "Idioms").
//!
//! The SWAR population count (`x - ((x >> 1) & m1)`, `(x & m2) + ((x >> 2) & m2)`,
//! `(x + (x >> 4)) & m4`, `(x * h01) >> 56`, at 64 bits, or at 32 bits with `>> 24`) is
//! exactly the number of set bits of `x` for every `x`: its last shift is replaced by
//! `popcnt x`, a single instruction where the host has it (Cranelift's x64 lowering of
//! `popcnt` is itself a SWAR sequence where it has not). Only the value of that last shift
//! changes (to the same number), so the intermediate values, where something else reads
//! them, are still computed as before; where nothing does, Cranelift drops them. The match
//! is on the values, whatever registers the program kept them in, and needs every constant
//! and shift exact.

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::{DataFlowGraph, Function, InstructionData, Opcode};

use super::*;

/// The canonical SWAR masks at 64 bits (their low halves at 32).
const M1: u64 = 0x5555_5555_5555_5555;
const M2: u64 = 0x3333_3333_3333_3333;
const M4: u64 = 0x0f0f_0f0f_0f0f_0f0f;
const H01: u64 = 0x0101_0101_0101_0101;

/// Replaces every SWAR population count in `ctx`'s function by `popcnt`; returns how many.
/// Loop-invariant constants reach a loop's blocks as block parameters until Cranelift
/// removes the constant ones, which it does first thing when it compiles; this runs that
/// pass early, only for a function that has the sequence's last constant at all.
pub(super) fn popcounts(
    ctx: &mut cranelift_codegen::Context,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
) -> Result<usize, JitError> {
    let func = &ctx.func;
    let insts = || func.layout.blocks().flat_map(|b| func.layout.block_insts(b));
    let has_h01 = insts().any(|i| {
        matches!(func.dfg.insts[i], InstructionData::UnaryImm { opcode: Opcode::Iconst, imm }
            if imm.bits().cast_unsigned() & 0xffff_ffff == H01 & 0xffff_ffff)
    });
    if !has_h01 {
        return Ok(0);
    }
    ctx.compute_cfg();
    ctx.compute_domtree();
    ctx.remove_constant_phis(isa).map_err(|e| JitError::Codegen(e.to_string()))?;
    let func = &mut ctx.func;
    let mut found = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let Some(x) = Match(&func.dfg).popcount(inst) {
                found.push((inst, x));
            }
        }
    }
    for &(inst, x) in &found {
        // Same result value and type: `x` has the type of the shift it replaces.
        func.dfg.insts[inst] = InstructionData::Unary { opcode: Opcode::Popcnt, arg: x };
    }
    Ok(found.len())
}

/// Replaces `bswap.i64(x) >> k` (32 <= k < 64) where `x` is a 32-bit value widened (a 32-bit
/// load or an extension) by `uextend(bswap.i32(x32) >> (k - 32))`: the same bits (x's high
/// half is zero, so the 64-bit swap is the 32-bit one shifted up by 32), and Cranelift's
/// value numbering then shares the 32-bit swap with a `be32` of the same word (bitrev32
/// swaps one word both ways). Returns how many.
pub(super) fn narrow_swaps(func: &mut Function) -> usize {
    let mut found = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let Some(x) = Match(&func.dfg).wide_swap_of_narrow(inst) {
                found.push((inst, x));
            }
        }
    }
    for &(inst, (x, k)) in &found {
        let mut pos = FuncCursor::new(func).at_inst(inst);
        let narrow = pos.ins().ireduce(I32, x);
        let swapped = pos.ins().bswap(narrow);
        let shifted = pos.ins().ushr_imm_u(swapped, k - 32);
        // Same result value and type (i64).
        pos.func.dfg.insts[inst] = InstructionData::Unary { opcode: Opcode::Uextend, arg: shifted };
    }
    found.len()
}

/// Pattern matching over one function's values.
struct Match<'a>(&'a DataFlowGraph);

impl Match<'_> {
    /// `v`'s operands if an instruction of `op` with two operands defines it, looking
    /// through a 32-bit value widened and narrowed back (32-bit ALU operations read their
    /// operands that way).
    fn bin(&self, v: Value, op: Opcode) -> Option<[Value; 2]> {
        let inst = self.0.value_def(self.peel(v)).inst()?;
        match self.0.insts[inst] {
            InstructionData::Binary { opcode, args } if opcode == op => {
                Some(args.map(|a| self.peel(a)))
            }
            _ => None,
        }
    }

    /// `v` with aliases resolved and every `ireduce.i32(uextend.i64(w))` taken back to `w`.
    fn peel(&self, v: Value) -> Value {
        let v = self.0.resolve_aliases(v);
        let unary = |v: Value, op: Opcode| {
            let inst = self.0.value_def(v).inst()?;
            match self.0.insts[inst] {
                InstructionData::Unary { opcode, arg } if opcode == op => {
                    Some(self.0.resolve_aliases(arg))
                }
                _ => None,
            }
        };
        // A 32-bit move widens and narrows once more: as many times as there are.
        let mut v = v;
        while let Some(w) = unary(v, Opcode::Ireduce).and_then(|w| unary(w, Opcode::Uextend)) {
            if self.0.value_type(w) != self.0.value_type(v) {
                break;
            }
            v = w;
        }
        v
    }

    /// Whether `a` and `b` are the same value: equal, or the same 64-bit value narrowed (each
    /// 32-bit operation narrows its operands itself).
    fn same(&self, a: Value, b: Value) -> bool {
        let narrowed = |v: Value| match self.0.insts[self.0.value_def(v).inst()?] {
            InstructionData::Unary { opcode: Opcode::Ireduce, arg } => {
                Some((self.0.resolve_aliases(arg), self.0.value_type(v)))
            }
            _ => None,
        };
        a == b || narrowed(a).is_some_and(|n| narrowed(b) == Some(n))
    }

    /// Whether `v` is the constant `k` (at `v`'s width).
    fn is_const(&self, v: Value, k: u64) -> bool {
        let Some(inst) = self.0.value_def(self.peel(v)).inst() else { return false };
        let bits = self.0.value_type(v).bits();
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        matches!(self.0.insts[inst], InstructionData::UnaryImm { opcode: Opcode::Iconst, imm }
            if imm.bits().cast_unsigned() & mask == k & mask)
    }

    /// `op(a, k)` or, for a commutative `op`, `op(k, a)`: `a`.
    fn with_const(&self, v: Value, op: Opcode, k: u64) -> Option<Value> {
        let [a, b] = self.bin(v, op)?;
        if self.is_const(b, k) {
            Some(a)
        } else if op != Opcode::Ushr && self.is_const(a, k) {
            Some(b)
        } else {
            None
        }
    }

    /// `a op b` in either order where `first(a)` holds, returning `(first(a), b)`.
    fn either<T>(
        &self,
        v: Value,
        op: Opcode,
        first: impl Fn(Value) -> Option<T>,
    ) -> Option<(T, Value)> {
        let [a, b] = self.bin(v, op)?;
        first(a).map(|t| (t, b)).or_else(|| first(b).map(|t| (t, a)))
    }

    /// `(x, k)` if `inst` is `ushr(bswap.i64(x), k)`, `k` in 32..64, `x` zero above bit 31.
    fn wide_swap_of_narrow(&self, inst: cranelift_codegen::ir::Inst) -> Option<(Value, i64)> {
        let InstructionData::Binary { opcode: Opcode::Ushr, args: [b, k] } = self.0.insts[inst]
        else {
            return None;
        };
        let b = self.0.resolve_aliases(b);
        let k = self.0.resolve_aliases(k);
        let k = match self.0.insts[self.0.value_def(k).inst()?] {
            InstructionData::UnaryImm { opcode: Opcode::Iconst, imm } => imm.bits(),
            _ => return None,
        };
        let x = match self.0.insts[self.0.value_def(b).inst()?] {
            InstructionData::Unary { opcode: Opcode::Bswap, arg } => self.0.resolve_aliases(arg),
            _ => return None,
        };
        let widened = match self.0.insts[self.0.value_def(x).inst()?] {
            InstructionData::Load { opcode: Opcode::Uload32, .. } => true,
            InstructionData::Unary { opcode: Opcode::Uextend, arg } => {
                self.0.value_type(arg) == I32
            }
            _ => false,
        };
        let wide = self.0.value_type(b) == I64;
        (wide && widened && (32..64).contains(&k)).then_some((x, k))
    }

    /// The `x` whose population count the result of `inst` is, if it is the SWAR sequence.
    fn popcount(&self, inst: cranelift_codegen::ir::Inst) -> Option<Value> {
        let InstructionData::Binary { opcode: Opcode::Ushr, .. } = self.0.insts[inst] else {
            return None;
        };
        let out = self.0.first_result(inst);
        let ty = self.0.value_type(out);
        let top = match ty {
            I64 => 56,
            I32 => 24,
            _ => return None,
        };
        let m = self.with_const(out, Opcode::Ushr, top)?;
        let w = self.with_const(m, Opcode::Imul, H01)?;
        let s = self.with_const(w, Opcode::Band, M4)?;
        // s = y + (y >> 4)
        let (y, y2) = self.either(s, Opcode::Iadd, |a| self.with_const(a, Opcode::Ushr, 4))?;
        if !self.same(y, y2) {
            return None;
        }
        // y = (z & m2) + ((z >> 2) & m2)
        let shifted = |a| self.with_const(self.with_const(a, Opcode::Band, M2)?, Opcode::Ushr, 2);
        let (z, low) = self.either(y, Opcode::Iadd, shifted)?;
        if !self.same(self.with_const(low, Opcode::Band, M2)?, z) {
            return None;
        }
        // z = x - ((x >> 1) & m1)
        let [x, half] = self.bin(z, Opcode::Isub)?;
        let x2 = self.with_const(self.with_const(half, Opcode::Band, M1)?, Opcode::Ushr, 1)?;
        (self.same(x, x2) && self.0.value_type(x) == ty).then_some(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_popcount_is_matched_in_and_out_of_its_loop() {
        let name = "bench/popcount";
        let p = crate::load_verified(storefn_progs::must(name), None, ProgType::Xrp).unwrap();
        let jit = JitProgram::compile(&p).unwrap();
        // The argument's count, and one in each copy of the loop's body (a reduction: the
        // ring's 4 and the rolled copy), whose constants are loop-invariant registers.
        assert_eq!((jit.reduction_loops(), jit.idioms()), (1, 6));
    }
}
