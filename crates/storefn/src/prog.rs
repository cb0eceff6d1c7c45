//! `storefn prog ...`: list, verify, dump and run storage functions.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use storefn_vm::xrp::{XRP_DATA_VIEW_BYTES, XRP_SCRATCH_BYTES};
use storefn_vm::{Engine, Instance, ProgType, XrpCtx};

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum ProgCmd {
    /// List the storage functions built into this binary (compiled from progs/).
    List,
    /// Load and verify an object; prints `ok: N instructions` or `insn #N: reason`.
    Verify {
        /// A clang `-target bpf` object file.
        file: PathBuf,
        /// Program to pick: a section (`xrp`) or a function name.
        #[arg(long)]
        section: Option<String>,
        #[arg(long = "type", value_enum, default_value_t = TypeArg::Xrp)]
        prog_type: TypeArg,
        /// Also print how many memory accesses the verifier proved in bounds (the JIT runs
        /// them without a check) and, for xrp, the data/scratch bytes those proofs need; and
        /// the loops whose trips it bounded (charged as a whole before they run).
        #[arg(long)]
        proofs: bool,
    },
    /// Disassemble the linked program, one line per instruction with its slot index.
    Dump {
        file: PathBuf,
        #[arg(long)]
        section: Option<String>,
    },
    /// Verify, then run the program once on one data block and print its decision.
    Run {
        file: PathBuf,
        #[arg(long = "type", value_enum)]
        prog_type: TypeArg,
        /// The block the function reads (`ctx->data`); zero-padded to the 4 KiB data view.
        #[arg(long)]
        data: PathBuf,
        /// Initial scratch contents (zero-padded to 4 KiB); zeros when absent.
        #[arg(long)]
        scratch: Option<PathBuf>,
        /// Where to write scratch after the run.
        #[arg(long)]
        scratch_out: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = EngineArg::Jit)]
        engine: EngineArg,
        #[arg(long)]
        section: Option<String>,
        /// Instructions the invocation may execute (default: the VM's DEFAULT_INSN_BUDGET).
        #[arg(long)]
        budget: Option<u64>,
    },
    /// Per-call cost of node searches (and of an empty function: the fixed cost of a call) on
    /// the JIT, the interpreter and native Rust.
    Bench(crate::prog_bench::BenchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TypeArg {
    Xrp,
    Lambda,
    Offload,
}

impl From<TypeArg> for ProgType {
    fn from(t: TypeArg) -> Self {
        match t {
            TypeArg::Xrp => ProgType::Xrp,
            TypeArg::Lambda => ProgType::Lambda,
            TypeArg::Offload => ProgType::Offload,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    Jit,
    Interp,
}

pub fn run(cmd: &ProgCmd) -> CmdResult {
    match cmd {
        ProgCmd::List => {
            for (name, elf) in storefn_progs::ALL {
                println!("{name:<32} {} bytes", elf.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        ProgCmd::Verify { file, section, prog_type, proofs } => {
            verify(file, section.as_deref(), (*prog_type).into(), *proofs)
        }
        ProgCmd::Dump { file, section } => dump(file, section.as_deref()),
        ProgCmd::Run { file, prog_type, data, scratch, scratch_out, engine, section, budget } => {
            if *prog_type != TypeArg::Xrp {
                return Err("prog run supports --type xrp only".into());
            }
            let engine = match engine {
                EngineArg::Jit => Engine::Jit,
                EngineArg::Interp => Engine::Interp,
            };
            let args = RunArgs {
                file,
                section: section.as_deref(),
                data,
                scratch: scratch.as_deref(),
                scratch_out: scratch_out.as_deref(),
                engine,
                budget: *budget,
            };
            run_xrp(&args)
        }
        ProgCmd::Bench(args) => crate::prog_bench::run(args),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn verify(file: &Path, section: Option<&str>, t: ProgType, proofs: bool) -> CmdResult {
    let elf = read(file)?;
    let prog =
        storefn_vm::load(&elf, section, t).map_err(|e| format!("{}: {e}", file.display()))?;
    match storefn_vm::VerifiedProgram::new(prog) {
        Ok(v) => {
            println!("ok: {} instructions", v.stats().insns);
            if proofs {
                let (proved, all) = v.proved_accesses();
                let (data, scratch) = v.xrp_min_bytes();
                println!(
                    "proved: {proved} of {all} memory accesses in bounds \
                     (needs data >= {data} bytes, scratch >= {scratch} bytes)"
                );
                for l in v.cfg().counted_loops() {
                    println!(
                        "counted loop: #{}..#{}, at most {} trips, charged before it runs",
                        l.header, l.latch, l.trips
                    );
                }
                for l in v.cfg().block_loops() {
                    println!(
                        "counted loop of blocks: header #{} (body up to #{}), at most {} trips, \
                         charged before it runs",
                        l.header, l.latch, l.trips
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn dump(file: &Path, section: Option<&str>) -> CmdResult {
    let elf = read(file)?;
    let prog = storefn_vm::load(&elf, section, ProgType::Xrp)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    println!(
        "; {} ({} slots, {} bytes of globals)",
        prog.name,
        prog.insns.len(),
        prog.globals.len()
    );
    for (pc, text) in storefn_vm::disassemble(&prog) {
        println!("{pc:5}: {text}");
    }
    Ok(ExitCode::SUCCESS)
}

struct RunArgs<'a> {
    file: &'a Path,
    section: Option<&'a str>,
    data: &'a Path,
    scratch: Option<&'a Path>,
    scratch_out: Option<&'a Path>,
    engine: Engine,
    budget: Option<u64>,
}

/// Reads `path` zero-padded to `len` bytes; longer files are an error, never truncated.
fn read_padded(path: &Path, len: usize, what: &str) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut v = read(path)?;
    if v.len() > len {
        return Err(format!(
            "{}: {what} file is {} bytes, more than the {len}-byte {what} buffer",
            path.display(),
            v.len()
        )
        .into());
    }
    v.resize(len, 0);
    Ok(v)
}

fn run_xrp(a: &RunArgs<'_>) -> CmdResult {
    let elf = read(a.file)?;
    let prog = storefn_vm::load_verified(&elf, a.section, ProgType::Xrp)
        .map_err(|e| format!("{}: {e}", a.file.display()))?;
    let mut inst = Instance::new(prog, a.engine)?;
    if let Some(b) = a.budget {
        inst.set_insn_budget(b);
    }
    let data = read_padded(a.data, XRP_DATA_VIEW_BYTES, "data")?;
    let mut scratch = match a.scratch {
        Some(p) => read_padded(p, XRP_SCRATCH_BYTES, "scratch")?,
        None => vec![0; XRP_SCRATCH_BYTES],
    };
    let mut ctx = XrpCtx::default();
    let r0 = inst.run_xrp(&mut ctx, &data, &mut scratch);
    for line in &inst.host().trace {
        eprintln!("trace: {line}");
    }
    let r0 = r0?;
    println!("r0={r0} done={}", u8::from(ctx.done != 0));
    for (i, addr, size) in ctx.requests() {
        println!("next {i} addr={addr} size={size}");
    }
    if let Some(p) = a.scratch_out {
        std::fs::write(p, &scratch).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
