//! Hostile and careless clients on loopback: each attack runs next to a victim tenant doing
//! point reads, and each test asserts the victim's service (its p99 against its idle p99, with
//! a generous margin: this is a shared 2-core VM) and the server's memory (the process's RSS:
//! the server runs in it), not only that the server stayed up. Every loop is bounded in count
//! and time. Figures are printed (`cargo test -p storefn-server --test hostile -- --nocapture
//! --test-threads 1`).

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{metric, scrape, TempDir};
use storefn_server::{Server, ServerConfig};
use storefn_wire::layout::*;
use storefn_wire::limits::*;
use storefn_wire::*;
use storefn_wire::{Client, ClientConfig, Request};

/// RSS and latency are per process and per machine: the tests run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// This process's resident set, bytes (`VmRSS` of /proc/self/status).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

const MIB: u64 = 1 << 20;

fn frame_of(reqs: &[Request<'_>]) -> Vec<u8> {
    let mut f = FrameBuf::default();
    f.begin(KIND_REQUEST);
    for (i, r) in reqs.iter().enumerate() {
        put_request(&mut f, i as u64, r);
    }
    f.finish().to_vec()
}

/// The victim's file: 1 MiB of 512 B blocks.
fn victim_file(dir: &TempDir) {
    std::fs::write(dir.join("v"), vec![7u8; 1 << 20]).unwrap();
}

/// The victim's p99 in µs: the lowest of three rounds of `n` sequential 512 B point reads
/// (other processes on this shared VM stall single rounds; an attack that hurts the victim
/// hurts every round).
fn victim_p99(c: &mut Client, n: usize) -> f64 {
    (0..3).map(|_| round_p99(c, n)).fold(f64::INFINITY, f64::min)
}

/// One round of `n` point reads; its p99 in µs.
fn round_p99(c: &mut Client, n: usize) -> f64 {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let offset = (i as u64 * 7919 % 2048) * 512;
        let t = Instant::now();
        let r = c.one(&Request::Read { path: b"v", offset, len: 512 }).unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(r.data.len(), 512);
    }
    lat.sort_by(f64::total_cmp);
    lat[(n * 99 / 100).min(n - 1)]
}

/// The victim's p99 idle and under attack, µs: three pairs of rounds (`round`, after `settle_ms`
/// for the attacker to stop or start), `active` set for the attacked ones; each figure the lowest
/// of its three (other processes on this shared VM stall single rounds; an attack that hurts
/// the victim hurts every round).
fn alternate(active: &AtomicBool, settle_ms: u64, mut round: impl FnMut() -> f64) -> (f64, f64) {
    let (mut idle, mut attacked) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        for (on, best) in [(false, &mut idle), (true, &mut attacked)] {
            active.store(on, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(settle_ms));
            *best = best.min(round());
        }
    }
    (idle, attacked)
}

/// What one attacking connection does: its client, and `go`, which waits while the victim
/// measures an idle round and says whether to go on (false once the victim is done, or after
/// 60 s); returns what it counts (requests answered).
type Attack = dyn Fn(&mut Client, &dyn Fn() -> bool) -> usize + Sync;

/// `conns` connections of tenant `attacker` running `attack` next to a victim tenant's point
/// reads on a server over `dir`: the victim's p99 idle and under attack (`alternate`, after
/// `settle_ms`, one `round` each) and the attackers' counts summed.
fn next_to_victim(
    dir: &TempDir,
    (conns, attacker): (usize, &str),
    (settle_ms, round): (u64, &dyn Fn(&mut Client) -> f64),
    attack: &Attack,
) -> (f64, f64, usize) {
    let server = Server::start("127.0.0.1:0", ServerConfig::new(dir.path())).unwrap();
    let addr = server.local_addr().to_string();
    let mut victim = Client::connect(&addr, tenant("victim")).unwrap();
    let (stop, active) = (AtomicBool::new(false), AtomicBool::new(false));
    let go = || {
        let t0 = Instant::now();
        while !active.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(60)
    };
    let (idle, attacked, count) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..conns)
            .map(|_| {
                let (addr, go) = (&addr, &go);
                s.spawn(move || {
                    let mut c = Client::connect(addr, tenant(attacker)).unwrap();
                    attack(&mut c, go)
                })
            })
            .collect();
        let (idle, attacked) = alternate(&active, settle_ms, || round(&mut victim));
        stop.store(true, Ordering::Relaxed);
        (idle, attacked, threads.into_iter().map(|t| t.join().unwrap()).sum())
    });
    server.stop();
    server.join().unwrap();
    (idle, attacked, count)
}

