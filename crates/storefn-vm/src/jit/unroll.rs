//! Counted loops ([`crate::cfg::Cfg::counted_loops`]) emitted as copies of their body: all
//! their trips when few, else a ring of a few copies (docs/design/vm.md, "Unrolled counted
//! loops").

use super::guard::LatchSkip;
use super::translate::Tx;
use super::*;
use crate::cfg::CountedLoop;

/// Unroll a counted loop of at most this many trips ([`Tx::unroll`])...
const UNROLL_MAX_TRIPS: u64 = 64;
/// ... and at most this many body slots in all copies: code size and compile time stay
/// within a few times the loop's own (BPF-KV's 31-key scan: 30 trips x 7 slots).
const UNROLL_MAX_SLOTS: u64 = 512;

/// A counted loop of more trips (or slots) than full unrolling takes, but whose body is at most
/// this many slots, is emitted as a ring of [`PARTIAL_COPIES`] copies ([`Tx::unroll`]).
const PARTIAL_MAX_BODY_SLOTS: u64 = 24;
const PARTIAL_COPIES: usize = 4;

/// How a counted loop is emitted ([`Tx::unroll`]).
#[derive(Clone, Copy)]
pub(super) enum Copies {
    /// One copy per trip, then a copy that loops on itself.
    Full,
    /// This many copies in a ring; with a [`LatchSkip`], behind a test per pass that lets
    /// all copies but the last drop the latch's test ([`Tx::skipping_ring`]).
    Cyclic(usize, Option<LatchSkip>),
    /// A guarded ring with partial accumulators ([`super::reduce`]).
    Reduce(super::reduce::Reduction),
}

/// Unrolled slots in all of a function's loops: bounds the compile time and code size an
/// untrusted program can ask for (a program is at most `MAX_INSNS` slots; without this, many
/// short counted loops could each be copied 64 times).
const UNROLL_MAX_FUNCTION_SLOTS: u64 = 2048;

/// The program's slots plus one function's unrolled copies stay within this many in the
/// quick tier, and within [`UNROLL_MAX_TOTAL_OPT_SLOTS`] in the optimising one: the copies
/// go through Cranelift like any slot, and unrolling was ~40% of compiling a program of many
/// short counted loops (the `loops` shape: at 4,096 slots 13-17 -> 7.5-9 ms; at 1,024,
/// optimising, 10-12 ms with 2,048 copied slots). The largest programs of each tier get no
/// copies; WiredTiger's `lookup` (958 slots, optimising) and every bench workload keep theirs.
const UNROLL_MAX_TOTAL_SLOTS: u64 = 4096;
/// [`UNROLL_MAX_TOTAL_SLOTS`] for the optimising tier, whose cost per slot is a few times
/// the quick tier's.
const UNROLL_MAX_TOTAL_OPT_SLOTS: u64 = 2048;

/// Unrolled slots a function of a program of `slots` slots may emit.
pub(super) fn unroll_allowance(slots: usize, quick: bool) -> u64 {
    let slots = u64::try_from(slots).unwrap_or(u64::MAX);
    let total = if quick { UNROLL_MAX_TOTAL_SLOTS } else { UNROLL_MAX_TOTAL_OPT_SLOTS };
    UNROLL_MAX_FUNCTION_SLOTS.min(total.saturating_sub(slots))
}

impl Tx<'_, '_> {
    /// The counted loop starting at `pc` that is unrolled ([`UNROLL_MAX_TRIPS`],
    /// [`UNROLL_MAX_SLOTS`], within what is left of [`UNROLL_MAX_FUNCTION_SLOTS`]), if any;
    /// takes its slots from what is left.
    pub(super) fn unrolled_loop_at(&mut self, pc: usize) -> Option<(CountedLoop, Copies)> {
        // Sorted by header (`loops::counted_loops`): a search per slot, not a scan.
        let k = self.counted.binary_search_by_key(&pc, |l| l.header).ok()?;
        let l = self.counted[k];
        let body = (l.latch + 1 - l.header) as u64;
        let slots = body * l.trips;
        let reduction = || super::reduce::find(self.insns, self.cfg, self.charges, l);
        let (copies, slots) = if l.trips <= UNROLL_MAX_TRIPS && slots <= UNROLL_MAX_SLOTS {
            (Copies::Full, slots)
        } else if let Some(r) = reduction() {
            // The ring's copies and the rolled one; or a vector pass (counted as two bodies),
            // its scalar copy and the rolled one.
            let r = super::reduce::Reduction { vector: self.vectorises(l, &r), ..r };
            let copies = if r.vector { 4 } else { r.copies as u64 + 1 };
            (Copies::Reduce(r), body * copies)
        } else if body <= PARTIAL_MAX_BODY_SLOTS {
            // With a latch skip, the ring and a rolled copy for the last few trips.
            let skip = super::guard::latch_skip(self.insns, self.cfg, l);
            let copies = PARTIAL_COPIES as u64 + u64::from(skip.is_some());
            (Copies::Cyclic(PARTIAL_COPIES, skip), body * copies)
        } else {
            return None;
        };
        (slots <= self.unroll_left).then(|| {
            self.unroll_left -= slots;
            (l, copies)
        })
    }

