//! Staleness: while reads run through the digest, another thread or process rewrites,
//! truncates, punches or replaces the file. Every read the post-chain check accepts must hold
//! the bytes the file had when the digest was built; the check must notice every mutation that
//! can change what the digest's blocks hold.

mod digest_support;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use digest_support::{
    open_raw, pattern, read_device, read_file, refresh_raw, sh, with_lease_retry,
    write_pattern_file, FsKind, LoopFs,
};
use rand::{Rng, SeedableRng};
use storefn_io::{lease_breaks_seen, Digest, DigestError, LeaseGuard, RawAccess, RawDevice};

const OLD: u64 = 0x01d;
const NEW: u64 = 0x2e3;
const FILLER: u64 = 0xf11;
const VICTIM_BYTES: u64 = 4 << 20;
/// Reads per chain-like round: a B+-tree walk's worth.
const READS_PER_CHAIN: usize = 5;
/// How long the reader keeps going before declaring a missed mutation.
const RACE_TIMEOUT: Duration = Duration::from_secs(30);

/// Write a file over the blocks the victim freed so a stale mapping would read its bytes.
fn fill_freed_blocks(dir: &Path) {
    write_pattern_file(&dir.join("filler"), FILLER, VICTIM_BYTES * 2);
}

/// Chains accepted before the mutation starts, so every race has a "before" part.
const CHAINS_BEFORE_MUTATION: u64 = 3;

/// What the post-chain check must do about a mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The mutation can change what the digest's blocks hold: it must be detected.
    MustDetect,
    /// The mutation leaves the open inode's bytes alone: detection (a conservative false
    /// alarm) is allowed, wrong data is not.
    MayDetect,
}

#[derive(Debug, Default)]
struct RaceOutcome {
    accepted: u64,
    stale: u64,
}

/// Chains of reads through `raw` while `mutate` runs on another thread. Each chain's bytes are
/// accepted only if `check_after_chain` passes afterwards, and then must equal the old content.
fn race(raw: &RawAccess, path: &Path, mutate: fn(&Path), expect: Expect) -> RaceOutcome {
    let done = AtomicBool::new(false);
    let accepted = AtomicU64::new(0);
    let mut out = RaceOutcome::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let size = raw.digest().file_size();
    std::thread::scope(|s| {
        s.spawn(|| {
            let t = Instant::now();
            // SeqCst: plain progress counter, no hot path.
            while accepted.load(Ordering::SeqCst) < CHAINS_BEFORE_MUTATION {
                assert!(t.elapsed() < RACE_TIMEOUT, "reader never got going");
                std::thread::sleep(Duration::from_millis(1));
            }
            mutate(path);
            done.store(true, Ordering::SeqCst); // SeqCst: plain flag, no hot path
        });
        let start = Instant::now();
        let mut rounds_after_done = 0;
        loop {
            let mut chain = Vec::with_capacity(READS_PER_CHAIN);
            for _ in 0..READS_PER_CHAIN {
                let off = 512 * rng.gen_range(0..(size - 4096) / 512);
                let w = raw.translate(off, 4096).expect("in-file range");
                let bytes = read_device(raw.device(), w.dev_offset, w.len);
                let skip = usize::try_from(w.skip).unwrap();
                chain.push((off, bytes[skip..skip + 4096].to_vec()));
            }
            match raw.check_after_chain() {
                Ok(()) => {
                    for (off, bytes) in &chain {
                        assert!(
                            *bytes == pattern(OLD, *off, 4096),
                            "accepted stale data at file offset {off}"
                        );
                    }
                    out.accepted += 1;
                    accepted.store(out.accepted, Ordering::SeqCst);
                }
                Err(e @ DigestError::Stale { .. }) => {
                    assert!(e.is_fallback());
                    out.stale += 1;
                }
                Err(e) => panic!("unexpected {e}"),
            }
            if done.load(Ordering::SeqCst) {
                rounds_after_done += 1;
                if rounds_after_done > 20 && (out.stale > 0 || expect == Expect::MayDetect) {
                    break;
                }
            }
            assert!(start.elapsed() < RACE_TIMEOUT, "mutation never detected: {out:?}");
        }
    });
    assert!(out.accepted > 0, "no chain ran before the mutation: {out:?}");
    if expect == Expect::MustDetect {
        assert!(out.stale > 0 && raw.check_after_chain().is_err(), "{out:?}");
    }
    out
}

