//! Counted loops that reduce: a sum (xor, or, and) carried round the loop in one register is
//! emitted as a guarded ring of copies of the body with one partial accumulator per copy,
//! combined where the loop leaves (docs/design/vm.md, "Reductions").
//!
//! Why: such a loop (`for (i = 0; i < n; i++) s += d[i]`) runs at the latency of its one add
//! chain, one add per iteration, however many copies are emitted; with several partial sums
//! the adds of consecutive copies are independent. And the ring's copies drop their exit
//! tests: the ring is entered only while the counter is far enough from its bound that none
//! of those tests can fire.
//!
//! The loop qualifies when ([`find`]): it is an exact counted loop (its only way out is the
//! counter's test) in clang's shape `...; r += c; if r OP N goto out; goto header` (OP
//! `==`, `>` or `>=`, unsigned, 64-bit, N a constant), whose body before the test is
//! straight-line code without charge points, and one register `A` (the accumulator) is
//! used in the body only by
//! - `X op= Y` with X holding a partial value and Y not (`op` one of add/sub, xor, or, and,
//!   the same family for the whole loop),
//! - `Y op= X` with X partial, Y not (`op` commutative): Y then holds a partial value,
//! - `Y = X` (a move),
//!
//! all 64-bit (associative and commutative mod 2^64) or all 32-bit (*narrow*: `wX op= wY`,
//! `wY = wX`; the low 32 bits of each of these operations depend only on the low 32 bits
//! of its operands, so every argument below holds for the low halves, and each step
//! zero-extends its result; a narrow loop's registers partial at the test must have been
//! written by a step, so their upper halves are zero),
//!
//! where "partial" starts as {A} at the header, every other write makes a register whole,
//! and at the back edge A is partial and every other partial register is written before it
//! is read in the next iteration. Any other read of a partial value (an address, a store, a
//! compare, another operation, a step of the other width) refuses the loop.
//!
//! Then, with partial variables `P_0` (A's own) .. `P_{k-1}` (the others starting at the
//! operation's identity), copy `j` of the ring reads and writes A as `P_{j mod k}`, and at
//! every point in copy `j` each partial register `X` stands for `X op (op of P_i, i != j mod
//! k)`: true at the header (the copy before left its partial in its P), kept by each of the
//! allowed operations (reassociation), and made whole again on the way out (the ring keeps
//! no exit test; the rolled copy that finishes the loop accumulates into `P_0`, and its exit
//! edge goes through a block that folds the other partials into every partial register;
//! for a narrow loop the fold is taken mod 2^32 and zero-extended, exactly what the
//! interpreter's last 32-bit step left there).
//! Loads, stores and their checks are the body's own, in the same order, with whole
//! (unchanged) addresses and values: a fault happens at the same instruction, with the same
//! address (a fault returns no register). The budget was charged before the loop for all its
//! iterations (the body has no charge point) and the same instructions run.

use super::translate::Tx;
use super::*;
use crate::cfg::CountedLoop;
use crate::insn::BPF_K;

/// Copies in the ring of a loop of at most [`SMALL_BODY_SLOTS`] slots, and of a longer one
/// (at most [`MAX_BODY_SLOTS`]): a ring must hold enough independent work per taken jump
/// and guard to issue several loads per cycle. (Two copies for bitrev32's 29 slots ran
/// slower than the plain loop, 917 vs 899 ns; four, 890.)
const SMALL_BODY_COPIES: usize = 8;
const SMALL_BODY_SLOTS: usize = 12;
const COPIES: usize = 4;
const MAX_BODY_SLOTS: usize = 32;
/// Partial accumulators for a body of at most [`SMALL_BODY_SLOTS`]: enough for adds of a
/// 1-cycle latency to keep up with two or three loads a cycle, few enough to stay in
/// registers beside the body's own.
const PARTIALS: usize = 4;
/// Partial accumulators for a longer body, whose own work hides the chain's latency: more
/// only take registers its copies need (knn, be32: spills in the ring with 4).
const LONG_BODY_PARTIALS: usize = 2;

