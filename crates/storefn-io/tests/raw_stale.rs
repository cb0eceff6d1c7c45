//! Raw-mode staleness in the engine: while raw chains run (many in flight), another thread or
//! process rewrites or truncates the file. No chain may deliver wrong data: a chain that read
//! the device is delivered only if the post-chain check passed (and then holds the old bytes);
//! otherwise it completes as `ChainError::Stale`, the redo goes through the file, and
//! `refresh_raw` brings raw mode back with the new layout. Needs root; skips otherwise.

mod common;
mod digest_support;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{get_u64, put_u64};
use digest_support::{pattern, sh, write_pattern_file, FsKind, LoopFs};
use rand::{Rng, SeedableRng};
use storefn_io::{
    func, ChainError, Completion, Engine, EngineConfig, EngineError, FileId, IoMode, VmError,
    XrpCtx,
};
use storefn_io::{lease_breaks_seen, DigestError};

const OLD: u64 = 0x01d;
const NEW: u64 = 0x2e3;
const FILLER: u64 = 0xf11;
const VICTIM_BYTES: u64 = 4 << 20;
/// Hops per chain (a B+-tree walk's worth); their addresses sit in scratch[8..48].
const HOPS: usize = 5;
/// Chains in flight per round, so a break lands on chains at every stage.
const IN_FLIGHT: usize = 16;
/// Device-read chains accepted before the mutation starts.
const CHAINS_BEFORE_MUTATION: u64 = 3;
const RACE_TIMEOUT: Duration = Duration::from_secs(30);
const RETRIES: u32 = 200;

/// Scratch: [0] hop index, [8 + 8i] address of hop i, [64 + 8i] first word read at hop i.
fn reader() -> impl FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, VmError> {
    func(|ctx, data, s| {
        let i = get_u64(s, 0) as usize;
        put_u64(s, 64 + 8 * i, get_u64(data, 0));
        put_u64(s, 0, i as u64 + 1);
        if i + 1 < HOPS {
            ctx.next_addr[0] = get_u64(s, 8 + 8 * (i + 1));
            ctx.size[0] = 4096;
        } else {
            ctx.done = 1;
        }
        Ok(0)
    })
}

fn lease_refused(e: &EngineError) -> bool {
    matches!(e, EngineError::RawUnavailable { source: DigestError::Lease { err, .. }, .. }
        if err.raw_os_error() == Some(libc::EAGAIN))
}

fn retry_lease(mut f: impl FnMut() -> Result<(), EngineError>) -> Result<(), EngineError> {
    for _ in 0..RETRIES {
        match f() {
            Err(e) if lease_refused(&e) => std::thread::sleep(Duration::from_millis(10)),
            r => return r,
        }
    }
    panic!("lease still refused after {RETRIES} tries")
}

fn rewrite_in_place(p: &Path) {
    let f = File::options().write(true).open(p).unwrap(); // waits for the lease release
    for off in (0..VICTIM_BYTES).step_by(1 << 20) {
        f.write_all_at(&pattern(NEW, off, 1 << 20), off).unwrap();
    }
    f.sync_all().unwrap();
}

fn truncate_and_reuse(p: &Path) {
    sh("truncate", &["-s", &(VICTIM_BYTES / 4).to_string(), p.to_str().unwrap()]);
    // Reuse the freed blocks so a stale mapping would read the filler's bytes.
    write_pattern_file(&p.parent().unwrap().join("filler"), FILLER, VICTIM_BYTES * 2);
}

/// What one chain's words may be.
fn word(seed: u64, addr: u64) -> u64 {
    get_u64(&pattern(seed, addr, 8), 0)
}

#[derive(Debug, Default)]
struct Outcome {
    accepted_device: u64,
    accepted_file: u64,
    stale: u64,
    redone: u64,
    refused: u64,
}

