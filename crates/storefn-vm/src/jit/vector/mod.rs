//! Reduction loops as vector code: the ring of [`super::reduce`] with its copies as the
//! lanes of one vector body (docs/design/vm.md, "Vector reductions").
//!
//! Why: a sum over a buffer (`for (i = 0; i < n; i++) s += d[i]`) runs one load and one add
//! per element in the scalar ring; with 64-bit lanes in 128-bit vectors, one vector load and
//! one vector add cover two elements, and the pass's one region check covers all of them.
//!
//! A pass of the vector ring runs [`ELEMENTS`] iterations of a reduction loop at once,
//! element `e` being the ring's copy `e` with a partial accumulator of its own (lane `e % 2`
//! of accumulator vector `e / 2`, all but element 0's starting at the operation's identity):
//! the scalar ring's argument (reassociation of the partials, `reduce.rs`) with
//! [`ELEMENTS`] copies and as many partials, each copy's work reordered beside the others'.
//! That reordering is sound because the copies share nothing but the counter and the
//! induction registers (computed exactly per element) and the accumulator (one partial
//! each); any other register a copy reads before writing it would carry a value from the
//! copy before, and refuses the loop.
//!
//! What a register holds during a pass ([`Kind`]): the same value for every element (not
//! written in the body, or computed only from such values: emitted as the scalar code
//! itself), `v + e * stride` (the counter, a pointer stepped beside it, an address made
//! from them: one scalar `v`), or one value per element (loads and what is computed from
//! them: vectors of two 64-bit lanes). Only 64-bit operations that are exact lane by lane
//! make vectors (add, sub, xor, or, and, neg, shifts by a constant, which eBPF masks to 63
//! as Cranelift does); a load makes a vector when its address is `v + e * size` (64-bit
//! words, or 32-bit ones zero- or sign-extended: consecutive elements). Anything else
//! (32-bit arithmetic on lanes, multiplication of lanes, compares, stores, calls) refuses
//! the loop, which keeps its scalar ring. A narrow (32-bit) reduction computes in 32-bit
//! lanes instead ([`narrow`]), with the same ring, checks and fold.
//!
//! Memory: each vector load covers several elements' loads, so before a pass reads
//! anything, every load site the verifier did not prove checks the whole range the pass
//! reads at that site (`ELEMENTS * size` bytes) against its read window, inline and without
//! calling the resolver. A miss is no fault: the pass is abandoned before anything it
//! computed is kept (no register but dead temporaries was written), the partials are folded
//! into the accumulator and one scalar copy of the body runs, with its own checks: it faults
//! exactly where the interpreter does, or refreshes the window, and goes back to the vector
//! ring. The ring is entered only while the counter is below [`Reduction::guard`] for
//! [`ELEMENTS`] copies, so no element's exit test could fire; its leftovers run in the
//! rolled copy of the body. The budget was charged before the loop for all of its iterations.

mod narrow;

use super::abi::{OFF_AUX_LO, OFF_AUX_SPAN};
use super::reduce::{uses, Reduction};
use super::translate::Tx;
use super::*;
use crate::cfg::CountedLoop;
use crate::insn::BPF_K;
use cranelift_codegen::ir::types::{I32X4, I64X2};

/// 128-bit vectors of two 64-bit lanes per pass (even: a 128-bit load of 32-bit words fills
/// two): eight give sixteen elements per pass for one guard test and one taken branch, in 8
/// of the 16 vector registers.
const GROUPS: usize = 8;
/// 64-bit lanes per vector.
const LANES: usize = 2;
/// Elements (loop iterations) per pass.
const ELEMENTS: usize = GROUPS * LANES;
/// 128-bit vectors of four 32-bit lanes per pass in a narrow reduction ([`narrow`]).
const QUADS: usize = ELEMENTS / 4;

/// One 32-bit half of a 64-bit value per element, in [`QUADS`] vectors of four lanes.
type Quads = [Value; QUADS];

/// What a register holds during a pass, per element `e` (module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The same value for every element, in the register's own variable.
    Scalar,
    /// `v + e * stride`, wrapping.
    Affine(i64),
    /// One value per element, in vectors.
    Vector,
    /// One value per element in a narrow reduction ([`narrow`]): its two 32-bit halves in
    /// 32-bit lanes, each either known zero (`false`) or in vectors.
    Halves { hi: bool, lo: bool },
    /// Written in the body and not yet in this element: reading it refuses the loop.
    Unset,
}

