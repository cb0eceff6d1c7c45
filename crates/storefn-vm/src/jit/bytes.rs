//! Byte loads recomposed into a word (`p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]`, as λ
//! functions and page parsers read unaligned big-endian fields) become one wider load, plus
//! a byte swap for big-endian order.
//!
//! The translator keeps a fact for each SSA value that is an OR of shifted byte loads from one
//! base value: which byte (offset from the base) sits in which lane. When an OR completes
//! 2, 4 or 8 lanes from lane 0 whose offsets are consecutive (rising: little-endian; falling:
//! big-endian), its result is that word loaded at once instead. What this assumes, and why it
//! holds:
//! - every byte load a fact names was performed (it is an operand of the OR) at its own
//!   address after its own check or proof, so each of the word's bytes is memory the
//!   invocation may read; the word load reads exactly those bytes (a load checked out of line
//!   may have read `aux.sink` after a failed check, so those loads get no fact);
//! - memory has not changed since those loads: facts are dropped at every instruction that is
//!   not register arithmetic or a load (stores, atomics, calls, jumps, `exit`) and at every
//!   block start, so the loads and the OR are on one straight run of instructions with no
//!   store between them;
//! - the byte loads' checks stay where they are (they fault where the interpreter faults), and
//!   so do the loads whose values something else uses; a byte load whose value nothing uses
//!   any more is removed after translation ([`drop_dead_byte_loads`]: Cranelift keeps every
//!   load, used or not). Removing an unused load changes nothing a program or the host can
//!   see: its check is separate code that stays, and the load itself (`notrap`, from checked
//!   or proved memory) has no effect but its value.
//!
//! The registers the recomposition wrote on the way keep their values (only the OR's result
//! is replaced, by an equal value), and budget charges are per block, so both engines see the
//! same registers, memory, faults and budget.

use super::*;
use cranelift_codegen::entity::SecondaryMap;
use cranelift_codegen::ir::{Function, Inst, InstructionData, Opcode, ValueDef};
use std::collections::HashSet;

/// Values with a fact at once (per straight run of instructions): bounds the translator's
/// work per instruction; recompositions longer than this lose their facts and stay as they are.
const MAX_FACTS: usize = 32;

/// Lanes of a 64-bit value, one byte each.
const LANES: usize = 8;

/// A value that is `OR over lanes l of (byte at base + off[l]) << 8l` (empty lanes zero).
#[derive(Clone, Copy)]
pub(super) struct ByteLanes {
    base: Value,
    off: [Option<i64>; LANES],
}

/// The facts of the current straight run of instructions ([`ByteLanes`]).
#[derive(Default)]
pub(super) struct ByteFacts {
    facts: Vec<(Value, ByteLanes)>,
    /// Every byte load given a fact in this function: candidates for
    /// [`drop_dead_byte_loads`].
    pub(super) loads: Vec<Value>,
    /// Word loads emitted instead of recompositions (a diagnostic for tests).
    pub(super) fused: usize,
}

impl ByteFacts {
    /// Memory may change or control may join: no fact survives.
    pub(super) fn clear(&mut self) {
        self.facts.clear();
    }

    fn get(&self, v: Value) -> Option<ByteLanes> {
        self.facts.iter().rev().find(|(k, _)| *k == v).map(|&(_, f)| f)
    }

    /// `v`'s lanes are `f` (also an OR the translator emitted for [`OrBytes::Lanes`]).
    pub(super) fn put(&mut self, v: Value, f: ByteLanes) {
        if self.facts.len() < MAX_FACTS {
            self.facts.push((v, f));
        }
    }

    /// `v` is the zero-extended byte at `base + off`, loaded at its own (checked or proved)
    /// address.
    pub(super) fn byte_load(&mut self, v: Value, base: Value, off: i16) {
        let mut lanes = [None; LANES];
        lanes[0] = Some(i64::from(off));
        self.put(v, ByteLanes { base, off: lanes });
        self.loads.push(v);
    }

    /// `r = v << k` in a register of `width` bits (zero-extended to 64): a fact when `k` moves
    /// whole bytes and none past the width.
    pub(super) fn shift(&mut self, r: Value, v: Value, k: i64, width: usize) {
        let Some(f) = self.get(v) else { return };
        if k < 0 || k % 8 != 0 {
            return;
        }
        let by = usize::try_from(k / 8).unwrap_or(LANES);
        let lanes = width / 8;
        if by >= lanes || f.off[lanes - by..].iter().any(Option::is_some) {
            return;
        }
        let mut off = [None; LANES];
        off[by..lanes].copy_from_slice(&f.off[..lanes - by]);
        self.put(r, ByteLanes { base: f.base, off });
    }

    /// `a | b` in a register of `width` bits: their union when both are facts over one base
    /// with no lane in common and none past the width.
    fn union(&self, a: Value, b: Value, width: usize) -> Option<ByteLanes> {
        let (x, y) = (self.get(a)?, self.get(b)?);
        if x.base != y.base {
            return None;
        }
        let mut off = [None; LANES];
        for (l, slot) in off.iter_mut().enumerate() {
            *slot = match (x.off[l], y.off[l]) {
                (Some(_), Some(_)) => return None,
                (Some(o), None) | (None, Some(o)) => Some(o),
                (None, None) => None,
            };
            if slot.is_some() && l >= width / 8 {
                return None;
            }
        }
        Some(ByteLanes { base: x.base, off })
    }
}