/// Checks a delivered chain; returns true when it must be redone (Stale).
fn judge(c: &Completion<'_>, new_seed: Option<u64>, out: &mut Outcome) -> bool {
    let addrs: Vec<u64> = (0..HOPS).map(|i| get_u64(c.scratch, 8 + 8 * i)).collect();
    match &c.result {
        Ok(st) => {
            for (i, &a) in addrs.iter().enumerate() {
                let got = get_u64(c.scratch, 64 + 8 * i);
                let old_ok = got == word(OLD, a);
                // A chain that read the device and passed the check saw the digest's file
                // version: the old bytes. Through the file, the new bytes are legitimate too.
                let new_ok = st.device_hops == 0 && new_seed.is_some_and(|s| got == word(s, a));
                assert!(old_ok || new_ok, "wrong data delivered at {a:#x}: {got:#x} ({st:?})");
            }
            if st.device_hops > 0 {
                out.accepted_device += 1;
            } else {
                out.accepted_file += 1;
            }
            false
        }
        Err(ChainError::Stale { .. }) => {
            out.stale += 1;
            true
        }
        // A shrinking file: hops past the new end fail on the file path, loudly.
        Err(ChainError::OutOfRange { .. } | ChainError::ShortRead { .. }) if new_seed.is_none() => {
            out.refused += 1;
            false
        }
        Err(e) => panic!("unexpected chain error {e}"),
    }
}

fn addresses(rng: &mut impl Rng, size: u64) -> [u64; HOPS] {
    std::array::from_fn(|_| 512 * rng.gen_range(0..(size - 4096) / 512))
}

fn submit(e: &mut Engine, id: FileId, token: u64, addrs: &[u64; HOPS]) {
    e.submit_chain(id, addrs[0], 4096, token, |s| {
        for (i, a) in addrs.iter().enumerate() {
            put_u64(s, 8 + 8 * i, *a);
        }
    })
    .unwrap();
}

/// Rounds of `IN_FLIGHT` raw chains while `mutate` runs on another thread; stale chains are
/// redone synchronously and must then read through the file.
fn race(e: &mut Engine, id: FileId, path: &Path, mutate: fn(&Path), new_seed: Option<u64>) {
    let done = AtomicBool::new(false);
    let accepted = AtomicU64::new(0);
    let mut out = Outcome::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    std::thread::scope(|s| {
        s.spawn(|| {
            let t = Instant::now();
            // SeqCst: plain progress counter and flag, no hot path.
            while accepted.load(Ordering::SeqCst) < CHAINS_BEFORE_MUTATION {
                assert!(t.elapsed() < RACE_TIMEOUT, "reader never got going");
                std::thread::sleep(Duration::from_millis(1));
            }
            mutate(path);
            done.store(true, Ordering::SeqCst);
        });
        let start = Instant::now();
        let mut rounds_after = 0;
        loop {
            let mut redo = Vec::new();
            for t in 0..IN_FLIGHT {
                let a = addresses(&mut rng, VICTIM_BYTES);
                submit(e, id, t as u64, &a);
            }
            e.wait(IN_FLIGHT, &mut reader(), |c| {
                if judge(&c, new_seed, &mut out) {
                    redo.push(std::array::from_fn::<u64, HOPS, _>(|i| {
                        get_u64(c.scratch, 8 + 8 * i)
                    }));
                }
            })
            .unwrap();
            accepted.store(out.accepted_device, Ordering::SeqCst);
            // The fallback: redo stale chains; raw mode is off now, so they read the file.
            for a in redo {
                let mut s = [0u8; 128];
                for (i, x) in a.iter().enumerate() {
                    put_u64(&mut s, 8 + 8 * i, *x);
                }
                let r = e.read_xrp(id, a[0], 4096, &mut reader(), &mut s);
                let c = Completion { token: 0, result: r, scratch: &s, data: &[] };
                assert!(!judge(&c, new_seed, &mut out), "a redo went stale");
                if let Ok(st) = c.result {
                    assert_eq!(st.device_hops, 0, "redo after Stale read the device");
                }
                out.redone += 1;
            }
            if done.load(Ordering::SeqCst) {
                rounds_after += 1;
                if rounds_after > 20 && out.stale > 0 {
                    break;
                }
            }
            assert!(start.elapsed() < RACE_TIMEOUT, "mutation never detected: {out:?}");
        }
    });
    println!("{out:?}");
    assert!(out.accepted_device >= CHAINS_BEFORE_MUTATION, "{out:?}");
    assert!(out.stale > 0 && out.redone == out.stale, "{out:?}");
    assert!(!e.is_raw(id), "raw mode must stay off until refreshed");
}

