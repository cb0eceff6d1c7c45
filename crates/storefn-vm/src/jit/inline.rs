//! Which BPF-to-BPF calls the JIT inlines, and so which functions it compiles at all.
//!
//! A call is inlined when its callee is a leaf (it makes no BPF-to-BPF call; helper calls are
//! fine) of at most [`INLINE_MAX_SLOTS`] slots, while the program's allowance of inlined
//! slots ([`Plan::new`]: as many as the program has, so the translator's work stays within
//! twice the program) lasts. An inlined call keeps the call's semantics exactly (the depth
//! check and its fault, the callee's own registers and frame, its charge at its first slot,
//! r1-r5 zero after it): only the machine call, the budget's trip through `env` and the fault
//! test after the return go (see `Tx::inline_call`). A function is compiled when it is the
//! entry or some compiled function calls it without inlining; one only ever inlined (or
//! never called) costs no Cranelift function, whose fixed cost dominated programs of many
//! small functions (the `calls` shape: 240 functions of 16 slots).

use crate::cfg::{is_pseudo_call, Cfg};
use crate::VerifiedProgram;

/// Longest callee inlined, in slots: a helper-sized function (BPF-KV's, WiredTiger's cell
/// parser is larger and stays a call).
pub(super) const INLINE_MAX_SLOTS: usize = 64;

/// The inlining decisions for one program.
#[derive(Debug)]
pub(super) struct Plan {
    /// Per slot: the BPF-to-BPF call there is inlined.
    pub(super) inline_at: Vec<bool>,
    /// Function indices (into `Cfg::functions`) to compile, entry first.
    pub(super) compiled: Vec<usize>,
}

impl Plan {
    pub(super) fn new(verified: &VerifiedProgram) -> Plan {
        let (insns, cfg) = (&verified.insns, verified.cfg());
        let nfuncs = cfg.functions().len();
        let calls_in = |f: usize| {
            let (s, e) = cfg.func_range(f);
            (s..e).filter(move |&pc| !cfg.is_second_half(pc) && is_pseudo_call(insns[pc]))
        };
        let leaf: Vec<bool> = (0..nfuncs).map(|f| calls_in(f).next().is_none()).collect();
        let mut inline_at = vec![false; insns.len()];
        let mut compiled = vec![0usize];
        let mut queued = vec![false; nfuncs];
        queued[0] = true;
        let mut allowance = insns.len();
        let mut k = 0;
        // Breadth-first from the entry over calls that stay calls; decisions are made in this
        // (deterministic) order, so the allowance runs out the same way on every compile.
        while let Some(&f) = compiled.get(k) {
            k += 1;
            for pc in calls_in(f) {
                let Some(g) = callee(verified, cfg, pc) else { continue };
                let (s, e) = cfg.func_range(g);
                if leaf[g] && e - s <= INLINE_MAX_SLOTS && e - s <= allowance {
                    allowance -= e - s;
                    inline_at[pc] = true;
                } else if !queued[g] {
                    queued[g] = true;
                    compiled.push(g);
                }
            }
        }
        Plan { inline_at, compiled }
    }
}

/// The function a BPF-to-BPF call at `pc` enters (the verifier checked it is a function
/// start; `None` only for a target outside the program, which the translator reports).
fn callee(verified: &VerifiedProgram, cfg: &Cfg, pc: usize) -> Option<usize> {
    let t = i64::try_from(pc).ok()? + i64::from(verified.insns[pc].imm) + 1;
    let t = usize::try_from(t).ok().filter(|&t| t < verified.insns.len())?;
    Some(cfg.func_of(t))
}
