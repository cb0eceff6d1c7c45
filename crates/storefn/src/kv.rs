//! `storefn kv ...`

use std::process::ExitCode;

use clap::Subcommand;

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum KvCmd {
    /// Print BPF-KV database sizes by layer count for 512 B nodes.
    Sizes,
}

pub fn run(cmd: &KvCmd) -> CmdResult {
    match cmd {
        KvCmd::Sizes => {
            // 512 B nodes with fan-out 31, 64 B values (docs/FORMAT.md).
            let mut nodes: u64 = 0;
            for layers in 1..=6u32 {
                nodes += 31u64.pow(layers - 1);
                let bytes = nodes * 512 + 31u64.pow(layers) * 64;
                println!("layers {layers}: {bytes} bytes");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
