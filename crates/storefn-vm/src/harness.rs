//! The measuring behind `storefn prog bench` (the CLI parses and prints): per-call cost of a
//! storage function on each engine (JIT, interpreter, a native Rust twin) through
//! [`Instance::run_xrp`], the call the io engine makes per block, plus JIT compile time.
//! Workloads (the caller passes the compiled ELF of [`Workload::prog_name`]):
//! - `node512`: one BPF-KV index-node search (512 B node, 31 keys; progs/bench_node512.bpf.c);
//! - `node4k`: binary search in a 4 KiB node of 511 keys (progs/bench_node4k.bpf.c);
//! - `empty`: a function that only ends the chain (progs/bench_empty.bpf.c): the fixed cost
//!   of a call, so the node figures split into fixed and per-iteration parts.
//!
//! Every engine answers the same key sequence and every answer is checked against the native
//! twin during warm-up, so a fast wrong engine cannot report a figure.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use crate::jit::JitProgram;
use crate::xrp::{XrpCtx, XRP_DATA_VIEW_BYTES, XRP_SCRATCH_BYTES};
use crate::{Engine as VmEngine, Instance, ProgType, VerifiedProgram};

/// Keys in a BPF-KV node (fan-out 31).
const NODE512_KEYS: usize = 31;
/// Keys in the 4 KiB node: one u64 count, then 511 keys.
const NODE4K_KEYS: usize = 511;
/// Distinct search keys cycled through (a power of two: indexed with a mask).
const KEY_RING: usize = 1024;
/// Compiles timed for the compile-time figure (median reported).
const COMPILE_SAMPLES: usize = 21;
/// Gap between consecutive keys stored in the nodes (so searches hit and miss).
const KEY_STRIDE: u64 = 10;

/// How much to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    /// Calls per engine per round.
    pub calls: u64,
    /// Rounds; the median round is reported (engines alternate within a round).
    pub rounds: usize,
    /// Warm-up (and answer-checking) calls per engine before timing (at least the key ring).
    pub warmup: u64,
    /// Seed for the search keys.
    pub seed: u64,
}

/// One measured (workload, engine) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub program: &'static str,
    /// `jit`, `interp` or `native`.
    pub engine: &'static str,
    /// Median over rounds.
    pub ns_per_call: f64,
    /// Median JIT compile time (JIT records only).
    pub compile_us: Option<f64>,
}

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Node512,
    Node4k,
    Empty,
}

impl Workload {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Workload::Node512 => "node512",
            Workload::Node4k => "node4k",
            Workload::Empty => "empty",
        }
    }

    /// The program under `progs/` (without `.bpf.c`) whose ELF [`bench_workload`] takes.
    #[must_use]
    pub fn prog_name(self) -> &'static str {
        match self {
            Workload::Node512 => "bench_node512",
            Workload::Node4k => "bench_node4k",
            Workload::Empty => "bench_empty",
        }
    }

    /// Fills the node and returns the largest stored key.
    fn fill(self, data: &mut [u64]) -> u64 {
        data.fill(0);
        match self {
            Workload::Node512 => {
                // next = 0, type = 0 (internal), key[k] = k * stride, ptr[k] = k.
                for k in 0..NODE512_KEYS {
                    data[2 + k] = k as u64 * KEY_STRIDE;
                    data[2 + NODE512_KEYS + k] = k as u64;
                }
                (NODE512_KEYS as u64 - 1) * KEY_STRIDE
            }
            Workload::Node4k => {
                data[0] = NODE4K_KEYS as u64;
                for k in 0..NODE4K_KEYS {
                    data[1 + k] = k as u64 * KEY_STRIDE;
                }
                (NODE4K_KEYS as u64 - 1) * KEY_STRIDE
            }
            Workload::Empty => 0,
        }
    }

    /// The same algorithm as the `.bpf.c` program, in Rust (the "native" engine): the value
    /// the program leaves in `scratch[1]`.
    fn native(self, data: &[u64], key: u64) -> u64 {
        match self {
            Workload::Node512 => native_node512(data, key),
            Workload::Node4k => native_node4k(data, key),
            // bench_empty leaves scratch[1] as the caller set it (zero).
            Workload::Empty => 0,
        }
    }
}

