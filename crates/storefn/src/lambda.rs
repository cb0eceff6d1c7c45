//! `storefn lambda gen|run|bench`: λ-IO functions over file ranges (storefn-lambda).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use storefn_lambda::bench::{self, BenchConfig, BenchRow, Condition};
use storefn_lambda::bench_remote::RemoteBenchConfig;
use storefn_lambda::bench_server::{run_server, ServerBenchConfig};
use storefn_lambda::DispatchConfig;
use storefn_lambda::{
    parse_range, run_local_once, run_remote_once, LambdaProg, Location, Where, Workload,
};
use storefn_vm::Engine;
use storefn_wire::limits::MAX_READ_BYTES;
use storefn_wire::ClientConfig;

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum LambdaCmd {
    /// Write a workload's input file: stats64, stats32, knn, grep, bitmap, tpch_q6.
    Gen(GenArgs),
    /// Run a λ function over a file range; prints a summary, writes the output bytes to --out.
    Run(RunArgs),
    /// Time per request of each workload under each client-cache condition (local side).
    Bench(BenchArgs),
    /// What the dispatcher itself adds per request (auto against sides that do no work).
    Overhead(OverheadArgs),
    /// pwrite_λ: run a λ function over an input file's bytes and write its output at an offset
    /// of FILE (here) or ADDR:FILE (on the server, durably before it answers).
    Write(WriteArgs),
}

#[derive(Debug, Args)]
pub struct WriteArgs {
    /// FILE on this machine (created when missing), or ADDR:FILE on a storage server (FILE
    /// relative to its served directory; it must exist there).
    #[arg(value_parser = parse_location)]
    file: Location,
    /// The bytes the function transforms.
    #[arg(long)]
    input: PathBuf,
    /// Where the output is written in FILE (decimal or 0x hex).
    #[arg(long, value_parser = parse_offset, default_value = "0")]
    offset: u64,
    /// Output buffer size (default: the workload's bound, at most 4M; 1M for other programs).
    #[arg(long, value_parser = parse_bytes)]
    out_cap: Option<u64>,
    #[command(flatten)]
    opts: ReqOpts,
}

/// Options of a single λ request (run, write).
#[derive(Debug, Args)]
pub struct ReqOpts {
    /// A built-in workload (stats64, knn, bitmap, ...), a built-in program (lambda/knn), or a
    /// path to a clang `-target bpf` object built against progs/include.
    #[arg(long)]
    prog: String,
    /// Program to pick from the object: a section or a function name.
    #[arg(long)]
    section: Option<String>,
    /// Token for the server (ADDR:FILE only).
    #[arg(long)]
    token_file: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = EngineArg::Jit)]
    engine: EngineArg,
}

/// The client's tenant and secret: the token file's first line, or none.
fn client_config(token_file: Option<&PathBuf>) -> Result<ClientConfig, String> {
    token_file.map_or(Ok(ClientConfig::default()), |t| {
        storefn_server::client_config(t).map_err(|e| format!("{}: {e}", t.display()))
    })
}