/// A register's value during an emitted pass: the emitted form of [`Kind`].
#[derive(Clone, Copy)]
enum Lanes {
    Scalar,
    Affine(Value, i64),
    Vector([Value; GROUPS]),
    Halves(Option<Quads>, Option<Quads>),
    Unset,
}

impl Lanes {
    fn kind(self) -> Kind {
        match self {
            Lanes::Scalar => Kind::Scalar,
            Lanes::Affine(_, s) => Kind::Affine(s),
            Lanes::Vector(_) => Kind::Vector,
            Lanes::Halves(hi, lo) => Kind::Halves { hi: hi.is_some(), lo: lo.is_some() },
            Lanes::Unset => Kind::Unset,
        }
    }
}

/// The body's slots in a pass: the header up to the counter's test (which a pass drops).
fn body(l: CountedLoop, red: &Reduction) -> std::ops::Range<usize> {
    l.header..red.test
}

/// The registers' kinds at the start of a pass: the accumulator a vector, a register whose
/// one write in the body is `r += imm` (the counter, a pointer stepped beside it) affine
/// with that stride, any other written register unset, the rest scalar.
fn start_kinds(insns: &[Insn], l: CountedLoop, red: &Reduction) -> [Kind; NUM_REGS] {
    let mut kinds = [Kind::Scalar; NUM_REGS];
    for r in 0..FRAME_REG {
        let writes: Vec<Insn> = body(l, red)
            .map(|pc| insns[pc])
            .filter(|&i| uses(i).is_none_or(|(_, w)| w & (1 << r) != 0))
            .collect();
        kinds[usize::from(r)] = match writes[..] {
            [] => Kind::Scalar,
            [i] if i.op == BPF_ALU64 | BPF_ADD | BPF_K && i.off == 0 => {
                Kind::Affine(i64::from(i.imm))
            }
            _ => Kind::Unset,
        };
    }
    kinds[usize::from(red.acc)] = accumulator_kind(red);
    kinds
}

/// The accumulator's kind at the start and end of a pass: 64-bit lanes, or for a narrow
/// reduction the low halves in 32-bit lanes (its steps read and write nothing else).
fn accumulator_kind(red: &Reduction) -> Kind {
    if red.narrow {
        narrow::LOW
    } else {
        Kind::Vector
    }
}

/// The kind an ALU instruction makes from its destination's kind `d` and its source's `s`
/// (module documentation), `None` refusing the loop.
fn alu_kind(i: Insn, d: Kind, s: Kind) -> Option<Kind> {
    use Kind::{Affine, Scalar, Unset, Vector};
    let o = i.op & 0xf0;
    // A byte swap's `BPF_X` says big-endian; a move does not read its destination.
    let x = i.op & BPF_X != 0 && o != BPF_END && o != BPF_NEG;
    let s = if x { s } else { Scalar };
    let d = if o == BPF_MOV { Scalar } else { d };
    if d == Unset || s == Unset {
        return None;
    }
    if (d, s) == (Scalar, Scalar) {
        // Exactly the scalar code (`Tx::alu`), whatever the operation and width.
        return Some(Scalar);
    }
    if i.class() != BPF_ALU64 || i.off != 0 {
        return None;
    }
    let imm = (!x).then_some(i64::from(i.imm));
    Some(match (o, d, s) {
        (BPF_MOV, _, k) => k,
        (BPF_ADD | BPF_SUB, Affine(a), Scalar) | (BPF_ADD, Scalar, Affine(a)) => Affine(a),
        (BPF_SUB, Scalar, Affine(a)) | (BPF_NEG, Affine(a), _) => Affine(a.wrapping_neg()),
        (BPF_ADD, Affine(a), Affine(b)) => Affine(a.wrapping_add(b)),
        (BPF_SUB, Affine(a), Affine(b)) => Affine(a.wrapping_sub(b)),
        (BPF_MUL, Affine(a), Scalar) => Affine(a.wrapping_mul(imm?)),
        (BPF_LSH, Affine(a), Scalar) => Affine(a.wrapping_shl((imm? & 63) as u32)),
        (BPF_ADD | BPF_SUB | BPF_XOR | BPF_OR | BPF_AND, Vector | Scalar, Vector | Scalar)
        | (BPF_NEG, Vector, _) => Vector,
        (BPF_LSH | BPF_RSH, Vector, Scalar) if imm.is_some() => Vector,
        _ => return None,
    })
}

