//! `storefn prog ...`

use std::process::ExitCode;

use clap::Subcommand;

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum ProgCmd {
    /// List the storage functions built into this binary (compiled from progs/).
    List,
    /// Per-call cost of node searches on the JIT, the interpreter and native Rust.
    Bench(crate::prog_bench::BenchArgs),
}

pub fn run(cmd: &ProgCmd) -> CmdResult {
    match cmd {
        ProgCmd::List => {
            for (name, elf) in storefn_progs::ALL {
                println!("{name:<32} {} bytes", elf.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        ProgCmd::Bench(args) => crate::prog_bench::run(args),
    }
}
