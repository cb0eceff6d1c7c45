//! The measuring behind `storefn prog bench` (the CLI parses and prints): per-call cost of a
//! storage function on each engine (our JIT and interpreter through [`Instance::run_xrp`], the
//! call the io engine makes per block; a native Rust twin; with the `bench` feature, rbpf's
//! JIT and interpreter), plus compile and verify times. The workloads are [`WORKLOADS`]
//! (`progs/bench/`, the BPF-KV node searches and `empty`, the fixed cost of a call).
//!
//! Every engine answers the same argument ring and every answer is checked against the native
//! twin before timing, so a fast wrong engine cannot report a figure. Rounds interleave the
//! engines (each round times every engine once, in turn); the median round is reported.

#[cfg(feature = "bench")]
mod peer;
pub mod shapes;
mod workloads;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use crate::jit::JitProgram;
use crate::xrp::{XrpCtx, XRP_SCRATCH_BYTES};
use crate::{Engine as VmEngine, Instance, ProgType, VerifiedProgram};
use workloads::{bytes, UNTOUCHED};
pub use workloads::{workload, Block, Spec, BLOCK_BYTES, WORKLOADS};

/// Distinct arguments cycled through (a power of two: indexed with a mask).
const ARG_RING: usize = 1024;
/// Compiles (and verifications) timed for the compile and verify figures (median reported).
const COMPILE_SAMPLES: usize = 21;
/// Time one engine's share of a round aims at: calls per round are cut to fit it (slow
/// engines on long workloads would otherwise take minutes), never below [`MIN_CALLS`].
const ROUND_SHARE_NS: f64 = 20e6;
const MIN_CALLS: u64 = 64;

/// How much to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    /// At most this many calls per engine per round.
    pub calls: u64,
    /// Rounds; the median round is reported (engines alternate within a round).
    pub rounds: usize,
    /// Warm-up (and answer-checking) calls per engine before timing (at least the ring).
    pub warmup: u64,
    /// Seed for the arguments.
    pub seed: u64,
}

/// One measured (workload, engine) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub program: &'static str,
    /// One of [`engines`].
    pub engine: &'static str,
    /// Median over rounds.
    pub ns_per_call: f64,
    /// Median compile time (JIT engines only).
    pub compile_us: Option<f64>,
    /// Median verify time (the engine's own verifier; not the native twin).
    pub verify_us: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Jit,
    Interp,
    Native,
    #[cfg(feature = "bench")]
    RbpfJit,
    #[cfg(feature = "bench")]
    RbpfInterp,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Jit => "jit",
            Engine::Interp => "interp",
            Engine::Native => "native",
            #[cfg(feature = "bench")]
            Engine::RbpfJit => "rbpf-jit",
            #[cfg(feature = "bench")]
            Engine::RbpfInterp => "rbpf-interp",
        }
    }
}

/// The engines measured, in the order they alternate within a round (rbpf's interpreter
/// before its JIT: it checks accesses, so it answers first).
const ENGINE_ORDER: &[Engine] = &[
    Engine::Jit,
    Engine::Interp,
    Engine::Native,
    #[cfg(feature = "bench")]
    Engine::RbpfInterp,
    #[cfg(feature = "bench")]
    Engine::RbpfJit,
];

/// The engines' names, in output order (rbpf's only with the `bench` feature).
#[must_use]
pub fn engines() -> Vec<&'static str> {
    ENGINE_ORDER.iter().map(|e| e.name()).collect()
}

/// The memory one invocation sees besides what the instance owns (stack, globals).
struct Sandbox {
    ctx: XrpCtx,
    block: Box<Block>,
    scratch: Box<[u64]>,
}

fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: a u64 slice is `len * 8` initialised bytes; every byte pattern is a valid u64,
    // so writes through the byte view leave `words` valid; the exclusive borrow carries over.
    unsafe {
        std::slice::from_raw_parts_mut(
            words.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(words),
        )
    }
}

/// Loads and verifies a bench program exactly as `storefn prog run` does.
///
/// # Errors
/// The loader's or verifier's message, prefixed with `name`.
pub fn load_xrp(elf: &[u8], name: &str) -> Result<Arc<VerifiedProgram>, String> {
    crate::load_verified(elf, Some("xrp"), ProgType::Xrp).map_err(|e| format!("{name}: {e}"))
}

struct Runner<'p> {
    spec: &'static Spec,
    jit: Instance,
    interp: Instance,
    sb: Sandbox,
    args: Vec<u64>,
    #[cfg(feature = "bench")]
    peer: peer::Peer<'p>,
    #[cfg(not(feature = "bench"))]
    peer: std::marker::PhantomData<&'p ()>,
}

