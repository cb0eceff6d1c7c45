//! Metadata digest on real file systems built by the tests (ext4 and xfs on loop devices, ext4
//! on zram): FIEMAP agrees with filefrag, every mapped byte read through the device equals the
//! file, and everything unsafe to read raw is refused with a named error.

mod digest_support;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use digest_support::{
    filefrag, open_raw, pattern, read_device, read_file, write_interleaved, write_pattern_file,
    FsKind, LoopFs, ZramFs,
};
use rand::{Rng, SeedableRng};
use storefn_io::{Digest, DigestError, ExtentProblem, RawDevice};

/// Largest device read the byte-comparison does at once.
const COMPARE_CHUNK: u64 = 1 << 20;

/// Every run of the digest, read through the device in chunks, equals pread on the file; and
/// random small ranges translated by `RawAccess::translate` read back the right bytes.
fn assert_byte_exact(path: &Path, seed: u64) {
    let file = File::open(path).unwrap();
    let raw = open_raw(&file);
    let d = raw.digest();
    let size = d.file_size();
    let lbs = raw.logical_block_size();
    for e in d.extents() {
        let end = (e.logical + e.len).min(size);
        let mut off = e.logical;
        while off < end {
            let n = (end - off).min(COMPARE_CHUNK);
            let dev_off = d.map(off, n).unwrap();
            assert_eq!(dev_off, e.physical + (off - e.logical));
            let aligned = n.next_multiple_of(lbs);
            let got = read_device(raw.device(), dev_off, aligned);
            assert!(got[..n as usize] == read_file(&file, off, n)[..], "mismatch at {off}");
            assert!(got[..n as usize] == pattern(seed, off, n as usize)[..], "not the pattern");
            off += n;
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..500 {
        let len = 512 * rng.gen_range(1..=8u64);
        let off = 512 * rng.gen_range(0..size.div_ceil(512));
        match raw.translate(off, len) {
            Ok(w) => {
                assert!(w.len <= raw.window_capacity(len));
                assert!(
                    d.extents().iter().any(|e| e.physical <= w.dev_offset
                        && w.dev_offset + w.len <= e.physical + e.len),
                    "window {w:?} leaves the file's runs"
                );
                let got = read_device(raw.device(), w.dev_offset, w.len);
                let s = usize::try_from(w.skip).unwrap();
                assert_eq!(&got[s..s + len as usize], &read_file(&file, off, len)[..], "{off}");
            }
            Err(DigestError::OutsideFile { offset, len: l, file_size }) => {
                assert_eq!((offset, l, file_size), (off, len, size));
                assert!(off + len > size, "in-file range {off}+{len} refused");
            }
            Err(DigestError::SpansExtents { boundary, .. }) => {
                assert!(off < boundary && boundary < off + len);
                assert!(d.extents().iter().any(|e| e.logical == boundary));
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    raw.check_after_chain().unwrap();
    // Tests run as root (LoopFs skips otherwise), so the device node opened without atime
    // updates: O_DIRECT reads of a block device would otherwise each run touch_atime.
    // SAFETY: plain fcntl on an open fd.
    let flags = unsafe { libc::fcntl(raw.device_fd(), libc::F_GETFL) };
    assert!(flags >= 0 && flags & libc::O_NOATIME != 0, "device flags {flags:#o}");
}

/// The digest's FIEMAP extents are exactly what `filefrag -v` lists (within the file size).
fn assert_matches_filefrag(path: &Path) {
    let file = File::open(path).unwrap();
    let d = Digest::build(&file).unwrap();
    let Some(ff) = filefrag(path) else {
        digest_support::skip("filefrag comparison: filefrag not installed");
        return;
    };
    let ff: Vec<_> = ff.into_iter().filter(|&(l, _, _)| l < d.file_size()).collect();
    assert_eq!(d.fiemap_extent_count(), ff.len(), "extent count vs filefrag: {ff:?}");
    for (logical, physical, len) in ff {
        let n = len.min(d.file_size() - logical);
        assert_eq!(d.map(logical, n).unwrap(), physical, "filefrag extent at {logical}");
    }
}

fn correctness_on(kind: FsKind, mkfs_args: &[&str]) {
    let Some(fs) = LoopFs::new(kind, 512, mkfs_args) else { return };
    // Contiguous, with a partial last block.
    let one = fs.path("one");
    write_pattern_file(&one, 7, (24 << 20) + 1000);
    assert_matches_filefrag(&one);
    assert_byte_exact(&one, 7);
    // Fragmented by interleaving with another file. On ext4, block-granular interleaving
    // gives more extents than one FIEMAP batch (512), so the batch loop is exercised.
    let (a, b) = (fs.path("frag-a"), fs.path("frag-b"));
    let min_extents = if kind == FsKind::Ext4 {
        fs.ext4_interleave_allocations();
        write_interleaved(&a, &b, 4096, 1536);
        1024
    } else {
        write_interleaved(&a, &b, 64 << 10, 48);
        2
    };
    let d = Digest::build(&File::open(&a).unwrap()).unwrap();
    assert!(
        d.fiemap_extent_count() >= min_extents,
        "{kind:?}: {} extents",
        d.fiemap_extent_count()
    );
    assert!(d.extents().len() >= min_extents, "{kind:?}: interleaving left {:?}", d.extents());
    assert_matches_filefrag(&a);
    assert_byte_exact(&a, 1);
    assert_byte_exact(&b, 2);
    // Confinement: no address in another file's blocks maps, and nothing past EOF.
    let db = Digest::build(&File::open(&b).unwrap()).unwrap();
    for eb in db.extents() {
        for ea in d.extents() {
            let disjoint =
                eb.physical + eb.len <= ea.physical || ea.physical + ea.len <= eb.physical;
            assert!(disjoint, "a and b share device blocks: {ea:?} {eb:?}");
        }
    }
    // A function that learned b's device offsets and asks a's digest for them gets either
    // OutsideFile or a's own blocks, never b's.
    let in_runs = |runs: &[storefn_io::Extent], dev: u64| {
        runs.iter().any(|e| e.physical <= dev && dev < e.physical + e.len)
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let probes = db
        .extents()
        .iter()
        .map(|e| e.physical)
        .chain((0..2000).map(|_| rng.gen::<u64>() >> rng.gen_range(0..64)));
    for off in probes {
        match d.map(off, 512) {
            Ok(dev) => {
                assert!(in_runs(d.extents(), dev) && in_runs(d.extents(), dev + 511), "{off}");
                assert!(!in_runs(db.extents(), dev), "{off} reached b's blocks");
            }
            Err(DigestError::OutsideFile { .. } | DigestError::SpansExtents { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let size = d.file_size();
    for (off, len) in [(size, 1), (size - 1, 2), (size + 4096, 4096), (1 << 40, 512), (0, 0)] {
        assert!(
            matches!(d.map(off, len), Err(DigestError::OutsideFile { offset, .. }) if offset == off),
            "{off}+{len}"
        );
    }
}

#[test]
fn ext4_digest_is_byte_exact_and_matches_filefrag() {
    correctness_on(FsKind::Ext4, &["-b", "4096"]);
}

#[test]
fn ext4_1k_blocks_digest_is_byte_exact() {
    correctness_on(FsKind::Ext4, &["-b", "1024"]);
}

#[test]
fn xfs_digest_is_byte_exact_and_matches_filefrag() {
    correctness_on(FsKind::Xfs, &[]);
}

fn refused(r: Result<Digest, DigestError>) -> DigestError {
    let e = r.expect_err("digest must be refused");
    assert!(e.is_fallback(), "{e}");
    e
}

fn refusals_on(kind: FsKind) {
    let Some(fs) = LoopFs::new(kind, 512, &[]) else { return };
    // fallocate without writing: unwritten extents.
    let p = fs.path("prealloc");
    let f = File::create(&p).unwrap();
    // SAFETY: plain fallocate on an open fd.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 1 << 20) }, 0);
    drop(f);
    let e = refused(Digest::build(&File::open(&p).unwrap()));
    assert!(
        matches!(
            e,
            DigestError::RefusedExtent { problem: ExtentProblem::Unwritten, logical: 0, .. }
        ),
        "{e}"
    );
    // Written head, preallocated tail: refused at the tail extent's offset.
    let p = fs.path("half");
    write_pattern_file(&p, 3, 64 << 10);
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    // SAFETY: plain fallocate on an open fd.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 64 << 10, 64 << 10) }, 0);
    drop(f);
    let e = refused(Digest::build(&File::open(&p).unwrap()));
    assert!(
        matches!(e, DigestError::RefusedExtent { problem: ExtentProblem::Unwritten, logical, .. }
            if logical == 64 << 10),
        "{e}"
    );
    // A hole in the middle (sparse write) and a hole at the end (extended size).
    let p = fs.path("sparse");
    let f = File::create(&p).unwrap();
    f.write_all_at(&pattern(1, 0, 4096), 0).unwrap();
    f.write_all_at(&pattern(1, 1 << 20, 4096), 1 << 20).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let e = refused(Digest::build(&File::open(&p).unwrap()));
    assert!(matches!(e, DigestError::Hole { offset: 4096, .. }), "{e}");
    let p = fs.path("extended");
    write_pattern_file(&p, 1, 8192);
    File::options().write(true).open(&p).unwrap().set_len(1 << 20).unwrap();
    let e = refused(Digest::build(&File::open(&p).unwrap()));
    assert!(matches!(e, DigestError::Hole { offset: 8192, len } if len == (1 << 20) - 8192), "{e}");
    // Delayed allocation is flushed by FIEMAP_FLAG_SYNC, not refused: write without fsync.
    let p = fs.path("dirty");
    std::fs::write(&p, pattern(9, 0, 256 << 10)).unwrap();
    assert_byte_exact(&p, 9);
    // An empty file has a digest that maps nothing.
    let p = fs.path("empty");
    File::create(&p).unwrap();
    let d = Digest::build(&File::open(&p).unwrap()).unwrap();
    assert!(matches!(d.map(0, 1), Err(DigestError::OutsideFile { file_size: 0, .. })));
}

#[test]
fn ext4_refuses_unwritten_holes_and_accepts_flushed_delalloc() {
    refusals_on(FsKind::Ext4);
}

#[test]
fn xfs_refuses_unwritten_holes_and_accepts_flushed_delalloc() {
    refusals_on(FsKind::Xfs);
}

#[test]
fn ext4_inline_data_is_refused() {
    let Some(fs) = LoopFs::new(FsKind::Ext4, 64, &["-O", "inline_data"]) else { return };
    let p = fs.path("tiny");
    std::fs::write(&p, b"inline: small enough to live in the inode").unwrap();
    let e = refused(Digest::build(&File::open(&p).unwrap()));
    assert!(
        matches!(e, DigestError::RefusedExtent { problem: ExtentProblem::Inline, logical: 0, .. }),
        "{e}"
    );
}

#[test]
fn xfs_reflinked_extents_are_refused_as_shared() {
    let Some(fs) = LoopFs::new(FsKind::Xfs, 512, &["-m", "reflink=1"]) else { return };
    let (a, b) = (fs.path("orig"), fs.path("clone"));
    write_pattern_file(&a, 5, 1 << 20);
    let out = std::process::Command::new("cp")
        .args(["--reflink=always", a.to_str().unwrap(), b.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "cp --reflink: {}", String::from_utf8_lossy(&out.stderr));
    for p in [&a, &b] {
        let e = refused(Digest::build(&File::open(p).unwrap()));
        assert!(
            matches!(e, DigestError::RefusedExtent { problem: ExtentProblem::Shared, .. }),
            "{e}"
        );
    }
}

#[test]
fn non_regular_files_and_fiemap_less_file_systems_are_refused() {
    let dir = File::open("/").unwrap();
    assert!(matches!(Digest::build(&dir), Err(DigestError::NotRegularFile { .. })));
    // /dev/shm is tmpfs: no FIEMAP.
    let p = Path::new("/dev/shm").join(format!("storefn-digest-{}", std::process::id()));
    if std::fs::write(&p, b"x").is_ok() {
        let r = Digest::build(&File::open(&p).unwrap());
        let _ = std::fs::remove_file(&p);
        let e = r.expect_err("tmpfs has no FIEMAP");
        assert!(matches!(e, DigestError::FiemapUnsupported { .. }), "{e}");
        assert!(e.is_fallback());
    } else {
        digest_support::skip("tmpfs part: /dev/shm not writable");
    }
}

#[test]
fn zram_ext4_digest_is_byte_exact() {
    let Some(fs) = ZramFs::new("256M") else { return };
    let p = fs.path("kv");
    write_pattern_file(&p, 11, (8 << 20) + 512);
    let dev = RawDevice::open(&Digest::build(&File::open(&p).unwrap()).unwrap()).unwrap();
    assert_eq!(dev.path(), Path::new("/dev/zram0"));
    assert_eq!(dev.logical_block_size(), 4096, "BRIEF §5: zram has 4 KiB logical blocks");
    drop(dev);
    assert_matches_filefrag(&p);
    assert_byte_exact(&p, 11);
}

/// Dirty pages of `fd`'s page cache (the `cachestat` syscall, Linux 6.5+).
fn dirty_pages(fd: i32) -> u64 {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: 0, len: 0 }; // len 0: to the end
    let mut st = Stat::default();
    // SAFETY: cachestat reads one range and writes one stat struct, both valid and repr(C).
    let rc = unsafe { libc::syscall(SYS_CACHESTAT, fd, &raw const range, &raw mut st, 0) };
    assert_eq!(rc, 0, "cachestat: {}", std::io::Error::last_os_error());
    st.nr_dirty
}

#[test]
fn raw_setup_writes_back_the_devices_dirty_metadata() {
    let Some(fs) = LoopFs::new(FsKind::Ext4, 64, &[]) else { return };
    let path = fs.path("f");
    write_pattern_file(&path, 7, 1 << 20);
    // Commit the journal (fsync) without writing the metadata home: the committed buffers are
    // now dirty pages of the device's page cache, which O_DIRECT device reads would flush.
    for i in 0..8 {
        let f = File::create(fs.path(&format!("small{i}"))).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync_all().unwrap();
    }
    let dev = File::open(fs.device()).unwrap();
    println!("dirty device pages before raw setup: {}", dirty_pages(dev.as_raw_fd()));
    let file = File::open(&path).unwrap();
    let raw = open_raw(&file);
    // Whatever was dirty before (the flusher may have run already), setup left none behind.
    assert_eq!(dirty_pages(raw.device_fd()), 0, "device cache still dirty after raw setup");
    assert!(raw.device().write_back_cache());
}
