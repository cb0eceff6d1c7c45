//! The range analysis ([`crate::ranges`]) of every function of a program, a BPF-to-BPF callee
//! starting from the states of r1-r5 at its call sites.
//!
//! The verifier refuses recursion, so the call graph is acyclic: functions are analysed in a
//! topological order of it, callers first, and when a function's turn comes every call site
//! that can reach it has been seen, with every state the caller's analysis keeps there. The
//! callee starts from those states ([`State::callee_entry`]: r1-r5 as at the call, pointers
//! into the caller's frame forgotten; r0 and r6-r9 anything), distinct ones kept apart up to
//! [`ENTRY_STATES`], past that joined into one. So a function called from two sites gets both
//! sites' states (or their join), and an argument unknown at any site is unknown in it: every
//! run of the callee starts in a state one of its entry states contains, because every run of a
//! call site is in a state the caller's analysis keeps there. In the caller, a call clobbers
//! r0-r5 (r0 is not taken from the callee's exits) and keeps r6-r9, which the callee's frame
//! saves and restores.
//!
//! A function no analysed path calls gets no entry state, so nothing in it is proved or counted
//! (no run reaches it). When the analysis gives up ([`ranges::MAX_ARRIVALS`] over the whole
//! program, which bounds verification time whatever the call graph), that function and every
//! function after it in the order get nothing.

use crate::cfg::{is_pseudo_call, rel_target, Cfg};
use crate::program::Program;
use crate::ranges::{Analysis, State};

/// Distinct entry states a callee keeps before they are joined into one: a function called
/// from a few sites with different arguments is analysed once per site's state, while one
/// called from a loop (a state per iteration) is analysed once, with their join.
pub(crate) const ENTRY_STATES: usize = 8;

/// Per slot of the program: the states the range analysis keeps there (empty: no analysed path
/// reaches the slot, or its function's analysis gave up).
pub(crate) fn analyze(prog: &Program, cfg: &Cfg) -> Vec<Vec<State>> {
    let mut out = vec![Vec::new(); prog.insns.len()];
    let nfuncs = cfg.functions().len();
    let mut entries: Vec<Vec<State>> = vec![Vec::new(); nfuncs];
    entries[0].push(State::entry());
    let mut analysis = Analysis::new(prog, cfg);
    for f in callers_first(prog, cfg) {
        let from = std::mem::take(&mut entries[f]);
        if from.is_empty() {
            continue;
        }
        let mut at_call = |pc: usize, st: &State| {
            if let Some(g) = callee(prog, cfg, pc) {
                add_entry(&mut entries[g], State::callee_entry(st));
            }
        };
        let (start, end) = cfg.func_range(f);
        if analysis.function(f, &from, &mut at_call, &mut out[start..end]).is_none() {
            // Nothing of this function, nor of any after it (the budget is spent).
            out[start..end].iter_mut().for_each(Vec::clear);
            break;
        }
    }
    out
}

/// The function the BPF-to-BPF call at `pc` enters (`None` only for a target the verifier
/// would have refused).
fn callee(prog: &Program, cfg: &Cfg, pc: usize) -> Option<usize> {
    let t = rel_target(&prog.insns, pc, i64::from(prog.insns[pc].imm))?;
    Some(cfg.func_of(t))
}

/// Adds `st` to a callee's entry states: dropped when one of them contains it; past
/// [`ENTRY_STATES`] all are joined into one.
fn add_entry(entries: &mut Vec<State>, st: State) {
    if entries.iter().any(|e| e.contains(&st)) {
        return;
    }
    entries.push(st);
    if entries.len() > ENTRY_STATES {
        let joined = entries.iter().skip(1).fold(entries[0], |acc, s| acc.merge(s, None));
        entries.clear();
        entries.push(joined);
    }
}