/// The p99 in µs of the point reads one victim makes in `dur` (at least one, reads of a
/// round-robin offset as in [`round_p99`]).
fn timed_round_p99(c: &mut Client, dur: Duration) -> f64 {
    let (mut lat, t0) = (Vec::new(), Instant::now());
    while lat.is_empty() || t0.elapsed() < dur {
        let offset = (lat.len() as u64 * 7919 % 2048) * 512;
        let t = Instant::now();
        let r = c.one(&Request::Read { path: b"v", offset, len: 512 }).unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(r.data.len(), 512);
    }
    lat.sort_by(f64::total_cmp);
    lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
}

/// The victim's service under an attack, against its idle p99: within 3x, plus 5 ms of slack
/// for the scheduling noise of a shared VM (prints both).
fn check_victim(what: &str, idle: f64, attacked: f64) {
    println!(
        "victim p99 {what}: idle {idle:.0} us, under attack {attacked:.0} us ({:.2}x)",
        attacked / idle
    );
    assert!(
        attacked <= 3.0 * idle + 5000.0,
        "{what}: the victim's p99 went from {idle:.0} to {attacked:.0} us"
    );
}

/// A server configuration with its metrics endpoint on loopback (the suite reads what it
/// measures from there, as an operator would).
fn metered(dir: &std::path::Path) -> ServerConfig {
    let mut cfg = ServerConfig::new(dir);
    cfg.metrics = Some("127.0.0.1:0".into());
    cfg
}

/// Connection buffer bytes of every thread, as the metrics endpoint reports them.
fn buffer_bytes(server: &Server) -> f64 {
    let m = scrape(server);
    metric(&m, "storefn_thread", &[("kind", "rx_buffer_bytes")])
        + metric(&m, "storefn_thread", &[("kind", "tx_buffer_bytes")])
}

fn tenant(name: &str) -> ClientConfig {
    ClientConfig { tenant: name.into(), ..ClientConfig::default() }
}

#[test]
fn a_client_that_never_drains_its_responses_holds_a_bounded_send_buffer() {
    // Regression: the send buffer was cleared only once completely sent and only its unsent
    // bytes counted against the 4 MiB bound, so a client reading steadily but never catching
    // up grew the server by its read rate, without bound.
    let _g = serial();
    let dir = TempDir::new("drain");
    victim_file(&dir);
    std::fs::write(dir.join("f"), vec![1u8; 4096 * 64]).unwrap();
    let server = Server::start("127.0.0.1:0", metered(dir.path())).unwrap();
    let mut victim = Client::connect(&server.local_addr().to_string(), tenant("victim")).unwrap();
    let idle = victim_p99(&mut victim, 300);
    let before = rss();
    let s = TcpStream::connect(server.local_addr()).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = s.try_clone().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = std::thread::spawn(move || {
        w.write_all(&frame_of(&[Request::Hello { tenant: b"greedy" }])).unwrap();
        let reads: Vec<Request<'_>> =
            (0..64u64).map(|i| Request::Read { path: b"f", offset: i * 4096, len: 4096 }).collect();
        let frame = frame_of(&reads);
        // Ends when the socket is shut down below.
        while w.write_all(&frame).is_ok() {}
    });
    let stop_r = Arc::clone(&stop);
    let reader = std::thread::spawn(move || {
        // ~16 MiB/s: steadily, but slower than the server produces.
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0u64;
        while !stop_r.load(Ordering::Relaxed) {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n as u64,
            }
            std::thread::sleep(Duration::from_millis(4));
        }
        got
    });
    std::thread::sleep(Duration::from_millis(500));
    let attacked = victim_p99(&mut victim, 300);
    std::thread::sleep(Duration::from_millis(2000));
    let grown = rss().saturating_sub(before);
    // The victim's and the greedy client's buffers, within two connections' stated bound.
    let held = buffer_bytes(&server);
    let conn_bound = storefn_server::limits::CONN_MEMORY_BOUND as f64;
    println!("non-draining client: connection buffers {:.1} MiB", held / MIB as f64);
    assert!(held > 0.0 && held <= 2.0 * conn_bound, "buffers {held} bytes");
    stop.store(true, Ordering::Relaxed);
    s.shutdown(Shutdown::Both).unwrap();
    writer.join().unwrap();
    let got = reader.join().unwrap();
    println!("non-draining client: read {} MiB, server RSS grew {} MiB", got / MIB, grown / MIB);
    check_victim("next to a non-draining client", idle, attacked);
    assert!(got > 16 * MIB, "the client read steadily ({got} bytes)");
    assert!(grown < 24 * MIB, "RSS grew {} MiB", grown / MIB);
    server.stop();
    server.join().unwrap();
}

