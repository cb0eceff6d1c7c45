//! Counted loops: loops of any function whose number of iterations the range analysis bounds
//! (a callee's from the states at its call sites, [`crate::callees`]), so their whole budget
//! charge is paid once, before the loop (by the charge point of the function start or loop
//! header before it, in the same function), instead of at the header on every iteration ([`crate::cfg::Cfg::precharge`]; docs/design/vm.md, "Budget").
//!
//! A loop qualifies when all of this holds (every item checked here, syntactically or on the
//! range analysis' states):
//! - its header `h` (not a function start) is the target of exactly one backward jump, the
//!   latch `l`, and its body is the slot range `[h, l]`;
//! - nothing outside `[h, l]` jumps into `(h, l]` (the loop is entered only at `h`, by a
//!   path that has passed a charge point), no slot of the body jumps backward except `l` to
//!   `h` (so the body holds no other loop and no charge point), and the body makes no call;
//! - one register `r` is written exactly once in the body, by `r += c` (`c != 0`, a constant),
//!   in the latch's basic block (so every iteration that takes the back edge runs it once),
//!   or, in clang's shape `r += c; if r == N goto out; goto header`, in the block of the
//!   conditional jump that alone falls into an unconditional latch, before that jump;
//! - on every state the range analysis sees at `h`, `r` is a scalar in `[a, b]`, and for a
//!   rising counter (`c > 0`) `b + c` does not wrap (at 32 bits for `w += c`), for a falling
//!   one (`c < 0`, clang's `for (n = N; n != 0; n--)`) `a >= |c|` (and `b` fits 32 bits for
//!   `w += c`), so `r + c` does not wrap either.
//!
//! Then, within one entry of the loop, the values `r` holds at `h` are `e, e + c, e + 2c, ...`
//! (strictly rising or strictly falling, no wrap), each inside `[a, b]`, so `h` runs at most
//! `trips = (b - a) / |c| + 1` times. The engines run these loops exactly as any other code;
//! only the place and amount of the charge change, in the table both read.

use crate::cfg::{is_pseudo_call, Cfg};
use crate::insn::{
    Insn, BPF_ADD, BPF_ALU, BPF_ALU64, BPF_ATOMIC, BPF_CALL, BPF_EXIT, BPF_JA, BPF_JMP, BPF_JMP32,
    BPF_K, BPF_LD, BPF_LDX, BPF_STX,
};
use crate::program::Program;
use crate::ranges::{State, Val};

mod sets;
pub(crate) use sets::{block_loops, BlockLoop};

/// Largest charge a counted loop may be collapsed into (`(trips - 1)` iterations plus the
/// longest pass through it, in instructions). Charging a loop up front charges for every
/// iteration it may run, so a loop that leaves early is charged more than it ran; this bounds
/// the excess per entry of the loop to a few microseconds of work. BPF-KV's 31-key node scan
/// needs 216.
pub const MAX_LOOP_PRECHARGE_INSNS: u64 = 4096;

/// The same bound for a loop whose only way out is its counter's test ([`CountedLoop::exact`]):
/// it overcharges only when entered with the counter past its lowest value, so a long array
/// scan (`for (i = 0; i < 2048; i++)`) is paid once instead of once per element. A charge this
/// large is still one compare; it bounds how much a loop entered late may be overcharged.
pub const MAX_EXACT_LOOP_PRECHARGE_INSNS: u64 = 1 << 16;

/// A loop whose header runs at most `trips` times per entry (module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountedLoop {
    /// The loop header: the only entry, and the back edge's target.
    pub header: usize,
    /// The back edge: the only backward jump to `header`, the body's last slot.
    pub latch: usize,
    /// Most times `header` runs per entry of the loop.
    pub trips: u64,
    /// The only edge out of the body is the counter's test: entered with the counter at its
    /// lowest value, the loop runs exactly `trips` times.
    pub exact: bool,
}