#[derive(Debug, Args)]
pub struct OverheadArgs {
    /// A file whose first --len bytes the local side's cache probe asks about.
    file: PathBuf,
    /// Bytes per request.
    #[arg(long, value_parser = parse_bytes, default_value = "4K")]
    len: u64,
    /// What the local side reports per request, ns (the server reports 100x that).
    #[arg(long, default_value_t = 1000)]
    local_ns: u64,
    #[arg(long, default_value_t = 100_000)]
    requests: u32,
    /// Rounds (medians are reported).
    #[arg(long, default_value_t = 5)]
    rounds: u32,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    #[arg(value_parser = parse_workload)]
    workload: Workload,
    /// The file to write (replaced if it exists).
    file: PathBuf,
    /// Bytes to write, rounded down to whole records (K, M, G suffixes: powers of 1024).
    #[arg(long, value_parser = parse_bytes, default_value = "64M")]
    size: u64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// FILE on this machine, or ADDR:FILE on a storage server (FILE relative to its served
    /// directory).
    #[arg(value_parser = parse_location)]
    file: Location,
    /// local: read the range here and run the function here; server: run it on the server
    /// (only the output crosses the network); auto: per request, by the measured cost model.
    #[arg(long = "where", value_parser = parse_where, default_value = "local")]
    r#where: Where,
    /// OFF:LEN (decimal or 0x hex); the whole file when absent.
    #[arg(long, value_parser = parse_range)]
    range: Option<(u64, u64)>,
    /// Where to write the function's output bytes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Output buffer size (default: the workload's bound, or 1M for other programs).
    #[arg(long, value_parser = parse_bytes)]
    out_cap: Option<u64>,
    #[command(flatten)]
    opts: ReqOpts,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Directory for the generated data files (`<workload>.dat`, reused when the size matches).
    #[arg(long)]
    dir: PathBuf,
    /// Workloads, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_parser = parse_workload)]
    workloads: Vec<Workload>,
    /// Client-cache conditions, comma-separated.
    #[arg(long, value_delimiter = ',', value_enum, default_values_t = [CondArg::Cold, CondArg::Warm])]
    conditions: Vec<CondArg>,
    /// Timed requests per (workload, condition), after 3 warm-up requests.
    #[arg(long, default_value_t = 200)]
    requests: u32,
    /// Bytes per request, rounded down to whole records.
    #[arg(long, value_parser = parse_bytes, default_value = "256K")]
    request_bytes: u64,
    /// Size of each data file.
    #[arg(long, value_parser = parse_bytes, default_value = "64M")]
    file_bytes: u64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = EngineArg::Jit)]
    engine: EngineArg,
    /// Append one JSON object per (workload, condition, where) to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw time per request per (workload, condition) and side into this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// A storage server serving --dir (`storefn serve --dir DIR`): run each read workload
    /// local (READ frames through the client's cache) / server (LAMBDA frame) / auto through
    /// a delay proxy per RTT. Requests must fit one LAMBDA frame (--request-bytes <= 1M).
    #[arg(long)]
    server: Option<std::net::SocketAddr>,
    /// With --server: round-trip times the proxy adds, µs.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 200, 1000])]
    rtts_us: Vec<u64>,
    /// With --server: also the runs whose conditions change midway (cache warms; cache is
    /// evicted; RTT rises; with --cpu-cap, the server's CPU is capped midway).
    #[arg(long)]
    changes: bool,
    /// With --server: repeat the sweep with the server's CPU capped to this % of one CPU
    /// (cgroup v1; needs root and --server-pid).
    #[arg(long)]
    cpu_cap: Option<u32>,
    /// With --cpu-cap: the server's process id.
    #[arg(long)]
    server_pid: Option<u32>,
    /// With --server: the client's block cache, bytes.
    #[arg(long, value_parser = parse_bytes, default_value = "64M")]
    client_cache: u64,
    /// With --server: token for the server.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    Jit,
    Interp,
}