fn victim(fs: &LoopFs) -> (std::path::PathBuf, File, RawAccess) {
    let p = fs.path("victim");
    write_pattern_file(&p, OLD, VICTIM_BYTES);
    let f = File::open(&p).unwrap();
    let raw = open_raw(&f);
    (p, f, raw)
}

fn rewrite_in_place(p: &Path) {
    let f = File::options().write(true).open(p).unwrap(); // blocks until the lease is released
    for off in (0..VICTIM_BYTES).step_by(1 << 20) {
        f.write_all_at(&pattern(NEW, off, 1 << 20), off).unwrap();
    }
    f.sync_all().unwrap();
}

fn truncate_by_other_process(p: &Path) {
    sh("truncate", &["-s", &(VICTIM_BYTES / 4).to_string(), p.to_str().unwrap()]);
    fill_freed_blocks(p.parent().unwrap());
}

fn punch_by_other_process(p: &Path) {
    sh("fallocate", &["-p", "-o", "0", "-l", &(VICTIM_BYTES / 2).to_string(), p.to_str().unwrap()]);
    fill_freed_blocks(p.parent().unwrap());
}

fn replace_by_rename(p: &Path) {
    let tmp = p.with_extension("new");
    write_pattern_file(&tmp, NEW, VICTIM_BYTES);
    std::fs::rename(&tmp, p).unwrap();
    fill_freed_blocks(p.parent().unwrap());
}

fn rewrite_race(kind: FsKind) {
    let Some(fs) = LoopFs::new(kind, 512, &[]) else { return };
    let (p, f, raw) = victim(&fs);
    let breaks = lease_breaks_seen();
    race(&raw, &p, rewrite_in_place, Expect::MustDetect);
    assert!(lease_breaks_seen() > breaks, "the lease-break handler never ran");
    // The writer is gone: a refresh sees the new bytes, byte-exact through the device.
    let raw = refresh_raw(raw, &f).unwrap();
    let w = raw.translate(8192, 4096).unwrap();
    let got = read_device(raw.device(), w.dev_offset, w.len);
    assert_eq!(&got[w.skip as usize..w.skip as usize + 4096], &pattern(NEW, 8192, 4096)[..]);
    raw.check_after_chain().unwrap();
}

#[test]
fn ext4_rewrite_during_reads_is_caught() {
    rewrite_race(FsKind::Ext4);
}

#[test]
fn xfs_rewrite_during_reads_is_caught() {
    rewrite_race(FsKind::Xfs);
}

fn truncate_race(kind: FsKind) {
    let Some(fs) = LoopFs::new(kind, 512, &[]) else { return };
    let (p, f, raw) = victim(&fs);
    race(&raw, &p, truncate_by_other_process, Expect::MustDetect);
    // The stale digest still translates the cut-off tail, to blocks the file no longer owns
    // (free or refilled): exactly the misread the failed check prevents.
    let off = VICTIM_BYTES - 8192;
    let stale_dev = raw.translate(off, 4096).unwrap().dev_offset;
    let raw = refresh_raw(raw, &f).unwrap();
    assert_eq!(raw.digest().file_size(), VICTIM_BYTES / 4);
    assert!(
        raw.digest()
            .extents()
            .iter()
            .all(|e| stale_dev < e.physical || stale_dev >= e.physical + e.len),
        "the truncated tail's blocks still belong to the file"
    );
    assert!(matches!(raw.translate(off, 4096), Err(DigestError::OutsideFile { .. })));
    assert_eq!(read_file(&f, 0, 512), pattern(OLD, 0, 512));
}

#[test]
fn ext4_truncate_by_another_process_is_caught() {
    truncate_race(FsKind::Ext4);
}

#[test]
fn xfs_truncate_by_another_process_is_caught() {
    truncate_race(FsKind::Xfs);
}