#[test]
fn unauthenticated_connections_cannot_pin_memory_with_announced_frames() {
    // Regression: before HELLO the receive buffer grew to whatever size a frame header
    // announced and never shrank: each unauthenticated socket pinned up to 1 MiB.
    let _g = serial();
    let dir = TempDir::new("preauth");
    victim_file(&dir);
    let tok = dir.join("tokens");
    std::fs::write(&tok, "victim 0123456789abcdef0123\n").unwrap();
    let mut cfg = metered(dir.path());
    cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let addr = server.local_addr().to_string();
    let mut victim = Client::connect(&addr, storefn_server::client_config(&tok).unwrap()).unwrap();
    let idle = victim_p99(&mut victim, 300);
    let before = rss();
    let refused_before = {
        let m = scrape(&server);
        let ev = |e: &str| metric(&m, "storefn_events_total", &[("event", e)]);
        ev("protocol_error") + ev("refused_connection")
    };
    let mut header = frame_of(&[Request::Hello { tenant: b"x" }]);
    header.truncate(FRAME_HEADER_BYTES);
    header[FRAME_OFF_BODY_BYTES..FRAME_OFF_BODY_BYTES + 4]
        .copy_from_slice(&((MAX_FRAME_BYTES - FRAME_HEADER_BYTES) as u32).to_le_bytes());
    header[FRAME_OFF_COUNT..FRAME_OFF_COUNT + 4].copy_from_slice(&1u32.to_le_bytes());
    let mut socks = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(&header).unwrap();
        let _ = s.write_all(&[0u8; 4096]);
        socks.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let attacked = victim_p99(&mut victim, 300);
    let grown = rss().saturating_sub(before);
    println!("200 unauthenticated 1 MiB frame headers: server RSS grew {} MiB", grown / MIB);
    check_victim("next to 200 pre-auth 1 MiB frames", idle, attacked);
    assert!(grown < 32 * MIB, "RSS grew {} MiB", grown / MIB);
    // Each was closed at its header, before its body was buffered.
    for s in &mut socks {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 64];
        assert!(matches!(s.read(&mut b), Ok(0) | Err(_)), "closed at the header");
    }
    // The endpoint saw each refused and the buffers are back to the victim's alone.
    let m = scrape(&server);
    let ev = |e: &str| metric(&m, "storefn_events_total", &[("event", e)]);
    let refused = ev("protocol_error") + ev("refused_connection");
    // Each closed at its header, or refused at accept by the address's pre-auth limit.
    assert_eq!(refused - refused_before, 200.0, "each oversized pre-AUTH frame counted");
    assert_eq!(metric(&m, "storefn_connections", &[("state", "unauthenticated")]), 0.0);
    let held = buffer_bytes(&server);
    assert!(held <= storefn_server::limits::CONN_MEMORY_BOUND as f64, "buffers {held} bytes");
    server.stop();
    server.join().unwrap();
}