impl EngineArg {
    fn engine(self) -> Engine {
        match self {
            EngineArg::Jit => Engine::Jit,
            EngineArg::Interp => Engine::Interp,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CondArg {
    Cold,
    Warm,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    s.parse()
}

fn parse_location(s: &str) -> Result<Location, String> {
    s.parse()
}

fn parse_where(s: &str) -> Result<Where, String> {
    s.parse()
}

/// `4096`, `256K`, `64M`, `1G` (powers of 1024).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|e| format!("size {s:?}: {e}"))?;
    n.checked_mul(mul).ok_or_else(|| format!("size {s:?} overflows"))
}

pub fn run(cmd: &LambdaCmd) -> CmdResult {
    match cmd {
        LambdaCmd::Gen(a) => gen(a),
        LambdaCmd::Run(a) => run_one(a),
        LambdaCmd::Bench(a) => run_bench(a),
        LambdaCmd::Overhead(a) => overhead(a),
        LambdaCmd::Write(a) => write(a),
    }
}

fn parse_offset(s: &str) -> Result<u64, String> {
    parse_range(&format!("{s}:0")).map(|(o, _)| o).map_err(|e| format!("offset {s:?}: {e}"))
}

fn write(a: &WriteArgs) -> CmdResult {
    use storefn_lambda::limits::MAX_REMOTE_WRITE_OUT_BYTES;
    use storefn_lambda::{write_local_once, write_remote_once};
    let input = std::fs::read(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let (prog, workload) = resolve_prog(&a.opts.prog, a.opts.section.as_deref())?;
    let out_cap = match (a.out_cap, workload) {
        (Some(c), _) => usize::try_from(c).map_err(|_| format!("--out-cap {c} is too large"))?,
        (None, Some(w)) => w.out_cap(input.len()).min(MAX_REMOTE_WRITE_OUT_BYTES),
        (None, None) => DEFAULT_OUT_CAP,
    };
    let (r, wh) = match &a.file {
        Location::Local(p) => {
            if a.opts.token_file.is_some() {
                return Err("--token-file applies to ADDR:FILE only".into());
            }
            let mut inst = prog.instance(a.opts.engine.engine())?;
            (write_local_once(p, &mut inst, a.offset, &input, out_cap)?, "local")
        }
        Location::Remote { addr, file } => {
            let cfg = client_config(a.opts.token_file.as_ref())?;
            let addr = addr.to_string();
            (write_remote_once(&addr, file, cfg, &prog, a.offset, &input, out_cap)?, "server")
        }
    };
    println!(
        "lambda write: prog {} file {} offset {} in {} bytes written {} bytes where {wh} time \
         {:.1} us (durable)",
        prog.name(),
        a.file,
        a.offset,
        input.len(),
        r.written,
        r.wall_ns as f64 / 1e3
    );
    Ok(ExitCode::SUCCESS)
}

fn overhead(a: &OverheadArgs) -> CmdResult {
    let o =
        storefn_lambda::bench_dispatch::measure(&a.file, a.len, a.local_ns, a.requests, a.rounds)?;
    println!(
        "lambda overhead: len {} local_ns {} requests {} rounds {} auto_extra_ns {:.1} \
         decide_record_ns {:.1} cache_probe_ns {:.1} samples_per_request {:.4} own_fraction {:.4}",
        a.len,
        a.local_ns,
        a.requests,
        a.rounds,
        o.auto_extra_ns,
        o.decide_record_ns,
        o.cache_probe_ns,
        o.samples_per_request,
        o.own_fraction
    );
    Ok(ExitCode::SUCCESS)
}

fn gen(a: &GenArgs) -> CmdResult {
    let err = |e: std::io::Error| format!("{}: {e}", a.file.display());
    let f = std::fs::File::create(&a.file).map_err(err)?;
    let mut w = std::io::BufWriter::new(f);
    let n = a.workload.generate(&mut w, a.size, a.seed).map_err(err)?;
    let f = w.into_inner().map_err(|e| err(e.into_error()))?;
    f.sync_all().map_err(err)?;
    println!("lambda gen: {} {} bytes seed {} -> {}", a.workload, n, a.seed, a.file.display());
    Ok(ExitCode::SUCCESS)
}

/// The program named by `--prog`, and the output bound when it is a built-in workload.
fn resolve_prog(
    spec: &str,
    section: Option<&str>,
) -> Result<(LambdaProg, Option<Workload>), String> {
    if let Ok(w) = spec.parse::<Workload>() {
        let elf = storefn_progs::must(w.prog_name());
        return Ok((LambdaProg::from_elf(w.name(), elf, section), Some(w)));
    }
    if let Some(elf) = storefn_progs::get(spec) {
        let w = Workload::ALL.into_iter().find(|w| w.prog_name() == spec);
        return Ok((LambdaProg::from_elf(spec, elf, section), w));
    }
    let elf = std::fs::read(spec).map_err(|e| {
        format!("--prog {spec}: not a built-in workload or program, and reading it as a file: {e}")
    })?;
    Ok((LambdaProg::from_elf(spec, &elf, section), None))
}

/// Default output buffer for a program that is not a built-in workload.
const DEFAULT_OUT_CAP: usize = 1 << 20;

fn run_one(a: &RunArgs) -> CmdResult {
    let path = match &a.file {
        Location::Local(p) => p,
        Location::Remote { addr, file } => return run_remote(a, &addr.to_string(), file),
    };
    if a.r#where != Where::Local {
        return Err(format!(
            "--where {}: {} is a local file, so only --where local applies (server and auto \
             need ADDR:FILE)",
            a.r#where, a.file
        )
        .into());
    }
    if a.opts.token_file.is_some() {
        return Err("--token-file applies to ADDR:FILE only".into());
    }
    let (prog, workload) = resolve_prog(&a.opts.prog, a.opts.section.as_deref())?;
    let mut inst = prog.instance(a.opts.engine.engine())?;
    let len_hint = a.range.map_or(0, |(_, l)| usize::try_from(l).unwrap_or(usize::MAX));
    let out_cap = match (a.out_cap, workload) {
        (Some(c), _) => usize::try_from(c).map_err(|_| format!("--out-cap {c} is too large"))?,
        (None, Some(w)) if a.range.is_some() => w.out_cap(len_hint),
        (None, Some(w)) => {
            let size = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
            w.out_cap(usize::try_from(size.len()).unwrap_or(usize::MAX))
        }
        (None, None) => DEFAULT_OUT_CAP,
    };
    let (out, r) = run_local_once(path, &mut inst, a.range, out_cap)?;
    if let Some(o) = &a.out {
        std::fs::write(o, &out).map_err(|e| format!("{}: {e}", o.display()))?;
    }
    println!(
        "lambda run: prog {} file {} range [{}, +{}) where local out {} bytes time {:.1} us \
         (io {:.1} us, compute {:.1} us, uncached {:.2} by {:?})",
        prog.name(),
        path.display(),
        r.off,
        r.len,
        r.out_bytes,
        (r.times.io_ns + r.times.compute_ns) as f64 / 1e3,
        r.times.io_ns as f64 / 1e3,
        r.times.compute_ns as f64 / 1e3,
        r.uncached,
        r.probe
    );
    Ok(ExitCode::SUCCESS)
}

/// `lambda run ADDR:FILE`: the program runs on the server (LAMBDA frame), here over READ
/// frames, or where the dispatcher says.
fn run_remote(a: &RunArgs, addr: &str, file: &str) -> CmdResult {
    let cfg = client_config(a.opts.token_file.as_ref())?;
    let (prog, workload) = resolve_prog(&a.opts.prog, a.opts.section.as_deref())?;
    let out_cap = match (a.out_cap, workload, a.range) {
        (Some(c), _, _) => usize::try_from(c).map_err(|_| format!("--out-cap {c} is too large"))?,
        (None, Some(w), Some((_, len))) => w.out_cap(usize::try_from(len).unwrap_or(usize::MAX)),
        // Every read workload's bound is a constant; bitmap (the write path) gets one 4 KiB
        // read's (its bound grows with the input: 1 MiB, the LAMBDA limit, would ask 4 GiB).
        (None, Some(w), None) => w.out_cap(MAX_READ_BYTES as usize),
        (None, None, _) => DEFAULT_OUT_CAP,
    };
    let (out, r) = run_remote_once(
        addr,
        file,
        &cfg,
        &prog,
        a.opts.engine.engine(),
        a.r#where,
        a.range,
        out_cap,
    )?;
    if let Some(o) = &a.out {
        std::fs::write(o, &out).map_err(|e| format!("{}: {e}", o.display()))?;
    }
    println!(
        "lambda run: prog {} file {addr}:{file} range [{}, +{}) where {} (asked {}) out {} bytes \
         time {:.1} us (client io {:.1} us, client compute {:.1} us)",
        prog.name(),
        r.off,
        r.len,
        r.ran.as_where(),
        a.r#where,
        r.out_bytes,
        r.wall_ns as f64 / 1e3,
        r.io_ns as f64 / 1e3,
        r.compute_ns as f64 / 1e3,
    );
    Ok(ExitCode::SUCCESS)
}

fn run_bench(a: &BenchArgs) -> CmdResult {
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("{}: {e}", a.dir.display()))?;
    let cfg = BenchConfig {
        dir: a.dir.clone(),
        workloads: if a.workloads.is_empty() {
            Workload::ALL.to_vec()
        } else {
            a.workloads.clone()
        },
        conditions: a
            .conditions
            .iter()
            .map(|c| match c {
                CondArg::Cold => Condition::Cold,
                CondArg::Warm => Condition::Warm,
            })
            .collect(),
        requests: a.requests,
        request_bytes: a.request_bytes,
        file_bytes: a.file_bytes,
        seed: a.seed,
        engine: a.engine.engine(),
    };
    let mut json_err = None;
    let progress = |r: &BenchRow| {
        print_row(r);
        if let Some(p) = &a.json {
            if let Err(e) = append_json(p, r, a.engine) {
                json_err.get_or_insert(e);
            }
        }
    };
    let rows = match a.server {
        None => bench::run(&cfg, progress)?,
        Some(server) => run_server_bench(a, cfg, server, progress)?,
    };
    if let Some(e) = json_err {
        return Err(e.into());
    }
    if a.server.is_some() {
        print_goals(&rows);
    }
    if let Some(p) = &a.plot {
        crate::lambda_plot::render(&rows, p)?;
        println!("lambda bench: plot -> {}", p.display());
    }
    let sides = if a.server.is_some() { "local/server/auto" } else { "local" };
    println!("lambda bench: {} rows, {} requests each, where {sides}", rows.len(), a.requests);
    Ok(ExitCode::SUCCESS)
}

fn run_server_bench(
    a: &BenchArgs,
    base: BenchConfig,
    server: std::net::SocketAddr,
    progress: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>, String> {
    let client = client_config(a.token_file.as_ref())?;
    let cfg = ServerBenchConfig {
        remote: RemoteBenchConfig {
            base,
            server,
            served_prefix: String::new(),
            rtts_us: a.rtts_us.clone(),
            changes: a.changes,
            dispatch: DispatchConfig::default(),
        },
        client,
        client_cache_bytes: a.client_cache,
        cpu_caps: std::iter::once(None).chain(a.cpu_cap.map(Some)).collect(),
        server_pid: a.server_pid,
    };
    run_server(&cfg, progress).map_err(|e| e.to_string())
}

/// Auto against the better fixed side per (workload, condition), and the tally per goal:
/// steady rows and changing rows whose answer did not flip within 5%, flips below both.
fn print_goals(rows: &[BenchRow]) {
    use storefn_lambda::bench_remote::Judged;
    let lines = storefn_lambda::bench_remote::goals(rows);
    for g in &lines {
        let rule = if matches!(g.judged, Judged::Flip(..)) { "auto<both" } else { "<=1.05" };
        println!(
            "lambda bench: goal workload {} condition {} local {:.1} server {:.1} auto {:.1} \
             ratio {:.3} noise {:.3} rounds {:.3}-{:.3} round_median {:.3} {}({rule}) {}",
            g.workload,
            g.condition,
            g.local_us,
            g.server_us,
            g.auto_us,
            g.ratio,
            g.noise,
            g.round_ratio.0,
            g.round_ratio.1,
            g.round_median,
            g.judged.label(),
            if g.met { "met" } else { "missed" }
        );
    }
    /// Which judgements a tally counts.
    type InGroup = fn(Judged) -> bool;
    // (name, judgements counted, a within-5% goal: also tallied by rounds and by noise)
    let groups: [(&str, InGroup, bool); 3] = [
        ("steady (auto within 5%)", |j| j == Judged::Steady, true),
        ("changing, answer unchanged (auto within 5%)", |j| j == Judged::Unchanged, true),
        ("changing, answer flips (auto beats both)", |j| matches!(j, Judged::Flip(..)), false),
    ];
    for (name, in_group, within_5) in groups {
        let mine: Vec<_> = lines.iter().filter(|g| in_group(g.judged)).collect();
        let mut r: Vec<f64> = mine.iter().map(|g| g.ratio).collect();
        let met = mine.iter().filter(|g| g.met).count();
        let max = r.iter().copied().fold(0.0, f64::max);
        let median = storefn_stats::median(&mut r).unwrap_or(0.0);
        // The within-5% goals judged by the median of rounds and by the run's noise too.
        let by_rounds = if within_5 {
            let rounds = mine.iter().filter(|g| g.met_by_rounds).count();
            let noise = mine.iter().filter(|g| g.within_noise).count();
            format!(" ({rounds} by median of rounds, {noise} within the run's noise)")
        } else {
            String::new()
        };
        println!(
            "lambda bench: goals {name} {met}/{} met{by_rounds}, auto/better-fixed median \
             {median:.3} max {max:.3}",
            r.len()
        );
    }
}

fn print_row(r: &BenchRow) {
    println!(
        "lambda bench: workload {} condition {} where {} requests {} request_bytes {} \
         us_per_request {:.1} p50 {:.1} p99 {:.1} out {} bytes cache_probe_us {:.2} \
         server_share {:.3}{}",
        r.workload,
        r.condition,
        r.r#where,
        r.requests,
        r.request_bytes,
        r.us_per_request,
        r.p50_us,
        r.p99_us,
        r.out_bytes,
        r.cache_probe_us,
        r.server_share,
        r.dispatch.map_or(String::new(), |d| format!(
            " probes {} changes {} switches {} cache_samples {} settled {}",
            d.probes, d.changes, d.switches, d.cache_samples, d.settled
        ))
    );
}

fn append_json(p: &Path, r: &BenchRow, engine: EngineArg) -> Result<(), String> {
    let obj = serde_json::json!({
        "workload": r.workload.name(), "condition": r.condition, "where": r.r#where.as_str(),
        "requests": r.requests, "us_per_request": r.us_per_request,
        "p50_us": r.p50_us, "p99_us": r.p99_us, "request_bytes": r.request_bytes,
        "out_bytes": r.out_bytes, "cache_probe_us": r.cache_probe_us, "server_share": r.server_share, "engine": format!("{engine:?}").to_lowercase(),
        "probes": r.dispatch.map(|d| d.probes), "changes": r.dispatch.map(|d| d.changes),
        "switches": r.dispatch.map(|d| d.switches),
        "round_us": r.round_us, "half_us": r.half_us,
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map_err(|e| format!("{}: {e}", p.display()))?;
    writeln!(f, "{obj}").map_err(|e| format!("{}: {e}", p.display()))
}