/// The registers `i` may write (at most two; `None` for none). Calls write r0-r5, reported
/// as r0 (loop bodies with calls are refused before this is asked).
pub(crate) fn written(i: Insn) -> [Option<u8>; 2] {
    match i.class() {
        BPF_ALU | BPF_ALU64 | BPF_LDX | BPF_LD => [Some(i.dst), None],
        // Fetching atomics write src; cmpxchg writes r0 (conservatively: any atomic, both).
        BPF_STX if i.op & 0xe0 == BPF_ATOMIC => [Some(i.src), Some(0)],
        _ => [None, None],
    }
}

/// The counted loops of every function, given the range analysis' states per slot of the
/// program ([`crate::callees::analyze`]: a callee's from its call sites; none where the
/// analysis gave up, and then nothing there is counted). Sorted by header.
pub(crate) fn counted_loops(prog: &Program, cfg: &Cfg, states: &[Vec<State>]) -> Vec<CountedLoop> {
    let mut out = Vec::new();
    for f in 0..cfg.functions().len() {
        counted_in(prog, cfg, cfg.func_range(f), states, &mut out);
    }
    // Sorted by header: the JIT looks a slot's loop up by binary search.
    out.sort_unstable_by_key(|l| l.header);
    out
}

/// Appends the counted loops of the function of slots `[start, end)` to `out`.
fn counted_in(
    prog: &Program,
    cfg: &Cfg,
    (start, end): (usize, usize),
    states: &[Vec<State>],
    out: &mut Vec<CountedLoop>,
) {
    let insns = &prog.insns;
    // Backward edges of the function (from, to), and for every slot the lowest and highest
    // slot with an edge into it (fall-through included).
    let mut back: Vec<(usize, usize)> = Vec::new();
    let mut sources: Vec<(usize, usize)> = vec![(usize::MAX, 0); end - start];
    for pc in (start..end).filter(|&pc| !cfg.is_second_half(pc)) {
        for s in cfg.successors(insns, pc).into_iter().flatten() {
            if s <= pc {
                back.push((pc, s));
            }
            if let Some(src) = s.checked_sub(start).and_then(|k| sources.get_mut(k)) {
                *src = (src.0.min(pc), src.1.max(pc));
            }
        }
    }
    let mut from: Vec<usize> = back.iter().map(|&(f, _)| f).collect();
    let mut to: Vec<usize> = back.iter().map(|&(_, t)| t).collect();
    from.sort_unstable();
    to.sort_unstable();
    let within = |v: &[usize], lo: usize, hi: usize| {
        v.partition_point(|&x| x <= hi) - v.partition_point(|&x| x < lo)
    };
    for &(latch, header) in &back {
        // The latch is the only backward jump in the body and the header the only backward
        // target in it: so the bodies left are disjoint, and the scans below cost O(slots).
        if header == start || within(&from, header, latch) != 1 || within(&to, header, latch) != 1 {
            continue;
        }
        let closed = (header..=latch).filter(|&pc| !cfg.is_second_half(pc)).all(|pc| {
            let i = insns[pc];
            debug_assert!(!is_pseudo_call(i) || i.op & 0xf0 == BPF_CALL);
            // Entered only at the header: every edge into the rest comes from the body.
            let (lo, hi) = sources[pc - start];
            !i.is_call() && (pc == header || lo == usize::MAX || (lo >= header && hi <= latch))
        });
        if !closed {
            continue;
        }
        let Some(reaching) = states.get(header).filter(|s| !s.is_empty()) else {
            continue;
        };
        let trips = (0..10u8).filter_map(|r| trips_for(insns, cfg, header, latch, r, reaching));
        if let Some((trips, exact)) = trips.min_by_key(|&(t, exact)| (t, !exact)) {
            out.push(CountedLoop { header, latch, trips, exact });
        }
    }
}