#[test]
fn hellos_with_made_up_names_do_not_lock_out_real_tenants() {
    // Regression: HELLO recorded any tenant name before AUTH and the tenant table was never
    // pruned: 1,100 HELLOs with made-up names locked every tenant not yet connected out.
    let _g = serial();
    let dir = TempDir::new("tenants");
    victim_file(&dir);
    let tok = dir.join("tokens");
    std::fs::write(&tok, "victim 0123456789abcdef0123\n").unwrap();
    for auth in [true, false] {
        let mut cfg = ServerConfig::new(dir.path());
        if auth {
            cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
        }
        let server = Server::start("127.0.0.1:0", cfg).unwrap();
        let addr = server.local_addr().to_string();
        for i in 0..1100 {
            let mut s = TcpStream::connect(&addr).unwrap();
            let name = format!("made-up-{i}");
            s.write_all(&frame_of(&[Request::Hello { tenant: name.as_bytes() }])).unwrap();
            let mut b = [0u8; 256];
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            assert!(s.read(&mut b).unwrap() > 0, "HELLO {i} answered");
        }
        let cfg = if auth { storefn_server::client_config(&tok).unwrap() } else { tenant("late") };
        let mut c = Client::connect(&addr, cfg).unwrap();
        let r = c.one(&Request::Read { path: b"v", offset: 0, len: 4 }).unwrap();
        assert_eq!(r.data, [7u8; 4]);
        server.stop();
        server.join().unwrap();
    }
}

#[test]
fn pipelined_lambda_ranges_are_all_answered_while_the_engine_is_full() {
    // Regression: a multi-chunk LAMBDA whose next chunks found the engine full (other jobs'
    // chunks of the same reap took the slots) and that had no read in flight was never
    // revisited: never answered, its staging and its tenant's share held forever.
    let _g = serial();
    let dir = TempDir::new("strand");
    let len = storefn_wire::limits::MAX_LAMBDA_IN_BYTES;
    std::fs::write(dir.join("f"), vec![3u8; 8 * len as usize]).unwrap();
    let server = Server::start("127.0.0.1:0", ServerConfig::new(dir.path())).unwrap();
    let addr = server.local_addr().to_string();
    let t0 = Instant::now();
    let clients: Vec<_> = (0..4)
        .map(|k| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let cfg = ClientConfig { timeout: Duration::from_secs(20), ..tenant("lam") };
                let mut c = Client::connect(&addr, cfg).unwrap();
                let elf = storefn_progs::must("lambda/stats64");
                let hash = c.load_prog(PROG_TYPE_LAMBDA, b"", elf).unwrap();
                let reqs: Vec<Request<'_>> = (0..64u64)
                    .map(|i| Request::Lambda {
                        path: b"f",
                        offset: ((i + k) % 8) * u64::from(len),
                        len,
                        hash: &hash,
                        out_cap: 64,
                    })
                    .collect();
                let mut answered = 0;
                for round in 0..4 {
                    let r =
                        c.call(&reqs).unwrap_or_else(|e| panic!("client {k} round {round}: {e}"));
                    assert!(r.iter().all(|r| r.status == 0), "client {k}: {:?}", r[0].message);
                    answered += r.len();
                }
                answered
            })
        })
        .collect();
    let answered: usize = clients.into_iter().map(|t| t.join().unwrap()).sum();
    println!("{answered} pipelined 1 MiB LAMBDAs answered in {:?}", t0.elapsed());
    assert_eq!(answered, 4 * 4 * 64);
    server.stop();
    server.join().unwrap();
}