/// The word a fact describes when its lanes are exactly `0..n` (n = 2, 4 or 8) holding
/// consecutive bytes: (lowest offset, n, big-endian).
fn word(f: &ByteLanes) -> Option<(i64, usize, bool)> {
    let n = f.off.iter().take_while(|o| o.is_some()).count();
    if !matches!(n, 2 | 4 | 8) || f.off[n..].iter().any(Option::is_some) {
        return None;
    }
    let o: Vec<i64> = f.off[..n].iter().map(|o| o.unwrap_or(0)).collect();
    let step = |d: i64| o.windows(2).all(|w| w[0].checked_add(d) == Some(w[1]));
    if step(1) {
        Some((o[0], n, false))
    } else if step(-1) {
        Some((o[n - 1], n, true))
    } else {
        None
    }
}

impl super::translate::Tx<'_, '_> {
    /// `v` is the constant 0.
    fn is_zero(&self, v: Value) -> bool {
        let dfg = &self.b.func.dfg;
        match dfg.value_def(dfg.resolve_aliases(v)) {
            ValueDef::Result(i, _) => matches!(
                dfg.insts[i],
                InstructionData::UnaryImm { opcode: Opcode::Iconst, imm } if imm.bits() == 0
            ),
            _ => false,
        }
    }

    /// `a | b` (zero-extended from `width` bits) when both are facts over one base: the
    /// recomposed word loaded at once when the two complete one ([`word`]; its fact recorded),
    /// else their union, which the caller records on the OR it emits
    /// ([`ByteFacts::put`]). `None` when the OR recomposes nothing.
    pub(super) fn or_bytes(&mut self, a: Value, b: Value, width: usize) -> Option<OrBytes> {
        // `acc = 0; acc |= p[0] << 24; ...`: zero is the word of no bytes.
        for (z, other) in [(a, b), (b, a)] {
            if let (true, Some(f)) = (self.is_zero(z), self.bytes.get(other)) {
                self.bytes.put(z, ByteLanes { base: f.base, off: [None; LANES] });
            }
        }
        let f = self.bytes.union(a, b, width)?;
        let Some((off, n, big)) = word(&f) else { return Some(OrBytes::Lanes(f)) };
        let addr = self.b.ins().iadd_imm_s(f.base, off);
        let fl = MemFlagsData::new().with_notrap();
        let ins = self.b.ins();
        let w = match (n, big) {
            (2, false) => ins.uload16(I64, fl, addr, 0),
            (4, false) => ins.uload32(fl, addr, 0),
            (8, false) => ins.load(I64, fl, addr, 0),
            _ => {
                let ty = match n {
                    2 => I16,
                    4 => I32,
                    _ => I64,
                };
                let w = ins.load(ty, fl, addr, 0);
                let s = self.b.ins().bswap(w);
                if n == 8 {
                    s
                } else {
                    self.b.ins().uextend(I64, s)
                }
            }
        };
        self.bytes.fused += 1;
        self.bytes.put(w, f);
        Some(OrBytes::Word(w))
    }
}

/// What an OR of two byte-lane facts is ([`super::translate::Tx::or_bytes`]).
pub(super) enum OrBytes {
    /// The recomposed word, loaded at once: the OR's result.
    Word(Value),
    /// Not a whole word yet: the lanes of the OR the caller emits.
    Lanes(ByteLanes),
}

/// Removes the byte loads in `loads` whose values nothing uses (after their recomposition was
/// loaded as a word), with the arithmetic that only fed them. Live: every instruction that
/// has an effect or may trap (stores, calls, branches, returns, any other load) and what it
/// uses, transitively; branch arguments count as uses. Everything else is side-effect-free
/// arithmetic or one of `loads` (`notrap`, checked or proved: their checks are other
/// instructions, which are live), so dropping it changes no result. O(instructions).
pub(super) fn drop_dead_byte_loads(func: &mut Function, loads: &[Value]) {
    let dfg = &func.dfg;
    let candidates: HashSet<Inst> = loads
        .iter()
        .filter_map(|&v| match dfg.value_def(dfg.resolve_aliases(v)) {
            ValueDef::Result(i, _) => Some(i),
            _ => None,
        })
        .collect();
    let removable = |inst: Inst| {
        let op = dfg.insts[inst].opcode();
        candidates.contains(&inst)
            || !(op.is_call()
                || op.is_branch()
                || op.is_terminator()
                || op.is_return()
                || op.can_trap()
                || op.other_side_effects()
                || op.can_store()
                || op.can_load())
    };
    let mut live: SecondaryMap<Inst, bool> = SecondaryMap::new();
    let mut work: Vec<Inst> = Vec::new();
    let mut all: Vec<Inst> = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            all.push(inst);
            if !removable(inst) {
                live[inst] = true;
                work.push(inst);
            }
        }
    }
    while let Some(inst) = work.pop() {
        for v in dfg.inst_values(inst) {
            if let ValueDef::Result(def, _) = dfg.value_def(dfg.resolve_aliases(v)) {
                if !live[def] {
                    live[def] = true;
                    work.push(def);
                }
            }
        }
    }
    for inst in all {
        if !live[inst] {
            func.layout.remove_inst(inst);
        }
    }
}
