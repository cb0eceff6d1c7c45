//! Narrow (32-bit) reductions in 32-bit lanes: the vector ring of the parent module with
//! each element's 64-bit register values held as two 32-bit halves in vectors of four
//! lanes (docs/design/vm.md, "Narrow vector reductions").
//!
//! Why: a narrow reduction (`x ^= rev(d[i]) + (u32)i`) computes in 32 bits; four 32-bit
//! lanes do twice the work of two 64-bit ones, and clang's code for such a body mixes
//! widths (a 64-bit byte swap and shift of a zero-extended word), which the halves model
//! exactly: each half is either known zero or in [`QUADS`] vectors of four elements each.
//!
//! The values, per element `e` (exact, 64-bit): a [`Kind::Halves`] register holds
//! `hi << 32 | lo`, an absent half being zero. What makes halves:
//! - a 32-bit load (`u32` zero-extended: high half zero; sign-extended: the high half is
//!   the low one shifted arithmetically by 31) from consecutive addresses,
//! - a 32-bit operation (add, sub, xor, or, and, neg, a move, shifts by a constant masked
//!   to 31 as the interpreter does, byte swaps) reading halves, scalars, constants or an
//!   affine value `v + e * stride`, whose low 32 bits are `low(v) + e * low(stride)` mod
//!   2^32 (a splat plus a constant vector): its result is zero-extended (no high half),
//! - a 64-bit and, or, xor, move, byte swap, or shift by a constant (masked to 63) of
//!   halves and scalars or constants (split into their halves), worked half by half,
//!   a shift moving bits between the halves; a known-zero half stays absent where the
//!   operation keeps it zero (`and` with zero, a shift past it).
//!
//! Anything else reading halves refuses the loop: 64-bit add, sub, neg (a carry crosses
//! the halves), arithmetic shifts, multiplies, divisions, shifts by a register, signed
//! moves, a 64-bit operation between halves and an affine value, 64-bit loads.
//! The accumulator and the registers holding partial values are read only by the
//! reduction's 32-bit steps (`reduce.rs`), so their low halves are all a pass keeps: the
//! accumulator vectors hold the partials' low halves, and the fold zero-extends, which is
//! what the interpreter's last 32-bit step left (the upper half the accumulator had before
//! the loop is never read: every iteration writes it with a step before anything else
//! could).

use super::super::translate::Tx;
use super::super::*;
use super::{alu_kind as wide_kind, Kind, Lanes, Quads, ELEMENTS, QUADS};
use cranelift_codegen::ir::types::{I32X4, I8X16};
use cranelift_codegen::ir::{ConstantData, Endianness};

/// A zero-extended 32-bit value per element.
pub(super) const LOW: Kind = Kind::Halves { hi: false, lo: true };

/// Which halves of an operand may be nonzero: a scalar register both, a constant
/// (sign-extended to 64 bits as eBPF's 64-bit operations do) those it has bits in.
fn operand_halves(k: Kind, imm: Option<i32>) -> Option<(bool, bool)> {
    match (k, imm) {
        (_, Some(c)) => Some((c < 0, c != 0)),
        (Kind::Halves { hi, lo }, None) => Some((hi, lo)),
        (Kind::Scalar, None) => Some((true, true)),
        _ => None,
    }
}

/// The halves a 64-bit shift by `k` (masked to 63) leaves of `(hi, lo)`.
fn shifted(left: bool, k: i32, (hi, lo): (bool, bool)) -> (bool, bool) {
    match (k & 63, left) {
        (0, _) => (hi, lo),
        (1..=31, true) => (hi || lo, lo),
        (1..=31, false) => (hi, hi || lo),
        (_, true) => (lo, false),
        (_, false) => (false, hi),
    }
}

/// The halves a byte swap (or conversion) of `(hi, lo)` leaves, if the interpreter defines it.
fn swapped(i: Insn, (hi, lo): (bool, bool)) -> Option<(bool, bool)> {
    let swap = i.class() == BPF_ALU64 || i.op & BPF_X != 0;
    if i.class() == BPF_ALU64 && i.op & BPF_X != 0 {
        return None;
    }
    match (i.imm, swap) {
        (16 | 32, _) => Some((false, lo)),
        (64, false) => Some((hi, lo)),
        (64, true) => Some((lo, hi)),
        _ => None,
    }
}

