//! The abstract state at one slot: the registers' values, the links between scalar registers,
//! and the scalars and pointers spilled to the analysed function's own frame (a callee starts
//! with no slot: its frame is new).
//!
//! **Links** (the Linux verifier's scalar ids): registers of one link class `k` hold
//! `base_k + off[r]` (mod 2^64) for one unknown `base_k` on every path reaching the slot. They
//! are made by `rX = rY` (a 32-bit move only when `rY` fits in 32 bits, so the zero-extension
//! changes nothing) and kept by `rX += c` (64-bit: modular, always exact; 32-bit: only when no
//! value of `rX` wraps, so the 32-bit sum is the 64-bit one). Any other write to a register
//! takes it out of its class. A branch that refines one register refines every register of its
//! class by the same range shifted by their offset difference, when the shifted range does not
//! wrap (the link itself holds modulo 2^64; only the range transfer needs the check).
//!
//! **Slots**: up to [`SLOTS`] spills `[r10 + at, r10 + at + size)` of the analysed function's
//! frame, each with the value the last store there wrote (a store narrower than 8 bytes: zero-extended on
//! the matching load). A store that may overlap a slot forgets it; a store the analysis cannot
//! place (through a pointer it lost, or one that may lie outside its object, where the stack
//! may be) and every call (helpers and callees may write the frame through a pointer) forget
//! all. Only a load of the same offset and size reads a slot back.

use super::{Base, Scal, Span, Val, FULL, U32_MAX};
use crate::program::STACK_FRAME_BYTES;
use std::ops::Index;

/// Frame slots a state tracks: clang spills a handful of loop counters and pointers under
/// register pressure (matmul: its row counter and four pointers). Each costs ~40 bytes of every
/// state the analysis keeps or queues.
pub(crate) const SLOTS: usize = 6;

/// Registers r0-r9 (r10 is the frame pointer; its accesses are proved syntactically), their
/// links and the tracked frame slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct State {
    regs: [Val; 10],
    /// Link class per register; 0: none.
    class: [u8; 10],
    /// Offset from the class' base; meaningless without a class.
    off: [i32; 10],
    /// Slot byte offsets from r10 (negative).
    slot_at: [i16; SLOTS],
    /// Slot widths in bytes; 0: the entry is unused.
    slot_size: [u8; SLOTS],
    slot_val: [Val; SLOTS],
}

impl Index<usize> for State {
    type Output = Val;
    fn index(&self, r: usize) -> &Val {
        &self.regs[r]
    }
}

impl State {
    /// Every register "anything" but r1 (the context), no link, no slot.
    pub(crate) fn entry() -> State {
        let mut regs = [FULL; 10];
        regs[1] = Val::Ptr(Base::Ctx, Span { lo: 0, hi: 0 });
        State {
            regs,
            class: [0; 10],
            off: [0; 10],
            slot_at: [0; SLOTS],
            slot_size: [0; SLOTS],
            slot_val: [FULL; SLOTS],
        }
    }

    /// The state a BPF-to-BPF callee starts in when called in state `st`: r1-r5 as the caller
    /// left them, except pointers into the caller's frame (the callee's r10 is another frame, and
    /// `Base::Stack` in its analysis means its own), r0 and r6-r9 anything (the verifier makes
    /// the callee write them before it reads them); no link and no slot (its frame is new).
    pub(crate) fn callee_entry(st: &State) -> State {
        let mut regs = [FULL; 10];
        for (to, &from) in regs[1..=5].iter_mut().zip(&st.regs[1..=5]) {
            if !matches!(from, Val::Ptr(Base::Stack, _)) {
                *to = from;
            }
        }
        State { regs, ..State::entry() }
    }

    /// `r = v`, linked to `link = (q, c)` (`r == q + c` on every path) when given.
    pub(crate) fn assign(&mut self, r: usize, v: Val, link: Option<(usize, i64)>) {
        let to = link.and_then(|(q, c)| self.class_of(q, c, r));
        self.regs[r] = v;
        (self.class[r], self.off[r]) = to.unwrap_or((0, 0));
    }