impl Runner<'_> {
    /// One invocation with `arg`: the answer the engine left in scratch[1].
    #[inline]
    fn call(&mut self, engine: Engine, arg: u64) -> Result<u64, String> {
        let Self { spec, jit, interp, sb, .. } = self;
        sb.scratch[0] = arg;
        let vm = match engine {
            Engine::Native => {
                sb.scratch[1] = (spec.native)(black_box(&sb.block), arg);
                sb.ctx.done = 1;
                return Ok(sb.scratch[1]);
            }
            Engine::Jit => jit,
            Engine::Interp => interp,
            #[cfg(feature = "bench")]
            Engine::RbpfJit => return self.peer.call(true, arg),
            #[cfg(feature = "bench")]
            Engine::RbpfInterp => return self.peer.call(false, arg),
        };
        vm.run_xrp(&mut sb.ctx, bytes(&sb.block), bytes_mut(&mut sb.scratch))
            .map_err(|e| format!("{} {}: {e}", spec.name, engine.name()))?;
        Ok(sb.scratch[1])
    }

    /// Checks `calls` answers against the native twin; returns the mean ns per call (a
    /// first estimate, to size the rounds).
    fn check_answers(&mut self, engine: Engine, calls: u64) -> Result<f64, String> {
        let t = Instant::now();
        for i in 0..calls {
            let arg = self.args[(i as usize) & (ARG_RING - 1)];
            self.sb.ctx.done = 0;
            self.sb.scratch[1] = UNTOUCHED;
            #[cfg(feature = "bench")]
            self.peer.set_answer(UNTOUCHED);
            let got = self.call(engine, arg)?;
            let want = (self.spec.native)(&self.sb.block, arg);
            let done = self.sb.ctx.done == 1 || !matches!(engine, Engine::Jit | Engine::Interp);
            if got != want || !done {
                return Err(format!(
                    "{} on {}: argument {arg} answered {got:#x} (done={}), native says {want:#x}",
                    self.spec.name,
                    engine.name(),
                    self.sb.ctx.done
                ));
            }
        }
        Ok(t.elapsed().as_nanos() as f64 / calls.max(1) as f64)
    }

    /// Mean ns per call over `calls` calls. Each engine kind has a loop of its own, so what
    /// is timed per call is the engine's call and the argument and answer moving through
    /// scratch, not a dispatch over engines or an error type built per call (`empty` reads
    /// as the fixed cost of `run_xrp`, not of this harness).
    fn time_ns_per_call(&mut self, engine: Engine, calls: u64) -> Result<f64, String> {
        let t = thread_cpu_ns();
        let sum = match engine {
            Engine::Jit | Engine::Interp => self.time_vm(engine, calls)?,
            Engine::Native => self.time_native(calls),
            #[cfg(feature = "bench")]
            Engine::RbpfJit | Engine::RbpfInterp => {
                let mut sum = 0u64;
                for i in 0..calls {
                    let arg = self.args[(i as usize) & (ARG_RING - 1)];
                    sum = sum.wrapping_add(self.call(engine, arg)?);
                }
                sum
            }
        };
        let ns = thread_cpu_ns() - t;
        black_box(sum);
        Ok(ns / calls as f64)
    }

    /// `calls` calls of `Instance::run_xrp` (the io engine's call per block) on our JIT or
    /// interpreter; the sum of the answers. Not inlined: a profiler names it (the loop is inside).
    #[inline(never)]
    fn time_vm(&mut self, engine: Engine, calls: u64) -> Result<u64, String> {
        let Self { spec, jit, interp, sb, args, .. } = self;
        let vm = if engine == Engine::Jit { jit } else { interp };
        let data = bytes(&sb.block);
        let scratch = bytes_mut(&mut sb.scratch);
        let mut sum = 0u64;
        for i in 0..calls {
            let arg = args[(i as usize) & (ARG_RING - 1)];
            scratch[..8].copy_from_slice(&arg.to_le_bytes());
            if let Err(e) = vm.run_xrp(&mut sb.ctx, data, scratch) {
                return Err(format!("{} {}: {e}", spec.name, engine.name()));
            }
            let answer: [u8; 8] = scratch[8..16].try_into().expect("8 bytes");
            sum = sum.wrapping_add(u64::from_le_bytes(answer));
        }
        Ok(sum)
    }

    /// `calls` calls of the native twin, its answer stored where the programs leave theirs.
    #[inline(never)]
    fn time_native(&mut self, calls: u64) -> u64 {
        let Self { spec, sb, args, .. } = self;
        let mut sum = 0u64;
        for i in 0..calls {
            let arg = args[(i as usize) & (ARG_RING - 1)];
            sb.scratch[0] = arg;
            sb.scratch[1] = (spec.native)(black_box(&sb.block), arg);
            sb.ctx.done = 1;
            sum = sum.wrapping_add(sb.scratch[1]);
        }
        sum
    }
}