#[test]
fn ext4_punch_hole_during_reads_is_caught_and_refresh_refuses_the_hole() {
    let Some(fs) = LoopFs::new(FsKind::Ext4, 512, &[]) else { return };
    let (p, f, raw) = victim(&fs);
    race(&raw, &p, punch_by_other_process, Expect::MustDetect);
    let e = refresh_raw(raw, &f).expect_err("a punched file has a hole");
    assert!(matches!(e, DigestError::Hole { offset: 0, .. }), "{e}");
    assert!(e.is_fallback());
}

#[test]
fn ext4_replace_by_rename_keeps_reading_the_open_inode() {
    // Rename-over does not touch the open inode's data: its blocks stay allocated while our fd
    // holds it, and the lease is not broken. The unlink does move its ctime (nlink drops), so
    // the identity check raises a conservative alarm; either way no wrong byte is accepted.
    // A fresh open of the path gets a fresh digest of the new file.
    let Some(fs) = LoopFs::new(FsKind::Ext4, 512, &[]) else { return };
    let (p, f, raw) = victim(&fs);
    let out = race(&raw, &p, replace_by_rename, Expect::MayDetect);
    println!("rename-over: {out:?}");
    let raw = refresh_raw(raw, &f).unwrap();
    assert_eq!(raw.digest().identity().size, VICTIM_BYTES);
    assert_eq!(read_file(&f, 4096, 4096), pattern(OLD, 4096, 4096));
    let f2 = File::open(&p).unwrap();
    let raw2 = open_raw(&f2);
    assert_ne!(raw2.digest().identity().ino, raw.digest().identity().ino);
    let w = raw2.translate(4096, 4096).unwrap();
    let got = read_device(raw2.device(), w.dev_offset, w.len);
    assert_eq!(&got[w.skip as usize..w.skip as usize + 4096], &pattern(NEW, 4096, 4096)[..]);
}

#[test]
fn identity_check_alone_catches_rewrite_truncate_and_punch() {
    // Without a lease (e.g. CAP_LEASE missing), the fstat identity still moves on every write,
    // truncate and punch; rebuild then gives a byte-exact digest again.
    let Some(fs) = LoopFs::new(FsKind::Ext4, 512, &[]) else { return };
    let p = fs.path("plain");
    for mutate in [rewrite_in_place as fn(&Path), truncate_by_other_process, punch_by_other_process]
    {
        write_pattern_file(&p, OLD, VICTIM_BYTES);
        let f = File::open(&p).unwrap();
        let mut d = Digest::build(&f).unwrap();
        assert!(d.still_valid(&f).unwrap());
        mutate(&p);
        assert!(!d.still_valid(&f).unwrap(), "identity did not move");
        match d.rebuild(&f) {
            Ok(()) => {
                assert!(d.still_valid(&f).unwrap());
                let dev = RawDevice::open(&d).unwrap();
                let n = d.file_size().min(1 << 20);
                let got = read_device(&dev, d.map(0, n).unwrap(), n);
                assert_eq!(got, read_file(&f, 0, n));
            }
            Err(e) => assert!(matches!(e, DigestError::Hole { .. }), "{e}"),
        }
    }
}

#[test]
fn lease_is_refused_while_a_writer_is_open_and_released_on_drop() {
    let Some(fs) = LoopFs::new(FsKind::Ext4, 64, &[]) else { return };
    let p = fs.path("busy");
    write_pattern_file(&p, OLD, 1 << 20);
    let f = File::open(&p).unwrap();
    let writer = File::options().write(true).open(&p).unwrap();
    let e = LeaseGuard::acquire(&f).expect_err("a writer is open");
    assert!(
        matches!(&e, DigestError::Lease { err, .. } if err.raw_os_error() == Some(libc::EAGAIN)),
        "{e}"
    );
    assert!(matches!(RawAccess::open(&f), Err(DigestError::Lease { .. })));
    drop(writer);
    let guard = with_lease_retry(|| LeaseGuard::acquire(&f));
    assert!(guard.is_intact());
    drop(guard);
    // Released: a writer opens at once instead of waiting out the break timer.
    let t = Instant::now();
    drop(File::options().write(true).open(&p).unwrap());
    assert!(t.elapsed() < Duration::from_secs(5));
}