/// The kind an ALU instruction makes in a narrow reduction's pass from its destination's
/// kind `d` and its source's `s` (module documentation), `None` refusing the loop.
pub(super) fn alu_kind(i: Insn, d: Kind, s: Kind) -> Option<Kind> {
    use Kind::{Halves, Scalar, Unset, Vector};
    let o = i.op & 0xf0;
    let x = i.op & BPF_X != 0 && o != BPF_END && o != BPF_NEG;
    let s = if x { s } else { Scalar };
    let d = if o == BPF_MOV { Scalar } else { d };
    if [d, s].iter().any(|k| matches!(k, Unset | Vector)) {
        return None;
    }
    let halves = |k: Kind| matches!(k, Halves { .. });
    let wide = i.class() == BPF_ALU64;
    if (d, s) == (Scalar, Scalar) || wide && !halves(d) && !halves(s) {
        // Scalars and affine values: the 64-bit lanes' rules.
        return wide_kind(i, d, s);
    }
    if i.off != 0 {
        return None;
    }
    let (hi, lo) = if !wide {
        match o {
            BPF_ADD | BPF_SUB | BPF_XOR | BPF_OR | BPF_AND | BPF_MOV | BPF_NEG => (false, true),
            BPF_LSH | BPF_RSH if !x => (false, true),
            BPF_END if halves(d) => swapped(i, operand_halves(d, None)?)?,
            _ => return None,
        }
    } else {
        let imm = (!x).then_some(i.imm);
        let (dh, dl) = operand_halves(d, None)?;
        let (sh, sl) = operand_halves(s, imm)?;
        match o {
            BPF_MOV => (sh, sl),
            BPF_AND => (dh && sh, dl && sl),
            BPF_OR | BPF_XOR => (dh || sh, dl || sl),
            BPF_LSH | BPF_RSH if !x => shifted(o == BPF_LSH, i.imm, (dh, dl)),
            BPF_END => swapped(i, (dh, dl))?,
            _ => return None,
        }
    };
    Some(Halves { hi, lo })
}

/// Whether a load of `i` from an address of kind `a` makes halves: 32-bit words at
/// consecutive addresses.
pub(super) fn load_kind(i: Insn, a: Kind) -> Option<Kind> {
    match (i.op & 0x18, i.op & 0xe0, a) {
        (BPF_W, BPF_MEM, Kind::Affine(4)) => Some(LOW),
        (BPF_W, BPF_MEMSX, Kind::Affine(4)) => Some(Kind::Halves { hi: true, lo: true }),
        _ => None,
    }
}

impl Tx<'_, '_> {
    /// A narrow pass's load ([`load_kind`]): the pass's range checked, one vector per quad.
    pub(super) fn narrow_load(
        &mut self,
        pc: usize,
        lanes: &[Lanes; NUM_REGS],
        miss: Block,
    ) -> Result<Lanes, JitError> {
        let (addr, _) = self.pass_address(pc, lanes, miss)?;
        let f = MemFlagsData::new().with_notrap();
        let mut lo = [addr; QUADS];
        for (q, v) in lo.iter_mut().enumerate() {
            *v = self.b.ins().load(I32X4, f, addr, i32::try_from(16 * q).unwrap_or(0));
        }
        if self.insns[pc].op & 0xe0 != BPF_MEMSX {
            return Ok(Lanes::Halves(None, Some(lo)));
        }
        let k = self.b.ins().iconst(I32, 31);
        let hi = lo.map(|v| self.b.ins().sshr(v, k));
        Ok(Lanes::Halves(Some(hi), Some(lo)))
    }

    /// A narrow pass's ALU slot whose result is not a scalar ([`alu_kind`]): `kind`.
    pub(super) fn narrow_alu(
        &mut self,
        pc: usize,
        lanes: &[Lanes; NUM_REGS],
        kind: Kind,
    ) -> Result<Lanes, JitError> {
        let i = self.insns[pc];
        if let Kind::Affine(_) = kind {
            return self.vector_alu(pc, lanes);
        }
        let o = i.op & 0xf0;
        let src = (i.op & BPF_X != 0 && o != BPF_END && o != BPF_NEG).then_some(i.src);
        if o == BPF_END {
            let (hi, lo) = self.halves(lanes, Some(i.dst), 0)?;
            return Ok(self.swap_halves(i, hi, lo));
        }
        if i.class() == BPF_ALU {
            return Ok(Lanes::Halves(None, Some(self.narrow_alu32(i, lanes, src))));
        }
        if o == BPF_MOV {
            return Ok(src.map_or(Lanes::Scalar, |s| lanes[usize::from(s)]));
        }
        let (dh, dl) = self.halves(lanes, Some(i.dst), 0)?;
        if let BPF_LSH | BPF_RSH = o {
            return Ok(self.shift_halves(o == BPF_LSH, i.imm & 63, dh, dl));
        }
        let (sh, sl) = self.halves(lanes, src, i.imm)?;
        // The 64-bit operations that work half by half.
        let op = match o {
            BPF_AND | BPF_OR => o,
            _ => BPF_XOR,
        };
        Ok(Lanes::Halves(self.half_op(op, dh, sh), self.half_op(op, dl, sl)))
    }