fn victim(kind: FsKind) -> Option<(LoopFs, Engine, FileId)> {
    let fs = LoopFs::new(kind, 512, &[])?;
    let p = fs.path("victim");
    write_pattern_file(&p, OLD, VICTIM_BYTES);
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let mut id = None;
    retry_lease(|| e.open(&p, IoMode::Raw).map(|i| id = Some(i))).unwrap();
    Some((fs, e, id.unwrap()))
}

/// After the writer is gone, `refresh_raw` brings raw mode back and chains read the new bytes
/// through the device.
fn refresh_and_check(e: &mut Engine, id: FileId, seed: u64, size: u64) {
    retry_lease(|| e.refresh_raw(id)).unwrap();
    assert!(e.is_raw(id));
    assert_eq!(e.file_size(id), Some(size));
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for _ in 0..50 {
        let a = addresses(&mut rng, size);
        let mut s = [0u8; 128];
        for (i, x) in a.iter().enumerate() {
            put_u64(&mut s, 8 + 8 * i, *x);
        }
        let st = e.read_xrp(id, a[0], 4096, &mut reader(), &mut s).unwrap();
        assert_eq!(st.device_hops, HOPS as u32);
        for (i, &x) in a.iter().enumerate() {
            assert_eq!(get_u64(&s, 64 + 8 * i), word(seed, x), "after refresh at {x:#x}");
        }
    }
}

fn rewrite_case(kind: FsKind) {
    let Some((fs, mut e, id)) = victim(kind) else { return };
    let breaks = lease_breaks_seen();
    race(&mut e, id, &fs.path("victim"), rewrite_in_place, Some(NEW));
    assert!(lease_breaks_seen() > breaks, "the lease-break handler never ran");
    refresh_and_check(&mut e, id, NEW, VICTIM_BYTES);
}

#[test]
fn ext4_rewrite_while_raw_chains_run_never_delivers_wrong_data() {
    rewrite_case(FsKind::Ext4);
}

#[test]
fn xfs_rewrite_while_raw_chains_run_never_delivers_wrong_data() {
    rewrite_case(FsKind::Xfs);
}

#[test]
fn ext4_truncate_while_raw_chains_run_never_delivers_wrong_data() {
    let Some((fs, mut e, id)) = victim(FsKind::Ext4) else { return };
    race(&mut e, id, &fs.path("victim"), truncate_and_reuse, None);
    refresh_and_check(&mut e, id, OLD, VICTIM_BYTES / 4);
}

#[test]
fn refresh_while_chains_run_makes_them_stale() {
    let Some((_fs, mut e, id)) = victim(FsKind::Ext4) else { return };
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for t in 0..IN_FLIGHT {
        submit(&mut e, id, t as u64, &addresses(&mut rng, VICTIM_BYTES));
    }
    // Refreshing mid-flight (a new lease and digest, epoch + 1) must not vouch for reads made
    // under the old digest: every chain that read the device before it completes Stale.
    retry_lease(|| e.refresh_raw(id)).unwrap();
    let mut stale = 0;
    e.wait(IN_FLIGHT, &mut reader(), |c| match c.result {
        Err(ChainError::Stale { why, .. }) => {
            assert!(why.contains("refreshed"), "{why}");
            stale += 1;
        }
        other => panic!("expected Stale, got {other:?}"),
    })
    .unwrap();
    assert_eq!(stale, IN_FLIGHT);
    assert!(e.is_raw(id), "a refresh leaves raw mode on");
}

