//! `storefn net delay`: the user-space delay proxy (storefn-netdelay) from the command line.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, Subcommand};
use storefn_netdelay::DelayProxy;

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum NetCmd {
    /// Forward TCP connections from --listen to --to, adding --rtt-us of round-trip time (half
    /// each way, in the path) and an optional bandwidth cap; runs until SIGINT/SIGTERM.
    Delay(DelayArgs),
}

#[derive(Debug, Args)]
pub struct DelayArgs {
    /// Address to accept connections on (port 0 picks one; the summary line names it).
    #[arg(long)]
    listen: SocketAddr,
    /// Address every connection is forwarded to.
    #[arg(long)]
    to: SocketAddr,
    /// Round-trip time to add, in microseconds.
    #[arg(long)]
    rtt_us: u64,
    /// Bandwidth cap per direction of each connection, in Mbit/s.
    #[arg(long)]
    mbit: Option<f64>,
}

/// Set by the SIGINT/SIGTERM handler; the main thread polls it.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Relaxed: a flag polled by one thread; nothing else is published through it.
    STOP.store(true, Ordering::Relaxed);
}

pub fn run(cmd: &NetCmd) -> CmdResult {
    let NetCmd::Delay(a) = cmd;
    let proxy = DelayProxy::spawn(a.listen, a.to, a.rtt_us, a.mbit)
        .map_err(|e| format!("net delay --listen {} --to {}: {e}", a.listen, a.to))?;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let cap = a.mbit.map_or_else(|| "unlimited".to_string(), |m| format!("{m} Mbit/s"));
    println!(
        "net delay: listening on {} -> {} rtt {} us bandwidth {cap}",
        proxy.local_addr(),
        a.to,
        a.rtt_us
    );
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = proxy.stats();
    println!(
        "net delay: stopped; connections {} refused {} bytes up {} down {}",
        st.connections.load(Ordering::Relaxed),
        st.refused.load(Ordering::Relaxed),
        st.bytes_up.load(Ordering::Relaxed),
        st.bytes_down.load(Ordering::Relaxed)
    );
    proxy.shutdown();
    Ok(ExitCode::SUCCESS)
}