#[test]
fn point_reads_are_not_stalled_by_another_connections_syncs() {
    // Regression: WRITE and LAMBDA_WRITE called fdatasync on the event-loop thread, stalling
    // every connection of that thread for the length of each sync.
    let _g = serial();
    let dir = TempDir::new("syncs");
    victim_file(&dir);
    std::fs::write(dir.join("w"), vec![0u8; 4 << 20]).unwrap();
    let server = Server::start("127.0.0.1:0", ServerConfig::new(dir.path())).unwrap();
    let addr = server.local_addr().to_string();
    let mut victim = Client::connect(&addr, tenant("victim")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let active = Arc::new(AtomicBool::new(false));
    let (stop_w, active_w) = (Arc::clone(&stop), Arc::clone(&active));
    let writer = std::thread::spawn(move || {
        let mut c = Client::connect(&addr, tenant("writer")).unwrap();
        let mut n = 0u64;
        let t0 = Instant::now();
        while !stop_w.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(60) {
            if !active_w.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let data = vec![(n % 251) as u8; 64 * 1024];
            let offset = (n % 64) * 64 * 1024;
            let r = c.one(&Request::Write { path: b"w", offset, data: &data }).unwrap();
            assert_eq!(r.status, 0, "{:?}", r.message);
            n += 1;
        }
        (n, t0.elapsed())
    });
    // Idle and under writes, alternating, the best of three rounds each.
    let (idle, attacked) = alternate(&active, 20, || round_p99(&mut victim, 300));
    stop.store(true, Ordering::Relaxed);
    let (writes, took) = writer.join().unwrap();
    println!("syncing writer: {writes} durable 64 KiB WRITEs in {took:?} (including idle rounds)");
    println!(
        "victim p99 next to a syncing writer: idle {idle:.0} us, under writes {attacked:.0} us \
         ({:.2}x)",
        attacked / idle
    );
    assert!(writes > 10, "the writer made progress");
    assert!(
        attacked <= 2.0 * idle + 1000.0,
        "the victim's p99 went from {idle:.0} to {attacked:.0} us next to the syncs"
    );
    // What was acknowledged is there.
    let got = std::fs::read(dir.join("w")).unwrap();
    let last = writes - 1;
    let at = ((last % 64) * 64 * 1024) as usize;
    assert_eq!(got[at], (last % 251) as u8);
    server.stop();
    server.join().unwrap();
}

/// A socket from `from` (a loopback address) to `to`.
fn connect_from(from: &str, to: std::net::SocketAddr) -> TcpStream {
    // SAFETY: plain socket calls on a descriptor this function owns; every result is checked
    // and the descriptor is handed to a TcpStream (which closes it) before any early return.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let s = <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd);
        let ip: std::net::Ipv4Addr = from.parse().unwrap();
        let mut sa: libc::sockaddr_in = std::mem::zeroed();
        sa.sin_family = libc::AF_INET as u16;
        sa.sin_addr.s_addr = u32::from(ip).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
        assert_eq!(libc::bind(fd, std::ptr::from_ref(&sa).cast(), len), 0);
        let std::net::SocketAddr::V4(t) = to else { panic!("IPv4 server") };
        sa.sin_addr.s_addr = u32::from(*t.ip()).to_be();
        sa.sin_port = t.port().to_be();
        assert_eq!(libc::connect(fd, std::ptr::from_ref(&sa).cast(), len), 0);
        s
    }
}