#[test]
fn deferred_reads_are_vouched_for_only_by_check_raw() {
    let Some((fs, mut e, id)) = victim(FsKind::Ext4) else { return };
    let p = fs.path("victim");
    let mut buf = vec![0u8; 4096];
    let epoch = e.raw_epoch(id);
    let st = e.read_deferred(id, 8192, &mut buf).unwrap();
    assert_eq!(st.device_hops, 1);
    e.check_raw(id, epoch).unwrap();
    // A writer (another thread: its open waits for our lease to be released) rewrites the
    // file; a deferred read right after still succeeds, but the check refuses to vouch for it.
    std::thread::scope(|s| {
        s.spawn(|| rewrite_in_place(&p)).join().unwrap();
    });
    let r = e.read_deferred(id, 8192, &mut buf);
    assert!(!matches!(r, Err(ref c) if c.is_stale()), "read_deferred never reports Stale: {r:?}");
    let err = e.check_raw(id, epoch).unwrap_err();
    assert!(err.is_stale(), "{err}");
    assert!(!e.is_raw(id), "a failed check turns raw mode off");
    // Raw mode off: reads go to the file and hold the new bytes.
    let st = e.read_deferred(id, 8192, &mut buf).unwrap();
    assert_eq!(st.device_hops, 0);
    assert_eq!(get_u64(&buf, 0), word(NEW, 8192));
    // After a refresh, an epoch taken before it no longer vouches for anything.
    retry_lease(|| e.refresh_raw(id)).unwrap();
    let err = e.check_raw(id, epoch).unwrap_err();
    assert!(err.to_string().contains("refreshed"), "{err}");
    let fresh = e.raw_epoch(id);
    assert_eq!(e.read_deferred(id, 8192, &mut buf).unwrap().device_hops, 1);
    assert_eq!(get_u64(&buf, 0), word(NEW, 8192));
    e.check_raw(id, fresh).unwrap();
}

#[test]
fn retry_raw_brings_raw_mode_back_once_the_writer_is_gone_and_no_sooner() {
    use storefn_io::limits::RAW_RETRY_INTERVAL;
    let Some((fs, mut e, id)) = victim(FsKind::Ext4) else { return };
    let p = fs.path("victim");
    assert!(e.retry_raw(id).is_none(), "nothing to retry while raw mode is on");
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        // A writer that keeps the file open (its open waits for our lease to be released).
        let p = &p;
        s.spawn(move || {
            let _w = File::options().write(true).open(p).unwrap();
            opened_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        opened_rx.recv().unwrap();
        let epoch = e.raw_epoch(id);
        let mut buf = vec![0u8; 4096];
        e.read_deferred(id, 0, &mut buf).unwrap();
        assert!(e.check_raw(id, epoch).unwrap_err().is_stale());
        assert!(!e.is_raw(id));
        // The writer is still there: the attempt fails and raw mode stays off...
        let r = e.retry_raw(id).expect("an attempt is due at once after the check failed");
        assert!(r.is_err(), "raw mode set up again while a writer holds the file");
        // ...and the next attempt waits out the interval.
        assert!(e.retry_raw(id).is_none(), "retried before RAW_RETRY_INTERVAL");
        assert_eq!(e.read_deferred(id, 0, &mut buf).unwrap().device_hops, 0);
        release_tx.send(()).unwrap();
    });
    let t = Instant::now();
    loop {
        std::thread::sleep(RAW_RETRY_INTERVAL / 4);
        match e.retry_raw(id) {
            Some(Ok(())) => break,
            Some(Err(ref err)) if lease_refused(err) => {}
            None => {}
            Some(Err(err)) => panic!("retry failed: {err}"),
        }
        assert!(t.elapsed() < RACE_TIMEOUT, "raw mode never came back");
    }
    assert!(e.is_raw(id));
    let mut buf = vec![0u8; 4096];
    assert_eq!(e.read_deferred(id, 0, &mut buf).unwrap().device_hops, 1);
    assert_eq!(get_u64(&buf, 0), word(OLD, 0));
}
