//! Staleness: a WiredTiger writer process rewrites keys and checkpoints every 100 ms while this
//! process looks keys up on the plain and the chain paths. Every answer must be a value the key
//! had (a block reused after its checkpoint was dropped must never leak into an answer).

mod common;

use common::TempDir;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use storefn_wiredtiger::{Answer, Lookups, ReadPath};

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

#[test]
fn lookups_during_checkpoints_return_only_values_keys_had() {
    let tmp = TempDir::new("stale");
    let db = tmp.0.join("db");
    std::fs::create_dir_all(&db).unwrap();
    let stop = tmp.0.join("stop");
    let mut child =
        Command::new(writer(&tmp.0)).arg(&db).arg(&stop).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    // Stops the writer however this test ends (it also stops by itself after 300 s).
    struct Stop(std::path::PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, b"");
        }
    }
    let _stop = Stop(stop.clone());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the writer started");
    let mut wrong = Vec::new();
    let mut stats = Vec::new();
    let mut value = Vec::new();
    for path in [ReadPath::Read, ReadPath::Xrp] {
        let mut l = Lookups::open(&db, "t", path).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..LOOKUPS / 2 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x % (KEYS + 100);
            let key = format!("key{i:06}");
            match l.get(key.as_bytes(), &mut value) {
                Ok(Answer::Found) if i < KEYS => {
                    let v = value.strip_suffix(&[0]).unwrap_or(&value);
                    if let Some(w) = check(i, v) {
                        wrong.push(w);
                    }
                }
                Ok(Answer::NotFound) if i >= KEYS => {}
                Ok(a) => wrong.push(format!("{path:?} lookup {n}: key {i}: {a:?}")),
                Err(e) => wrong.push(format!("{path:?} lookup {n}: key {i}: {e}")),
            }
        }
        stats.push((path, l.stats));
    }
    std::fs::write(&stop, b"").unwrap();
    let mut rounds = String::new();
    out.read_line(&mut rounds).unwrap();
    assert!(child.wait().unwrap().success());
    eprintln!("writer rounds: {}; {stats:?}", rounds.trim());
    assert!(
        wrong.is_empty(),
        "{} wrong answers, first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    for (path, s) in &stats {
        assert!(s.reloads > 0, "{path:?}: the reader never moved to a newer checkpoint: {s:?}");
        assert_eq!(s.fallbacks, 0, "{path:?}: {s:?}");
    }
}