#[inline(never)]
fn native_node512(node: &[u64], key: u64) -> u64 {
    let keys = &node[2..2 + NODE512_KEYS];
    let mut i = 1;
    while i < NODE512_KEYS {
        if key < keys[i] {
            break;
        }
        i += 1;
    }
    i as u64 - 1
}

#[inline(never)]
fn native_node4k(node: &[u64], key: u64) -> u64 {
    let keys = &node[1..=NODE4K_KEYS];
    let (mut lo, mut hi) =
        (0usize, usize::try_from(node[0]).unwrap_or(usize::MAX).min(NODE4K_KEYS));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if keys[mid] <= key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo as u64
}

/// The memory one invocation sees besides what the instance owns (stack, globals): an XRP
/// context, the node and scratch, kept as u64 words for the native twin.
struct Sandbox {
    ctx: XrpCtx,
    data: Vec<u64>,
    scratch: Vec<u64>,
}

impl Sandbox {
    fn new() -> Self {
        Self {
            ctx: XrpCtx::default(),
            data: vec![0; XRP_DATA_VIEW_BYTES / 8],
            scratch: vec![0; XRP_SCRATCH_BYTES / 8],
        }
    }
}

fn bytes(words: &[u64]) -> &[u8] {
    // SAFETY: a u64 slice is `len * 8` initialised bytes; u8 has alignment 1 and no invalid
    // values, and the returned slice borrows `words`, so it cannot outlive or alias a write.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: as in `bytes`; every byte pattern is a valid u64, so writes through the byte view
    // leave `words` valid, and the exclusive borrow is carried over.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Jit,
    Interp,
    Native,
}

impl Engine {
    fn name(self) -> &'static str {
        match self {
            Engine::Jit => "jit",
            Engine::Interp => "interp",
            Engine::Native => "native",
        }
    }
}

/// The engines measured, in the order they alternate within a round.
pub const ENGINES: [&str; 3] = ["jit", "interp", "native"];
const ENGINE_ORDER: [Engine; 3] = [Engine::Jit, Engine::Interp, Engine::Native];

/// Both VM engines run through [`Instance::run_xrp`], so the figures include its per-call
/// region setup.
struct Runner {
    workload: Workload,
    jit: Instance,
    interp: Instance,
    sb: Sandbox,
    keys: Vec<u64>,
}

impl Runner {
    /// One invocation for `key`: returns the answer the engine wrote to scratch[1].
    #[inline]
    fn call(&mut self, engine: Engine, key: u64) -> Result<u64, String> {
        let Self { workload, jit, interp, sb, .. } = self;
        sb.scratch[0] = key;
        let vm = match engine {
            Engine::Native => {
                sb.scratch[1] = workload.native(black_box(&sb.data), key);
                sb.ctx.done = 1;
                return Ok(sb.scratch[1]);
            }
            Engine::Jit => jit,
            Engine::Interp => interp,
        };
        vm.run_xrp(&mut sb.ctx, bytes(&sb.data), bytes_mut(&mut sb.scratch))
            .map_err(|e| format!("{} {}: {e}", workload.name(), engine.name()))?;
        Ok(sb.scratch[1])
    }

    fn check_answers(&mut self, engine: Engine, calls: u64) -> Result<(), String> {
        for i in 0..calls {
            let key = self.keys[(i as usize) & (KEY_RING - 1)];
            self.sb.ctx.done = 0;
            let got = self.call(engine, key)?;
            let want = self.workload.native(&self.sb.data, key);
            if got != want || self.sb.ctx.done != 1 {
                return Err(format!(
                    "{} on {}: key {key} answered {got} (done={}), native says {want}",
                    self.workload.name(),
                    engine.name(),
                    self.sb.ctx.done
                ));
            }
        }
        Ok(())
    }

    fn time_ns_per_call(&mut self, engine: Engine, calls: u64) -> Result<f64, String> {
        let mut sum = 0u64;
        let t = Instant::now();
        for i in 0..calls {
            let key = self.keys[(i as usize) & (KEY_RING - 1)];
            sum = sum.wrapping_add(self.call(engine, key)?);
        }
        let ns = t.elapsed().as_nanos() as f64;
        black_box(sum);
        Ok(ns / calls as f64)
    }
}

/// xorshift64*: a tiny deterministic generator for the key ring (no dependency needed).
fn keys_for(seed: u64, max_key: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..KEY_RING)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d) % (max_key + 2 * KEY_STRIDE)
        })
        .collect()
}

