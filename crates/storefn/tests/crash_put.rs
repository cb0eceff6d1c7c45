//! Crash safety of puts and compaction: SIGKILL `storefn kv put-stream` at random points
//! (memtable of 40 entries, so many kills land inside a compaction), reopen, and check every
//! acknowledged write is there with its value.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use storefn_kv::value_text;
use storefn_kv::{Db, MARKER_SUFFIX, NEW_SUFFIX};

/// Kill rounds.
const ROUNDS: u64 = 6;
/// Each round is killed after a random number of acknowledged puts in this range (several
/// compactions' worth at 40 entries each), plus a random extra delay up to `MAX_EXTRA_MS`.
const MIN_ACKS_BEFORE_KILL: usize = 30;
const MAX_ACKS_BEFORE_KILL: usize = 400;
const MAX_EXTRA_MS: u64 = 60;
/// A round that cannot reach its ack target (a very slow disk) is killed after this long.
const ROUND_DEADLINE_S: u64 = 20;
/// 40 entries of 80 accounted bytes: a compaction every 40 distinct keys.
const MEMTABLE_BYTES: usize = 40 * 80;

#[test]
fn every_acknowledged_put_survives_sigkill_including_during_compaction() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("crash_put");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("db");
    let bin = env!("CARGO_BIN_EXE_storefn");
    let st = Command::new(bin).args(["kv", "create"]).arg(&db).args(["--layers", "2"]).output();
    assert!(st.unwrap().status.success());
    // key -> (round seed, put index) of the newest acknowledged put.
    let mut model: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
    let mut total_acks = 0;
    for round in 1..=ROUNDS {
        let batch = rng.gen_range(1..=8u32);
        let mut child = Command::new(bin)
            .args(["kv", "put-stream"])
            .arg(&db)
            .args(["--count", "1000000", "--seed", &round.to_string()])
            .args(["--memtable-bytes", &MEMTABLE_BYTES.to_string(), "--batch", &batch.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Kill at a point defined by progress, not wall time, so a slow or loaded machine
        // still reaches compactions: wait for a random number of acks, then a random delay.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let target_acks = rng.gen_range(MIN_ACKS_BEFORE_KILL..MAX_ACKS_BEFORE_KILL);
        let deadline = Instant::now() + Duration::from_secs(ROUND_DEADLINE_S);
        let mut lines = Vec::new();
        while lines.len() < target_acks && Instant::now() < deadline {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(50)) {
                lines.push(l);
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..MAX_EXTRA_MS)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(status.code().is_none(), "put-stream exited on its own: {stderr}");
        for line in lines.iter().filter(|l| !l.starts_with("locked ")) {
            let mut f = line.split(' ');
            assert_eq!(f.next(), Some("ack"), "{line}");
            let key: u64 = f.next().unwrap().parse().unwrap();
            let idx: u64 = f.next().unwrap().rsplit('-').next().unwrap().parse().unwrap();
            model.insert(key, (round, idx));
        }
        lines.retain(|l| !l.starts_with("locked "));
        total_acks += lines.len();
        let acked_this_round = lines.len() as u64;
        check(&db, &mut model, round, acked_this_round);
    }
    assert!(total_acks > 100, "too few acknowledged puts to mean anything: {total_acks}");
}

/// Reopens and compares. A put after the last ack of the killed round may have become durable
/// without being acknowledged; it can only be newer than the model's value for its key.
fn check(db: &std::path::Path, model: &mut HashMap<u64, (u64, u64)>, round: u64, acked: u64) {
    let d = Db::open(db).unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
    for (&key, entry) in model.iter_mut() {
        let (seed, idx) = *entry;
        let v = d.get(key).unwrap().unwrap_or_else(|| panic!("key {key} lost"));
        let text = value_text(&v);
        let want = format!("s{seed}-{idx}");
        let newer_unacked =
            text.strip_prefix(&format!("s{round}-")).and_then(|i| i.parse::<u64>().ok());
        match newer_unacked {
            // Durable but unacknowledged: from now on it is the value later rounds must keep.
            Some(i) if i >= acked => *entry = (round, i),
            _ => assert_eq!(text, want, "round {round} key {key}"),
        }
    }
    // A tree key with no acknowledged put holds BPF-KV's value (or an unacknowledged put's).
    if let Some(k) = (0..961u64).find(|k| !model.contains_key(k)) {
        let text = value_text(&d.get(k).unwrap().unwrap());
        assert!(text == format!("{k:>63}") || text.starts_with('s'), "key {k}: {text:?}");
    }
    drop(d);
    for suffix in [NEW_SUFFIX, MARKER_SUFFIX] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        assert!(!PathBuf::from(p).exists(), "{suffix} left after recovery");
    }
}
