//! The attack measurement: a victim tenant's point-read p99 with the server idle and while one
//! attacking tenant does each of the things a hostile (or careless) client does, against an
//! in-process server on loopback over a directory of its own. Idle and attacked rounds
//! alternate (which goes first alternates too) and each figure is the median over rounds, so
//! the machine's drift hits both sides alike; the ratio is attacked / idle from the same run.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{Server, ServerConfig};
use storefn_wire::limits::MAX_LAMBDA_IN_BYTES;
use storefn_wire::{
    put_request, Client, ClientConfig, ClientError, FrameBuf, Request, KIND_REQUEST,
    PROG_TYPE_LAMBDA, PROG_TYPE_XRP,
};

/// Every attack the measurement runs, by the name the report gives it.
pub const ATTACKS: [&str; 7] = [
    "cpu_flood",
    "stat_flood",
    "load_prog_flood",
    "write_sync_flood",
    "lambda_staging_flood",
    "non_reading_clients",
    "connection_flood",
];

/// What to run.
#[derive(Debug, Clone)]
pub struct AttackConfig {
    /// A scratch directory the server serves (created, its files written, removed after).
    pub dir: PathBuf,
    /// Rounds per attack (idle and attacked each), at least 1.
    pub rounds: usize,
    /// Point reads per round.
    pub reads: usize,
    /// Attacks to run (names from [`ATTACKS`]); all when empty.
    pub only: Vec<String>,
}

/// One attack's figures.
#[derive(Debug, Clone)]
pub struct AttackResult {
    pub attack: &'static str,
    /// Medians over the rounds of the victim's per-round p99, µs.
    pub idle_p99_us: f64,
    pub attacked_p99_us: f64,
    /// attacked / idle.
    pub ratio: f64,
    /// The attacker's requests answered (connections made; writes of request frames the
    /// server had room for, for the clients that never read) while it ran.
    pub attacker_ops: u64,
}