/// Median of the rounds (the harness takes at least one sample of everything it reports).
fn median(v: &mut [f64]) -> f64 {
    storefn_stats::median(v).unwrap_or(0.0)
}

fn compile_us(prog: &VerifiedProgram) -> Result<f64, String> {
    let mut samples = Vec::with_capacity(COMPILE_SAMPLES);
    for _ in 0..COMPILE_SAMPLES {
        let t = Instant::now();
        let jit = JitProgram::compile(prog).map_err(|e| format!("{}: {e}", prog.name))?;
        samples.push(t.elapsed().as_nanos() as f64 / 1000.0);
        drop(jit);
    }
    Ok(median(&mut samples))
}

/// Measures `workload` (its program's ELF in `elf`) on every engine: one record per engine, in
/// [`ENGINES`] order.
///
/// # Errors
/// The program does not load, verify or compile, an engine fails a call, or an engine's answer
/// differs from the native twin's.
pub fn bench_workload(
    workload: Workload,
    elf: &[u8],
    cfg: &BenchConfig,
) -> Result<Vec<Record>, String> {
    let prog = load_xrp(elf, workload.prog_name())?;
    let compile = compile_us(&prog)?;
    let instance = |engine| {
        Instance::new(Arc::clone(&prog), engine).map_err(|e| format!("{}: {e}", prog.name))
    };
    let (jit, interp) = (instance(VmEngine::Jit)?, instance(VmEngine::Interp)?);
    let mut sb = Sandbox::new();
    let max_key = workload.fill(&mut sb.data);
    let mut r = Runner { workload, jit, interp, sb, keys: keys_for(cfg.seed, max_key) };
    for &e in &ENGINE_ORDER {
        r.check_answers(e, cfg.warmup.max(KEY_RING as u64))?;
    }
    let mut per_engine: Vec<Vec<f64>> = vec![Vec::new(); ENGINE_ORDER.len()];
    for _ in 0..cfg.rounds.max(1) {
        for (i, &e) in ENGINE_ORDER.iter().enumerate() {
            per_engine[i].push(r.time_ns_per_call(e, cfg.calls.max(1))?);
        }
    }
    Ok(ENGINE_ORDER
        .iter()
        .zip(&mut per_engine)
        .map(|(&e, samples)| Record {
            program: workload.name(),
            engine: e.name(),
            ns_per_call: median(samples),
            compile_us: (e == Engine::Jit).then_some(compile),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_searches_are_right() {
        let mut d = vec![0u64; 512];
        Workload::Node512.fill(&mut d);
        assert_eq!(native_node512(&d, 0), 0);
        assert_eq!(native_node512(&d, 15), 1);
        assert_eq!(native_node512(&d, 10_000), 30);
        Workload::Node4k.fill(&mut d);
        assert_eq!(native_node4k(&d, 0), 1);
        assert_eq!(native_node4k(&d, 25), 3);
        assert_eq!(native_node4k(&d, u64::MAX), 511);
    }

    #[test]
    fn bench_programs_match_native_on_every_engine() {
        let cfg = BenchConfig { calls: 10, rounds: 1, warmup: 1, seed: 7 };
        for w in [Workload::Node512, Workload::Node4k, Workload::Empty] {
            let recs =
                bench_workload(w, storefn_progs::must(w.prog_name()), &cfg).expect("answers agree");
            let engines: Vec<&str> = recs.iter().map(|r| r.engine).collect();
            assert_eq!(engines, ENGINES);
            assert!(recs.iter().all(|r| r.ns_per_call > 0.0 && r.program == w.name()));
            assert!(recs.iter().all(|r| r.compile_us.is_some() == (r.engine == "jit")));
        }
    }

    #[test]
    fn a_program_that_answers_wrong_is_refused() {
        // node4k's program answers an upper bound, not node512's child index.
        let cfg = BenchConfig { calls: 1, rounds: 1, warmup: 1, seed: 7 };
        let e = bench_workload(Workload::Node512, storefn_progs::must("bench_node4k"), &cfg)
            .unwrap_err();
        assert!(e.contains("native says"), "{e}");
    }

    #[test]
    fn loader_refuses_garbage() {
        assert!(load_xrp(b"nope", "x").is_err());
        assert!(load_xrp(b"\x7fELF\x02\x01", "x").is_err());
    }
}