/// CPU time of the calling thread, in ns. Per-call figures are taken in it rather than wall
/// time: on a machine shared with other work (this project's is) the time a thread waits
/// while others run is not the engine's; on a quiet machine the two agree.
fn thread_cpu_ns() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// The argument ring: `spec.arg` of a deterministic stream.
fn args_for(spec: &Spec, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..ARG_RING).map(|_| (spec.arg)(workloads::xorshift(&mut x))).collect()
}

/// Median of the samples (the harness takes at least one sample of everything it reports).
fn median(v: &mut [f64]) -> f64 {
    storefn_stats::median(v).unwrap_or(0.0)
}

/// Median of `n` runs of `f`, in µs of thread CPU time (see [`thread_cpu_ns`]).
fn time_us<T, E: std::fmt::Display>(
    what: &str,
    n: usize,
    f: impl FnMut() -> Result<T, E>,
) -> Result<f64, String> {
    Ok(median(&mut samples_us(what, n, f)?))
}

/// `n` (at least one) runs of `f`, each in µs of thread CPU time, in run order.
fn samples_us<T, E: std::fmt::Display>(
    what: &str,
    n: usize,
    mut f: impl FnMut() -> Result<T, E>,
) -> Result<Vec<f64>, String> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        let t = thread_cpu_ns();
        let out = f().map_err(|e| format!("{what}: {e}"))?;
        samples.push((thread_cpu_ns() - t) / 1000.0);
        drop(out);
    }
    Ok(samples)
}

/// The linked instructions as bytes (what a peer VM loads).
fn code_bytes(prog: &VerifiedProgram) -> Result<Vec<u8>, String> {
    if !prog.global_relocs.is_empty() {
        return Err(format!("{}: bench programs may not use globals", prog.name));
    }
    Ok(prog.insns.iter().flat_map(crate::insn::Insn::encode).collect())
}

/// Measures `spec` (its program's ELF in `elf`) on every engine: one record per engine, in
/// [`engines`] order (without `rbpf-jit` when rbpf's JIT cannot compile the program: see
/// [`peer_jit_refusal`]).
///
/// # Errors
/// The program does not load, verify or compile, an engine fails a call, or an engine's answer
/// differs from the native twin's.
pub fn bench_workload(
    spec: &'static Spec,
    elf: &[u8],
    cfg: &BenchConfig,
) -> Result<Vec<Record>, String> {
    let prog = load_xrp(elf, spec.prog)?;
    let verify =
        time_us(spec.prog, COMPILE_SAMPLES, || VerifiedProgram::new(prog.program().clone()))?;
    let compile = time_us(spec.prog, COMPILE_SAMPLES, || JitProgram::compile(&prog))?;
    let instance = |engine| {
        Instance::new(Arc::clone(&prog), engine).map_err(|e| format!("{}: {e}", prog.name))
    };
    let mut block: Box<Block> = Box::new([0; BLOCK_BYTES / 8]);
    (spec.fill)(&mut block);
    let code = code_bytes(&prog)?;
    let sb =
        Sandbox { ctx: XrpCtx::default(), block, scratch: vec![0; XRP_SCRATCH_BYTES / 8].into() };
    #[cfg(feature = "bench")]
    let peer = peer::Peer::new(&code, &sb.block)?;
    #[cfg(not(feature = "bench"))]
    let peer = std::marker::PhantomData::<&()>;
    let _ = &code;
    let mut r = Runner {
        spec,
        jit: instance(VmEngine::Jit)?,
        interp: instance(VmEngine::Interp)?,
        sb,
        args: args_for(spec, cfg.seed),
        peer,
    };
    #[cfg(feature = "bench")]
    let order: Vec<Engine> = ENGINE_ORDER
        .iter()
        .copied()
        .filter(|&e| e != Engine::RbpfJit || r.peer.has_jit())
        .collect();
    #[cfg(not(feature = "bench"))]
    let order = ENGINE_ORDER.to_vec();
    let mut calls = Vec::with_capacity(order.len());
    for &e in &order {
        let est = r.check_answers(e, cfg.warmup.max(ARG_RING as u64))?;
        calls.push(
            ((ROUND_SHARE_NS / est.max(1.0)) as u64).clamp(MIN_CALLS, cfg.calls.max(MIN_CALLS)),
        );
    }
    let mut per_engine: Vec<Vec<f64>> = vec![Vec::new(); order.len()];
    for _ in 0..cfg.rounds.max(1) {
        for (i, &e) in order.iter().enumerate() {
            per_engine[i].push(r.time_ns_per_call(e, calls[i].min(cfg.calls.max(1)))?);
        }
    }
    Ok(order
        .iter()
        .zip(&mut per_engine)
        .map(|(&e, samples)| Record {
            program: spec.name,
            engine: e.name(),
            ns_per_call: median(samples),
            compile_us: match e {
                Engine::Jit => Some(compile),
                #[cfg(feature = "bench")]
                Engine::RbpfJit => r.peer.compile_us.as_ref().ok().copied(),
                _ => None,
            },
            verify_us: match e {
                Engine::Jit | Engine::Interp => Some(verify),
                #[cfg(feature = "bench")]
                Engine::RbpfJit | Engine::RbpfInterp => Some(r.peer.verify_us),
                Engine::Native => None,
            },
        })
        .collect())
}