/// A reduction loop ([`find`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reduction {
    /// The accumulator register.
    pub acc: u8,
    /// BPF_ADD (add and sub), BPF_XOR, BPF_OR or BPF_AND.
    pub op: u8,
    /// The counter's register.
    pub counter: u8,
    /// The counter's test (the latch is the slot after it).
    pub test: usize,
    /// Where the test jumps out of the loop.
    pub exit: usize,
    /// The ring is entered while the counter (at the header) is below this, unsigned.
    pub guard: u64,
    /// Copies in the ring.
    pub copies: usize,
    /// Registers that hold a partial value at the test (bit r for register r).
    pub at_exit: u16,
    /// The counter's step per iteration.
    pub step: u64,
    /// The reduction's steps are 32-bit (`wX op= wY`, `wY = wX`): the exit's fold is
    /// exact at 32 bits and zero-extends.
    pub narrow: bool,
    /// The loop runs as vector code first ([`super::vector`]).
    pub vector: bool,
}

/// The operation family of a reduction's steps and their class (`BPF_ALU64`, or `BPF_ALU`
/// for a narrow one), both the same for the whole loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Steps {
    family: Option<u8>,
    class: Option<u8>,
}

impl Reduction {
    /// The operation family's identity: all ones for AND, else zero.
    pub(super) fn identity(&self) -> i64 {
        if self.op == BPF_AND {
            -1
        } else {
            0
        }
    }
}

/// Bit of register `r`.
fn bit(r: u8) -> u16 {
    1 << (r & 15)
}

/// The registers `i` reads and writes, or `None` for a call or an exit.
pub(super) fn uses(i: Insn) -> Option<(u16, u16)> {
    let (d, s) = (bit(i.dst), bit(i.src));
    let x = i.op & BPF_X != 0;
    Some(match i.class() {
        BPF_ALU | BPF_ALU64 => match i.op & 0xf0 {
            BPF_MOV => (if x { s } else { 0 }, d),
            // `BPF_X` in a byte swap says big-endian, not a source register.
            BPF_NEG | BPF_END => (d, d),
            _ => (d | if x { s } else { 0 }, d),
        },
        BPF_LD => (0, d),
        BPF_LDX => (s, d),
        BPF_ST => (d, 0),
        BPF_STX if i.op & 0xe0 == BPF_ATOMIC => (d | s | bit(0), s | bit(0)),
        BPF_STX => (d | s, 0),
        _ => match i.op & 0xf0 {
            BPF_CALL | BPF_EXIT => return None,
            BPF_JA => (0, 0),
            _ => (d | if x { s } else { 0 }, 0),
        },
    })
}

/// How `i` moves partial values given the partial registers `d`: `Ok(Some(new d))` for an
/// allowed reduction step (recording its operation family and width in `op`), `Ok(None)`
/// for any other instruction (checked by the caller), `Err` for a second operation family
/// or width.
fn reduction_step(i: Insn, d: u16, op: &mut Steps) -> Result<Option<u16>, ()> {
    let class = i.class();
    if !matches!(class, BPF_ALU64 | BPF_ALU) || i.off != 0 {
        return Ok(None);
    }
    let x = i.op & BPF_X != 0;
    let (dst, src) = (bit(i.dst), bit(i.src));
    let o = i.op & 0xf0;
    if o == BPF_MOV {
        if !(x && d & src != 0) {
            return Ok(None);
        }
        return match *op.class.get_or_insert(class) == class {
            true => Ok(Some(d | dst)),
            false => Err(()),
        };
    }
    let family = match o {
        BPF_ADD | BPF_SUB => BPF_ADD,
        BPF_XOR | BPF_OR | BPF_AND => o,
        _ => return Ok(None),
    };
    match (d & dst != 0, x && d & src != 0) {
        // `X op= whole`: X stays partial.
        (true, false) => {}
        // `whole op= X` (commutative ops only): the result is partial.
        (false, true) if o != BPF_SUB => {}
        _ => return Ok(None),
    }
    if *op.family.get_or_insert(family) != family || *op.class.get_or_insert(class) != class {
        return Err(());
    }
    Ok(Some(d | dst))
}