/// Function indices in a topological order of the call graph, callers before callees
/// (Kahn's algorithm over the call sites; the verifier refused cycles).
fn callers_first(prog: &Program, cfg: &Cfg) -> Vec<usize> {
    let nfuncs = cfg.functions().len();
    let mut calls: Vec<Vec<usize>> = vec![Vec::new(); nfuncs];
    let mut callers = vec![0usize; nfuncs];
    for (f, out) in calls.iter_mut().enumerate() {
        let (start, end) = cfg.func_range(f);
        for pc in (start..end).filter(|&pc| !cfg.is_second_half(pc)) {
            if is_pseudo_call(prog.insns[pc]) {
                if let Some(g) = callee(prog, cfg, pc) {
                    out.push(g);
                    callers[g] += 1;
                }
            }
        }
    }
    let mut ready: Vec<usize> = (0..nfuncs).rev().filter(|&f| callers[f] == 0).collect();
    let mut order = Vec::with_capacity(nfuncs);
    while let Some(f) = ready.pop() {
        order.push(f);
        for &g in &calls[f] {
            callers[g] -= 1;
            if callers[g] == 0 {
                ready.push(g);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use crate::insn::{
        Insn, BPF_ADD, BPF_ALU64, BPF_AND, BPF_B, BPF_CALL, BPF_DW, BPF_EXIT, BPF_JA, BPF_JEQ,
        BPF_JMP, BPF_K, BPF_LDX, BPF_MEM, BPF_MOV, BPF_PSEUDO_CALL, BPF_ST, BPF_X,
    };
    use crate::loops::CountedLoop;
    use crate::program::ProgType;
    use crate::testutil::{ins, xrp_program};
    use crate::VerifiedProgram;

    const LDX_DW: u8 = BPF_LDX | BPF_MEM | BPF_DW;

    fn mov(dst: u8, imm: i32) -> Insn {
        ins(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)
    }

    fn mov_reg(dst: u8, src: u8) -> Insn {
        ins(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0)
    }

    fn and(dst: u8, imm: i32) -> Insn {
        ins(BPF_ALU64 | BPF_AND | BPF_K, dst, 0, 0, imm)
    }

    fn exit() -> Insn {
        ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
    }

    /// The entry: `r6 = ctx->data; r7 = ctx->scratch; r8 = scratch[0]` (any value), r9 the
    /// context, then
    /// each of `sites` (the argument setup of one call of the callee), the call, and
    /// `r0 = 0; exit`; then `callee`. Returns the program and the callee's first slot.
    fn program(sites: &[Vec<Insn>], callee: &[Insn]) -> (VerifiedProgram, usize) {
        let mut p = vec![ins(LDX_DW, 6, 1, 0, 0), ins(LDX_DW, 7, 1, 272, 0)];
        p.extend([ins(LDX_DW, 8, 7, 0, 0), mov_reg(9, 1)]);
        let calls = sites.iter().map(|s| s.len() + 1).sum::<usize>();
        let start = p.len() + calls + 2;
        for site in sites {
            p.extend_from_slice(site);
            let rel = i32::try_from(start - p.len() - 1).unwrap();
            p.push(ins(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, rel));
        }
        p.extend([mov(0, 0), exit()]);
        assert_eq!(p.len(), start);
        p.extend_from_slice(callee);
        (VerifiedProgram::new(xrp_program(p)).expect("verifies"), start)
    }

    /// `r1 += r2; r0 = *(u8 *)(r1 + 0); exit`: a byte at base + index.
    fn byte_at() -> [Insn; 3] {
        [
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 1, 2, 0, 0),
            ins(BPF_LDX | BPF_MEM | BPF_B, 0, 1, 0, 0),
            exit(),
        ]
    }

    /// A call site passing `base` and `r8 & mask` (the entry's unknown value, masked).
    fn site(base: u8, mask: Option<i32>) -> Vec<Insn> {
        let mut s = vec![mov_reg(1, base), mov_reg(2, 8)];
        s.extend(mask.map(|m| and(2, m)));
        s
    }

    #[test]
    fn a_callee_access_is_proved_from_its_call_sites_arguments() {
        let (p, f) = program(&[site(6, Some(1023))], &byte_at());
        assert!(p.access_in_bounds(f + 1), "data + [0, 1023]");
        assert_eq!(p.xrp_min_bytes(), (1024, 8));
        // Two sites with the same base and bounded indices: both kept, both in bounds.
        let (p, f) = program(&[site(6, Some(1023)), site(6, Some(4095))], &byte_at());
        assert!(p.access_in_bounds(f + 1));
        assert_eq!(p.xrp_min_bytes(), (4096, 8));
        // A different base at the other site, each in its own view: proved on both paths.
        let (p, f) = program(&[site(6, Some(1023)), site(7, Some(255))], &byte_at());
        assert!(p.access_in_bounds(f + 1));
        assert_eq!(p.xrp_min_bytes(), (1024, 256));
    }

    #[test]
    fn a_callee_access_is_not_proved_when_any_call_site_could_break_it() {
        let checked = |sites: &[Vec<Insn>]| {
            let (p, f) = program(sites, &byte_at());
            assert!(!p.access_in_bounds(f + 1), "{sites:?}");
            assert_eq!(p.xrp_min_bytes(), (0, 8));
        };
        // Another site passes an unbounded index.
        checked(&[site(6, Some(1023)), site(6, None)]);
        // Another site's index is past the view.
        checked(&[site(6, Some(1023)), site(6, Some(8191))]);
        // Another site passes another base, through which the index leaves its bounds
        // (the context is 288 bytes).
        checked(&[site(6, Some(1023)), site(9, Some(1023))]);
        // A pointer into the caller's frame is forgotten at the call: never the callee's own.
        checked(&[vec![mov_reg(1, 10), ins(BPF_ALU64 | BPF_ADD | BPF_K, 1, 0, 0, -16), mov(2, 8)]]);
    }

    #[test]
    fn past_the_entry_state_bound_the_sites_are_joined() {
        // Nine sites, each a constant index: joined into data + [0, 8 * 8] (still proved).
        let data = |k: i32| vec![mov_reg(1, 6), mov(2, 8 * k)];
        let sites: Vec<Vec<Insn>> = (0..=8).map(data).collect();
        let (p, f) = program(&sites, &byte_at());
        assert!(p.access_in_bounds(f + 1));
        assert_eq!(p.xrp_min_bytes(), (65, 8));
        // Seven through data and one through the scratch: kept apart, each in its view.
        let scratch = vec![mov_reg(1, 7), mov(2, 0)];
        let mut sites: Vec<Vec<Insn>> = (0..7).map(data).collect();
        sites.push(scratch.clone());
        let (p, f) = program(&sites, &byte_at());
        assert!(p.access_in_bounds(f + 1));
        // Eight and one: nine states, joined, and two bases join to an unknown value.
        sites.insert(0, data(7));
        let (p, f) = program(&sites, &byte_at());
        assert!(!p.access_in_bounds(f + 1));
    }

    /// A callee whose counter starts at its argument r2: `r3 = r2; r0 = 0; header:
    /// r4 = r1; r4 += r3; r5 = *(u8 *)(r4 + 0); r0 += r5; r3 += 1; if r3 == 200 goto out;
    /// goto header; out: exit` (clang's shape).
    fn summing() -> Vec<Insn> {
        vec![
            mov_reg(3, 2),
            mov(0, 0),
            mov_reg(4, 1), // 2: header
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 4, 3, 0, 0),
            ins(BPF_LDX | BPF_MEM | BPF_B, 5, 4, 0, 0), // 4: the load
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 0, 5, 0, 0),
            ins(BPF_ALU64 | BPF_ADD | BPF_K, 3, 0, 0, 1),
            ins(BPF_JMP | BPF_JEQ | BPF_K, 3, 0, 1, 200),
            ins(BPF_JMP | BPF_JA, 0, 0, -7, 0), // 8: latch
            exit(),
        ]
    }

    #[test]
    fn a_callee_loop_is_counted_from_its_arguments_range() {
        let (p, f) = program(&[site(6, Some(127))], &summing());
        let want = CountedLoop { header: f + 2, latch: f + 8, trips: 200, exact: true };
        assert_eq!(p.cfg().counted_loops(), &[want]);
        assert_eq!(p.cfg().charge(f + 2), 0, "the header charges nothing");
        // The callee's start pays: #0..#1, 199 iterations of 7, the last pass (6 + exit).
        assert_eq!(p.cfg().charge(f), 2 + 199 * 7 + 7);
        assert!(p.access_in_bounds(f + 4), "data + [0, 126 + 199]");
        // One site with an unbounded start: the counter may start anywhere.
        let (p, f) = program(&[site(6, Some(127)), site(6, None)], &summing());
        assert!(p.cfg().counted_loops().is_empty());
        assert_ne!(p.cfg().charge(f + 2), 0);
        assert!(!p.access_in_bounds(f + 4));
    }

    #[test]
    fn alternate_is_proved_and_counted_in_its_called_function() {
        let p = crate::load_verified(storefn_progs::must("bench/alternate"), None, ProgType::Xrp)
            .unwrap();
        let f = p.cfg().functions()[1];
        let (proved, all) = p.proved_accesses();
        assert_eq!((proved, all), (all, 7));
        // `d[(at + i) & 32767]` with at < 3840, i < 256: [0, 4094]; key = scratch + 64 + i.
        assert_eq!(p.xrp_min_bytes(), (4095, 320));
        let l = p.cfg().counted_loops();
        assert!(l.len() == 1 && l[0].trips == 256 && l[0].exact && l[0].header > f, "{l:?}");
    }

    /// `loops::random::gen`'s program as a callee whose counter starts at its argument r1:
    /// the entry passes `a` (and, at a second site now and then, `a2`: both reach the
    /// callee), or an unknown value (then the loop is not counted). A second call after the
    /// first keeps the callee's start a charge point the budget can run out at twice.
    fn gen_called(seed: u64) -> Vec<Insn> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ 0x5eed);
        let mut callee = crate::loops::random::gen(seed);
        let a = callee[10].imm;
        // Keep r1 (the prologue's `r1 = c` becomes `r1 += 0`) and start the counter there.
        callee[1] = ins(BPF_ALU64 | BPF_ADD | BPF_K, 1, 0, 0, 0);
        callee[10] = mov_reg(callee[10].dst, 1);
        let first = match rng.gen_range(0..5) {
            0 => ins(LDX_DW, 1, 10, -8, 0), // unknown: loaded from the stack
            _ => mov(1, a),
        };
        let second = if rng.gen_bool(0.5) { a } else { a + rng.gen_range(0..5) };
        // The unknown start is below the known ones: counting from them alone would
        // undercharge.
        let mut p = vec![
            ins(BPF_ST | BPF_MEM | BPF_DW, 10, 0, -8, (a - 3).max(0)),
            first,
            ins(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, 5), // -> 8
            mov_reg(6, 0),
            mov(1, second),
            ins(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, 2), // -> 8
            ins(BPF_ALU64 | BPF_ADD | BPF_X, 0, 6, 0, 0),
            exit(),
        ];
        p.append(&mut callee);
        p
    }

    #[test]
    fn counted_loops_in_callees_stop_at_the_same_instruction_on_both_engines() {
        use crate::jit::JitProgram;
        use crate::loops::random::same_stop;
        let (mut counted, mut finished, mut stopped) = (0, 0, 0);
        for seed in 0..1500u64 {
            let Ok(prog) = VerifiedProgram::new(xrp_program(gen_called(seed))) else { continue };
            let jit = JitProgram::compile(&prog).unwrap();
            let f = prog.cfg().functions()[1];
            counted += usize::from(prog.cfg().counted_loops().iter().any(|l| l.header > f));
            let (e, c) = (u64::from(prog.cfg().charge(0)), u64::from(prog.cfg().charge(f)));
            // Around the entry's charge and each of the callee's (which holds its counted
            // loop's whole charge), a small random budget (inside an uncounted loop), plenty.
            let small = seed % 61 + 1;
            for budget in [e + c - 1, e + c, e + c + 1, e + 2 * c - 1, e + 2 * c, small, 50_000] {
                if same_stop(&prog, &jit, budget, &format!("seed {seed}")) {
                    finished += 1;
                } else {
                    stopped += 1;
                }
            }
        }
        assert!(
            counted > 300 && finished > 1000 && stopped > 1000,
            "counted {counted}, finished {finished}, stopped {stopped}"
        );
    }
}