/// Whether a load of `i` from an address of kind `a` makes a vector: 64-bit words, or
/// 32-bit ones zero- or sign-extended, at consecutive addresses.
fn load_kind(i: Insn, a: Kind) -> Option<Kind> {
    let len: i64 = match (i.op & 0x18, i.op & 0xe0) {
        (BPF_DW, BPF_MEM) => 8,
        (BPF_W, BPF_MEM | BPF_MEMSX) => 4,
        _ => return None,
    };
    (a == Kind::Affine(len)).then_some(Kind::Vector)
}

/// The kind written by slot `pc` (`None`: the loop is refused); `plain(pc)`: a load there
/// is an ordinary checked or proved one (not a promoted stack slot, not out of line).
fn step_kind(
    insns: &[Insn],
    (pc, narrow): (usize, bool),
    kinds: &[Kind; NUM_REGS],
    plain: impl Fn(usize) -> bool,
) -> Option<(u8, Kind)> {
    let i = insns[pc];
    let (d, s) = (*kinds.get(usize::from(i.dst))?, *kinds.get(usize::from(i.src))?);
    match (i.class(), narrow) {
        (BPF_ALU | BPF_ALU64, false) => Some((i.dst, alu_kind(i, d, s)?)),
        (BPF_ALU | BPF_ALU64, true) => Some((i.dst, narrow::alu_kind(i, d, s)?)),
        (BPF_LDX, false) if plain(pc) => Some((i.dst, load_kind(i, s)?)),
        (BPF_LDX, true) if plain(pc) => Some((i.dst, narrow::load_kind(i, s)?)),
        _ => None,
    }
}

/// Whether reduction loop `l` runs as vector code (module documentation; a narrow one in
/// 32-bit lanes, [`narrow`]); `plain(pc)`: a load at `pc` is an ordinary one ([`step_kind`]).
pub(super) fn qualifies(
    insns: &[Insn],
    l: CountedLoop,
    red: &Reduction,
    plain: impl Fn(usize) -> bool,
) -> bool {
    vector_guard(red).is_some() && kinds_at_end(insns, l, red, plain).is_some()
}

/// The registers' kinds after a pass's body, if every slot qualifies and the accumulator is
/// still a vector.
fn kinds_at_end(
    insns: &[Insn],
    l: CountedLoop,
    red: &Reduction,
    plain: impl Fn(usize) -> bool,
) -> Option<[Kind; NUM_REGS]> {
    let mut kinds = start_kinds(insns, l, red);
    for pc in body(l, red) {
        let (dst, k) = step_kind(insns, (pc, red.narrow), &kinds, &plain)?;
        *kinds.get_mut(usize::from(dst))? = k;
    }
    (kinds[usize::from(red.acc)] == accumulator_kind(red)).then_some(kinds)
}

/// The vector ring is entered while the counter is below this: then the [`ELEMENTS`]
/// elements' tests see `v + c .. v + ELEMENTS c`, all below the bound ([`Reduction::guard`]).
fn vector_guard(red: &Reduction) -> Option<u64> {
    let bound = red.guard.checked_add(red.step.checked_mul(red.copies as u64)?)?;
    let guard = bound.checked_sub(red.step.checked_mul(ELEMENTS as u64)?)?;
    (guard > 0).then_some(guard)
}

impl Tx<'_, '_> {
    /// Whether reduction loop `l` runs as vector code here.
    pub(super) fn vectorises(&self, l: CountedLoop, red: &Reduction) -> bool {
        let plain = |pc: usize| !self.slot_plan.at[pc] && !self.out_of_line[pc];
        qualifies(self.insns, l, red, plain)
    }