fn frame_of(reqs: &[Request<'_>]) -> Vec<u8> {
    let mut f = FrameBuf::default();
    f.begin(KIND_REQUEST);
    for (i, r) in reqs.iter().enumerate() {
        put_request(&mut f, i as u64, r);
    }
    f.finish().to_vec()
}

fn tenant(name: &str) -> ClientConfig {
    ClientConfig {
        tenant: name.into(),
        timeout: Duration::from_secs(30),
        ..ClientConfig::default()
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One round of sequential 512 B point reads; its p99 in µs.
fn round_p99(c: &mut Client, n: usize) -> Result<f64, ClientError> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let offset = (i as u64 * 7919 % 2048) * 512;
        let t = Instant::now();
        c.one(&Request::Read { path: b"v", offset, len: 512 })?;
        lat.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    lat.sort_unstable();
    Ok(storefn_stats::percentile_us(&lat, 0.99).unwrap_or(0.0))
}

fn write_files(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("v"), vec![7u8; 1 << 20])?;
    let mut spin = vec![0u8; 1024];
    spin[512..520].copy_from_slice(&512u64.to_le_bytes());
    std::fs::write(dir.join("loop"), spin)?;
    std::fs::write(dir.join("w"), vec![0u8; 4 << 20])?;
    std::fs::write(dir.join("big"), vec![3u8; 8 * MAX_LAMBDA_IN_BYTES as usize])
}

/// Runs the attacks against a fresh server each; the results in [`ATTACKS`] order.
///
/// # Errors
/// Setting up the directory or the server; the victim's reads failing.
pub fn run(cfg: &AttackConfig) -> Result<Vec<AttackResult>, String> {
    write_files(&cfg.dir).map_err(|e| format!("{}: {e}", cfg.dir.display()))?;
    let mut out = Vec::new();
    for name in ATTACKS {
        if !cfg.only.is_empty() && !cfg.only.iter().any(|o| o == name) {
            continue;
        }
        out.push(one(cfg, name)?);
    }
    let _ = std::fs::remove_dir_all(&cfg.dir);
    Ok(out)
}

fn one(cfg: &AttackConfig, name: &'static str) -> Result<AttackResult, String> {
    let server = Server::start("127.0.0.1:0", ServerConfig::new(&cfg.dir))
        .map_err(|e| format!("server: {e}"))?;
    let addr = server.local_addr().to_string();
    let mut victim = Client::connect(&addr, tenant("victim")).map_err(|e| e.to_string())?;
    let (stop, active, ops) = (AtomicBool::new(false), AtomicBool::new(false), AtomicU64::new(0));
    let res = std::thread::scope(|s| {
        let attacker = s.spawn(|| attack(name, &addr, &stop, &active, &ops));
        let (mut idle, mut hit) = (Vec::new(), Vec::new());
        let mut measure = |attacked: bool| -> Result<(), String> {
            // Relaxed: flags the attacker polls; nothing is published through them.
            active.store(attacked, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(if attacked { 300 } else { 100 }));
            let p = round_p99(&mut victim, cfg.reads).map_err(|e| format!("{name}: {e}"))?;
            if attacked {
                hit.push(p);
            } else {
                idle.push(p);
            }
            Ok(())
        };
        let mut r = Ok(());
        for k in 0..cfg.rounds.max(1) {
            let order = if k % 2 == 0 { [false, true] } else { [true, false] };
            for a in order {
                r = r.and_then(|()| measure(a));
            }
        }
        stop.store(true, Ordering::Relaxed);
        active.store(false, Ordering::Relaxed);
        let _ = attacker.join();
        r.map(|()| (median(&mut idle), median(&mut hit)))
    });
    server.stop();
    let _ = server.join();
    let (idle_p99_us, attacked_p99_us) = res?;
    Ok(AttackResult {
        attack: name,
        idle_p99_us,
        attacked_p99_us,
        ratio: attacked_p99_us / idle_p99_us.max(1e-9),
        attacker_ops: ops.load(Ordering::Relaxed),
    })
}

/// Runs attack `name` while `active`, until `stop`; counts its answered requests in `ops`.
fn attack(name: &str, addr: &str, stop: &AtomicBool, active: &AtomicBool, ops: &AtomicU64) {
    let wait = || {
        while !active.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        !stop.load(Ordering::Relaxed)
    };
    let conns = match name {
        "stat_flood" => 4,
        "cpu_flood" | "write_sync_flood" | "load_prog_flood" | "lambda_staging_flood" => 2,
        _ => 1,
    };
    std::thread::scope(|s| {
        for k in 0..conns {
            s.spawn(move || {
                let r = match name {
                    "non_reading_clients" => non_reading(addr, &wait, ops),
                    "connection_flood" => conn_flood(addr, &wait, ops),
                    _ => requests(name, k, addr, &wait, ops),
                };
                if let Err(e) = r {
                    eprintln!("attack {name}: {e}");
                }
            });
        }
    });
}

/// The attacks made of well-formed requests, one frame after another.
fn requests(
    name: &str,
    k: usize,
    addr: &str,
    wait: &dyn Fn() -> bool,
    ops: &AtomicU64,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut c = Client::connect(addr, tenant("attacker"))?;
    let spin = c.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("test/spin"))?;
    let lam = c.load_prog(PROG_TYPE_LAMBDA, b"", storefn_progs::must("lambda/stats64"))?;
    let elf = storefn_progs::must("engines/wiredtiger/lookup");
    let data = vec![5u8; 64 * 1024];
    let mut n = 0u64;
    while wait() {
        let padded: Vec<Vec<u8>>;
        let reqs: Vec<Request<'_>> = match name {
            "cpu_flood" => (0..128)
                .map(|_| Request::Xrp {
                    path: b"loop",
                    offset: 0,
                    len: 512,
                    hash: &spin,
                    scratch: &[],
                    out_len: 0,
                })
                .collect(),
            "stat_flood" => (0..1024).map(|_| Request::Stat { path: b"v" }).collect(),
            "load_prog_flood" => {
                // Distinct programs (trailing bytes the loader ignores): each one verified.
                padded = (0..8u64)
                    .map(|j| {
                        let mut v = elf.to_vec();
                        v.resize(elf.len() + 8 * (1 + (n * 8 + j) as usize * 2 + k), 0);
                        v
                    })
                    .collect();
                padded
                    .iter()
                    .map(|e| Request::LoadProg { prog_type: PROG_TYPE_XRP, section: b"", elf: e })
                    .collect()
            }
            "write_sync_flood" => (0..4u64)
                .map(|j| Request::Write { path: b"w", offset: ((n + j) % 64) << 16, data: &data })
                .collect(),
            _ => (0..16u64)
                .map(|j| Request::Lambda {
                    path: b"big",
                    offset: ((n + j) % 8) * u64::from(MAX_LAMBDA_IN_BYTES),
                    len: MAX_LAMBDA_IN_BYTES,
                    hash: &lam,
                    out_cap: 64,
                })
                .collect(),
        };
        let r = c.call(&reqs)?;
        n += 1;
        // Relaxed: a counter read after the threads are joined.
        ops.fetch_add(r.len() as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Connections that ask for 1 MiB READs and never read the answers.
fn non_reading(
    addr: &str,
    wait: &dyn Fn() -> bool,
    ops: &AtomicU64,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut socks = Vec::new();
    let reads: Vec<Request<'_>> =
        (0..16u64).map(|_| Request::Read { path: b"big", offset: 0, len: 1 << 20 }).collect();
    let frame = frame_of(&reads);
    let hello = frame_of(&[Request::Hello { tenant: b"attacker" }]);
    while wait() {
        if socks.len() < 16 {
            let mut s = TcpStream::connect(addr)?;
            s.write_all(&hello)?;
            s.set_nonblocking(true)?;
            socks.push(s);
        }
        // Past the server's bound it stops reading us: the write would block, not grow it; a
        // connection the server closed (slow-client timeout) is replaced.
        socks.retain_mut(|s| match s.write(&frame) {
            Ok(_) => {
                // Relaxed: a counter read after the threads are joined.
                ops.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(socks);
    Ok(())
}

/// Connections opened as fast as the server takes them, never authenticating.
fn conn_flood(
    addr: &str,
    wait: &dyn Fn() -> bool,
    ops: &AtomicU64,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut socks = std::collections::VecDeque::new();
    while wait() {
        if let Ok(s) = TcpStream::connect(addr) {
            // Relaxed: a counter read after the threads are joined.
            ops.fetch_add(1, Ordering::Relaxed);
            socks.push_back(s);
        }
        // A bounded number held open at once: the oldest go as new ones come.
        if socks.len() > 512 {
            socks.pop_front();
        }
    }
    Ok(())
}

/// The results as one JSON object (the CLI's `--json`).
#[must_use]
pub fn to_json(cfg: &AttackConfig, results: &[AttackResult]) -> String {
    let rows: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "{{\"attack\":\"{}\",\"idle_p99_us\":{:.1},\"attacked_p99_us\":{:.1},\
                 \"ratio\":{:.3},\"attacker_ops\":{}}}",
                r.attack, r.idle_p99_us, r.attacked_p99_us, r.ratio, r.attacker_ops
            )
        })
        .collect();
    format!(
        "{{\"bench\":\"server_attacks\",\"rounds\":{},\"reads_per_round\":{},\"goal_ratio\":3.0,\
         \"attacks\":[{}]}}",
        cfg.rounds,
        cfg.reads,
        rows.join(",")
    )
}