    /// The class and offset of `q + c`, giving `q` a class of its own if it has none (not for
    /// `q == r`: a register linked only to itself says nothing).
    fn class_of(&mut self, q: usize, c: i64, r: usize) -> Option<(u8, i32)> {
        if !matches!(self.regs[q], Val::Scalar(_)) || (self.class[q] == 0 && q == r) {
            return None;
        }
        let off = if self.class[q] == 0 { 0 } else { self.off[q] };
        let off = i32::try_from(i64::from(off) + c).ok()?;
        if self.class[q] == 0 {
            // At most nine other registers hold a class, so one of 1..=10 is free.
            let free = (1..=10u8).find(|k| !self.class.contains(k))?;
            (self.class[q], self.off[q]) = (free, 0);
        }
        Some((self.class[q], off))
    }

    /// `r`'s difference to `q` when they are linked: `r == q + d` (mod 2^64).
    fn delta(&self, r: usize, q: usize) -> Option<i64> {
        (self.class[r] != 0 && self.class[r] == self.class[q])
            .then(|| i64::from(self.off[r]) - i64::from(self.off[q]))
    }

    /// Narrows scalar `r` to `s` on a branch edge, and every register linked to it; `None`:
    /// no value is left (the edge cannot be taken).
    pub(crate) fn refine(&mut self, r: usize, s: Scal) -> Option<()> {
        let Val::Scalar(cur) = self.regs[r] else { return Some(()) };
        let s = s.clamp(cur.lo, cur.hi)?;
        self.regs[r] = Val::Scalar(s);
        for q in (0..10).filter(|&q| q != r) {
            let (Some(d), Val::Scalar(v)) = (self.delta(q, r), self.regs[q]) else { continue };
            let d = d.cast_unsigned();
            let (lo, hi) = (s.lo.wrapping_add(d), s.hi.wrapping_add(d));
            // `lo > hi`: the shifted range wraps, and is no interval.
            if lo <= hi {
                self.regs[q] = Val::Scalar(v.clamp(lo, hi)?);
            }
        }
        Some(())
    }

    /// After a call: r0-r5 are clobbered, and the frame may have been written.
    pub(crate) fn clobber_call(&mut self) {
        for r in 0..=5 {
            self.assign(r, FULL, None);
        }
        self.slot_size = [0; SLOTS];
    }

    /// A store of `n` bytes somewhere in `[r10 + lo, r10 + hi + n)` (`lo == hi`: exactly
    /// there) writing `v` (`None`: not a plain store, or a value not tracked); `None` for the
    /// place: anywhere, the frame included.
    pub(crate) fn store(&mut self, place: Option<(i64, i64)>, n: u8, v: Option<Val>) {
        let Some((lo, hi)) = place else {
            self.slot_size = [0; SLOTS];
            return;
        };
        let end = hi.saturating_add(i64::from(n));
        for k in 0..SLOTS {
            let at = i64::from(self.slot_at[k]);
            if self.slot_size[k] != 0 && at < end && lo < at + i64::from(self.slot_size[k]) {
                self.slot_size[k] = 0;
            }
        }
        let (Some(v), Ok(at)) = (v.map(|v| narrow(v, n)), i16::try_from(lo)) else { return };
        let in_frame = lo >= -(STACK_FRAME_BYTES as i64) && end <= 0;
        if lo != hi || v == FULL || !in_frame {
            return;
        }
        // A free entry, else the least informative one if `v` says more.
        let k = (0..SLOTS).find(|&k| self.slot_size[k] == 0).or_else(|| {
            let worst = (0..SLOTS).max_by_key(|&k| width(self.slot_val[k]))?;
            (width(self.slot_val[worst]) > width(v)).then_some(worst)
        });
        if let Some(k) = k {
            (self.slot_at[k], self.slot_size[k], self.slot_val[k]) = (at, n, v);
        }
    }