#[test]
fn a_connection_flood_from_one_address_is_refused_and_others_keep_their_service() {
    // Regression: there was no global, per-address or pre-auth connection limit (8,192 per
    // thread): one host's sockets that never authenticate could take every connection.
    let _g = serial();
    let dir = TempDir::new("flood");
    victim_file(&dir);
    let tok = dir.join("tokens");
    std::fs::write(&tok, "victim 0123456789abcdef0123\n").unwrap();
    let mut cfg = metered(dir.path());
    cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
    cfg.conn_limits.preauth_per_peer = 16;
    // Long enough that no admitted socket times out while the 600 connect (a loaded 2-vCPU VM
    // took 2 s: SYN retries), else a freed slot admits one more and the refused count moves.
    cfg.conn_limits.auth_timeout = Duration::from_secs(8);
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let addr = server.local_addr();
    let mut victim =
        Client::connect(&addr.to_string(), storefn_server::client_config(&tok).unwrap()).unwrap();
    let idle = victim_p99(&mut victim, 300);
    let before = rss();
    // 600 sockets from 127.0.0.2 that never send a byte.
    let t_flood = Instant::now();
    let mut flood: Vec<TcpStream> = (0..600).map(|_| connect_from("127.0.0.2", addr)).collect();
    println!("flood connected in {:?}", t_flood.elapsed());
    std::thread::sleep(Duration::from_millis(300));
    let attacked = victim_p99(&mut victim, 300);
    // A new client from another address still gets in and authenticates.
    let mut late =
        Client::connect(&addr.to_string(), storefn_server::client_config(&tok).unwrap()).unwrap();
    assert_eq!(late.one(&Request::Read { path: b"v", offset: 0, len: 4 }).unwrap().data, [7; 4]);
    let grown = rss().saturating_sub(before);
    let refused = server.stats().refused_connections.load(Ordering::Relaxed);
    println!(
        "600 silent sockets from one address: {refused} refused, RSS grew {} MiB",
        grown / MIB
    );
    check_victim("next to 600 silent sockets", idle, attacked);
    assert_eq!(refused, 600 - 16, "all but the address's 16 pre-auth slots refused");
    // The endpoint's view: the address's 16 pre-auth slots taken (less those the auth timeout
    // closed already: this VM may be slow enough for it), the rest refused. A scrape may fall
    // between a close's two counts: bounded retries.
    let gauge = |m: &str, st: &str| metric(m, "storefn_connections", &[("state", st)]);
    let ev = |m: &str, e: &str| metric(m, "storefn_events_total", &[("event", e)]);
    let consistent = (0..20).any(|_| {
        let m = scrape(&server);
        let held = gauge(&m, "unauthenticated") + ev(&m, "closed_unauthenticated");
        let ok = held == 16.0
            && gauge(&m, "authenticated") == 2.0
            && ev(&m, "refused_connection") == 584.0;
        if !ok {
            std::thread::sleep(Duration::from_millis(50));
        }
        ok
    });
    assert!(consistent, "pre-auth gauge + closed = 16, 2 authenticated, 584 refused");
    // The 16 admitted are closed when they do not authenticate in time.
    let mut open = 0;
    for s in &mut flood {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut b = [0u8; 8];
        if matches!(s.read(&mut b), Ok(n) if n > 0) {
            open += 1;
        }
    }
    assert_eq!(open, 0);
    assert_eq!(server.stats().closed_unauthenticated.load(Ordering::Relaxed), 16);
    let m = scrape(&server);
    assert_eq!(metric(&m, "storefn_events_total", &[("event", "closed_unauthenticated")]), 16.0);
    assert_eq!(gauge(&m, "unauthenticated"), 0.0);
    flood.clear();
    server.stop();
    server.join().unwrap();
}

