//! `storefn prog bench`: per-call cost of a storage function on each engine (JIT, interpreter,
//! native Rust), plus JIT compile time. The measuring lives in `storefn_vm::harness`; this
//! module parses the arguments, hands the harness the compiled programs and prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde::Serialize;
use storefn_vm::harness::{self, BenchConfig};

use crate::CmdResult;

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
    /// Workloads to run, comma-separated (e.g. one at a time under a profiler). `empty` is
    /// the fixed cost of a call (a function that only ends the chain).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "node512,node4k,empty")]
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
    Empty,
}

impl Workload {
    fn harness(self) -> harness::Workload {
        match self {
            Workload::Node512 => harness::Workload::Node512,
            Workload::Node4k => harness::Workload::Node4k,
            Workload::Empty => harness::Workload::Empty,
        }
    }
}

fn bench_workload(w: Workload, args: &BenchArgs) -> Result<Vec<Record>, String> {
    let w = w.harness();
    let elf = storefn_progs::get(w.prog_name())
        .ok_or_else(|| format!("program {} not built", w.prog_name()))?;
    let cfg = BenchConfig {
        calls: args.calls,
        rounds: args.rounds,
        warmup: args.warmup,
        seed: args.seed,
    };
    Ok(harness::bench_workload(w, elf, &cfg)?
        .into_iter()
        .map(|r| Record {
            program: r.program,
            engine: r.engine,
            ns_per_call: r.ns_per_call,
            compile_us: r.compile_us,
        })
        .collect())
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
    fn json_records_follow_the_contract() {
        let args = BenchArgs {
            calls: 5,
            rounds: 1,
            warmup: 1,
            seed: 3,
            json: None,
            workload: vec![Workload::Node4k],
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
}