/// The slot that tests whether to go round again: the latch itself when it is a conditional
/// jump, or in clang's shape (`r += c; if r == N goto out; goto header`) the conditional jump
/// just before an unconditional latch that only it falls into.
pub(crate) fn latch_test(insns: &[Insn], cfg: &Cfg, header: usize, latch: usize) -> usize {
    let i = insns[latch];
    let prev = latch.checked_sub(1).filter(|&p| p > header && !cfg.is_second_half(p));
    let only_fallen_into = |p: usize| {
        (header..=latch)
            .filter(|&q| q != p && !cfg.is_second_half(q))
            .all(|q| !cfg.successors(insns, q).contains(&Some(latch)))
    };
    match prev {
        Some(p)
            if i.op == BPF_JMP | BPF_JA
                && is_cond_jump(insns[p])
                && only_fallen_into(p)
                && cfg.is_block_start(latch) =>
        {
            p
        }
        _ => latch,
    }
}

fn is_cond_jump(i: Insn) -> bool {
    matches!(i.class(), BPF_JMP | BPF_JMP32) && !matches!(i.op & 0xf0, BPF_JA | BPF_CALL | BPF_EXIT)
}

/// Whether every edge out of `[header, latch]` leaves from `test`, which compares `r` with a
/// constant (module documentation of [`CountedLoop::exact`]).
fn exits_only_at_test(
    insns: &[Insn],
    cfg: &Cfg,
    (header, latch): (usize, usize),
    test: usize,
    r: u8,
) -> bool {
    let t = insns[test];
    if !is_cond_jump(t) || t.dst != r || t.op & 0x08 != BPF_K {
        return false;
    }
    (header..=latch).filter(|&pc| !cfg.is_second_half(pc) && pc != test).all(|pc| {
        let succ = cfg.successors(insns, pc);
        insns[pc].op != BPF_JMP | BPF_EXIT
            && succ.iter().flatten().all(|&s| (header..=latch).contains(&s))
    })
}

/// The trip bound if `r` is the loop's induction register (module documentation), and
/// whether the loop leaves only through `r`'s test.
fn trips_for(
    insns: &[Insn],
    cfg: &Cfg,
    header: usize,
    latch: usize,
    r: u8,
    reaching: &[State],
) -> Option<(u64, bool)> {
    let writes: Vec<usize> = (header..=latch)
        .filter(|&pc| !cfg.is_second_half(pc) && written(insns[pc]).contains(&Some(r)))
        .collect();
    let [at] = writes[..] else { return None };
    let test = latch_test(insns, cfg, header, latch);
    let latch_block = (header..=test).rev().find(|&pc| cfg.is_block_start(pc))?;
    if at < latch_block || at > test {
        return None;
    }
    let trips = counter_trips(insns[at], r, reaching)?;
    let exact = exits_only_at_test(insns, cfg, (header, latch), test, r);
    Some((trips, exact))
}