    /// A 32-bit operation on the low halves: its result, zero-extended.
    fn narrow_alu32(&mut self, i: Insn, lanes: &[Lanes; NUM_REGS], src: Option<u8>) -> Quads {
        let o = i.op & 0xf0;
        let s = self.low_quads(lanes, src, i.imm);
        if o == BPF_MOV {
            return s;
        }
        let d = self.low_quads(lanes, Some(i.dst), 0);
        let amount = self.b.ins().iconst(I32, i64::from(i.imm & 31));
        let mut out = d;
        for q in 0..QUADS {
            out[q] = self.lane_op(o, d[q], s[q], amount);
        }
        out
    }

    /// `a op b` (`op` one of `BPF_AND`, `BPF_OR`, `BPF_XOR`) half by half, an absent half
    /// being zero.
    fn half_op(&mut self, op: u8, a: Option<Quads>, b: Option<Quads>) -> Option<Quads> {
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (None, _) | (_, None) if op == BPF_AND => return None,
            (x, None) | (None, x) => return x,
        };
        let mut out = a;
        for q in 0..QUADS {
            out[q] = self.combine(op, a[q], b[q]);
        }
        Some(out)
    }

    /// Each quad shifted by `k` (0..32), `left` or right (logical).
    fn shift_quads(&mut self, left: bool, k: i32, v: Option<Quads>) -> Option<Quads> {
        let v = v?;
        if k == 0 {
            return Some(v);
        }
        let k = self.b.ins().iconst(I32, i64::from(k));
        Some(v.map(|x| if left { self.b.ins().ishl(x, k) } else { self.b.ins().ushr(x, k) }))
    }

    /// A 64-bit logical shift by `k` (0..64) of `hi << 32 | lo`, half by half ([`shifted`]).
    fn shift_halves(&mut self, left: bool, k: i32, hi: Option<Quads>, lo: Option<Quads>) -> Lanes {
        let (from, into) = if left { (lo, hi) } else { (hi, lo) };
        let (to, rest) = match k {
            0 => (into, from),
            1..=31 => {
                let kept = self.shift_quads(left, k, into);
                let carried = self.shift_quads(!left, 32 - k, from);
                let moved = self.shift_quads(left, k, from);
                (self.half_op(BPF_OR, kept, carried), moved)
            }
            _ => (self.shift_quads(left, k - 32, from), None),
        };
        // `to` is the half the bits move towards, `rest` the one they leave.
        if left {
            Lanes::Halves(to, rest)
        } else {
            Lanes::Halves(rest, to)
        }
    }

    /// A byte swap or conversion (the interpreter's `end`) of `hi << 32 | lo`.
    fn swap_halves(&mut self, i: Insn, hi: Option<Quads>, lo: Option<Quads>) -> Lanes {
        let swap = i.class() == BPF_ALU64 || i.op & BPF_X != 0;
        match (i.imm, swap) {
            (16, false) => {
                let mask = self.splat_quads(0xffff);
                Lanes::Halves(None, self.half_op(BPF_AND, lo, Some(mask)))
            }
            (16, true) => {
                let s = lo.map(|q| self.bswap_quads(q));
                Lanes::Halves(None, self.shift_quads(false, 16, s))
            }
            (32, false) => Lanes::Halves(None, lo),
            (32, true) => Lanes::Halves(None, lo.map(|q| self.bswap_quads(q))),
            (64, false) => Lanes::Halves(hi, lo),
            _ => Lanes::Halves(lo.map(|q| self.bswap_quads(q)), hi.map(|q| self.bswap_quads(q))),
        }
    }

    /// Every 32-bit lane byte-swapped: one byte shuffle per quad.
    fn bswap_quads(&mut self, v: Quads) -> Quads {
        let mask = ConstantData::from((0..16u8).map(|b| b & !3 | (3 - b % 4)).collect::<Vec<_>>());
        // One immediate for every swap, so that swaps of the same quad are one instruction
        // (a 64-bit swap of a zero-extended word and a 32-bit one of it: bitrev32).
        let imms = &mut self.b.func.dfg.immediates;
        let mask = match imms.iter().find(|(_, d)| **d == mask) {
            Some((k, _)) => k,
            None => imms.push(mask),
        };
        let le = MemFlagsData::new().with_endianness(Endianness::Little);
        v.map(|q| {
            let bytes = self.b.ins().bitcast(I8X16, le, q);
            let s = self.b.ins().shuffle(bytes, bytes, mask);
            self.b.ins().bitcast(I32X4, le, s)
        })
    }

    /// The constant `c` in every lane.
    fn splat_quads(&mut self, c: u32) -> Quads {
        let c = self.b.ins().iconst(I32, i64::from(c));
        [self.b.ins().splat(I32X4, c); QUADS]
    }

    /// Operand `r`'s halves (`imm` sign-extended when `None`), an absent half being zero.
    fn halves(
        &mut self,
        lanes: &[Lanes; NUM_REGS],
        r: Option<u8>,
        imm: i32,
    ) -> Result<(Option<Quads>, Option<Quads>), JitError> {
        let Some(r) = r else {
            let hi = (imm < 0).then(|| self.splat_quads(u32::MAX));
            let lo = (imm != 0).then(|| self.splat_quads(imm.cast_unsigned()));
            return Ok((hi, lo));
        };
        Ok(match lanes[usize::from(r)] {
            Lanes::Halves(hi, lo) => (hi, lo),
            Lanes::Scalar => {
                let v = self.b.use_var(self.regs[usize::from(r)]);
                let h = self.b.ins().ushr_imm_u(v, 32);
                let h = self.b.ins().ireduce(I32, h);
                let l = self.b.ins().ireduce(I32, v);
                let (h, l) = (self.b.ins().splat(I32X4, h), self.b.ins().splat(I32X4, l));
                (Some([h; QUADS]), Some([l; QUADS]))
            }
            _ => return Err(invalid(0, "64-bit halves of an affine or unset register")),
        })
    }

    /// Operand `r`'s low 32 bits per element (`imm` when `None`).
    fn low_quads(&mut self, lanes: &[Lanes; NUM_REGS], r: Option<u8>, imm: i32) -> Quads {
        let Some(r) = r else { return self.splat_quads(imm.cast_unsigned()) };
        match lanes[usize::from(r)] {
            Lanes::Halves(_, Some(lo)) => lo,
            Lanes::Halves(_, None) => self.splat_quads(0),
            Lanes::Affine(v, stride) => self.iota_quads(v, stride),
            _ => {
                let v = self.b.use_var(self.regs[usize::from(r)]);
                let l = self.b.ins().ireduce(I32, v);
                [self.b.ins().splat(I32X4, l); QUADS]
            }
        }
    }

    /// The low 32 bits of `v + e * stride` for element `e`: `low(v)` in every lane plus a
    /// constant `low(e * stride)` per lane, wrapping as the scalar code's 64-bit sum does
    /// in its low half.
    fn iota_quads(&mut self, v: Value, stride: i64) -> Quads {
        let base = self.b.ins().ireduce(I32, v);
        let base = self.b.ins().splat(I32X4, base);
        let mut out = [base; QUADS];
        for (q, o) in out.iter_mut().enumerate() {
            let bytes: Vec<u8> = (0..4)
                .flat_map(|j| {
                    let e = (4 * q + j) as i64;
                    (e.wrapping_mul(stride) as u32).to_le_bytes()
                })
                .collect();
            let k = self.b.func.dfg.constants.insert(ConstantData::from(bytes));
            let c = self.b.ins().vconst(I32X4, k);
            *o = self.b.ins().iadd(base, c);
        }
        debug_assert_eq!(out.len() * 4, ELEMENTS);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::BPF_K;

    fn op(class: u8, o: u8, x: bool, imm: i32) -> Insn {
        Insn { op: class | o | if x { BPF_X } else { BPF_K }, dst: 0, src: 1, off: 0, imm }
    }

    #[test]
    fn halves_follow_the_operations() {
        use Kind::{Affine, Halves, Scalar, Unset, Vector};
        let h = |hi, lo| Halves { hi, lo };
        // 32-bit operations zero-extend, whatever they read; shifts only by a constant.
        for o in [BPF_ADD, BPF_SUB, BPF_XOR, BPF_OR, BPF_AND, BPF_MOV] {
            assert_eq!(alu_kind(op(BPF_ALU, o, true, 0), h(true, true), Affine(1)), Some(LOW));
        }
        assert_eq!(alu_kind(op(BPF_ALU, BPF_LSH, false, 40), h(true, false), Scalar), Some(LOW));
        assert_eq!(alu_kind(op(BPF_ALU, BPF_NEG, false, 0), LOW, Scalar), Some(LOW));
        // A 64-bit byte swap of a zero-extended word leaves its bits in the high half; a
        // shift right by 32 or more brings them back.
        let be64 = op(BPF_ALU, BPF_END, true, 64);
        assert_eq!(alu_kind(be64, LOW, Scalar), Some(h(true, false)));
        let rsh = |k| op(BPF_ALU64, BPF_RSH, false, k);
        assert_eq!(alu_kind(rsh(36), h(true, false), Scalar), Some(LOW));
        assert_eq!(alu_kind(rsh(4), h(true, false), Scalar), Some(h(true, true)));
        assert_eq!(alu_kind(rsh(64), LOW, Scalar), Some(LOW));
        assert_eq!(alu_kind(op(BPF_ALU64, BPF_LSH, false, 32), LOW, Scalar), Some(h(true, false)));
        // 64-bit logic: a constant's zero half clears (and) or keeps (or, xor) a half.
        assert_eq!(alu_kind(op(BPF_ALU64, BPF_AND, false, 0xff), h(true, true), Scalar), Some(LOW));
        assert_eq!(alu_kind(op(BPF_ALU64, BPF_OR, false, -1), LOW, Scalar), Some(h(true, true)));
        assert_eq!(alu_kind(op(BPF_ALU64, BPF_XOR, true, 0), LOW, Scalar), Some(h(true, true)));
        assert_eq!(
            alu_kind(op(BPF_ALU64, BPF_AND, true, 0), LOW, h(true, false)),
            Some(h(false, false))
        );
        // Refused: carries across the halves, signed or multiplying operations, shifts by a
        // register, signed moves, 64-bit operations between halves and affine values.
        for (class, o, x) in [
            (BPF_ALU64, BPF_ADD, true),
            (BPF_ALU64, BPF_SUB, false),
            (BPF_ALU64, BPF_NEG, false),
            (BPF_ALU64, BPF_MUL, false),
            (BPF_ALU, BPF_MUL, false),
            (BPF_ALU, BPF_DIV, false),
            (BPF_ALU, BPF_MOD, true),
            (BPF_ALU, BPF_ARSH, false),
            (BPF_ALU64, BPF_ARSH, false),
            (BPF_ALU, BPF_LSH, true),
            (BPF_ALU64, BPF_RSH, true),
        ] {
            assert_eq!(alu_kind(op(class, o, x, 3), LOW, Scalar), None, "{class:#x} {o:#x}");
        }
        let movsx = Insn { off: 8, ..op(BPF_ALU, BPF_MOV, true, 0) };
        assert_eq!(alu_kind(movsx, Scalar, LOW), None);
        assert_eq!(alu_kind(op(BPF_ALU64, BPF_XOR, true, 0), LOW, Affine(4)), None);
        assert_eq!(alu_kind(op(BPF_ALU, BPF_END, true, 32), Affine(4), Scalar), None);
        assert_eq!(alu_kind(op(BPF_ALU, BPF_ADD, true, 0), LOW, Unset), None);
        assert_eq!(alu_kind(op(BPF_ALU, BPF_ADD, true, 0), Vector, Scalar), None);
        // Scalars stay the scalar code, whatever the operation; affine values keep the
        // 64-bit lanes' rules.
        assert_eq!(alu_kind(op(BPF_ALU, BPF_MUL, false, 3), Scalar, Scalar), Some(Scalar));
        assert_eq!(alu_kind(op(BPF_ALU64, BPF_LSH, false, 2), Affine(1), Scalar), Some(Affine(4)));
        // Loads: u32 words at consecutive addresses only.
        let load = |size: u8, mode: u8| Insn { op: BPF_LDX | mode | size, ..op(0, 0, false, 0) };
        assert_eq!(load_kind(load(BPF_W, BPF_MEM), Affine(4)), Some(LOW));
        assert_eq!(load_kind(load(BPF_W, BPF_MEMSX), Affine(4)), Some(h(true, true)));
        assert_eq!(load_kind(load(BPF_W, BPF_MEM), Affine(8)), None);
        assert_eq!(load_kind(load(BPF_DW, BPF_MEM), Affine(8)), None);
        assert_eq!(load_kind(load(BPF_B, BPF_MEM), Affine(1)), None);
    }
}