#[test]
fn connections_driven_to_their_bound_stay_within_the_stated_memory() {
    // The worst-case memory formula (server::worst_case_memory) checked: 16 connections send
    // READs without ever reading an answer, until the server stops answering them (their
    // answer budgets full); the process's RSS growth stays below the formula for 16
    // connections.
    let _g = serial();
    let dir = TempDir::new("membound");
    std::fs::write(dir.join("f"), vec![1u8; 4096 * 256]).unwrap();
    let server = Server::start("127.0.0.1:0", metered(dir.path())).unwrap();
    let before = rss();
    let reads: Vec<Request<'_>> =
        (0..256u64).map(|i| Request::Read { path: b"f", offset: i * 4096, len: 4096 }).collect();
    let frame = frame_of(&reads);
    let conns = 16;
    let mut socks: Vec<(TcpStream, usize)> = (0..conns)
        .map(|_| {
            let mut s = TcpStream::connect(server.local_addr()).unwrap();
            s.write_all(&frame_of(&[Request::Hello { tenant: b"hog" }])).unwrap();
            s.set_nonblocking(true).unwrap();
            (s, 0)
        })
        .collect();
    // Frames of 256 READs, each written whole (a partial frame is finished first), until the
    // server stops taking them or 3 s passed.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        let mut progress = false;
        for (s, pos) in &mut socks {
            match s.write(&frame[*pos..]) {
                Ok(n) => {
                    *pos = (*pos + n) % frame.len();
                    progress = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let grown = rss().saturating_sub(before);
    let peak = server.stats().peak_conn_bytes.load(Ordering::Relaxed);
    let bound = storefn_server::limits::worst_case_memory(1, conns, 0);
    println!(
        "{conns} connections at their bound: RSS grew {} MiB ({:.1} MiB per connection), \
         busiest connection {:.1} MiB; formula {} MiB ({:.1} MiB per connection + {} MiB per \
         thread)",
        grown / MIB,
        grown as f64 / conns as f64 / MIB as f64,
        peak as f64 / MIB as f64,
        bound / MIB,
        storefn_server::limits::CONN_MEMORY_BOUND as f64 / MIB as f64,
        storefn_server::limits::THREAD_MEMORY_BOUND as u64 / MIB
    );
    // READ answers stop at the connection's answer budget (later READs wait for it).
    assert!(
        peak >= storefn_server::limits::MAX_CONN_READ_BYTES as u64 / 2,
        "the connections reached their answer budget ({peak} bytes)"
    );
    assert!(peak <= storefn_server::limits::CONN_MEMORY_BOUND as u64);
    // What the endpoint reports of the same buffers: at their bound, within the formula.
    let held = buffer_bytes(&server);
    let conn_bound = storefn_server::limits::CONN_MEMORY_BOUND as f64;
    println!("endpoint: connection buffers {:.1} MiB", held / MIB as f64);
    assert!(held >= storefn_server::limits::MAX_CONN_READ_BYTES as f64 / 2.0, "{held} bytes");
    assert!(held <= conns as f64 * conn_bound, "{held} bytes");
    assert!(grown <= bound, "RSS grew {grown} bytes, over the formula's {bound}");
    drop(socks);
    server.stop();
    server.join().unwrap();
}

#[test]
fn each_tenant_runs_under_its_own_instruction_budget() {
    // Regression: every program ran under the VM's default budget (2^20 instructions per
    // invocation) whoever sent it; the operator could not give a tenant less.
    let _g = serial();
    let dir = TempDir::new("budget");
    common::loop_file(dir.path());
    let mut cfg = ServerConfig::new(dir.path());
    cfg.tenant_insn_budgets = vec![("small".into(), 5000)];
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let addr = server.local_addr().to_string();
    for (name, budget) in
        [("small", 5000), ("other", storefn_server::limits::DEFAULT_TENANT_INSN_BUDGET)]
    {
        let mut c = Client::connect(&addr, tenant(name)).unwrap();
        let spin = c.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("test/spin")).unwrap();
        let t = Instant::now();
        let e = c.one(&common::spin_request(&spin)).unwrap_err();
        println!("tenant {name}: budget {budget} stopped the spin in {:?}", t.elapsed());
        assert_eq!(e.status(), Some(StatusCode::ChainFailed as u16), "{e}");
        assert!(e.to_string().contains(&format!("({budget} instructions)")), "{name}: {e}");
    }
    server.stop();
    server.join().unwrap();
}

#[test]
fn a_tenant_burning_cpu_in_its_programs_leaves_the_thread_to_others() {
    // Regression: fair admission counted engine slots only; one tenant's budget-burning
    // chains ran inline by the hundred in each pass and raised another tenant's p99 25-500x.
    let _g = serial();
    let dir = TempDir::new("cpuflood");
    victim_file(&dir);
    common::loop_file(dir.path());
    let burn: &Attack = &|c, go| {
        let spin = c.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("test/spin")).unwrap();
        let reqs: Vec<Request<'_>> = (0..128).map(|_| common::spin_request(&spin)).collect();
        let mut chains = 0;
        while go() {
            let r = c.call(&reqs).unwrap();
            assert!(r.iter().all(|r| r.status == StatusCode::ChainFailed as u16));
            chains += r.len();
        }
        chains
    };
    let round: &dyn Fn(&mut Client) -> f64 = &|v| round_p99(v, 200);
    let (idle, attacked, chains) = next_to_victim(&dir, (2, "burner"), (100, round), burn);
    println!("budget-burning tenant: {chains} chains run to their instruction budget");
    check_victim("next to budget-burning chains", idle, attacked);
    assert!(chains > 0);
}

#[test]
fn a_load_prog_flood_leaves_the_thread_to_others() {
    // Regression: LOAD_PROG hashed, parsed and verified on the event loop under the registry's
    // mutex; a tenant sending large programs stalled every connection of the thread.
    let _g = serial();
    let dir = TempDir::new("loadflood");
    victim_file(&dir);
    let load: &Attack = &|c, go| {
        let elf = storefn_progs::must("engines/wiredtiger/lookup");
        let mut n = 0;
        while go() {
            // Distinct programs (trailing bytes the loader ignores change the hash): each one
            // is verified, none comes from the registry.
            let padded: Vec<Vec<u8>> = (0..8)
                .map(|k| {
                    let mut v = elf.to_vec();
                    v.resize(elf.len() + 8 * (n + k + 1), 0);
                    v
                })
                .collect();
            let reqs: Vec<Request<'_>> = padded
                .iter()
                .map(|e| Request::LoadProg { prog_type: PROG_TYPE_XRP, section: b"", elf: e })
                .collect();
            let r = c.call(&reqs).unwrap();
            assert!(r.iter().all(|r| r.status == 0), "{:?}", r[0].message);
            n += r.len();
        }
        n
    };
    let round: &dyn Fn(&mut Client) -> f64 = &|v| round_p99(v, 200);
    let (idle, attacked, loaded) = next_to_victim(&dir, (1, "loader"), (100, round), load);
    println!("LOAD_PROG flood: {loaded} distinct programs verified");
    check_victim("next to a LOAD_PROG flood", idle, attacked);
    assert!(loaded >= 8, "the flood's first frame was verified");
}

#[test]
fn a_lambda_flood_leaves_the_thread_to_others() {
    // Regression: a λ function ran over its whole range in one call on the event loop, which no
    // per-pass slice can split: a tenant's 1 MiB λs that spin to their instruction budget
    // (~0.2 s each in a release build) stalled every other connection of the thread for each
    // run's length: a point read waited seconds. Ranges of 256 KiB here keep the runs of a
    // debug build short enough for the test's time.
    let _g = serial();
    let dir = TempDir::new("lamflood");
    victim_file(&dir);
    let len = MAX_LAMBDA_IN_BYTES / 4;
    std::fs::write(dir.join("big"), vec![0u8; 2 * len as usize]).unwrap();
    let spin: &Attack = &move |c, go| {
        let elf = storefn_progs::must("test/lambda_spin");
        let hash = c.load_prog(PROG_TYPE_LAMBDA, b"", elf).unwrap();
        let reqs: Vec<Request<'_>> = (0..2u64)
            .map(|i| Request::Lambda {
                path: b"big",
                offset: i * u64::from(len),
                len,
                hash: &hash,
                out_cap: 64,
            })
            .collect();
        let mut runs = 0;
        while go() {
            let r = c.call(&reqs).unwrap();
            let spent = |r: &storefn_wire::Reply| {
                r.status == StatusCode::ChainFailed as u16 && r.message.contains("budget")
            };
            assert!(r.iter().all(spent), "{:?}", r[0].message);
            runs += r.len();
        }
        runs
    };
    // Rounds of a fixed time, not a fixed count: one stalled read per run would be a single
    // sample, which a count-based round's p99 (and a round falling between runs) misses.
    let round: &dyn Fn(&mut Client) -> f64 = &|v| timed_round_p99(v, Duration::from_millis(300));
    let (idle, attacked, runs) = next_to_victim(&dir, (1, "spinner"), (100, round), spin);
    println!("λ flood: {runs} 256 KiB runs to their instruction budget");
    check_victim("next to λs spinning to their budget", idle, attacked);
    assert!(runs >= 2, "the flood's first frame ran");
}

#[test]
fn a_stat_flood_leaves_the_thread_to_others() {
    // Regression: STAT ran inline, each frame's 1,024 whole: four connections of STAT frames
    // raised another tenant's p50 to 13-22 ms.
    let _g = serial();
    let dir = TempDir::new("statflood");
    victim_file(&dir);
    let stat: &Attack = &|c, go| {
        let reqs: Vec<Request<'_>> = (0..1024).map(|_| Request::Stat { path: b"v" }).collect();
        let mut n = 0;
        while go() {
            let r = c.call(&reqs).unwrap();
            assert!(r.iter().all(|r| r.status == 0), "{:?}", r[0].message);
            n += r.len();
        }
        n
    };
    let round: &dyn Fn(&mut Client) -> f64 = &|v| round_p99(v, 200);
    let (idle, attacked, stats) = next_to_victim(&dir, (4, "stats"), (100, round), stat);
    println!("STAT flood: {stats} STATs answered");
    check_victim("next to a STAT flood", idle, attacked);
    assert!(stats >= 1024);
}