/// Why rbpf's JIT cannot run `spec`'s program (`None`: it can, or rbpf is not built in).
///
/// # Errors
/// The program does not load or verify.
pub fn peer_jit_refusal(spec: &Spec, elf: &[u8]) -> Result<Option<String>, String> {
    #[cfg(feature = "bench")]
    {
        let prog = load_xrp(elf, spec.prog)?;
        let code = code_bytes(&prog)?;
        let block: Box<Block> = Box::new([0; BLOCK_BYTES / 8]);
        let refusal = peer::Peer::new(&code, &block)?.compile_us.err();
        Ok(refusal)
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = (spec, elf);
        Ok(None)
    }
}

/// Geometric mean of `a / b` ns per call over the workloads that have both engines (`empty`,
/// the fixed cost, left out), and the largest ratio with its workload.
#[must_use]
pub fn ratio_summary(records: &[Record], a: &str, b: &str) -> Option<(f64, f64, &'static str)> {
    let ns = |p: &str, e: &str| {
        records.iter().find(|r| r.program == p && r.engine == e).map(|r| r.ns_per_call)
    };
    let mut logs = Vec::new();
    let mut worst = (0.0, "");
    for r in records.iter().filter(|r| r.engine == a && r.program != "empty") {
        if let Some(d) = ns(r.program, b).filter(|&d| d > 0.0) {
            let q = r.ns_per_call / d;
            logs.push(q.ln());
            if q > worst.0 {
                worst = (q, r.program);
            }
        }
    }
    (!logs.is_empty())
        .then(|| ((logs.iter().sum::<f64>() / logs.len() as f64).exp(), worst.0, worst.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_matches_native_on_every_engine() {
        let cfg = BenchConfig { calls: 10, rounds: 1, warmup: 1, seed: 7 };
        for w in WORKLOADS {
            let recs = bench_workload(w, storefn_progs::must(w.prog), &cfg).expect("answers agree");
            let names: Vec<&str> = recs.iter().map(|r| r.engine).collect();
            let refused = peer_jit_refusal(w, storefn_progs::must(w.prog)).unwrap();
            let want: Vec<&str> =
                engines().into_iter().filter(|&e| e != "rbpf-jit" || refused.is_none()).collect();
            assert_eq!(names, want, "{}", w.name);
            assert!(recs.iter().all(|r| r.ns_per_call > 0.0 && r.program == w.name));
            assert!(recs.iter().all(|r| r.compile_us.is_some() == r.engine.ends_with("jit")));
            assert!(recs.iter().all(|r| r.verify_us.is_some() == (r.engine != "native")));
        }
    }

    #[test]
    fn a_program_that_answers_wrong_is_refused() {
        // node4k's program answers an upper bound, not node512's child index.
        let cfg = BenchConfig { calls: 1, rounds: 1, warmup: 1, seed: 7 };
        let spec = workload("node512").unwrap();
        let e = bench_workload(spec, storefn_progs::must("bench_node4k"), &cfg).unwrap_err();
        assert!(e.contains("native says"), "{e}");
    }

    #[test]
    fn ratio_summary_is_a_geometric_mean_without_empty() {
        let rec = |program, engine, ns_per_call| Record {
            program,
            engine,
            ns_per_call,
            compile_us: None,
            verify_us: None,
        };
        let recs = [
            rec("a", "jit", 2.0),
            rec("a", "native", 1.0),
            rec("b", "jit", 1.0),
            rec("b", "native", 2.0),
            rec("empty", "jit", 9.0),
            rec("empty", "native", 1.0),
        ];
        let (g, worst, at) = ratio_summary(&recs, "jit", "native").unwrap();
        assert!((g - 1.0).abs() < 1e-12);
        assert_eq!((worst, at), (2.0, "a"));
        assert!(ratio_summary(&recs, "jit", "rbpf-jit").is_none());
    }

    #[test]
    fn loader_refuses_garbage() {
        assert!(load_xrp(b"nope", "x").is_err());
        assert!(load_xrp(b"\x7fELF\x02\x01", "x").is_err());
    }
}