/// The partial registers at the test, the operation family and whether the steps are
/// 32-bit, if `acc` is a reduction's accumulator over the straight-line `[header, test)`
/// (module documentation).
fn partials(
    insns: &[Insn],
    cfg: &Cfg,
    (header, test): (usize, usize),
    acc: u8,
) -> Option<(u8, u16, bool)> {
    let mut d = bit(acc);
    let mut op = Steps::default();
    // Registers whose last write is a reduction step.
    let mut stepped = 0;
    for pc in (header..=test).filter(|&pc| !cfg.is_second_half(pc)) {
        let i = insns[pc];
        if let Some(next) = reduction_step(i, d, &mut op).ok()? {
            d = next;
            stepped |= bit(i.dst);
            continue;
        }
        let (reads, writes) = uses(i)?;
        if reads & d != 0 {
            return None;
        }
        d &= !writes;
        stepped &= !writes;
    }
    // At the back edge: A partial, every other partial register dead at the header.
    if d & bit(acc) == 0 {
        return None;
    }
    let mut live = d & !bit(acc);
    for pc in (header..=test).filter(|&pc| !cfg.is_second_half(pc)) {
        let (reads, writes) = uses(insns[pc])?;
        if reads & live != 0 {
            return None;
        }
        live &= !writes;
    }
    if live != 0 {
        return None;
    }
    let narrow = op.class == Some(BPF_ALU);
    // A narrow step zero-extends: the exit's 32-bit fold is exact for a register whose last
    // write was one, not for an accumulator the body never writes (its upper half is kept).
    if narrow && d & !stepped != 0 {
        return None;
    }
    Some((op.family?, d, narrow))
}

/// The loop's reduction, if it is one (module documentation).
pub(super) fn find(
    insns: &[Insn],
    cfg: &Cfg,
    charges: &[u32],
    l: CountedLoop,
) -> Option<Reduction> {
    let body = l.latch + 1 - l.header;
    let test = l.latch.checked_sub(1)?;
    let t = insns[test];
    if !l.exact || body > MAX_BODY_SLOTS || test <= l.header || cfg.is_second_half(test) {
        return None;
    }
    let exit_on = matches!(t.op & 0xf0, BPF_JEQ | BPF_JGT | BPF_JGE);
    if t.class() != BPF_JMP
        || t.op & BPF_X != 0
        || !exit_on
        || insns[l.latch].op != BPF_JMP | BPF_JA
    {
        return None;
    }
    let exit = rel_target(test, i64::from(t.off), insns.len()).ok()?;
    if (l.header..=l.latch).contains(&exit) || !cfg.is_block_start(l.latch) {
        return None;
    }
    // Straight-line before the test, no charge point, one write of the counter: `r += c`.
    let slots = || (l.header..test).filter(|&pc| !cfg.is_second_half(pc));
    let jumps = slots().any(|pc| matches!(insns[pc].class(), BPF_JMP | BPF_JMP32));
    if jumps || (l.header..=l.latch).any(|pc| charges[pc] != 0) {
        return None;
    }
    let counter = t.dst;
    let writes: Vec<usize> =
        slots().filter(|&pc| uses(insns[pc]).is_none_or(|(_, w)| w & bit(counter) != 0)).collect();
    let [at] = writes[..] else { return None };
    let inc = insns[at];
    if inc.op != BPF_ALU64 | BPF_ADD | BPF_K || inc.off != 0 || inc.imm < 1 {
        return None;
    }
    let copies = if body <= SMALL_BODY_SLOTS { SMALL_BODY_COPIES } else { COPIES };
    // The ring's tests see `v + c .. v + copies c`, all below the bound when `v < N -
    // copies c`: none of them can jump out (nor wrap).
    let bound = i64::from(t.imm).cast_unsigned();
    let step = u64::from(inc.imm.unsigned_abs());
    let guard = bound.checked_sub(step.checked_mul(copies as u64)?)?;
    if guard == 0 {
        return None;
    }
    let (acc, (op, at_exit, narrow)) = (0..FRAME_REG)
        .filter(|&a| a != counter)
        .find_map(|a| partials(insns, cfg, (l.header, test), a).map(|p| (a, p)))?;
    Some(Reduction {
        acc,
        op,
        counter,
        test,
        exit,
        guard,
        copies,
        at_exit,
        step,
        narrow,
        vector: false,
    })
}

