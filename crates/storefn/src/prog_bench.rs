//! `storefn prog bench`: per-call cost of a storage function on each engine (our JIT and
//! interpreter, native Rust, and with the `bench` feature rbpf's JIT and interpreter), plus
//! compile and verify times. The measuring lives in `storefn_vm::harness`; this module parses
//! the arguments, hands the harness the compiled programs and prints.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use storefn_vm::harness::{self, BenchConfig, Spec};

use crate::CmdResult;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// At most this many calls per engine per round (fewer for slow engines: a round aims at
    /// ~20 ms per engine).
    #[arg(long, default_value_t = 200_000)]
    pub calls: u64,
    /// Rounds; the median round is reported (engines alternate within a round).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Warm-up (and answer-checking) calls per engine before timing.
    #[arg(long, default_value_t = 2_000)]
    pub warmup: u64,
    /// Seed for the arguments.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results as a JSON array to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Workloads to run, comma-separated, or `all` (e.g. one at a time under a profiler).
    /// `empty` is the fixed cost of a call; `list` prints the workloads.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub workload: Vec<String>,
    /// Instead of the workloads: time verifying and compiling generated programs of this many
    /// instruction slots in each shape (straight, loads, branchy, loops, calls, unproved).
    #[arg(long)]
    pub shapes: Option<usize>,
}

/// One JSON record: program, engine, ns_per_call, compile_us (JIT engines), verify_us.
#[derive(Debug, Serialize)]
struct Record {
    program: &'static str,
    engine: &'static str,
    ns_per_call: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    compile_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verify_us: Option<f64>,
}

fn selected(names: &[String]) -> Result<Vec<&'static Spec>, String> {
    if names.iter().any(|n| n == "all") {
        return Ok(harness::WORKLOADS.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            harness::workload(n).ok_or_else(|| {
                let known: Vec<&str> = harness::WORKLOADS.iter().map(|w| w.name).collect();
                format!("unknown workload {n:?} (known: {})", known.join(", "))
            })
        })
        .collect()
}

fn bench_workload(w: &'static Spec, args: &BenchArgs) -> Result<Vec<harness::Record>, String> {
    let elf = storefn_progs::get(w.prog).ok_or_else(|| format!("program {} not built", w.prog))?;
    let cfg = BenchConfig {
        calls: args.calls,
        rounds: args.rounds,
        warmup: args.warmup,
        seed: args.seed,
    };
    harness::bench_workload(w, elf, &cfg)
}

fn print_summary(records: &[harness::Record], args: &BenchArgs) {
    // One stable line: jit/native per BPF-KV node workload.
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
        "summary: node512 jit/native={} node4k jit/native={} (median of {} rounds)",
        ratio("node512"),
        ratio("node4k"),
        args.rounds.max(1),
    );
    let mut line = String::from("geomean:");
    for (a, b) in [("jit", "native"), ("jit", "rbpf-jit"), ("interp", "rbpf-interp")] {
        if let Some((g, worst, at)) = harness::ratio_summary(records, a, b) {
            line += &format!(" {a}/{b}={g:.2} (max {worst:.2} {at})");
        }
    }
    let empty = records.iter().find(|r| r.program == "empty" && r.engine == "jit");
    if let Some(e) = empty {
        line += &format!(" fixed_cost_jit_ns={:.1}", e.ns_per_call);
    }
    println!("{line}");
}

fn run_shapes(n: usize, args: &BenchArgs) -> CmdResult {
    let rows = harness::shapes::time_shapes(n, args.rounds.max(1))?;
    let head = ["shape", "insns", "verify_us", "compile_us", "compile_max_us"];
    println!("{:<10} {:>6} {:>10} {:>11} {:>15}", head[0], head[1], head[2], head[3], head[4]);
    for r in &rows {
        println!(
            "{:<10} {:>6} {:>10.0} {:>11.0} {:>15.0}",
            r.shape, r.insns, r.verify_us, r.compile_us, r.compile_max_us
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: &BenchArgs) -> CmdResult {
    if let Some(n) = args.shapes {
        return run_shapes(n, args);
    }
    if args.workload.iter().any(|n| n == "list") {
        for w in harness::WORKLOADS {
            println!("{:<10} {:<22} {}", w.name, w.prog, w.shape);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut records = Vec::new();
    for w in selected(&args.workload)? {
        records.extend(bench_workload(w, args)?);
    }
    println!(
        "{:<10} {:<11} {:>12} {:>11} {:>10}",
        "program", "engine", "ns_per_call", "compile_us", "verify_us"
    );
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |c| format!("{c:.0}"));
    for r in &records {
        println!(
            "{:<10} {:<11} {:>12.1} {:>11} {:>10}",
            r.program,
            r.engine,
            r.ns_per_call,
            us(r.compile_us),
            us(r.verify_us)
        );
    }
    print_summary(&records, args);
    if let Some(path) = &args.json {
        let rows: Vec<Record> = records
            .iter()
            .map(|r| Record {
                program: r.program,
                engine: r.engine,
                ns_per_call: r.ns_per_call,
                compile_us: r.compile_us,
                verify_us: r.verify_us,
            })
            .collect();
        let text = serde_json::to_string_pretty(&rows)?;
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
            workload: vec!["node4k".into()],
            shapes: None,
        };
        let recs: Vec<Record> = bench_workload(harness::workload("node4k").unwrap(), &args)
            .unwrap()
            .into_iter()
            .map(|r| Record {
                program: r.program,
                engine: r.engine,
                ns_per_call: r.ns_per_call,
                compile_us: r.compile_us,
                verify_us: r.verify_us,
            })
            .collect();
        let v: serde_json::Value = serde_json::to_value(&recs).unwrap();
        for r in v.as_array().unwrap() {
            let o = r.as_object().unwrap();
            assert_eq!(o["program"], "node4k");
            assert!(o["ns_per_call"].as_f64().unwrap() > 0.0);
            let engine = o["engine"].as_str().unwrap();
            assert!(harness::engines().contains(&engine));
            assert_eq!(o.contains_key("compile_us"), engine.ends_with("jit"), "{engine}");
            assert_eq!(o.contains_key("verify_us"), engine != "native", "{engine}");
        }
    }
}
