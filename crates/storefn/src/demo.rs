//! `storefn demo`: the README's main job.

use std::process::ExitCode;

use clap::Args;

use crate::CmdResult;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the demo database (default: a fresh temporary directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

pub fn run(_args: &DemoArgs) -> CmdResult {
    println!("storefn demo: built-in storage functions");
    for (name, elf) in storefn_progs::ALL {
        println!("  {name:<32} {} bytes", elf.len());
    }
    Ok(ExitCode::SUCCESS)
}
