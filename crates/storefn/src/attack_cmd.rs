//! `storefn attack`: a victim tenant's point-read p99 idle and under each attack on the server
//! (storefn-server's attack measurement, an in-process server on loopback).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use storefn_server::attack::{self, AttackConfig, ATTACKS};

use crate::CmdResult;

#[derive(Debug, Args)]
pub struct AttackArgs {
    /// Scratch directory the server serves (created, filled, removed after).
    #[arg(long, default_value = "/tmp/storefn-attack")]
    dir: PathBuf,
    /// Rounds per attack: idle and attacked alternate, each figure is the median of its rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Victim point reads (512 B) per round.
    #[arg(long, default_value_t = 400)]
    reads: usize,
    /// Run only these attacks (repeatable): cpu_flood, stat_flood, load_prog_flood,
    /// write_sync_flood, lambda_staging_flood, non_reading_clients, connection_flood.
    #[arg(long)]
    only: Vec<String>,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &AttackArgs) -> CmdResult {
    if let Some(bad) = a.only.iter().find(|o| !ATTACKS.contains(&o.as_str())) {
        return Err(format!("--only {bad}: expected one of {}", ATTACKS.join(", ")).into());
    }
    if a.rounds == 0 || a.reads == 0 {
        return Err("--rounds and --reads: expected at least 1".into());
    }
    let cfg =
        AttackConfig { dir: a.dir.clone(), rounds: a.rounds, reads: a.reads, only: a.only.clone() };
    let results = attack::run(&cfg)?;
    if a.json {
        println!("{}", attack::to_json(&cfg, &results));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<22} {:>12} {:>14} {:>7} {:>12}",
        "attack", "idle p99 us", "attacked p99 us", "ratio", "attacker ops"
    );
    for r in &results {
        println!(
            "{:<22} {:>12.0} {:>14.0} {:>6.2}x {:>12}",
            r.attack, r.idle_p99_us, r.attacked_p99_us, r.ratio, r.attacker_ops
        );
    }
    Ok(ExitCode::SUCCESS)
}