/// The most times a loop header runs per entry, when `i`, the body's only write of `r`, runs
/// once on every iteration and `reaching` are the range analysis' states at the header: for
/// `r += c` (constant `c != 0`) with `r` a scalar in `[a, b]` on every state and `r + c` not
/// wrapping, `(b - a) / |c| + 1` (module documentation).
fn counter_trips(i: Insn, r: u8, reaching: &[State]) -> Option<u64> {
    let is64 = i.class() == BPF_ALU64;
    let add_k = (is64 || i.class() == BPF_ALU) && i.op & 0xf0 == BPF_ADD && i.op & 0x08 == BPF_K;
    if !add_k || i.dst != r || i.off != 0 || i.imm == 0 {
        return None;
    }
    let step = u64::from(i.imm.unsigned_abs());
    let mut span: Option<(u64, u64)> = None;
    for st in reaching {
        let Val::Scalar(s) = st[usize::from(r)] else { return None };
        span = Some(span.map_or((s.lo, s.hi), |(lo, hi)| (lo.min(s.lo), hi.max(s.hi))));
    }
    let (lo, hi) = span?;
    let limit = if is64 { u64::MAX } else { u64::from(u32::MAX) };
    // No visit of the header may step the counter across the end of its width: then the
    // values it holds there are strictly monotonic (module documentation).
    let wraps = if i.imm > 0 { hi.checked_add(step)? > limit } else { lo < step || hi > limit };
    if wraps {
        return None;
    }
    Some((hi - lo) / step + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn::{
        BPF_DW, BPF_EXIT, BPF_JGT, BPF_JLT, BPF_JNE, BPF_MEM, BPF_MOV, BPF_X, BPF_XOR,
    };
    use crate::program::ProgType;
    use crate::testutil::{ins, xrp_program};
    use crate::VerifiedProgram;

    fn verified(insns: Vec<Insn>) -> VerifiedProgram {
        VerifiedProgram::new(xrp_program(insns)).expect("verifies")
    }

    const MOV: u8 = BPF_ALU64 | BPF_MOV | BPF_K;
    const ADD: u8 = BPF_ALU64 | BPF_ADD | BPF_K;
    const EXIT: u8 = BPF_JMP | BPF_EXIT;

    /// `r3 = start; loop: r0 ^= 5; [extra]; r3 += step; if r3 < end goto loop; exit` (r0 is
    /// not a counter: it is not added to).
    fn counted(start: i32, step: i32, end: i32, extra: Option<Insn>) -> Vec<Insn> {
        let mut v = vec![ins(MOV, 0, 0, 0, 0), ins(MOV, 3, 0, 0, start)];
        v.push(ins(BPF_ALU64 | BPF_XOR | BPF_K, 0, 0, 0, 5)); // 2: header
        v.extend(extra);
        v.push(ins(ADD, 3, 0, 0, step));
        let back = -(i16::try_from(v.len()).unwrap() - 1);
        v.push(ins(BPF_JMP | BPF_JLT | BPF_K, 3, 0, back, end));
        v.push(ins(EXIT, 0, 0, 0, 0));
        v
    }

    #[test]
    fn bpfkv_node_scan_is_charged_once_before_the_loop() {
        let p =
            crate::load_verified(storefn_progs::must("bench_node512"), Some("xrp"), ProgType::Xrp)
                .unwrap();
        // r3 runs 1..=30 at the header (#5); the latch is `if r3 != 31 goto -7` (#11).
        assert_eq!(
            p.cfg().counted_loops(),
            &[CountedLoop { header: 5, latch: 11, trips: 30, exact: false }]
        );
        // #0..#4, then 29 iterations of the 7-slot body, then the longest pass: the body up
        // to the latch and out through #12..#17 (13).
        assert_eq!(p.cfg().charge(0), 5 + 29 * 7 + 13);
        assert_eq!(p.cfg().charge(5), 0);
    }

    #[test]
    fn trips_follow_the_counter_range() {
        let p = verified(counted(0, 1, 10, None));
        assert_eq!(
            p.cfg().counted_loops(),
            &[CountedLoop { header: 2, latch: 4, trips: 10, exact: true }]
        );
        // #0, #1, then 9 iterations of 3 and a last pass of 4 (the latch and the exit).
        assert_eq!(p.cfg().charge(0), 2 + 9 * 3 + 4);
        let p = verified(counted(5, 3, 20, None));
        // r3 at the header: 5, 8, ..., 17 (the analysis keeps each).
        assert_eq!(p.cfg().counted_loops()[0].trips, 5);
    }

    #[test]
    fn falling_counters_are_counted_unless_they_may_wrap() {
        // lcg: `w3 = 1024; loop: ...; w3 += -1; if w3 == 0 goto out; goto loop`.
        let p =
            crate::load_verified(storefn_progs::must("bench/lcg"), None, ProgType::Xrp).unwrap();
        assert_eq!(
            p.cfg().counted_loops(),
            &[CountedLoop { header: 8, latch: 16, trips: 1024, exact: true }]
        );
        // `r3 = 10; loop: r0 ^= 5; r3 += -3; if r3 > 0 goto loop`: r3 is 10, 7, 4, 1 at the
        // header, but 1 - 3 wraps to a huge value that `> 0` takes back round, so the
        // analysis sees no bound below 3 and the loop is not counted (the budget stops it).
        let mut v = counted(10, -3, 0, None);
        v[4] = ins(BPF_JMP | BPF_JGT | BPF_K, 3, 0, -3, 0);
        let p = verified(v);
        assert!(p.cfg().counted_loops().is_empty(), "{:?}", p.cfg().counted_loops());
        // `r3 = 12; loop: ...; r3 += -3; if r3 > 0 goto loop`: 12, 9, 6, 3 (then 0 leaves).
        let mut v = counted(12, -3, 0, None);
        v[4] = ins(BPF_JMP | BPF_JGT | BPF_K, 3, 0, -3, 0);
        let p = verified(v);
        assert_eq!(
            p.cfg().counted_loops(),
            &[CountedLoop { header: 2, latch: 4, trips: 4, exact: true }]
        );
    }

    #[test]
    fn loops_without_a_proved_count_stay_charged_per_iteration() {
        let cases: Vec<(&str, Vec<Insn>)> = vec![
            // The counter is also written elsewhere in the body.
            ("second write", counted(0, 1, 10, Some(ins(ADD, 3, 0, 0, 1)))),
            (
                "loaded counter",
                counted(0, 1, 10, Some(ins(BPF_LDX | BPF_MEM | BPF_DW, 3, 10, -8, 0))),
            ),
            // A step of 0 never moves the counter.
            ("zero step", counted(0, 0, 10, Some(ins(BPF_ALU64 | BPF_MOV | BPF_X, 3, 4, 0, 0)))),
            // A counter beyond the analysis' exact states with no bound on the way back.
            ("unbounded", {
                let mut v = counted(0, 1, 10, None);
                v[4] = ins(BPF_JMP | BPF_JNE | BPF_X, 3, 4, -3, 0);
                v.insert(1, ins(MOV, 4, 0, 0, -1));
                // keep the jump target: header moved to #3
                v
            }),
        ];
        for (what, mut v) in cases {
            // Make r4 and the stack slot defined for the cases that read them.
            v.insert(0, ins(MOV, 4, 0, 0, 7));
            v.insert(1, ins(BPF_STX | BPF_MEM | BPF_DW, 10, 4, -8, 0));
            let p = verified(v);
            assert!(p.cfg().counted_loops().is_empty(), "{what}: {:?}", p.cfg().counted_loops());
        }
    }

    #[test]
    fn a_loop_entered_past_its_header_is_not_counted() {
        // #2 jumps into the body (#4), skipping the header (#3).
        let v = vec![
            ins(MOV, 0, 0, 0, 0),
            ins(MOV, 3, 0, 0, 0),
            ins(BPF_JMP | BPF_JNE | BPF_K, 0, 0, 1, 5), // 2: -> 4
            ins(ADD, 0, 0, 0, 1),                       // 3: header
            ins(ADD, 3, 0, 0, 1),                       // 4
            ins(BPF_JMP | BPF_JLT | BPF_K, 3, 0, -3, 10), // 5: -> 3
            ins(EXIT, 0, 0, 0, 0),
        ];
        let p = verified(v);
        assert!(p.cfg().counted_loops().is_empty());
        assert_ne!(p.cfg().charge(3), 0);
    }

    #[test]
    fn clangs_loop_shape_is_counted_and_a_single_exit_loop_is_charged_whole() {
        // sum64: `r2 += 8; if r2 == 4096 goto out; goto header`, 512 trips of 8 slots,
        // leaving only through the counter's test.
        let p =
            crate::load_verified(storefn_progs::must("bench/sum64"), None, ProgType::Xrp).unwrap();
        assert_eq!(
            p.cfg().counted_loops(),
            &[CountedLoop { header: 4, latch: 11, trips: 512, exact: true }]
        );
        assert_eq!(p.cfg().charge(4), 0);
        // #0..#3, 511 iterations of #4..#11, then #4..#10 and the way out (#12..#16).
        assert_eq!(p.cfg().charge(0), 4 + 511 * 8 + 7 + 5);
        // The histogram's 2048 bytes: 13 slots an iteration, more than the ordinary bound.
        let p = crate::load_verified(storefn_progs::must("bench/histogram"), None, ProgType::Xrp)
            .unwrap();
        let l = p.cfg().counted_loops();
        assert!(l.iter().any(|l| l.trips == 2048 && l.exact), "{l:?}");
    }

    #[test]
    fn a_loop_with_a_second_exit_is_not_exact() {
        // `counted` with a forward jump out of the body at #3.
        let v = counted(0, 1, 10, Some(ins(BPF_JMP | BPF_JNE | BPF_K, 0, 0, 2, 3)));
        let p = verified(v);
        assert_eq!(p.cfg().counted_loops().len(), 1);
        assert!(!p.cfg().counted_loops()[0].exact);
        // 3000 trips of an exact loop: charged whole (under MAX_EXACT_LOOP_PRECHARGE_INSNS).
        let p = verified(counted(0, 1, 3000, None));
        assert_eq!(p.cfg().counted_loops()[0].trips, 3000);
    }

    #[test]
    fn a_loop_too_long_to_charge_at_once_stays_per_iteration() {
        // 3 slots x 30000 trips: more than MAX_EXACT_LOOP_PRECHARGE_INSNS.
        let p = verified(counted(0, 1, 30000, None));
        assert!(p.cfg().counted_loops().is_empty());
        assert_eq!(p.cfg().charge(2), 4);
    }
}

/// Random counted loops on both engines: what the budget charges covers what runs.
#[cfg(test)]
pub(crate) mod random {
    use crate::insn::{
        Insn, BPF_ADD, BPF_ALU, BPF_ALU64, BPF_DW, BPF_EXIT, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JGT,
        BPF_JLE, BPF_JLT, BPF_JMP, BPF_JNE, BPF_K, BPF_LDX, BPF_MEM, BPF_MOV, BPF_STX, BPF_XOR,
    };
    use crate::jit::JitProgram;
    use crate::program::STACK_BYTES;
    use crate::testutil::{ins, stack_env, xrp_program};
    use crate::{VerifiedProgram, VmError};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Constants in r0-r9, `r = a`, a loop whose body mixes arithmetic (on the counter too,
    /// now and then), stack traffic and forward jumps (inside the body, onto the latch
    /// block, out of the loop), a latch block `r += c; if r <op> K goto header` (or clang's
    /// `r += c; if r == K goto out; goto header`), a tail.
    pub(crate) fn gen(seed: u64) -> Vec<Insn> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut v: Vec<Insn> = (0..10)
            .map(|r| ins(BPF_ALU64 | BPF_MOV | BPF_K, r, 0, 0, rng.gen_range(0..40)))
            .collect();
        let r = rng.gen_range(0..10u8);
        // A falling counter now and then (`for (n = a; n != k; n -= step)`), started high
        // enough that most of them stay above zero.
        let down = rng.gen_bool(0.25);
        let a = if down { rng.gen_range(40..200) } else { rng.gen_range(0..20) };
        v.push(ins(BPF_ALU64 | BPF_MOV | BPF_K, r, 0, 0, a));
        let header = v.len();
        let body = rng.gen_range(1..10usize);
        let inc = header + body;
        // clang's shape: `r += c; if r == K goto out; goto header`.
        let clang = rng.gen_bool(0.3);
        let (latch, tail) = (inc + 1 + usize::from(clang), 2usize);
        let exit = latch + 1 + tail;
        for pc in header..inc {
            let q = if rng.gen_bool(0.1) { r } else { rng.gen_range(0..10u8) };
            v.push(match rng.gen_range(0..6) {
                0 | 1 => ins(BPF_ALU64 | BPF_XOR | BPF_K, q, 0, 0, rng.gen_range(0..8)),
                2 => ins(BPF_STX | BPF_MEM | BPF_DW, 10, q, -8 * rng.gen_range(1..4), 0),
                3 => ins(BPF_LDX | BPF_MEM | BPF_DW, q, 10, -8 * rng.gen_range(1..4), 0),
                _ => {
                    let to = rng.gen_range(pc + 1..=exit);
                    ins(BPF_JMP | BPF_JNE | BPF_K, q, 0, (to - pc - 1) as i16, rng.gen_range(0..8))
                }
            });
        }
        let step = rng.gen_range(1..4) * if down { -1 } else { 1 };
        let class = if rng.gen_bool(0.3) { BPF_ALU } else { BPF_ALU64 };
        v.push(ins(class | BPF_ADD | BPF_K, r, 0, 0, step));
        let (op, k) = match rng.gen_range(0..3) {
            0 => (BPF_JNE, a + step * rng.gen_range(1..60)),
            1 if down => (BPF_JGT, rng.gen_range(0..a)),
            1 => (BPF_JLT, rng.gen_range(0..200)),
            _ if down => (BPF_JGE, rng.gen_range(0..a)),
            _ => (BPF_JLE, rng.gen_range(0..200)),
        };
        let back = (header as i16) - (latch as i16) - 1;
        if clang {
            // Sometimes off the counter's class (never met: the budget stops it).
            let k = a + step * rng.gen_range(1..60) + i32::from(rng.gen_bool(0.1));
            v.push(ins(BPF_JMP | BPF_JEQ | BPF_K, r, 0, 1, k));
            v.push(ins(BPF_JMP | BPF_JA, 0, 0, back, 0));
        } else {
            v.push(ins(BPF_JMP | op | BPF_K, r, 0, back, k));
        }
        for _ in 0..tail {
            v.push(ins(BPF_ALU64 | BPF_ADD | BPF_K, rng.gen_range(0..10), 0, 0, 1));
        }
        v.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
        assert_eq!(v.len(), exit + 1);
        v
    }

    /// (result, instructions charged, instructions executed) on the interpreter; (result,
    /// instructions charged, 0) on the JIT.
    pub(crate) fn run(
        prog: &VerifiedProgram,
        budget: u64,
        jit: Option<&JitProgram>,
    ) -> (Result<u64, VmError>, u64, u64) {
        let mut stack = vec![0u64; STACK_BYTES / 8];
        let top = stack.as_mut_ptr() as u64 + STACK_BYTES as u64;
        let mut env = stack_env(top, budget);
        let mut executed = 0;
        // SAFETY: the only region is `stack`, alive and not borrowed during the call; no host
        // state; r1 is never dereferenced (the programs overwrite it first); xrp_min_bytes is
        // (0, 0): no data or scratch access is proved.
        let r = unsafe {
            match jit {
                Some(j) => j.run(&mut env, 0, top),
                None => crate::interp::run_counted(prog, &mut env, 0, top, &mut executed),
            }
        };
        (r, budget - env.insns_left, executed)
    }

    /// Runs `prog` under `budget` on both engines and checks that the interpreter executed
    /// no more than it charged, the JIT gives the same result with the same budget left, and
    /// a finished run fits exactly what it spent (one less stops it). Whether it finished
    /// (else the budget stopped it; any other error fails).
    pub(crate) fn same_stop(
        prog: &VerifiedProgram,
        jit: &JitProgram,
        budget: u64,
        what: &str,
    ) -> bool {
        let (r, charged, executed) = run(prog, budget, None);
        let what = format!("{what} budget {budget}: {:?}", prog.insns);
        assert!(executed <= charged, "{what}: ran {executed}, charged {charged}");
        assert_eq!(run(prog, budget, Some(jit)).0, r, "{what}: JIT");
        assert_eq!(run(prog, budget, Some(jit)).1, charged, "{what}: JIT budget left");
        match r {
            Ok(v) => {
                assert_eq!(run(prog, charged, None).0, Ok(v), "{what}: exact fit");
                let short = run(prog, charged - 1, None).0;
                assert!(
                    matches!(short, Err(VmError::BudgetExhausted { .. })),
                    "{what}: one short gave {short:?}"
                );
                true
            }
            Err(VmError::BudgetExhausted { .. }) => false,
            Err(e) => panic!("{what}: {e}"),
        }
    }

    /// [`same_stop`] under budgets just short of `prog`'s entry charge (which holds a counted
    /// loop's whole charge), exactly it, one more, a small random one (inside uncounted
    /// loops) and plenty: how many runs finished and how many the budget stopped.
    pub(crate) fn around_the_entry_charge(
        prog: &VerifiedProgram,
        jit: &JitProgram,
        seed: u64,
    ) -> (usize, usize) {
        let entry = u64::from(prog.cfg().charge(0));
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xabcd);
        let budgets = [entry - 1, entry, entry + 1, rng.gen_range(1..64), 5000];
        let finished =
            budgets.iter().filter(|&&b| same_stop(prog, jit, b, &format!("seed {seed}"))).count();
        (finished, budgets.len() - finished)
    }

    #[test]
    fn counted_loops_charge_at_least_what_runs_the_same_on_both_engines() {
        let (mut counted, mut falling, mut finished, mut stopped) = (0, 0, 0, 0);
        for seed in 0..3000u64 {
            let Ok(prog) = VerifiedProgram::new(xrp_program(gen(seed))) else { continue };
            assert_eq!(prog.xrp_min_bytes(), (0, 0));
            let jit = JitProgram::compile(&prog).unwrap();
            let counts = !prog.cfg().counted_loops().is_empty();
            counted += usize::from(counts);
            // The generator adds a negative constant only as a falling counter's step.
            let add_k = [BPF_ALU | BPF_ADD | BPF_K, BPF_ALU64 | BPF_ADD | BPF_K];
            let step_down = |i: &Insn| add_k.contains(&i.op) && i.imm < 0;
            falling += usize::from(counts && prog.insns.iter().any(step_down));
            let (f, s) = around_the_entry_charge(&prog, &jit, seed);
            (finished, stopped) = (finished + f, stopped + s);
        }
        assert!(
            counted > 500 && falling > 100 && finished > 1000 && stopped > 1000,
            "counted {counted} ({falling} falling), finished {finished}, stopped {stopped}"
        );
    }
}

