//! `storefn prog bench`: per-call cost of a storage function on each engine (JIT, interpreter,
//! native Rust), plus JIT compile time. Workloads:
//! - `node512`: one BPF-KV index-node search (512 B node, 31 keys; progs/bench_node512.bpf.c);
//! - `node4k`: binary search in a 4 KiB node of 511 keys (progs/bench_node4k.bpf.c).
//!
//! Every engine answers the same key sequence and every answer is checked against the native
//! implementation during warm-up, so a fast wrong engine cannot report a figure.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};
use serde::Serialize;
use storefn_vm::jit::JitProgram;
use storefn_vm::xrp::{XrpCtx, XRP_DATA_VIEW_BYTES, XRP_SCRATCH_BYTES};
use storefn_vm::{Instance, ProgType, VerifiedProgram};

use crate::CmdResult;

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

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Calls per engine per round.
    #[arg(long, default_value_t = 200_000)]
    pub calls: u64,
    /// Rounds; the median round is reported (engines alternate within a round).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Warm-up (and answer-checking) calls per engine before timing.
    #[arg(long, default_value_t = 2_000)]
    pub warmup: u64,
    /// Seed for the search keys.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results as a JSON array to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Workloads to run, comma-separated (e.g. one at a time under a profiler).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "node512,node4k")]
    pub workload: Vec<Workload>,
}

/// One JSON record (the contract of issue 3: program, engine, ns_per_call, compile_us for JIT).
#[derive(Debug, Serialize)]
struct Record {
    program: &'static str,
    engine: &'static str,
    ns_per_call: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    compile_us: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    Node512,
    Node4k,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Node512 => "node512",
            Workload::Node4k => "node4k",
        }
    }

    fn prog_name(self) -> &'static str {
        match self {
            Workload::Node512 => "bench_node512",
            Workload::Node4k => "bench_node4k",
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
        }
    }

    /// The same algorithm as the `.bpf.c` program, in Rust (the "native" engine).
    fn native(self, data: &[u64], key: u64) -> u64 {
        match self {
            Workload::Node512 => native_node512(data, key),
            Workload::Node4k => native_node4k(data, key),
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
fn load_xrp_section(elf: &[u8], name: &str) -> Result<Arc<VerifiedProgram>, String> {
    storefn_vm::load_verified(elf, Some("xrp"), ProgType::Xrp).map_err(|e| format!("{name}: {e}"))
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

fn engines() -> [Engine; 3] {
    [Engine::Jit, Engine::Interp, Engine::Native]
}

/// Both VM engines run through [`Instance::run_xrp`], the call the io engine makes per block,
/// so the figures include its per-call region setup.
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
            let got = self.call(engine, key)?;
            let want = self.workload.native(&self.sb.data, key);
            if got != want {
                return Err(format!(
                    "{} on {}: key {key} answered {got}, native says {want}",
                    self.workload.name(),
                    engine.name()
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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

fn bench_workload(workload: Workload, args: &BenchArgs) -> Result<Vec<Record>, String> {
    let elf = storefn_progs::get(workload.prog_name())
        .ok_or_else(|| format!("program {} not built", workload.prog_name()))?;
    let prog = load_xrp_section(elf, workload.prog_name())?;
    let compile = compile_us(&prog)?;
    let instance = |engine| {
        Instance::new(Arc::clone(&prog), engine).map_err(|e| format!("{}: {e}", prog.name))
    };
    let (jit, interp) = (instance(storefn_vm::Engine::Jit)?, instance(storefn_vm::Engine::Interp)?);
    let mut sb = Sandbox::new();
    let max_key = workload.fill(&mut sb.data);
    let mut r = Runner { workload, jit, interp, sb, keys: keys_for(args.seed, max_key) };
    let engines = engines();
    for &e in &engines {
        r.check_answers(e, args.warmup.max(KEY_RING as u64))?;
    }
    let mut per_engine: Vec<Vec<f64>> = vec![Vec::new(); engines.len()];
    for _ in 0..args.rounds.max(1) {
        for (i, &e) in engines.iter().enumerate() {
            per_engine[i].push(r.time_ns_per_call(e, args.calls.max(1))?);
        }
    }
    let mut out = Vec::new();
    for (i, &e) in engines.iter().enumerate() {
        out.push(Record {
            program: workload.name(),
            engine: e.name(),
            ns_per_call: median(&mut per_engine[i]),
            compile_us: (e == Engine::Jit).then_some(compile),
        });
    }
    Ok(out)
}

pub fn run(args: &BenchArgs) -> CmdResult {
    let mut records = Vec::new();
    for &w in &args.workload {
        records.extend(bench_workload(w, args)?);
    }
    println!("{:<8} {:<7} {:>12} {:>11}", "program", "engine", "ns_per_call", "compile_us");
    for r in &records {
        let c = r.compile_us.map_or_else(|| "-".to_string(), |c| format!("{c:.0}"));
        println!("{:<8} {:<7} {:>12.1} {:>11}", r.program, r.engine, r.ns_per_call, c);
    }
    // One stable summary line: jit/native ratio per workload.
    let ratio = |p: &str| {
        let ns = |e: &str| {
            records.iter().find(|r| r.program == p && r.engine == e).map(|r| r.ns_per_call)
        };
        match (ns("jit"), ns("native")) {
            (Some(j), Some(n)) if n > 0.0 => format!("{:.2}", j / n),
            _ => "-".into(),
        }
    };
    println!(
        "summary: node512 jit/native={} node4k jit/native={} (median of {} rounds x {} calls)",
        ratio("node512"),
        ratio("node4k"),
        args.rounds.max(1),
        args.calls.max(1)
    );
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&records)?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_programs_match_native_on_every_engine() {
        let args = BenchArgs {
            calls: 10,
            rounds: 1,
            warmup: 1,
            seed: 7,
            json: None,
            workload: vec![Workload::Node512, Workload::Node4k],
        };
        for w in [Workload::Node512, Workload::Node4k] {
            let recs = bench_workload(w, &args).expect("answers agree");
            assert_eq!(recs.len(), engines().len());
            assert!(recs.iter().all(|r| r.ns_per_call > 0.0));
            assert!(recs.iter().any(|r| r.engine == "jit" && r.compile_us.is_some()));
        }
    }

    #[test]
    fn json_records_follow_the_contract() {
        let args = BenchArgs {
            calls: 5,
            rounds: 1,
            warmup: 1,
            seed: 3,
            json: None,
            workload: vec![Workload::Node512, Workload::Node4k],
        };
        let recs = bench_workload(Workload::Node4k, &args).unwrap();
        let v: serde_json::Value = serde_json::to_value(&recs).unwrap();
        for r in v.as_array().unwrap() {
            let o = r.as_object().unwrap();
            assert_eq!(o["program"], "node4k");
            assert!(o["ns_per_call"].as_f64().unwrap() > 0.0);
            let engine = o["engine"].as_str().unwrap();
            assert!(["jit", "interp", "native"].contains(&engine));
            assert_eq!(o.contains_key("compile_us"), engine == "jit", "{engine}");
        }
    }

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
    fn loader_refuses_garbage() {
        assert!(load_xrp_section(b"nope", "x").is_err());
        assert!(load_xrp_section(b"\x7fELF\x02\x01", "x").is_err());
    }
}