    /// Emits counted loop `l` as `trips` copies of its body, copy k's back edge going to copy
    /// k + 1's header, then one more copy whose back edge goes to itself: the same control flow
    /// as the loop for any number of iterations (every exit stays in every copy), so the
    /// unrolling rests on no proof; the trip bound only decides how many copies are worth
    /// emitting (past it the rolled copy is never reached). The loop's budget was charged
    /// before it (its header is not a charge point), so the copies charge nothing. Within a
    /// copy the counter and the addresses it steps are constants or a constant away from the
    /// copy before, which Cranelift folds. Returns whether control falls out of the last slot
    /// (never: the last copy ends with its back edge).
    ///
    /// A loop of more trips ([`Copies::Cyclic`]) is emitted as a few copies in a ring, copy
    /// k's back edge entering copy k + 1 and the last copy's the first: again the loop's own
    /// control flow for any number of iterations, with one taken jump per ring instead of
    /// one per iteration and the steps of consecutive copies folded into address offsets.
    pub(super) fn unroll(
        &mut self,
        l: CountedLoop,
        copies: Copies,
        open: bool,
    ) -> Result<bool, JitError> {
        debug_assert_eq!(self.charges[l.header], 0, "a counted loop's header charges nothing");
        // `n` copies, a ring or a line whose last copy loops on itself.
        let (n, cyclic) = match copies {
            Copies::Full => (usize::try_from(l.trips).unwrap_or(usize::MAX) + 1, false),
            Copies::Cyclic(n, Some(skip)) => return self.skipping_ring(l, n, skip, open),
            Copies::Cyclic(n, None) => (n, true),
            Copies::Reduce(r) => return self.unroll_reduction(l, r, open),
        };
        let mut headers = Vec::with_capacity(n);
        headers.push(self.block(l.header).expect("a loop header starts a block"));
        for _ in 1..n {
            headers.push(self.b.create_block());
        }
        if open {
            self.flush_pending();
            self.b.ins().jump(headers[0], &[]);
        }
        // The last copy's back edge: the first (a ring) or itself.
        let back = if cyclic { headers[0] } else { headers[n - 1] };
        let outer = self.exit_edges.replace(l.header..=l.latch);
        let r = self.loop_copies(l, &headers, back, Layout::Inline);
        self.exit_edges = outer;
        r?;
        *self.block_slot(l.header) = Some(headers[0]);
        Ok(false)
    }

    /// Emits counted loop `l` as a ring of `n` copies behind `skip`'s test: the header's
    /// block holds the test, which enters the ring while the counter has room for `n - 1`
    /// more steps below the latch's bound, else a rolled copy out of line (the last few
    /// trips). In the ring the latch tests of all copies but the last are jumps (they would
    /// jump back: [`LatchSkip`]), and the last copy's back edge returns to the test. Every
    /// other exit stays in every copy, so this rests on nothing but that proof. Returns
    /// `false`, as [`Tx::unroll`].
    fn skipping_ring(
        &mut self,
        l: CountedLoop,
        n: usize,
        skip: LatchSkip,
        open: bool,
    ) -> Result<bool, JitError> {
        // Sealed once the ring's last copy, its other predecessor, is emitted.
        let test = self.enter_header(l, open);
        let ring: Vec<Block> = (0..n).map(|_| self.b.create_block()).collect();
        let rolled = self.cold_block();
        self.ring_test(skip, n, ring[0], rolled);
        self.skip_latch = Some(l.latch);
        let r = self.loop_copies(l, &ring, test, Layout::Inline);
        self.skip_latch = None;
        r?;
        self.loop_copies(l, &[rolled], rolled, Layout::Cold)?;
        self.b.seal_block(test);
        *self.block_slot(l.header) = Some(test);
        Ok(false)
    }