impl Tx<'_, '_> {
    /// Emits reduction loop `l` ([`find`]): its header's block sets the extra partials to
    /// the identity and tests the guard, which enters the ring (copies without their exit
    /// tests in one block, the last one's back edge returning to a second guard test) while the
    /// counter is below [`Reduction::guard`], else a rolled copy that loops on itself. The
    /// rolled copy alone keeps the test; it leaves through a block that folds the partials.
    /// A loop that runs as vector code has its vector ring there instead of the scalar one
    /// (`rolled_reduction`). Returns whether control falls out of the last slot (never).
    pub(super) fn unroll_reduction(
        &mut self,
        l: CountedLoop,
        red: Reduction,
        open: bool,
    ) -> Result<bool, JitError> {
        let entry = self.enter_header(l, open);
        self.counts.reductions += 1;
        if red.vector {
            let scalar = self.vector_ring(l, &red)?;
            self.enter(scalar);
            return self.rolled_reduction(l, &red, entry);
        }
        let mut parts = vec![self.regs[usize::from(red.acc)]];
        let identity = self.iconst(red.identity());
        let partials = if red.copies == SMALL_BODY_COPIES { PARTIALS } else { LONG_BODY_PARTIALS };
        for _ in 1..partials {
            let p = self.b.declare_var(I64);
            self.b.def_var(p, identity);
            parts.push(p);
        }
        let guard = self.b.create_block();
        let rolled = self.b.create_block();
        let ring = self.b.create_block();
        // The first test in the header's own block, the ring's back edge to a second one:
        // then that block is inside the ring's loop only, and both loops' headers have the
        // header's block as immediate dominator, where Cranelift hoists their invariants.
        // With one shared test block, the rolled loop's invariants were hoisted into it, so
        // inside the ring's loop (alternate recomputed its caller's `at % 3840` every pass).
        self.guard_test(&red, ring, rolled);
        self.b.switch_to_block(guard);
        self.guard_test(&red, ring, rolled);
        for k in 0..red.copies {
            let last = k + 1 == red.copies;
            let head = (k == 0).then_some(ring);
            let p = parts[k % parts.len()];
            self.reduction_copy(l, &red, (head, last.then_some(guard)), p, false)?;
        }
        let exit = self.reduction_copy(l, &red, (Some(rolled), Some(rolled)), parts[0], true)?;
        *self.block_slot(l.header) = Some(entry);
        let exit = exit.ok_or_else(|| invalid(red.test, "a kept test without its exit"))?;
        self.fold_partials(exit, &red, &parts);
        Ok(false)
    }

    /// The leftovers of a vector ring (fewer than a pass's elements, or one after a pass's
    /// check missed): the rolled copy alone, looping on itself with its test. A scalar ring
    /// for them was as fast (bitrev32 251 vs 250 ns, sum64 43 vs 43) and cost a third of the
    /// compile time (bitrev32 1,370-1,532 vs 942-1,106 µs on a loaded machine).
    fn rolled_reduction(
        &mut self,
        l: CountedLoop,
        red: &Reduction,
        entry: Block,
    ) -> Result<bool, JitError> {
        let rolled = self.b.create_block();
        self.b.ins().jump(rolled, &[]);
        let own = self.regs[usize::from(red.acc)];
        let exit = self.reduction_copy(l, red, (Some(rolled), Some(rolled)), own, true)?;
        *self.block_slot(l.header) = Some(entry);
        let exit = exit.ok_or_else(|| invalid(red.test, "a kept test without its exit"))?;
        self.fold_partials(exit, red, &[own]);
        Ok(false)
    }