    /// The value an `n`-byte load at `r10 + at` reads when a slot holds it.
    pub(crate) fn slot(&self, at: i64, n: u8) -> Option<Val> {
        (0..SLOTS)
            .find(|&k| self.slot_size[k] == n && i64::from(self.slot_at[k]) == at)
            .map(|k| self.slot_val[k])
    }

    /// Whether every concrete state `o` admits is admitted by `self`.
    pub(crate) fn contains(&self, o: &State) -> bool {
        self.regs.iter().zip(&o.regs).all(|(x, y)| x.contains(*y))
            && (self.class == [0; 10] || self.links_hold_in(o))
            && (0..SLOTS).filter(|&k| self.slot_size[k] != 0).all(|k| {
                let at = i64::from(self.slot_at[k]);
                o.slot(at, self.slot_size[k]).is_some_and(|v| self.slot_val[k].contains(v))
            })
    }

    /// Whether every link of `self` holds in `o`.
    fn links_hold_in(&self, o: &State) -> bool {
        (0..10).all(|r| {
            // Each member of a class against its first member (links are transitive).
            let Some(q) = (0..r).find(|&q| self.delta(r, q).is_some()) else { return true };
            self.delta(r, q) == o.delta(r, q)
        })
    }

    /// The state admitting both (`widen`: each value through [`Val::widen`] with these
    /// thresholds, else [`Val::join`]): the links and slots both have.
    pub(crate) fn merge(&self, o: &State, widen: Option<&[u64]>) -> State {
        let val = |a: Val, b: Val| widen.map_or_else(|| a.join(b), |t| a.widen(b, t));
        let mut out = State::entry();
        out.regs = std::array::from_fn(|r| val(self.regs[r], o.regs[r]));
        for r in 0..10 {
            let common = (0..r).find_map(|q| {
                let d = self.delta(r, q)?;
                (o.delta(r, q) == Some(d)).then_some((q, d))
            });
            if let Some((q, d)) = common {
                if out.class[q] == 0 {
                    (out.class[q], out.off[q]) = (q as u8 + 1, 0);
                }
                if let Ok(off) = i32::try_from(i64::from(out.off[q]) + d) {
                    (out.class[r], out.off[r]) = (out.class[q], off);
                }
            }
        }
        let mut n = 0;
        for k in (0..SLOTS).filter(|&k| self.slot_size[k] != 0) {
            let (at, size) = (self.slot_at[k], self.slot_size[k]);
            let Some(b) = o.slot(i64::from(at), size) else { continue };
            let v = val(self.slot_val[k], b);
            if v != FULL {
                (out.slot_at[n], out.slot_size[n], out.slot_val[n]) = (at, size, v);
                n += 1;
            }
        }
        out
    }
}

/// What an `n`-byte load reads back after an `n`-byte store of `v`.
fn narrow(v: Val, n: u8) -> Val {
    if n >= 8 {
        return v;
    }
    let mask = (1u64 << (8 * u32::from(n))) - 1;
    match v {
        Val::Scalar(s) if s.hi <= mask => v,
        _ => super::scalar(0, mask),
    }
}

/// How little a slot's value says: a pointer most, then narrower scalars.
fn width(v: Val) -> u64 {
    match v {
        Val::Ptr(..) => 0,
        Val::Scalar(s) => (s.hi - s.lo).saturating_add(1),
    }
}

/// A 32-bit `wX += c` (c sign-extended from the immediate) is `rX + c` in 64 bits when no
/// value of `rX` leaves `[0, 2^32)`.
pub(crate) fn add32_exact(v: Val, c: i64) -> bool {
    let Val::Scalar(s) = v else { return false };
    s.hi <= U32_MAX
        && i128::from(s.lo) + i128::from(c) >= 0
        && i128::from(s.hi) + i128::from(c) <= i128::from(U32_MAX)
}