    /// Switches to the block of `l`'s header (after a jump there from the open block, if
    /// any), unsealed: the caller seals it once its predecessors are all emitted (the loop's
    /// back edges, unless they go to copies' headers). Returns it.
    pub(super) fn enter_header(&mut self, l: CountedLoop, open: bool) -> Block {
        let header = self.block(l.header).expect("a loop header starts a block");
        if open {
            self.flush_pending();
            self.b.ins().jump(header, &[]);
        }
        self.bytes.clear();
        self.b.switch_to_block(header);
        header
    }

    /// Emits `l` once per header in `headers`, copy k's back edge entering copy k + 1 and
    /// the last copy's `back`; `layout` places the copies' blocks. Control enters `headers[0]`
    /// by jumps the caller emitted, and never falls out of a copy (a loop's back edge).
    pub(super) fn loop_copies(
        &mut self,
        l: CountedLoop,
        headers: &[Block],
        back: Block,
        layout: Layout<'_>,
    ) -> Result<(), JitError> {
        let (unlikely, exits) = match layout {
            Layout::Hot { unlikely, exits } => (Some(unlikely), exits),
            Layout::Inline | Layout::Cold => (None, &[][..]),
        };
        for k in 0..headers.len() {
            let outer: Vec<(usize, Block, Block)> = exits
                .iter()
                .map(|&t| {
                    let to = self.block(t).expect("a jump target starts a block");
                    let via = self.cold_block();
                    *self.block_slot(t) = Some(via);
                    (t, to, via)
                })
                .collect();
            *self.block_slot(l.header) = Some(headers[k]);
            // Fresh blocks for this copy's interior: jumps inside the body only go forward and
            // nothing outside enters past the header, so all are created before use.
            for pc in l.header + 1..=l.latch {
                if self.block(pc).is_some() {
                    let cold = match layout {
                        Layout::Hot { .. } => unlikely.is_some_and(|u| u.contains(&pc)),
                        Layout::Cold => true,
                        Layout::Inline => false,
                    };
                    let blk = if cold { self.cold_block() } else { self.b.create_block() };
                    *self.block_slot(pc) = Some(blk);
                }
            }
            let (mut pc, mut open) = (l.header, false);
            let next = headers.get(k + 1).copied();
            while pc <= l.latch {
                if pc == l.latch {
                    *self.block_slot(l.header) = Some(next.unwrap_or(back));
                    if let (Some(to), true) = (next, self.skip_latch == Some(pc) && open) {
                        // A test the ring's guard proved jumps back (`super::guard`).
                        self.flush_pending();
                        self.b.ins().jump(to, &[]);
                        (open, pc) = (false, pc + 1);
                        continue;
                    }
                }
                (open, pc) = self.step(pc, open)?;
            }
            if open {
                return Err(invalid(l.latch, "a loop's back edge that falls through"));
            }
            for (t, to, via) in outer {
                *self.block_slot(t) = Some(to);
                self.enter(via);
                self.b.ins().jump(to, &[]);
            }
        }
        Ok(())
    }
}

/// Where [`Tx::loop_copies`] places a copy's blocks.
#[derive(Clone, Copy)]
pub(super) enum Layout<'a> {
    /// In line, in slot order (unrolled counted loops).
    Inline,
    /// All out of line (a guarded loop's checked copy and its rolled unchecked one).
    Cold,
    /// In line but for the `unlikely` body slots' blocks, and every exit to one of `exits`
    /// (the slots outside the body it reaches) through a block of the copy's own out of line:
    /// the registers a copy leaves with differ from the other copies', so Cranelift splits
    /// each exit edge into a block of moves, which it places right after the branch's block
    /// and which then stands between a copy and the next one (a taken jump per copy); out of
    /// line, the next copy falls through (a guarded loop's ring, `super::guard`).
    Hot { unlikely: &'a std::ops::Range<usize>, exits: &'a [usize] },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_programs_get_no_unrolled_copies() {
        assert_eq!(unroll_allowance(300, false), 1748);
        assert_eq!(unroll_allowance(1024, false), 1024);
        assert_eq!(unroll_allowance(1390, true), UNROLL_MAX_FUNCTION_SLOTS);
        assert_eq!(unroll_allowance(3000, true), 1096);
        assert_eq!(unroll_allowance(4096, true), 0);
        assert_eq!(unroll_allowance(65_536, true), 0);
    }
}
