//! WAL: round trip, group commit, batch framing, torn tails vs corruption before the last
//! commit, point-in-time recovery.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use storefn_io::RealStorage;
use storefn_kv::layout::wal::COMMIT_BYTES;
use storefn_kv::layout::wal::HEADER_BYTES;
use storefn_kv::layout::wal::RECORD_BYTES;
use storefn_kv::layout::wal::VALUE_BYTES;
use storefn_kv::Wal;
use storefn_kv::WalError;

fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wal_recovery");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn val(key: u64) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    let s = format!("value-{key}");
    v[..s.len()].copy_from_slice(s.as_bytes());
    v
}

fn open(path: &Path) -> Wal {
    Wal::open(&RealStorage, path, &storefn_kv::replay_wal(path).unwrap()).unwrap()
}

/// Bytes of a batch of `n` records.
fn batch_bytes(n: usize) -> usize {
    HEADER_BYTES + n * RECORD_BYTES + COMMIT_BYTES
}

/// Appends `n` records one at a time: one batch each.
fn write_log(path: &Path, keys: std::ops::Range<u64>) {
    let w = open(path);
    for k in keys {
        w.append(k, &val(k)).unwrap();
    }
}

#[test]
fn appended_records_replay_in_order_and_appends_continue() {
    let p = tmp("roundtrip.wal");
    write_log(&p, 0..10);
    write_log(&p, 0..5);
    let r = storefn_kv::replay_wal(&p).unwrap();
    assert_eq!((r.torn_bytes, r.batches), (0, 15));
    assert_eq!(r.records.len(), 15);
    for (i, rec) in r.records.iter().enumerate() {
        assert_eq!(rec.seq, i as u64 + 1);
        let key = if i < 10 { i as u64 } else { i as u64 - 10 };
        assert_eq!((rec.key, rec.value), (key, val(key)));
    }
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 15 * batch_bytes(1) as u64);
    assert_eq!(r.end, 15 * batch_bytes(1) as u64);
}

#[test]
fn concurrent_appenders_share_group_commits() {
    let p = tmp("group.wal");
    let w = Arc::new(open(&p));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let w = Arc::clone(&w);
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let k = t * 1000 + i;
                    let seq = w.append(k, &val(k)).unwrap();
                    // Acknowledged means durable: the syncer published at least this seq.
                    assert!(w.durable_seq() >= seq);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let batches = w.batches();
    assert!((1..=400).contains(&batches), "batches {batches}");
    drop(w);
    let r = storefn_kv::replay_wal(&p).unwrap();
    assert_eq!(r.records.len(), 400);
    assert_eq!(r.batches, batches, "one framed batch per group commit");
    let mut keys: Vec<u64> = r.records.iter().map(|r| r.key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 400);
    assert!(r.records.iter().all(|r| r.value == val(r.key)));
}

#[test]
fn pipelined_submits_overlap_one_sync_with_the_next_batch() {
    let p = tmp("pipeline.wal");
    let w = open(&p);
    let tickets: Vec<_> = (0..2000u64).map(|k| w.submit(k, &val(k)).unwrap()).collect();
    w.wait(*tickets.last().unwrap()).unwrap();
    // 2000 records were queued without waiting: far fewer syncs than records.
    assert!(w.batches() < 2000, "batches {}", w.batches());
    drop(w);
    assert_eq!(storefn_kv::replay_wal(&p).unwrap().records.len(), 2000);
}

#[test]
fn torn_tail_is_ignored_by_readers_and_cut_by_the_writer() {
    let last = batch_bytes(1);
    for cut in [1usize, 8, COMMIT_BYTES, COMMIT_BYTES + 1, last - HEADER_BYTES, last - 1] {
        let p = tmp(&format!("torn{cut}.wal"));
        write_log(&p, 0..6);
        let len = std::fs::metadata(&p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len - cut as u64).unwrap();
        drop(f);
        let r = storefn_kv::replay_wal(&p).unwrap();
        assert_eq!(r.records.len(), 5, "cut {cut}");
        assert_eq!(r.torn_bytes, (last - cut) as u64);
        // Replay is read-only: the torn bytes are still there.
        assert_eq!(std::fs::metadata(&p).unwrap().len(), len - cut as u64);
        // The writer cuts them and appends right after the last commit.
        write_log(&p, 100..101);
        let r = storefn_kv::replay_wal(&p).unwrap();
        assert_eq!((r.records.len(), r.torn_bytes), (6, 0));
        assert_eq!(r.records[5].key, 100);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 6 * last as u64);
    }
}

