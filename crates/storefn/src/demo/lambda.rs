//! The demo's λ-IO table: one function (stats64) over 64 KiB ranges of a file the loopback server
//! serves, at 200 µs RTT, run by `auto` for ranges the client has not read (cold: reading them
//! means moving 64 KiB over the link, while the server sends back 24 bytes) and for ranges it has
//! cached (warm: no network at all). Auto profiles both sides, then runs each request on the side
//! its model predicts faster.

use std::net::SocketAddr;

use storefn_lambda::{
    DispatchConfig, Dispatcher, LambdaProg, RemoteReadSide, RemoteSide, ServerTransport, Side,
    SideKind, Workload,
};
use storefn_netdelay::DelayProxy;
use storefn_wire::ClientConfig;

use crate::CmdResult;

/// The file's size and each request's range.
pub const FILE_BYTES: u64 = 32 << 20;
const RANGE_BYTES: u64 = 64 << 10;
/// Requests per condition.
const REQUESTS: u64 = 200;
/// Distinct ranges the warm condition repeats (all cached after their first read).
const WARM_RANGES: u64 = 4;
const RTT_US: u64 = 200;

/// Writes the workload file `path` (served as `name`).
pub fn make_file(path: &std::path::Path, seed: u64) -> CmdResult {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    Workload::Stats64.generate(&mut f, FILE_BYTES, seed)?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Prints the table for the served file `name` on `server`.
pub fn run(server: SocketAddr, name: &str) -> CmdResult {
    let proxy = DelayProxy::spawn(([127, 0, 0, 1], 0).into(), server, RTT_US, None)?;
    let addr = proxy.local_addr().to_string();
    let w = Workload::Stats64;
    let prog = LambdaProg::from_elf(w.name(), storefn_progs::must(w.prog_name()), None);
    let mut out = vec![0u8; w.out_cap(RANGE_BYTES as usize)];
    println!();
    println!(
        "λ-IO: {} over {} KiB ranges of a served file, {RTT_US} µs RTT, {REQUESTS} requests each",
        w.name(),
        RANGE_BYTES >> 10
    );
    println!(
        "{:<6} {:>16} {:>14} {:>12}",
        "client", "auto ran local", "auto ran server", "mean µs"
    );
    for (cond, ranges) in [("cold", REQUESTS), ("warm", WARM_RANGES)] {
        let cfg = ClientConfig::default();
        let mut local = RemoteReadSide::new(
            ServerTransport::connect(&addr, cfg.clone())?,
            name,
            prog.instance(storefn_vm::Engine::Jit)?,
        );
        let mut remote = RemoteSide::new(ServerTransport::connect(&addr, cfg)?, name, &prog)?;
        // One request on each side first (connections, the server's program load), outside the
        // ranges measured, so auto starts from steady-state samples.
        let spare = FILE_BYTES - RANGE_BYTES;
        local.run(spare, RANGE_BYTES, &mut out)?;
        remote.run(spare, RANGE_BYTES, &mut out)?;
        local.drop_cached(spare, RANGE_BYTES);
        let mut d = Dispatcher::new(DispatchConfig::default());
        let (mut n_local, mut n_server, mut total_ns) = (0u64, 0u64, 0u64);
        for i in 0..REQUESTS {
            // Cold: a range never read before; warm: one of a few ranges read over and over.
            let off = (i % ranges) * RANGE_BYTES % FILE_BYTES;
            let (side, run) = d.run(&mut local, &mut remote, off, RANGE_BYTES, &mut out)?;
            match side {
                SideKind::Local => n_local += 1,
                SideKind::Server => n_server += 1,
            }
            total_ns += run.wall_ns;
        }
        println!(
            "{:<6} {:>16} {:>14} {:>12.1}",
            cond,
            n_local,
            n_server,
            total_ns as f64 / REQUESTS as f64 / 1e3
        );
    }
    println!(
        "(auto profiles both sides and runs each request where its model predicts it faster: \
         cold, a local run moves the range over the link; warm, it needs no network)"
    );
    Ok(std::process::ExitCode::SUCCESS)
}
