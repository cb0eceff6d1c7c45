//! Staleness: a WiredTiger writer process rewrites keys and checkpoints every 100 ms while this
//! process looks keys up on the plain and the chain paths, locally and through a server. Every answer must be a value the key
//! had (a block reused after its checkpoint was dropped must never leak into an answer).

mod common;

use common::TempDir;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig};
use storefn_wiredtiger::{Answer, Lookups, ReadPath, RemotePath, RemoteTable};

const KEYS: u64 = 20_000;
const LOOKUPS: u64 = 100_000;

/// Whether round `r` of the writer (tests/support/writer.c) wrote key `i`.
fn wrote(i: u64, r: u64) -> bool {
    let start = (r * 7919) % 1000;
    r == 0 || (i >= start && (i - start).is_multiple_of(1 + r % 7))
}

/// `None` when `v` is a value key `i` had; else why not.
fn check(i: u64, v: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(v).ok()?;
    let want_head = format!("key{i:06}:r");
    let rest = s.strip_prefix(&want_head)?;
    let (r, pad) = rest.split_once(':')?;
    let r: u64 = r.parse().ok()?;
    let n = ((i + r) % 200) as usize;
    let c = (b'a' + ((i + r) % 26) as u8) as char;
    (wrote(i, r) && pad.len() == n && pad.chars().all(|x| x == c))
        .then_some(())
        .map_or_else(|| Some(format!("key {i}: {s:?}")), |()| None)
}

fn writer(dir: &std::path::Path) -> std::path::PathBuf {
    let exe = dir.join("writer");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/writer.c");
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .arg("-lwiredtiger")
        .status()
        .expect("cc runs (the native feature needs it too)");
    assert!(st.success(), "building {src}");
    exe
}

/// Stops the writer however a test ends (it also stops by itself after 300 s).
struct Stop(std::path::PathBuf);
impl Drop for Stop {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, b"");
    }
}

/// The writer process on `db`, started and ready: its stdout (for the last round) and its stop.
fn start_writer(
    tmp: &std::path::Path,
    db: &std::path::Path,
) -> (Child, BufReader<ChildStdout>, Stop) {
    std::fs::create_dir_all(db).unwrap();
    let stop = tmp.join("stop");
    let mut child =
        Command::new(writer(tmp)).arg(db).arg(&stop).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let stop = Stop(stop);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the writer started");
    (child, out, stop)
}

/// Stops the writer and returns its last round.
fn finish(mut child: Child, mut out: BufReader<ChildStdout>, stop: &Stop) -> String {
    std::fs::write(&stop.0, b"").unwrap();
    let mut rounds = String::new();
    out.read_line(&mut rounds).unwrap();
    assert!(child.wait().unwrap().success());
    rounds.trim().into()
}

/// The key of lookup `n`'s xorshift state `x` (some of them absent), advanced in place.
fn next_key(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x % (KEYS + 100)
}

/// Checks one answer for key `i` against the values it had; a wrong one is pushed to `wrong`.
fn judge(what: &str, i: u64, r: Result<Answer, String>, value: &[u8], wrong: &mut Vec<String>) {
    match r {
        Ok(Answer::Found) if i < KEYS => {
            let v = value.strip_suffix(&[0]).unwrap_or(value);
            if let Some(w) = check(i, v) {
                wrong.push(format!("{what}: {w}"));
            }
        }
        Ok(Answer::NotFound) if i >= KEYS => {}
        Ok(a) => wrong.push(format!("{what}: key {i}: {a:?}")),
        Err(e) => wrong.push(format!("{what}: key {i}: {e}")),
    }
}

fn assert_none_wrong(wrong: &[String]) {
    assert!(
        wrong.is_empty(),
        "{} wrong answers, first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[test]
fn lookups_during_checkpoints_return_only_values_keys_had() {
    let tmp = TempDir::new("stale");
    let db = tmp.0.join("db");
    let (child, out, stop) = start_writer(&tmp.0, &db);
    let mut wrong = Vec::new();
    let mut stats = Vec::new();
    let mut value = Vec::new();
    for path in [ReadPath::Read, ReadPath::Xrp] {
        let mut l = Lookups::open(&db, "t", path).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..LOOKUPS / 2 {
            let i = next_key(&mut x);
            let key = format!("key{i:06}");
            let r = l.get(key.as_bytes(), &mut value).map_err(|e| e.to_string());
            judge(&format!("{path:?} lookup {n}"), i, r, &value, &mut wrong);
        }
        stats.push((path, l.stats));
    }
    let rounds = finish(child, out, &stop);
    eprintln!("writer rounds: {rounds}; {stats:?}");
    assert_none_wrong(&wrong);
    for (path, s) in &stats {
        assert!(s.reloads > 0, "{path:?}: the reader never moved to a newer checkpoint: {s:?}");
        assert_eq!(s.fallbacks, 0, "{path:?}: {s:?}");
    }
}

#[test]
fn remote_lookups_during_checkpoints_return_only_values_keys_had() {
    // The same writer, read through `storefn serve` on loopback: pushdown (the server runs the
    // chain and checks every block's CRC-32C) and rpc-read (a READ per page).
    let tmp = TempDir::new("stale-remote");
    let db = tmp.0.join("db");
    let (child, out, stop) = start_writer(&tmp.0, &db);
    let mut cfg = ServerConfig::new(&tmp.0);
    cfg.threads = 1;
    // A 32 KiB leaf's scan and checksum take more than the default tenant budget per hop.
    cfg.insn_budget = 1 << 20;
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let mut wrong = Vec::new();
    let mut stats = Vec::new();
    let mut value = Vec::new();
    for path in [RemotePath::RpcRead, RemotePath::Pushdown] {
        let c = Client::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap();
        let mut t = RemoteTable::open(c, "db", "t").unwrap();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in 0..LOOKUPS / 2 {
            let i = next_key(&mut x);
            let key = format!("key{i:06}");
            let r = t.get(key.as_bytes(), path, &mut value).map_err(|e| e.to_string());
            judge(&format!("{path:?} lookup {n}"), i, r, &value, &mut wrong);
        }
        stats.push((path, t.stats));
    }
    let rounds = finish(child, out, &stop);
    server.stop();
    server.join().unwrap();
    eprintln!("writer rounds: {rounds}; {stats:?}");
    assert_none_wrong(&wrong);
    for (path, s) in &stats {
        assert!(s.reloads > 0, "{path:?}: the reader never moved to a newer checkpoint: {s:?}");
        assert_eq!(s.lookups, LOOKUPS / 2, "{path:?}: {s:?}");
    }
}
