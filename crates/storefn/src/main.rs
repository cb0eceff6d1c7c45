//! `storefn`: one binary for programs, the KV store, the engine's benchmarks and plots.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod attack_cmd;
#[cfg(feature = "bench")]
mod cluster_bench;
mod cluster_cmd;
mod dds_cmd;
mod demo;
mod digest_cmd;
mod io;
mod kv;
mod kv_remote;
mod lambda;
mod lambda_plot;
mod net;
mod pageserver_cmd;
mod plot;
mod plot_rtt;
mod prog;
mod prog_bench;
mod rocks;
mod rocks_bench;
mod rocks_plot;
mod serve;
mod wt;
mod ycsb;

/// Run small, verified eBPF storage functions where the data is.
#[derive(Debug, Parser)]
#[command(name = "storefn", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Storage functions: verify, disassemble, run, benchmark.
    #[command(subcommand)]
    Prog(prog::ProgCmd),
    /// BPF-KV: create a database, look keys up through every path, benchmark.
    #[command(subcommand)]
    Kv(kv::KvCmd),
    /// The io_uring engine: chain microbenchmarks.
    #[command(subcommand)]
    Io(io::IoCmd),
    /// The README demo: build a small database, run every lookup path, compare.
    Demo(demo::DemoArgs),
    /// λ-IO: run a function over a file range, locally or on the server; workloads; bench.
    #[command(subcommand)]
    Lambda(lambda::LambdaCmd),
    /// Network emulation: a user-space delay proxy for tests and benchmarks.
    #[command(subcommand)]
    Net(net::NetCmd),
    /// Serve the files of a directory to remote clients; run storage functions next to them.
    Serve(serve::ServeArgs),
    /// The server under hostile clients: a victim's point-read p99 idle and under each attack.
    Attack(attack_cmd::AttackArgs),
    /// Figures from `storefn kv bench --json` runs: throughput and latency vs layers and threads.
    Plot(plot::PlotArgs),
    /// DDS rings: the progressive ring vs a mutex ring vs a flag-per-slot ring.
    #[command(subcommand)]
    Ring(dds_cmd::RingCmd),
    /// DDS offload engine pieces: the cache table's benchmark.
    #[command(subcommand)]
    Dds(dds_cmd::DdsCmd),
    /// DDS's page server over the network: server with offload, host application, GetPage bench.
    #[command(subcommand)]
    Pageserver(pageserver_cmd::PageServerCmd),
    /// RocksDB's own files, read-only: Gets as RocksDB answers them.
    #[command(subcommand)]
    Rocks(rocks::RocksCmd),
    /// WiredTiger: point lookups in a database's own B-tree files, read-only.
    #[command(subcommand)]
    Wt(wt::WtCmd),
    /// Many servers on etcd: collections, shards, replicas, their status; drain a server.
    #[command(subcommand)]
    Cluster(cluster_cmd::ClusterCmd),
    /// YCSB's core workloads A-F against BPF-KV, WiredTiger through storefn, WiredTiger alone.
    #[command(subcommand)]
    Ycsb(ycsb::YcsbCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.cmd, Cmd::Prog(_)) {
        // Listings and disassembly are read through `head` and pagers: a reader that stops early
        // ends the process quietly, as it would any Unix filter. Rust's runtime ignores SIGPIPE,
        // so without this the next print panics on EPIPE. Only here: the other commands write to
        // sockets and pipes whose peers may hang up, and must see that as an error, not die.
        // SAFETY: restoring a signal's default disposition before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.cmd {
        Cmd::Prog(c) => prog::run(&c),
        Cmd::Kv(c) => kv::run(&c),
        Cmd::Io(c) => io::run(&c),
        Cmd::Demo(a) => demo::run(&a),
        Cmd::Plot(a) => plot::run(&a),
        Cmd::Net(c) => net::run(&c),
        Cmd::Lambda(c) => lambda::run(&c),
        Cmd::Serve(a) => serve::run(&a),
        Cmd::Attack(a) => attack_cmd::run(&a),
        Cmd::Ring(c) => dds_cmd::run_ring(&c),
        Cmd::Dds(c) => dds_cmd::run_dds(&c),
        Cmd::Pageserver(c) => pageserver_cmd::run(&c),
        Cmd::Rocks(c) => rocks::run(&c),
        Cmd::Wt(c) => wt::run(&c),
        Cmd::Cluster(c) => cluster_cmd::run(&c),
        Cmd::Ycsb(c) => ycsb::run(&c),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What every subcommand returns: an exit code, or an error printed as `error: ...`.
pub type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;