    /// Emits the vector ring of reduction loop `l` from the header's block (current, open)
    /// and returns the block, not yet entered, where the rolled copy takes over the loop's
    /// leftovers. Shape: `init` (accumulator vectors from the accumulator, the guard) ->
    /// pass (the guard again at its end) -> pass; a failed check of a pass goes to one scalar copy of the body
    /// and back to `init`; a failed guard folds the partials and leaves for the rolled copy.
    pub(super) fn vector_ring(
        &mut self,
        l: CountedLoop,
        red: &Reduction,
    ) -> Result<Block, JitError> {
        let guard = vector_guard(red).ok_or_else(|| invalid(l.header, "no vector guard"))?;
        self.counts.vectors += 1;
        let (ty, n) = if red.narrow { (I32X4, QUADS) } else { (I64X2, GROUPS) };
        let accs: Vec<Variable> = (0..n).map(|_| self.b.declare_var(ty)).collect();
        let (init, pass, miss, out) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().jump(init, &[]);
        self.b.switch_to_block(init);
        self.init_accumulators(red, &accs);
        // The guard before the first pass and again at the end of each (one taken branch
        // per pass).
        self.vector_guard_test(red, guard, pass, out);
        self.b.switch_to_block(pass);
        self.vector_pass(l, red, &accs, miss)?;
        self.vector_guard_test(red, guard, pass, out);
        self.b.seal_block(pass);
        // A failed check: fold, one scalar copy (faulting or refreshing the window), retry.
        self.enter(miss);
        self.fold_accumulators(red, &accs);
        let copy = self.b.create_block();
        self.b.ins().jump(copy, &[]);
        let own = self.regs[usize::from(red.acc)];
        let exit = self.reduction_copy(l, red, (Some(copy), Some(init)), own, true)?;
        let exit = exit.ok_or_else(|| invalid(red.test, "a kept test without its exit"))?;
        self.b.seal_block(copy);
        self.b.seal_block(init);
        self.fold_partials(exit, red, &[own]);
        self.enter(out);
        self.fold_accumulators(red, &accs);
        let scalar = self.b.create_block();
        self.b.ins().jump(scalar, &[]);
        Ok(scalar)
    }