#[test]
fn damage_inside_the_last_batch_is_a_torn_tail() {
    // A torn last write cannot be told from damage to the last batch: there is no later
    // commit to prove the log went on. Every byte of the last batch, flipped, reads as torn.
    let p = tmp("tornflip.wal");
    write_log(&p, 0..3);
    let good = std::fs::read(&p).unwrap();
    let start = 2 * batch_bytes(1);
    for at in start..good.len() {
        let mut bytes = good.clone();
        bytes[at] ^= 0x40;
        std::fs::write(&p, &bytes).unwrap();
        let r = storefn_kv::replay_wal(&p).unwrap();
        assert_eq!((r.records.len(), r.torn_bytes), (2, batch_bytes(1) as u64), "byte {at}");
    }
}

#[test]
fn damage_before_the_last_commit_is_an_error_naming_the_offset() {
    let p = tmp("corrupt.wal");
    write_log(&p, 0..4);
    let good = std::fs::read(&p).unwrap();
    let b = batch_bytes(1);
    // Every byte of batch 1 (of 0..4), flipped: an error naming batch 1's offset.
    for at in b..2 * b {
        let mut bytes = good.clone();
        bytes[at] ^= 0x01;
        std::fs::write(&p, &bytes).unwrap();
        match storefn_kv::replay_wal(&p) {
            Err(WalError::Corrupt { offset, valid_offset, .. }) => {
                assert_eq!(offset, b as u64, "byte {at}");
                assert_eq!(valid_offset, 2 * b as u64, "byte {at}");
            }
            other => panic!("byte {at}: expected Corrupt, got {other:?}"),
        }
        // Nothing was truncated: the evidence stays for the operator.
        assert_eq!(std::fs::read(&p).unwrap(), bytes);
    }
    // The writer refuses it too.
    let e = storefn_kv::replay_wal(&p).unwrap_err().to_string();
    assert!(e.contains(&format!("offset {b}")) && e.contains("--point-in-time"), "{e}");
}

#[test]
fn point_in_time_recovery_drops_the_damage_and_everything_after() {
    let p = tmp("pit.wal");
    write_log(&p, 0..5);
    let mut bytes = std::fs::read(&p).unwrap();
    let b = batch_bytes(1);
    bytes[2 * b + HEADER_BYTES + 3] ^= 0xff; // a key byte of batch 2 (seq 3)
    std::fs::write(&p, &bytes).unwrap();
    let d = storefn_kv::cut_wal_at_corruption(&RealStorage, &p).unwrap().expect("corruption found");
    assert_eq!((d.offset, d.bytes, d.reason), (2 * b as u64, 3 * b as u64, "bad batch checksum"));
    assert_eq!((d.batches, d.records, d.seqs), (2, 2, Some((4, 5))));
    let r = storefn_kv::replay_wal(&p).unwrap();
    assert_eq!(r.records.iter().map(|r| r.key).collect::<Vec<_>>(), vec![0, 1]);
    assert!(storefn_kv::cut_wal_at_corruption(&RealStorage, &p).unwrap().is_none(), "nothing left");
    write_log(&p, 9..10);
    assert_eq!(
        storefn_kv::replay_wal(&p).unwrap().records.last().unwrap().seq,
        3,
        "appends continue"
    );
}

#[test]
fn missing_log_replays_empty_and_creating_it_syncs_the_directory() {
    let p = tmp("absent.wal");
    let r = storefn_kv::replay_wal(&p).unwrap();
    assert!(r.records.is_empty() && r.torn_bytes == 0 && !r.exists);
    // The crash model shows the name survives only because the directory was synced.
    let dir = p.parent().unwrap().join("absent-dir");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sim = storefn_io::CrashSim::new(&dir, None, 1).unwrap();
    let wp = dir.join("x.wal");
    let w = Wal::open(&sim, &wp, &storefn_kv::replay_wal(&wp).unwrap()).unwrap();
    w.append(1, &val(1)).unwrap();
    drop(w);
    let img = sim.crash_now();
    let name = std::ffi::OsStr::new("x.wal");
    assert!(img.contains_key(name), "the log's name is durable");
    assert_eq!(
        storefn_kv::scan_wal(&img[name]).replay.records.len(),
        1,
        "the acknowledged record too"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
