//! `storefn io ...`

use std::process::ExitCode;

use clap::Subcommand;

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum IoCmd {
    /// Report whether io_uring is usable on this kernel.
    Probe,
}

pub fn run(cmd: &IoCmd) -> CmdResult {
    match cmd {
        IoCmd::Probe => {
            println!("io_uring: (probe pending: storefn-io engine)");
            Ok(ExitCode::SUCCESS)
        }
    }
}