    /// Enters `pass` while the counter is below `guard`, else `out`.
    fn vector_guard_test(&mut self, red: &Reduction, guard: u64, pass: Block, out: Block) {
        let v = self.b.use_var(self.regs[usize::from(red.counter)]);
        let go = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, v, guard.cast_signed());
        self.b.ins().brif(go, pass, &[], out, &[]);
    }

    /// Accumulator vector 0 gets the accumulator in lane 0, every other lane the identity
    /// (a narrow reduction's, their low halves: its steps read nothing else).
    fn init_accumulators(&mut self, red: &Reduction, accs: &[Variable]) {
        let mut identity = self.iconst(red.identity());
        let mut a = self.b.use_var(self.regs[usize::from(red.acc)]);
        let ty = if red.narrow {
            identity = self.b.ins().ireduce(I32, identity);
            a = self.b.ins().ireduce(I32, a);
            I32X4
        } else {
            I64X2
        };
        let id = self.b.ins().splat(ty, identity);
        let first = self.b.ins().insertlane(id, a, 0);
        self.b.def_var(accs[0], first);
        for &v in &accs[1..] {
            self.b.def_var(v, id);
        }
    }

    /// The accumulator gets every lane of every accumulator vector folded in (a narrow
    /// reduction's mod 2^32 and zero-extended, what its last 32-bit step leaves: `reduce.rs`).
    fn fold_accumulators(&mut self, red: &Reduction, accs: &[Variable]) {
        let mut v = self.b.use_var(accs[0]);
        for &o in &accs[1..] {
            let o = self.b.use_var(o);
            v = self.combine(red.op, v, o);
        }
        let mut a = self.b.ins().extractlane(v, 0);
        for lane in 1..if red.narrow { 4 } else { LANES as u8 } {
            let o = self.b.ins().extractlane(v, lane);
            a = self.combine(red.op, a, o);
        }
        if red.narrow {
            a = self.b.ins().uextend(I64, a);
        }
        self.b.def_var(self.regs[usize::from(red.acc)], a);
    }

    /// One pass: every slot of the body for [`ELEMENTS`] elements at once, each checked load
    /// site's range checked first (a miss goes to `miss` with nothing of the pass kept), then
    /// the counter, the stepped registers and the accumulator vectors defined for the next.
    fn vector_pass(
        &mut self,
        l: CountedLoop,
        red: &Reduction,
        accs: &[Variable],
        miss: Block,
    ) -> Result<(), JitError> {
        let plain = |_: usize| true;
        let start = start_kinds(self.insns, l, red);
        let mut lanes = [Lanes::Scalar; NUM_REGS];
        for (r, k) in start.iter().enumerate() {
            lanes[r] = match *k {
                Kind::Affine(s) => Lanes::Affine(self.b.use_var(self.regs[r]), s),
                Kind::Unset => Lanes::Unset,
                _ => Lanes::Scalar,
            };
        }
        let acc: Vec<Value> = accs.iter().map(|&v| self.b.use_var(v)).collect();
        lanes[usize::from(red.acc)] = if red.narrow {
            Lanes::Halves(None, acc.try_into().ok())
        } else {
            Lanes::Vector(acc.try_into().map_err(|_| invalid(l.header, "accumulators"))?)
        };
        for pc in body(l, red) {
            let kinds = lanes.map(Lanes::kind);
            let (dst, kind) = step_kind(self.insns, (pc, red.narrow), &kinds, plain)
                .ok_or_else(|| invalid(pc, "a vector pass the plan refused"))?;
            let new = match (kind, self.insns[pc].class(), red.narrow) {
                (Kind::Scalar, ..) => {
                    self.alu(pc, self.insns[pc])?;
                    Lanes::Scalar
                }
                (_, BPF_LDX, false) => self.vector_load(pc, &lanes, miss)?,
                (_, BPF_LDX, true) => self.narrow_load(pc, &lanes, miss)?,
                (_, _, false) => self.vector_alu(pc, &lanes)?,
                (_, _, true) => self.narrow_alu(pc, &lanes, kind)?,
            };
            if new.kind() != kind {
                return Err(invalid(pc, "a vector slot emitted as another kind than planned"));
            }
            lanes[usize::from(dst)] = new;
        }
        for (r, now) in lanes.iter().enumerate() {
            match (start[r], *now) {
                // The last element's value: what the scalar loop holds after as many trips.
                (Kind::Affine(_), Lanes::Affine(v, s)) => {
                    let last = s.wrapping_mul(ELEMENTS as i64 - 1);
                    let v = self.b.ins().iadd_imm_s(v, last);
                    self.b.def_var(self.regs[r], v);
                }
                (Kind::Vector, Lanes::Vector(vs)) => {
                    for (a, v) in accs.iter().zip(vs) {
                        self.b.def_var(*a, v);
                    }
                }
                (Kind::Halves { .. }, Lanes::Halves(None, Some(vs))) => {
                    for (a, v) in accs.iter().zip(vs) {
                        self.b.def_var(*a, v);
                    }
                }
                (Kind::Affine(_) | Kind::Vector | Kind::Halves { .. }, _) => {
                    return Err(invalid(l.latch, "a vector pass ending in another kind"))
                }
                // Written before read in every element: dead at the header.
                _ => {}
            }
        }
        Ok(())
    }

    /// Slot `pc`'s operand `r` (`imm` when `None`) as a vector per group.
    fn operand_vectors(
        &mut self,
        lanes: &[Lanes; NUM_REGS],
        r: Option<u8>,
        imm: i32,
    ) -> [Value; GROUPS] {
        match r.map(|r| lanes[usize::from(r)]) {
            Some(Lanes::Vector(vs)) => vs,
            Some(_) => {
                let v = self.b.use_var(self.regs[usize::from(r.unwrap_or(0))]);
                [self.b.ins().splat(I64X2, v); GROUPS]
            }
            None => {
                let c = self.iconst(i64::from(imm));
                [self.b.ins().splat(I64X2, c); GROUPS]
            }
        }
    }

    /// Slot `pc`'s operand `r` (`imm` when `None`) as the scalar `v` of `v + e * stride`.
    fn operand_base(&mut self, lanes: &[Lanes; NUM_REGS], r: Option<u8>, imm: i32) -> Value {
        match r.map(|r| (r, lanes[usize::from(r)])) {
            Some((_, Lanes::Affine(v, _))) => v,
            Some((r, _)) => self.b.use_var(self.regs[usize::from(r)]),
            None => self.iconst(i64::from(imm)),
        }
    }

    /// A 64-bit ALU slot whose result is affine or a vector ([`alu_kind`]).
    fn vector_alu(&mut self, pc: usize, lanes: &[Lanes; NUM_REGS]) -> Result<Lanes, JitError> {
        let i = self.insns[pc];
        let o = i.op & 0xf0;
        let src = (i.op & BPF_X != 0 && o != BPF_NEG).then_some(i.src);
        if o == BPF_MOV {
            return Ok(src.map_or(Lanes::Scalar, |s| lanes[usize::from(s)]));
        }
        let kinds = lanes.map(Lanes::kind);
        let kind = alu_kind(
            i,
            kinds[usize::from(i.dst)],
            src.map_or(Kind::Scalar, |s| kinds[usize::from(s)]),
        )
        .ok_or_else(|| invalid(pc, "a vector slot the plan refused"))?;
        if let Kind::Affine(stride) = kind {
            let d = self.operand_base(lanes, Some(i.dst), 0);
            let s = self.operand_base(lanes, src, i.imm);
            let ins = self.b.ins();
            let v = match o {
                BPF_ADD => ins.iadd(d, s),
                BPF_SUB => ins.isub(d, s),
                BPF_MUL => ins.imul(d, s),
                BPF_LSH => ins.ishl_imm_u(d, i64::from(i.imm & 63)),
                _ => ins.ineg(d),
            };
            return Ok(Lanes::Affine(v, stride));
        }
        let d = self.operand_vectors(lanes, Some(i.dst), 0);
        let s = if matches!(o, BPF_LSH | BPF_RSH | BPF_NEG) {
            d
        } else {
            self.operand_vectors(lanes, src, i.imm)
        };
        let amount = self.iconst(i64::from(i.imm & 63));
        let mut out = d;
        for g in 0..GROUPS {
            out[g] = self.lane_op(o, d[g], s[g], amount);
        }
        Ok(Lanes::Vector(out))
    }

    /// `d op s` lane by lane for one of the operations the lanes do exactly: shifts by
    /// `amount` (already masked to the lane width), neg of `d`, else add, sub, xor, or, and
    /// ([`Tx::combine`]).
    fn lane_op(&mut self, o: u8, d: Value, s: Value, amount: Value) -> Value {
        match o {
            BPF_LSH => self.b.ins().ishl(d, amount),
            BPF_RSH => self.b.ins().ushr(d, amount),
            BPF_NEG => self.b.ins().ineg(d),
            _ => self.combine(o, d, s),
        }
    }

    /// A load at consecutive addresses ([`load_kind`]): its whole range in the pass checked
    /// against the site's read window unless proved (a miss goes to `miss`), then one
    /// vector load per group.
    fn vector_load(
        &mut self,
        pc: usize,
        lanes: &[Lanes; NUM_REGS],
        miss: Block,
    ) -> Result<Lanes, JitError> {
        let i = self.insns[pc];
        let (addr, len) = self.pass_address(pc, lanes, miss)?;
        let f = MemFlagsData::new().with_notrap();
        let sx = i.op & 0xe0 == BPF_MEMSX;
        let mut out = [addr; GROUPS];
        if len == 8 {
            for (g, v) in out.iter_mut().enumerate() {
                *v = self.b.ins().load(I64X2, f, addr, i32::try_from(16 * g).unwrap_or(0));
            }
        } else {
            // Four 32-bit words per load, widened by halves into two groups.
            for (k, pair) in out.chunks_exact_mut(2).enumerate() {
                let w = self.b.ins().load(I32X4, f, addr, i32::try_from(16 * k).unwrap_or(0));
                (pair[0], pair[1]) = if sx {
                    (self.b.ins().swiden_low(w), self.b.ins().swiden_high(w))
                } else {
                    (self.b.ins().uwiden_low(w), self.b.ins().uwiden_high(w))
                };
            }
        }
        Ok(Lanes::Vector(out))
    }

    /// The address of load `pc`'s first element in a pass and its size, after the check of
    /// the pass's whole range at that site unless proved (a miss goes to `miss`).
    fn pass_address(
        &mut self,
        pc: usize,
        lanes: &[Lanes; NUM_REGS],
        miss: Block,
    ) -> Result<(Value, u64), JitError> {
        let i = self.insns[pc];
        let Lanes::Affine(base, _) = lanes[usize::from(i.src)] else {
            return Err(invalid(pc, "a vector load from a non-affine address"));
        };
        let len = Self::size_of(pc, i)?;
        let addr = self.b.ins().iadd_imm_s(base, i64::from(i.off));
        if !self.in_bounds[pc] {
            self.range_check(pc, addr, len * ELEMENTS as u64, miss);
        }
        Ok((addr, len))
    }

    /// Continues where `bytes` bytes at `addr` lie inside load `pc`'s read window, else
    /// jumps to `miss`. The window's span is its region's length less
    /// `MAX_ACCESS_BYTES - 1` ([`Tx::check`]), so the range fits when its offset is below
    /// the span less `bytes - MAX_ACCESS_BYTES` (no range fits a span smaller than that).
    fn range_check(&mut self, pc: usize, addr: Value, bytes: u64, miss: Block) {
        let fl = MemFlagsData::trusted();
        let (lo, span) = match self.read_window(pc) {
            Some((lo, span)) => (self.b.use_var(lo), self.b.use_var(span)),
            None => (
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_LO),
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_SPAN),
            ),
        };
        let more = (bytes - MAX_ACCESS_BYTES).cast_signed();
        let wide = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, span, more);
        let less = self.b.ins().iadd_imm_s(span, -more);
        let zero = self.iconst(0);
        let limit = self.b.ins().select(wide, less, zero);
        let off = self.b.ins().isub(addr, lo);
        let inside = self.b.ins().icmp(IntCC::UnsignedLessThan, off, limit);
        let cont = self.b.create_block();
        self.b.ins().brif(inside, cont, &[], miss, &[]);
        self.enter(cont);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether bench program `name`'s one counted loop is a reduction that runs as vector
    /// code (`None`: not a reduction).
    fn bench_vectorises(name: &str) -> Option<bool> {
        let (p, l, red) = super::super::reduce::tests::bench_loop(name);
        Some(qualifies(&p.insns, l, &red?, |_| true))
    }

    #[test]
    fn the_bench_sums_run_as_vector_code() {
        assert_eq!(bench_vectorises("bench/sum64"), Some(true));
        assert_eq!(bench_vectorises("bench/sum32"), Some(true));
        // bitrev32: a narrow xor chain over a 64-bit byte swap and shifts of u32 words,
        // reading the counter in a 32-bit add (32-bit lanes).
        assert_eq!(bench_vectorises("bench/bitrev32"), Some(true));
        // popcount's body multiplies the loaded word (no 64-bit lane multiply).
        assert_eq!(bench_vectorises("bench/popcount"), Some(false));
    }

    #[test]
    fn kinds_follow_the_lanes() {
        use Kind::{Affine, Scalar, Unset, Vector};
        let alu = |op: u8, x: bool, imm: i32| Insn {
            op: BPF_ALU64 | op | if x { BPF_X } else { BPF_K },
            dst: 0,
            src: 1,
            off: 0,
            imm,
        };
        // Addresses: the counter scaled and offset stays affine.
        assert_eq!(alu_kind(alu(BPF_LSH, false, 3), Affine(1), Scalar), Some(Affine(8)));
        assert_eq!(alu_kind(alu(BPF_ADD, true, 0), Affine(8), Affine(4)), Some(Affine(12)));
        assert_eq!(alu_kind(alu(BPF_SUB, true, 0), Scalar, Affine(4)), Some(Affine(-4)));
        // Lane-wise operations on loaded values, and what the lanes cannot do.
        assert_eq!(alu_kind(alu(BPF_XOR, true, 0), Vector, Scalar), Some(Vector));
        assert_eq!(alu_kind(alu(BPF_RSH, false, 7), Vector, Scalar), Some(Vector));
        assert_eq!(alu_kind(alu(BPF_RSH, true, 0), Vector, Scalar), None);
        assert_eq!(alu_kind(alu(BPF_MUL, false, 3), Vector, Scalar), None);
        assert_eq!(alu_kind(alu(BPF_ARSH, false, 3), Vector, Scalar), None);
        assert_eq!(alu_kind(alu(BPF_ADD, true, 0), Vector, Affine(8)), None);
        let w = Insn { op: BPF_ALU | BPF_ADD | BPF_K, dst: 0, src: 0, off: 0, imm: 1 };
        assert_eq!(alu_kind(w, Vector, Scalar), None);
        // 32-bit arithmetic on scalars is the scalar code itself.
        assert_eq!(alu_kind(w, Scalar, Scalar), Some(Scalar));
        // A register written later in the body is not read before it.
        assert_eq!(alu_kind(alu(BPF_ADD, true, 0), Scalar, Unset), None);
        // Loads: consecutive elements only.
        let load = |size: u8| Insn { op: BPF_LDX | BPF_MEM | size, dst: 0, src: 1, off: 0, imm: 0 };
        assert_eq!(load_kind(load(BPF_DW), Affine(8)), Some(Vector));
        assert_eq!(load_kind(load(BPF_W), Affine(4)), Some(Vector));
        assert_eq!(load_kind(load(BPF_W), Affine(8)), None);
        assert_eq!(load_kind(load(BPF_B), Affine(1)), None);
        assert_eq!(load_kind(load(BPF_DW), Scalar), None);
    }
}
