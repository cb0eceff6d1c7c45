//! WAL: round trip, group commit, torn tails vs corruption in the middle.

use std::path::PathBuf;
use std::sync::Arc;

use storefn_kv::wal::{self, Wal, WalError, MAX_BATCH_BYTES, RECORD_BYTES, VALUE_BYTES};

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

fn write_log(path: &std::path::Path, n: u64) {
    let records = wal::replay(path).unwrap().records;
    let w = Wal::open(path, records.last().map_or(0, |r| r.seq)).unwrap();
    for k in 0..n {
        w.append(k, &val(k)).unwrap();
    }
}

#[test]
fn crc32_matches_the_ieee_check_value() {
    // The standard check value of CRC-32/ISO-HDLC over "123456789".
    assert_eq!(wal::crc32(&[b"1234", b"56789"]), 0xCBF4_3926);
}

#[test]
fn appended_records_replay_in_order_and_appends_continue() {
    let p = tmp("roundtrip.wal");
    write_log(&p, 10);
    write_log(&p, 5);
    let r = wal::replay(&p).unwrap();
    assert_eq!(r.torn_bytes, 0);
    assert_eq!(r.records.len(), 15);
    for (i, rec) in r.records.iter().enumerate() {
        assert_eq!(rec.seq, i as u64 + 1);
        let key = if i < 10 { i as u64 } else { i as u64 - 10 };
        assert_eq!((rec.key, rec.value), (key, val(key)));
    }
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 15 * RECORD_BYTES as u64);
}

#[test]
fn concurrent_appenders_share_group_commits() {
    let p = tmp("group.wal");
    let w = Arc::new(Wal::open(&p, 0).unwrap());
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
    let r = wal::replay(&p).unwrap();
    assert_eq!(r.records.len(), 400);
    let mut keys: Vec<u64> = r.records.iter().map(|r| r.key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 400);
    assert!(r.records.iter().all(|r| r.value == val(r.key)));
}

#[test]
fn pipelined_submits_overlap_one_sync_with_the_next_batch() {
    let p = tmp("pipeline.wal");
    let w = Wal::open(&p, 0).unwrap();
    let tickets: Vec<_> = (0..2000u64).map(|k| w.submit(k, &val(k)).unwrap()).collect();
    w.wait(*tickets.last().unwrap()).unwrap();
    // 2000 records were queued without waiting: far fewer syncs than records.
    assert!(w.batches() < 2000, "batches {}", w.batches());
    drop(w);
    assert_eq!(wal::replay(&p).unwrap().records.len(), 2000);
}

#[test]
fn torn_tail_is_cut_and_valid_prefix_kept() {
    for cut in [1usize, 15, 16, 40, RECORD_BYTES - 1] {
        let p = tmp(&format!("torn{cut}.wal"));
        write_log(&p, 6);
        let len = std::fs::metadata(&p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len - cut as u64).unwrap();
        drop(f);
        let r = wal::replay(&p).unwrap();
        assert_eq!(r.records.len(), 5, "cut {cut}");
        assert_eq!(r.torn_bytes, (RECORD_BYTES - cut) as u64);
        // The file was truncated to the valid prefix; appending continues cleanly.
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 5 * RECORD_BYTES as u64);
        write_log(&p, 1);
        assert_eq!(wal::replay(&p).unwrap().records.len(), 6);
    }
}

#[test]
fn garbage_in_the_last_batch_window_is_a_torn_tail() {
    let p = tmp("tornflip.wal");
    write_log(&p, 20);
    let mut bytes = std::fs::read(&p).unwrap();
    // A record torn inside the final batch with a later record of that batch on disk.
    bytes[17 * RECORD_BYTES + 40] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();
    let r = wal::replay(&p).unwrap();
    assert_eq!(r.records.len(), 17);
    assert_eq!(r.torn_bytes, 3 * RECORD_BYTES as u64);
}

#[test]
fn corruption_followed_by_valid_records_far_away_is_an_error() {
    let p = tmp("corrupt.wal");
    let n = (MAX_BATCH_BYTES / RECORD_BYTES) as u64 + 10;
    {
        let w = Wal::open(&p, 0).unwrap();
        let tickets: Vec<_> = (0..n).map(|k| w.submit(k, &val(k)).unwrap()).collect();
        w.wait(*tickets.last().unwrap()).unwrap();
    }
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[3 * RECORD_BYTES + 20] ^= 0x01;
    std::fs::write(&p, &bytes).unwrap();
    match wal::replay(&p) {
        Err(WalError::CorruptMiddle { offset, reason, .. }) => {
            assert_eq!(offset, 3 * RECORD_BYTES as u64);
            assert_eq!(reason, "bad crc");
        }
        other => panic!("expected CorruptMiddle, got {other:?}"),
    }
    // Nothing was truncated: the evidence stays for the operator.
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
}

#[test]
fn missing_log_replays_empty() {
    let p = tmp("absent.wal");
    let r = wal::replay(&p).unwrap();
    assert!(r.records.is_empty() && r.torn_bytes == 0);
}