/// Many counted loops in one program: all are counted, the JIT unrolls only as many as its
/// per-function allowance takes and emits the rest rolled, and both engines still agree.
#[cfg(test)]
mod many {
    use crate::insn::{BPF_ADD, BPF_ALU64, BPF_EXIT, BPF_JLT, BPF_JMP, BPF_K, BPF_MOV};
    use crate::jit::JitProgram;
    use crate::program::STACK_BYTES;
    use crate::testutil::{ins, stack_env, xrp_program};
    use crate::VerifiedProgram;

    #[test]
    fn many_counted_loops_all_counted_and_the_jit_agrees() {
        const LOOPS: i32 = 300;
        let mut v = vec![ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0)];
        for _ in 0..LOOPS {
            // r3 = 0; do { r0 += 1; r3 += 1 } while (r3 < 30)
            v.push(ins(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, 0));
            v.push(ins(BPF_ALU64 | BPF_ADD | BPF_K, 0, 0, 0, 1));
            v.push(ins(BPF_ALU64 | BPF_ADD | BPF_K, 3, 0, 0, 1));
            v.push(ins(BPF_JMP | BPF_JLT | BPF_K, 3, 0, -3, 30));
        }
        v.push(ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
        let prog = VerifiedProgram::new(xrp_program(v)).unwrap();
        assert_eq!(prog.cfg().counted_loops().len(), LOOPS as usize);
        let jit = JitProgram::compile(&prog).unwrap();
        let mut stack = vec![0u64; STACK_BYTES / 8];
        let top = stack.as_mut_ptr() as u64 + STACK_BYTES as u64;
        let charge = u64::from(prog.cfg().charge(0));
        for budget in [charge - 1, charge] {
            let (mut a, mut b) = (stack_env(top, budget), stack_env(top, budget));
            // SAFETY: the only region is `stack`, alive and not borrowed during the calls; no
            // host state; nothing is proved about data or scratch.
            let (j, i) =
                unsafe { (jit.run(&mut a, 0, top), crate::interp::run(&prog, &mut b, 0, top)) };
            assert_eq!(j, i, "budget {budget}");
            assert_eq!(a.insns_left, b.insns_left, "budget {budget}");
        }
        let mut env = stack_env(top, charge);
        // SAFETY: as above.
        assert_eq!(unsafe { jit.run(&mut env, 0, top) }, Ok(30 * LOOPS as u64));
    }
}