    /// Enters the ring while the counter is below the guard, else the rolled copy.
    fn guard_test(&mut self, red: &Reduction, ring: Block, rolled: Block) {
        let v = self.b.use_var(self.regs[usize::from(red.counter)]);
        let go = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, v, red.guard.cast_signed());
        self.b.ins().brif(go, ring, &[], rolled, &[]);
    }

    /// One copy of the body, reading and writing the accumulator as `part`: entered at
    /// `head` (`None`: it goes on in the current block, after the copy before), its back
    /// edge going to `back` (`None`: dropped, the next copy follows in the same block), its
    /// exit test kept when `test` (else dropped: the guard proved it does not jump). The
    /// ring is one block, so its loads can be folded into the adds that use them. Returns
    /// the block the kept test's exit goes to.
    pub(super) fn reduction_copy(
        &mut self,
        l: CountedLoop,
        red: &Reduction,
        (head, back): (Option<Block>, Option<Block>),
        part: Variable,
        test: bool,
    ) -> Result<Option<Block>, JitError> {
        let own = std::mem::replace(&mut self.regs[usize::from(red.acc)], part);
        // The ring is one straight run: the byte-load facts are per copy (forgetting them is
        // always sound), so a copy does not find the table full of the copies' before it.
        self.bytes.clear();
        *self.block_slot(l.header) = head;
        for pc in l.header + 1..l.latch {
            if self.block(pc).is_some() {
                *self.block_slot(pc) = Some(self.b.create_block());
            }
        }
        // The latch starts a block ([`find`]) after a kept test; without the test, the back
        // edge goes on in the same block.
        *self.block_slot(l.latch) = test.then(|| self.b.create_block());
        let fix = test.then(|| self.b.create_block());
        let out = self.block(red.exit);
        if fix.is_some() {
            *self.block_slot(red.exit) = fix;
        }
        let (mut pc, mut open) = (l.header, head.is_none());
        let mut r = Ok(());
        let end = if back.is_some() { l.latch + 1 } else { red.test };
        while pc < end {
            if pc == red.test && !test {
                pc += 1;
                continue;
            }
            if pc == l.latch {
                *self.block_slot(l.header) = back;
            }
            match self.step(pc, open) {
                Ok(s) => (open, pc) = s,
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        *self.block_slot(red.exit) = out;
        self.regs[usize::from(red.acc)] = own;
        r?;
        if open != back.is_none() {
            return Err(invalid(l.latch, "a reduction copy that falls through"));
        }
        Ok(fix)
    }

    /// `a op b` for `op` one of add, sub, xor, or and (the default) of eBPF's ALU operations,
    /// at `a`'s type (scalars, or vectors lane by lane): a reduction's operation family, a
    /// lane operation ([`super::vector`]), a fused read-modify-write's ([`super::rmw`]).
    pub(super) fn combine(&mut self, op: u8, a: Value, b: Value) -> Value {
        match op {
            BPF_ADD => self.b.ins().iadd(a, b),
            BPF_SUB => self.b.ins().isub(a, b),
            BPF_XOR => self.b.ins().bxor(a, b),
            BPF_OR => self.b.ins().bor(a, b),
            _ => self.b.ins().band(a, b),
        }
    }

    /// The exit of the rolled copy (which accumulates into `parts[0]`, the accumulator's own
    /// variable): every register holding a partial value gets the others folded in, then
    /// the loop's real exit.
    pub(super) fn fold_partials(&mut self, blk: Block, red: &Reduction, parts: &[Variable]) {
        self.enter(blk);
        let others: Vec<Value> = parts[1..].iter().map(|&v| self.b.use_var(v)).collect();
        let mut defs = Vec::new();
        for r in (0..FRAME_REG).filter(|&r| red.at_exit & bit(r) != 0) {
            let mut v = self.b.use_var(self.regs[usize::from(r)]);
            for &o in &others {
                v = self.combine(red.op, v, o);
            }
            if red.narrow {
                // Partials are zero-extended (or AND's all-ones identity): the fold is exact
                // at 32 bits, and a narrow step's result is zero-extended.
                let low = self.b.ins().ireduce(I32, v);
                v = self.b.ins().uextend(I64, low);
            }
            defs.push((r, v));
        }
        for (r, v) in defs {
            self.b.def_var(self.regs[usize::from(r)], v);
        }
        let out = self.block(red.exit).expect("a jump target starts a block");
        self.b.ins().jump(out, &[]);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Bench program `name`, its one counted loop, and the reduction [`find`] sees there.
    pub(in crate::jit) fn bench_loop(
        name: &str,
    ) -> (std::sync::Arc<crate::VerifiedProgram>, CountedLoop, Option<Reduction>) {
        let p = crate::load_verified(storefn_progs::must(name), None, ProgType::Xrp).unwrap();
        let cfg = p.cfg();
        let [l] = cfg.counted_loops() else { panic!("{name}: {:?}", cfg.counted_loops()) };
        let red = find(&p.insns, cfg, cfg.charges(), *l);
        let l = *l;
        (p, l, red)
    }

    fn bench_reduction(name: &str) -> Option<Reduction> {
        bench_loop(name).2
    }

    #[test]
    fn the_bench_sums_are_reductions() {
        // sum64: `r0 = *(r4 + r2); r0 += r5; r2 += 8; r5 = r0; if r2 == 4096 ...`: r5 is the
        // accumulator, r0 holds the sum too at the test.
        let r = bench_reduction("bench/sum64").unwrap();
        assert_eq!((r.acc, r.op, r.counter, r.copies), (5, BPF_ADD, 2, SMALL_BODY_COPIES));
        assert_eq!((r.at_exit, r.guard), (bit(0) | bit(5), 4096 - 8 * 8));
        let r = bench_reduction("bench/sum32").unwrap();
        assert_eq!((r.acc, r.at_exit, r.guard), (5, bit(5), 4096 - 8 * 4));
        // popcount's body (23 slots) gets the smaller ring.
        let r = bench_reduction("bench/popcount").unwrap();
        assert_eq!((r.acc, r.copies), (5, COPIES));
    }

    #[test]
    fn narrow_reductions_are_taken() {
        // bitrev32 (29 slots): `w6 = w3; w6 += w0; w6 ^= w5; ...; w5 = w6`: a 32-bit xor
        // chain through r5 and r6, both partial at the test.
        let r = bench_reduction("bench/bitrev32").unwrap();
        assert_eq!((r.acc, r.op, r.counter, r.narrow), (5, BPF_XOR, 3, true));
        assert_eq!((r.at_exit, r.copies), (bit(5) | bit(6), COPIES));
        assert!(!bench_reduction("bench/sum64").unwrap().narrow);
    }

    #[test]
    fn partial_values_may_flow_only_through_the_reduction() {
        let add = |d, s| Insn { op: BPF_ALU64 | BPF_ADD | BPF_X, dst: d, src: s, off: 0, imm: 0 };
        let sub = |d, s| Insn { op: BPF_ALU64 | BPF_SUB | BPF_X, dst: d, src: s, off: 0, imm: 0 };
        let mut op = Steps::default();
        // acc += whole; whole += acc (commutative): both partial.
        assert_eq!(reduction_step(add(5, 0), bit(5), &mut op), Ok(Some(bit(5))));
        assert_eq!(reduction_step(add(0, 5), bit(5), &mut op), Ok(Some(bit(0) | bit(5))));
        // whole -= acc is not `acc op whole`; acc += acc doubles the others.
        assert_eq!(reduction_step(sub(0, 5), bit(5), &mut op), Ok(None));
        assert_eq!(reduction_step(add(5, 5), bit(5), &mut op), Ok(None));
        // A second family is refused.
        let xor = Insn { op: BPF_ALU64 | BPF_XOR | BPF_X, dst: 5, src: 0, off: 0, imm: 0 };
        assert_eq!(reduction_step(xor, bit(5), &mut op), Err(()));
        // So is a second width, a move's included.
        let w = |i: Insn| Insn { op: i.op & !7 | BPF_ALU, ..i };
        assert_eq!(reduction_step(w(add(5, 0)), bit(5), &mut op), Err(()));
        let mov = Insn { op: BPF_ALU64 | BPF_MOV | BPF_X, dst: 6, src: 5, off: 0, imm: 0 };
        assert_eq!(reduction_step(w(mov), bit(5), &mut op), Err(()));
        assert_eq!(reduction_step(mov, bit(5), &mut op), Ok(Some(bit(5) | bit(6))));
        // A byte swap reads its destination only (BPF_X there means big-endian).
        let be = Insn { op: BPF_ALU | BPF_END | BPF_X, dst: 1, src: 5, off: 0, imm: 32 };
        assert_eq!(uses(be), Some((bit(1), bit(1))));
    }
}
