//! `storefn pageserver ...`: DDS's page server over the network (`storefn_dds::PageHost`, `storefn_dds::Deployment`).
//! `serve` runs storefn-server with the DDS front end and hands the host channels to a host
//! application over a Unix socket; `host` is that application; `bench` is the GetPage load.
//! This module parses and prints.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use storefn_dds::bench::pageserver::{self as bench, PageBenchConfig};
use storefn_dds::bench::spawn::{spawn_and_run, HostCommand};
use storefn_dds::limits::DEFAULT_CHANNEL_RING_BYTES;
use storefn_dds::{
    client_config_from_token_file, host_loop, DeployOptions, Deployment, PageHost, PageServerAuth,
};
use storefn_dds::{connect, ChannelListener, ForwardEnd, HostFiles, Side};

use crate::serve::{on_signal, STOP};
use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum PageServerCmd {
    /// The storage server with DDS offload: waits for the host application on --channel, then
    /// serves GetPage (OFFLOAD) requests on --listen.
    Serve(ServeArgs),
    /// The host application: stores pages through the host file library, replays page
    /// updates, answers the GetPages the offload functions forward to it.
    Host(HostArgs),
    /// GetPage load: latency of offloaded vs forwarded requests, host CPU per GetPage.
    Bench(BenchArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Served directory (the page file lives here).
    #[arg(long)]
    dir: PathBuf,
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: String,
    /// Unix socket the host application connects to (must not exist; mode 0600).
    #[arg(long)]
    channel: PathBuf,
    /// Offload functions (ELF); default: the built-in progs/dds/pageserver.bpf.c.
    #[arg(long)]
    prog: Option<PathBuf>,
    /// off: every GetPage goes to the host application (the baseline).
    #[arg(long, value_enum, default_value = "on")]
    offload: OnOff,
    /// Cache-table items.
    #[arg(long, default_value_t = 1 << 16)]
    table_items: usize,
    /// Server threads; each relays the host's answers to the requests it forwarded.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// `TENANT SECRET` lines; every connection must authenticate (HMAC-SHA256).
    #[arg(long, required_unless_present = "insecure_no_auth")]
    token_file: Option<PathBuf>,
    /// Serve without authentication: anyone who can connect reads, writes, loads programs.
    #[arg(long, conflicts_with = "token_file")]
    insecure_no_auth: bool,
    /// Serve Prometheus metrics on this address (`GET /metrics`), e.g. 127.0.0.1:9464.
    #[arg(long)]
    metrics: Option<String>,
    /// Connection and refused-request log lines: text, or one JSON object per line.
    #[arg(long, default_value = "text")]
    log_format: storefn_server::LogFormat,
}

#[derive(Debug, Args)]
pub struct HostArgs {
    /// The server's host-channel socket.
    #[arg(long)]
    channel: PathBuf,
    /// Page file, relative to the server's directory.
    #[arg(long, default_value = "pages")]
    file: String,
    /// Pages to store (8 KiB each).
    #[arg(long, default_value_t = 4096)]
    pages: u64,
    /// Page updates replayed per second (random pages).
    #[arg(long, default_value_t = 1000)]
    updates_per_sec: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A running `storefn pageserver serve` with its host application.
    #[arg(long, conflicts_with = "spawn", required_unless_present = "spawn")]
    remote: Option<String>,
    /// Start a server, a host application (a separate process: this binary as
    /// `pageserver host`) and the load on this machine (loopback); all stopped after.
    #[arg(long)]
    spawn: bool,
    /// With --spawn: run the server with offload on or off. With --remote: what the server
    /// was started with (recorded in the report).
    #[arg(long, value_enum, default_value = "on")]
    offload: OnOff,
    /// With --spawn: directory for the page file (default: a fresh one under $TMPDIR,
    /// removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// With --spawn: pages stored.
    #[arg(long, default_value_t = 4096)]
    pages: u64,
    /// With --spawn: page updates replayed per second by the host.
    #[arg(long, default_value_t = 1000)]
    updates_per_sec: u64,
    /// Measured GetPages.
    #[arg(long, default_value_t = 20_000)]
    requests: u64,
    /// Unmeasured GetPages per thread first.
    #[arg(long, default_value_t = 2000)]
    warmup: u64,
    /// Client threads (one connection and one request outstanding each).
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Server threads (with --spawn; with --remote: what the server was started with,
    /// recorded in the report).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// With --remote: authenticate as the first tenant of this token file.
    #[arg(long, conflicts_with = "spawn")]
    token_file: Option<PathBuf>,
    /// Share of GetPages asking for a version newer than the cached one (host only).
    #[arg(long, default_value_t = 0.1)]
    host_share: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(c: &PageServerCmd) -> CmdResult {
    match c {
        PageServerCmd::Serve(a) => serve(a),
        PageServerCmd::Host(a) => host(a),
        PageServerCmd::Bench(a) => bench_cmd(a),
    }
}

fn install_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

fn elf(prog: Option<&PathBuf>) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    Ok(match prog {
        Some(p) => std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => storefn_progs::must("dds/pageserver").to_vec(),
    })
}

fn serve(a: &ServeArgs) -> CmdResult {
    let elf = elf(a.prog.as_ref())?;
    install_signals();
    let l = ChannelListener::bind(&a.channel)?;
    eprintln!(
        "storefn pageserver serve: waiting for the host application on {}",
        a.channel.display()
    );
    let files = l.accept(DEFAULT_CHANNEL_RING_BYTES)?;
    let forward = l.accept(DEFAULT_CHANNEL_RING_BYTES)?;
    let on = a.offload == OnOff::On;
    let mut opts = DeployOptions::new(a.table_items, on);
    opts.threads = a.threads;
    opts.metrics.clone_from(&a.metrics);
    opts.log_format = a.log_format;
    opts.log = true;
    opts.auth = match &a.token_file {
        Some(t) => PageServerAuth::from_token_file(t)?,
        None => PageServerAuth::InsecureNoAuth,
    };
    let d = Deployment::start_with_opts(&a.listen, &a.dir, &elf, &opts, files, forward)?;
    eprintln!(
        "storefn pageserver serve: listening on {} (dir {}, offload {}, {} thread(s), auth {})",
        d.server.local_addr(),
        a.dir.display(),
        if on { "on" } else { "off" },
        a.threads,
        if a.token_file.is_some() { "on" } else { "off" }
    );
    if let Some(m) = d.server.metrics_addr() {
        eprintln!("storefn pageserver serve: metrics on http://{m}/metrics");
    }
    while !STOP.load(Ordering::Relaxed) {
        // A new host application may attach once the current one is gone.
        if let Err(e) = reattach(&l, &d) {
            eprintln!("storefn pageserver serve: host application refused: {e}");
        }
    }
    let s = d.front.stats();
    eprintln!(
        "storefn pageserver serve: stopping ({} offloaded, {} forwarded, {} function faults: \
         batches whose offload functions faulted or answered out of range, forwarded whole)",
        s.offloaded.load(Ordering::Relaxed),
        s.forwarded.load(Ordering::Relaxed),
        s.faults.load(Ordering::Relaxed)
    );
    if let Some(f) = d.front.last_fault() {
        eprintln!("storefn pageserver serve: last function fault: {f}");
    }
    d.stop()?;
    Ok(ExitCode::SUCCESS)
}

/// Waits up to 50 ms for a host application on the channel socket; attaches it (both its
/// channels) if the current host is gone, else refuses it (closes its socket).
fn reattach(l: &ChannelListener, d: &Deployment) -> Result<(), Box<dyn std::error::Error>> {
    let timed_out = |e: &storefn_dds::HostError| {
        matches!(e, storefn_dds::HostError::Dir { source, .. }
            if source.kind() == std::io::ErrorKind::TimedOut)
    };
    let files = match l.accept_timeout(DEFAULT_CHANNEL_RING_BYTES, Duration::from_millis(50)) {
        Ok(f) => f,
        Err(e) if timed_out(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let forward = l.accept_timeout(DEFAULT_CHANNEL_RING_BYTES, Duration::from_secs(5))?;
    d.attach_host(files, forward)?;
    eprintln!("storefn pageserver serve: a new host application attached");
    Ok(())
}

fn host(a: &HostArgs) -> CmdResult {
    install_signals();
    let files = HostFiles::new(connect(&a.channel)?);
    let forward = ForwardEnd::new(connect(&a.channel)?, Side::Host);
    let mut h = PageHost::create(files, forward, &a.file, a.pages)?;
    eprintln!(
        "storefn pageserver host: {} pages stored in {}; replaying {} updates/s",
        a.pages, a.file, a.updates_per_sec
    );
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> CmdResult {
        let t = s.spawn(|| host_loop(&mut h, &stop, a.updates_per_sec, a.seed));
        while !STOP.load(Ordering::Relaxed) && !t.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        t.join().map_err(|_| "host loop panicked")??;
        Ok(ExitCode::SUCCESS)
    })?;
    let st = h.stats();
    eprintln!(
        "storefn pageserver host: stopped ({} forwarded answered, {} updates, {:.1} ms busy CPU)",
        st.answered,
        st.updates,
        st.busy_cpu_ns as f64 / 1e6
    );
    Ok(ExitCode::SUCCESS)
}

fn bench_cmd(a: &BenchArgs) -> CmdResult {
    if !(0.0..=1.0).contains(&a.host_share) {
        return Err(format!("--host-share {}: expected 0..=1", a.host_share).into());
    }
    let cfg = PageBenchConfig {
        addr: a.remote.clone().unwrap_or_default(),
        requests: a.requests,
        warmup: a.warmup,
        clients: a.clients,
        threads: a.threads,
        client: match &a.token_file {
            Some(t) => client_config_from_token_file(t)?,
            None => storefn_wire::ClientConfig::default(),
        },
        host_share: a.host_share,
        seed: a.seed,
        offload: a.offload == OnOff::On,
    };
    let r = if a.spawn {
        let (dir, temp) = match &a.dir {
            Some(d) => (d.clone(), false),
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let d = std::env::temp_dir()
                    .join(format!("storefn-pageserver-{}-{nanos}", std::process::id()));
                std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
                (d, true)
            }
        };
        // The host application is a separate process: this binary, as `pageserver host`.
        let host = HostCommand {
            program: std::env::current_exe().map_err(|e| format!("current executable: {e}"))?,
            args: vec!["pageserver".into(), "host".into()],
        };
        let r = spawn_and_run(&dir, &elf(None)?, a.pages, a.updates_per_sec, &host, &cfg);
        if temp {
            let _ = std::fs::remove_dir_all(&dir);
        }
        r?
    } else {
        bench::run(&cfg)?
    };
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    println!(
        "pageserver offload={} threads={} clients={} requests={} offloaded_share={:.3} host_cpu_us_per_op={:.2} \
         p50_us={:.1} p99_us={:.1} offloaded_p50_us={} forwarded_p50_us={} offloaded_p99_us={} \
         forwarded_p99_us={} host_us_per_forwarded={} stale_pages={} ops_per_sec={:.0}",
        if r.offload { "on" } else { "off" },
        r.threads,
        r.clients,
        r.requests,
        r.offloaded_share,
        r.host_cpu_us_per_op,
        r.p50_us,
        r.p99_us,
        opt(r.offloaded_p50_us),
        opt(r.forwarded_p50_us),
        opt(r.offloaded_p99_us),
        opt(r.forwarded_p99_us),
        opt(r.host_us_per_forwarded),
        r.stale_pages,
        r.ops_per_sec
    );
    if r.offloaded_device_p50_us.is_some() || r.forwarded_ring_p50_us.is_some() {
        println!(
            "time split p50/p99 us: offloaded device={}/{} | forwarded ring={}/{} host={}/{} \
             device={}/{}",
            opt(r.offloaded_device_p50_us),
            opt(r.offloaded_device_p99_us),
            opt(r.forwarded_ring_p50_us),
            opt(r.forwarded_ring_p99_us),
            opt(r.forwarded_host_p50_us),
            opt(r.forwarded_host_p99_us),
            opt(r.forwarded_device_p50_us),
            opt(r.forwarded_device_p99_us)
        );
    }
    if let Some(n) = r.function_faults.filter(|&n| n > 0) {
        println!(
            "function faults: {n} batches forwarded whole (last: {})",
            r.last_fault.as_deref().unwrap_or("-")
        );
    }
    if let Some(p) = &a.json {
        let s = serde_json::to_string_pretty(&r)?;
        std::fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if r.stale_pages > 0 {
        return Err(format!("{} stale pages (older than the LSN asked)", r.stale_pages).into());
    }
    Ok(ExitCode::SUCCESS)
}
