//! Raw mode (IoMode::Raw): chains read the block device through the metadata digest. On ext4
//! and xfs loop file systems the tests build themselves: raw chains give exactly the results of
//! file-mode chains and of the model; functions aiming outside their file fail with
//! `OutsideFile`; files that cannot be served raw are refused with a fallback error. Needs root
//! (skips with a message otherwise); every file system is torn down on drop.

mod common;
mod digest_support;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::{get_u64, list_walker, node_step, put_u64, random_lists, random_tree, walk_list};
use common::{Lists, NODE};
use digest_support::{
    create_direct, pattern, write_interleaved, write_pattern_file, AlignedBuf, FsKind, LoopFs,
};
use storefn_io::{
    func, ChainError, Completion, Engine, EngineConfig, EngineError, FileId, IoMode, SubmitError,
    VmError, XrpCtx,
};
use storefn_io::{Digest, DigestError};

/// Fragmentation unit: the pointer files are written in chunks of this size alternating with a
/// filler file, so their extents are discontiguous every chunk and some hops span two extents.
const CHUNK: usize = 16 << 10;
/// Tries for a lease refused only because another test thread's child (between fork and exec)
/// holds copies of this process's writable fds.
const LEASE_RETRIES: u32 = 200;

fn lease_refused(e: &EngineError) -> bool {
    matches!(e, EngineError::RawUnavailable { source: DigestError::Lease { err, .. }, .. }
        if err.raw_os_error() == Some(libc::EAGAIN))
}

/// Opens `path` in raw mode, retrying transient lease refusals.
pub fn open_raw(e: &mut Engine, path: &Path) -> FileId {
    for _ in 0..LEASE_RETRIES {
        match e.open(path, IoMode::Raw) {
            Err(err) if lease_refused(&err) => std::thread::sleep(Duration::from_millis(10)),
            r => return r.expect("raw mode on a loop file system"),
        }
    }
    panic!("lease still refused after {LEASE_RETRIES} tries");
}

/// Writes `bytes` (padded to whole chunks) to `path` with O_DIRECT, alternating every chunk
/// with a write to `filler`, so the file is fragmented.
fn write_fragmented(path: &Path, filler: &Path, bytes: &[u8]) {
    let (f, g) = (create_direct(path), create_direct(filler));
    let mut buf = AlignedBuf::new(CHUNK, 4096);
    for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
        let off = (i * CHUNK) as u64;
        buf.as_mut().fill(0);
        buf.as_mut()[..chunk.len()].copy_from_slice(chunk);
        f.write_all_at(buf.as_ref(), off).unwrap();
        buf.as_mut().fill(0xee);
        g.write_all_at(buf.as_ref(), off).unwrap();
    }
    f.sync_all().unwrap();
    g.sync_all().unwrap();
}

fn fragmented_fs(kind: FsKind) -> Option<LoopFs> {
    let fs = LoopFs::new(kind, 512, &[])?;
    if kind == FsKind::Ext4 {
        fs.ext4_interleave_allocations();
    }
    Some(fs)
}

/// Tree lookup of the key in scratch[0]: scratch[8] = found, scratch[16] = value.
fn tree_lookup() -> impl FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, VmError> {
    func(|ctx, data, s| {
        match node_step(data, get_u64(s, 0)) {
            Ok(child) => {
                ctx.next_addr[0] = child;
                ctx.size[0] = NODE as u64;
            }
            Err(v) => {
                put_u64(s, 8, u64::from(v.is_some()));
                put_u64(s, 16, v.unwrap_or(0));
                ctx.done = 1;
            }
        }
        Ok(0)
    })
}

/// Per chain: its result words (scratch[0..24]) and hops; plus device hops in all.
#[derive(Debug, Default)]
struct Batch {
    results: Vec<Option<[u64; 3]>>,
    hops: u64,
    device_hops: u64,
}

/// Runs one chain per `(start, len, args)` with up to 256 in flight.
fn run_batch<F>(e: &mut Engine, id: FileId, starts: &[(u64, u64, u64)], f: &mut F) -> Batch
where
    F: FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, VmError>,
{
    let mut b = Batch { results: vec![None; starts.len()], ..Batch::default() };
    let mut next = 0;
    while next < starts.len() || e.live() > 0 {
        while next < starts.len() && e.live() < 256 {
            let (start, len, arg) = starts[next];
            match e.submit_chain(id, start, len, next as u64, |s| put_u64(s, 0, arg)) {
                Ok(()) => next += 1,
                Err(SubmitError::Full { .. }) => break,
                Err(other) => panic!("{other}"),
            }
        }
        e.wait(1, f, |c: Completion<'_>| {
            let st = c.result.expect("chain ok");
            b.hops += u64::from(st.hops);
            b.device_hops += u64::from(st.device_hops);
            let w = |i: usize| get_u64(c.scratch, i * 8);
            b.results[c.token as usize] = Some([w(0), w(1), w(2)]);
        })
        .unwrap();
    }
    b
}

fn engines(path: &Path) -> (Engine, FileId, Engine, FileId) {
    let mut file_e = Engine::new(EngineConfig::default()).unwrap();
    let file_id = file_e.open(path, IoMode::Direct).unwrap();
    let mut raw_e = Engine::new(EngineConfig::default()).unwrap();
    let raw_id = open_raw(&mut raw_e, path);
    assert!(raw_e.is_raw(raw_id));
    (file_e, file_id, raw_e, raw_id)
}

fn lists_differential(fs: &LoopFs, kind: FsKind) {
    // Stride 520: nodes cross block boundaries, and some cross the fragmentation chunks.
    let Lists { bytes, heads } = random_lists(7, 40_000, 4000, 520);
    let path = fs.path("lists");
    write_fragmented(&path, &fs.path("filler-lists"), &bytes);
    let d = Digest::build(&File::open(&path).unwrap()).unwrap();
    assert!(d.extents().len() > 100, "{kind:?}: file not fragmented: {} runs", d.extents().len());
    let (mut fe, fid, mut re, rid) = engines(&path);
    let starts: Vec<_> = heads.iter().map(|&h| (h, 16, 0)).collect();
    let file = run_batch(&mut fe, fid, &starts, &mut list_walker());
    let raw = run_batch(&mut re, rid, &starts, &mut list_walker());
    assert_eq!(file.device_hops, 0, "file mode never reads the device");
    for (i, &h) in heads.iter().enumerate() {
        let (sum, n) = walk_list(&bytes, h);
        assert_eq!(file.results[i].map(|r| [r[0], r[1]]), Some([sum, n]), "file chain {i}");
        assert_eq!(raw.results[i], file.results[i], "{kind:?}: raw chain {i} differs");
    }
    assert_eq!(raw.hops, file.hops);
    // Most hops read the device; the ones whose node spans two runs read the file.
    assert!(raw.device_hops * 10 > raw.hops * 9, "{kind:?}: {raw:?}");
    assert!(raw.device_hops < raw.hops, "{kind:?}: no hop spanned two extents");
    assert!(re.is_raw(rid), "no staleness without writers");
}

fn tree_differential(fs: &LoopFs, kind: FsKind) {
    let tree = random_tree(11, 30_000, 30);
    let path = fs.path("tree");
    write_fragmented(&path, &fs.path("filler-tree"), &tree.bytes);
    let (mut fe, fid, mut re, rid) = engines(&path);
    // Present keys and (mostly) absent ones.
    let keys: Vec<u64> = tree.map.keys().step_by(7).copied().chain(0..500).collect();
    let starts: Vec<_> = keys.iter().map(|&k| (tree.root, NODE as u64, k)).collect();
    let file = run_batch(&mut fe, fid, &starts, &mut tree_lookup());
    let raw = run_batch(&mut re, rid, &starts, &mut tree_lookup());
    for (i, k) in keys.iter().enumerate() {
        let want = tree.map.get(k).map_or([*k, 0, 0], |&v| [*k, 1, v]);
        assert_eq!(file.results[i], Some(want), "file lookup of {k}");
        assert_eq!(raw.results[i], Some(want), "{kind:?}: raw lookup of {k}");
    }
    assert_eq!(raw.hops, u64::from(tree.depth) * keys.len() as u64);
    // 512 B nodes at 512 B slots never span a 16 KiB chunk: every hop reads the device.
    assert_eq!(raw.device_hops, raw.hops, "{kind:?}");
}

fn differential_on(kind: FsKind) {
    let Some(fs) = fragmented_fs(kind) else { return };
    lists_differential(&fs, kind);
    tree_differential(&fs, kind);
}

#[test]
fn ext4_raw_chains_match_file_mode_and_the_model() {
    differential_on(FsKind::Ext4);
}

#[test]
fn xfs_raw_chains_match_file_mode_and_the_model() {
    differential_on(FsKind::Xfs);
}

/// Reads scratch[0]..+scratch[8] after the first block; then copies the first 64 bytes it got
/// to scratch[64..128] and finishes.
fn aim() -> impl FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, VmError> {
    func(|ctx, data, s| {
        if get_u64(s, 24) == 0 {
            put_u64(s, 24, 1);
            ctx.next_addr[0] = get_u64(s, 0);
            ctx.size[0] = get_u64(s, 8);
        } else {
            s[64..128].copy_from_slice(&data[..64]);
            ctx.done = 1;
        }
        Ok(0)
    })
}

/// The chain's error, or the 64 bytes the function saw at the aimed address.
fn aim_at(e: &mut Engine, id: FileId, addr: u64, size: u64) -> Result<Vec<u8>, ChainError> {
    let mut s = [0u8; 128];
    put_u64(&mut s, 0, addr);
    put_u64(&mut s, 8, size);
    e.read_xrp(id, 0, 512, &mut aim(), &mut s)?;
    Ok(s[64..128].to_vec())
}

fn assert_outside(r: Result<Vec<u8>, ChainError>, addr: u64, size_a: u64, what: &str) {
    match r {
        Err(ChainError::OutsideFile { at, size, file_size }) => {
            assert_eq!((at.hop, at.addr, file_size), (2, addr, size_a), "{what}");
            assert!(size > 0);
        }
        other => panic!("{what}: {addr:#x} should be OutsideFile, got {other:?}"),
    }
}

fn confinement_on(kind: FsKind) {
    let Some(fs) = fragmented_fs(kind) else { return };
    let (a, b) = (fs.path("a"), fs.path("b"));
    write_interleaved(&a, &b, 64 << 10, 16);
    let size_a = std::fs::metadata(&a).unwrap().len();
    let da = Digest::build(&File::open(&a).unwrap()).unwrap();
    let db = Digest::build(&File::open(&b).unwrap()).unwrap();
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let id = open_raw(&mut e, &a);
    let mut fe = Engine::new(EngineConfig::default()).unwrap();
    let fid = fe.open(&a, IoMode::Direct).unwrap();
    // The function works: an in-file address reads a's bytes through the device.
    assert_eq!(aim_at(&mut e, id, 8192, 512).unwrap(), pattern(1, 8192, 64));
    // Past the end of the file, straddling it, and overflowing.
    for (addr, size) in [(size_a, 512), (size_a - 256, 512), (size_a + 4096, 4096)] {
        assert_outside(aim_at(&mut e, id, addr, size), addr, size_a, "past EOF");
        let f = aim_at(&mut fe, fid, addr, size);
        assert!(matches!(f, Err(ChainError::OutOfRange { .. })), "file mode: {f:?}");
    }
    assert_outside(aim_at(&mut e, id, u64::MAX - 100, 512), u64::MAX - 100, size_a, "overflow");
    // Another file's blocks: b's device offsets (from its FIEMAP), used as file offsets.
    for eb in db.extents() {
        for addr in [eb.physical, eb.physical + eb.len - 512] {
            let r = aim_at(&mut e, id, addr, 512);
            if addr + 512 <= size_a {
                // Inside a's size: it is a's own byte at that file offset, never b's block.
                assert_eq!(r.unwrap(), pattern(1, addr, 64), "{kind:?}: {addr:#x}");
            } else {
                assert_outside(r, addr, size_a, "b's blocks");
            }
        }
    }
    // Device offset 0 and the superblock (ext4: byte 1024; xfs: byte 0), expressed as file
    // offsets relative to a's first run: they wrap around and are refused.
    let base = da.extents()[0].physical;
    assert!(base > 0);
    for dev in [0u64, 1024] {
        let addr = dev.wrapping_sub(base);
        assert_outside(aim_at(&mut e, id, addr, 512), addr, size_a, "superblock");
    }
    // File offsets 0 and 1024 are a's own bytes, not the superblock.
    for addr in [0u64, 1024] {
        assert_eq!(aim_at(&mut e, id, addr, 512).unwrap(), pattern(1, addr, 64));
    }
    // A chain *starting* outside the file fails the same way, on hop 1.
    let mut s = [0u8; 16];
    let r = e.read_xrp(id, size_a, 512, &mut aim(), &mut s);
    assert!(
        matches!(r, Err(ChainError::OutsideFile { at, .. }) if at.hop == 1 && at.addr == size_a),
        "{r:?}"
    );
    // Refusals are the function's fault, not staleness: raw mode stays on.
    assert!(e.is_raw(id));
}

#[test]
fn ext4_functions_aiming_outside_their_file_fail_with_outside_file() {
    confinement_on(FsKind::Ext4);
}

#[test]
fn xfs_functions_aiming_outside_their_file_fail_with_outside_file() {
    confinement_on(FsKind::Xfs);
}

#[test]
fn files_raw_mode_cannot_serve_are_refused_with_a_fallback_error() {
    let Some(fs) = LoopFs::new(FsKind::Ext4, 64, &[]) else { return };
    let holey = fs.path("holey");
    let f = File::create(&holey).unwrap();
    f.write_all_at(&pattern(3, 0, 4096), 0).unwrap();
    f.write_all_at(&pattern(3, 1 << 20, 4096), 1 << 20).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let err = e.open(&holey, IoMode::Raw).unwrap_err();
    match &err {
        EngineError::RawUnavailable { path, source } => {
            assert_eq!(path, &holey);
            assert!(matches!(source, DigestError::Hole { offset: 4096, .. }), "{source}");
            assert!(source.is_fallback());
        }
        other => panic!("expected RawUnavailable, got {other}"),
    }
    assert!(err.to_string().contains("IoMode::Direct"), "{err}");
    // The fallback: the same engine serves it through the file.
    let id = e.open(&holey, IoMode::Direct).unwrap();
    assert!(!e.is_raw(id));
    let mut s = [0u8; 128];
    put_u64(&mut s, 0, 1 << 20);
    put_u64(&mut s, 8, 512);
    e.read_xrp(id, 0, 512, &mut aim(), &mut s).unwrap();
    assert_eq!(&s[64..128], &pattern(3, 1 << 20, 64)[..]);
    // A normal file next to it is served raw.
    let plain = fs.path("plain");
    write_pattern_file(&plain, 4, 1 << 20);
    let pid = open_raw(&mut e, &plain);
    assert!(e.is_raw(pid));
    assert!(matches!(e.refresh_raw(id), Err(EngineError::NotRaw { .. })));
}

#[test]
fn raw_mode_on_the_root_disk_fails_cleanly_and_the_file_path_works() {
    let path = std::env::temp_dir().join(format!("storefn-raw-vda-{}", std::process::id()));
    struct Rm<'a>(&'a Path);
    impl Drop for Rm<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    let _rm = Rm(&path);
    write_pattern_file(&path, 5, 1 << 20);
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    match e.open(&path, IoMode::Raw) {
        Err(EngineError::RawUnavailable { source, .. }) => {
            assert!(source.is_fallback(), "{source}");
            match &source {
                DigestError::DeviceAccess { path: dev, err } => {
                    println!("raw mode refused as expected: {} ({err})", dev.display());
                    if dev == Path::new("/dev/vda") && digest_support::is_root() {
                        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
                    }
                }
                other => println!("raw mode refused before the device: {other}"),
            }
        }
        Err(other) => panic!("expected RawUnavailable, got {other}"),
        Ok(_) => {
            println!("skipped: the temp dir's device opens here, nothing to refuse");
            return;
        }
    }
    // Nothing was left registered or leased: the file path works and writers are not blocked.
    let id = e.open(&path, IoMode::Direct).unwrap();
    let mut s = [0u8; 128];
    put_u64(&mut s, 0, 4096);
    put_u64(&mut s, 8, 512);
    e.read_xrp(id, 0, 512, &mut aim(), &mut s).unwrap();
    assert_eq!(&s[64..128], &pattern(5, 4096, 64)[..]);
    drop(std::fs::OpenOptions::new().write(true).open(&path).unwrap());
}

#[test]
fn zram_raw_chains_read_inline_and_match_file_mode() {
    // zram cannot take non-blocking reads, so io_uring would punt every device read to a
    // worker thread; the engine reads it inline instead. Results must not change.
    let Some(fs) = digest_support::ZramFs::new("512M") else { return };
    let Lists { bytes, heads } = random_lists(8, 20_000, 2000, 512);
    let path = fs.path("lists");
    std::fs::write(&path, &bytes).unwrap();
    File::open(&path).unwrap().sync_all().unwrap();
    let (mut fe, fid, mut re, rid) = engines(&path);
    assert_eq!(re.raw_reads_inline(rid), Some(true), "zram lacks NOWAIT support");
    let starts: Vec<_> = heads.iter().map(|&h| (h, 16, 0)).collect();
    let file = run_batch(&mut fe, fid, &starts, &mut list_walker());
    let raw = run_batch(&mut re, rid, &starts, &mut list_walker());
    for (i, &h) in heads.iter().enumerate() {
        let (sum, n) = walk_list(&bytes, h);
        assert_eq!(raw.results[i].map(|r| [r[0], r[1]]), Some([sum, n]), "raw chain {i}");
        assert_eq!(raw.results[i], file.results[i]);
    }
    assert_eq!(raw.device_hops, raw.hops);
    // Plain reads too.
    let mut buf = [0u8; 512];
    re.read(rid, 512 * 77, &mut buf).unwrap();
    assert_eq!(&buf[..], &bytes[512 * 77..512 * 78]);
}

#[test]
fn loop_devices_take_ring_reads() {
    let Some(fs) = LoopFs::new(FsKind::Ext4, 64, &[]) else { return };
    let p = fs.path("f");
    write_pattern_file(&p, 6, 1 << 20);
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let id = open_raw(&mut e, &p);
    assert_eq!(e.raw_reads_inline(id), Some(false), "loop (blk-mq) supports NOWAIT");
}

/// Range reads in raw mode on `path` (fragmented every [`CHUNK`]): within one extent the read
/// goes to the device, across extents through the file; both give `pread`'s bytes.
fn raw_range_reads_match_pread(path: &Path, bytes: &[u8], want_inline: bool) {
    use storefn_io::limits::range_buf_bytes;
    use storefn_io::{NoFunction, RangeBuf};
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let id = open_raw(&mut e, path);
    assert_eq!(e.raw_reads_inline(id), Some(want_inline));
    let mut buf = RangeBuf::new(range_buf_bytes(bytes.len())).unwrap();
    e.register_range_buf(&buf).unwrap();
    // Inside one chunk (one extent): a device read.
    for (off, len) in [(CHUNK as u64 + 100, 5000u64), (3 * CHUNK as u64, CHUNK as u64)] {
        let at = (off % 4096) as usize;
        // SAFETY: `buf` is untouched until the wait below delivered this read.
        unsafe { e.submit_range(id, off, len, &mut buf, at, 1) }.unwrap();
        let mut stats = None;
        e.wait(1, &mut NoFunction, |c| {
            assert!(c.data == &bytes[off as usize..(off + len) as usize], "{off}+{len}");
            stats = Some(c.result.unwrap());
        })
        .unwrap();
        assert_eq!(stats.unwrap().device_hops, 1, "{off}+{len} reads the device");
    }
    // Across extents (through the file) and the whole file in one span.
    for (off, len) in [(CHUNK as u64 - 300, 1000u64), (1, bytes.len() as u64 - 1)] {
        let r = e.read_range(id, off, len, &mut buf).unwrap();
        assert!(buf.as_slice()[r] == bytes[off as usize..(off + len) as usize], "{off}+{len}");
    }
}

#[test]
fn raw_range_reads_match_pread_on_loop_and_zram() {
    let bytes = pattern(9, 0, 40 * CHUNK);
    if let Some(fs) = fragmented_fs(FsKind::Ext4) {
        let path = fs.path("range");
        write_fragmented(&path, &fs.path("range-filler"), &bytes);
        raw_range_reads_match_pread(&path, &bytes, false);
    }
    if let Some(fs) = digest_support::ZramFs::new("256M") {
        let path = fs.path("range");
        write_fragmented(&path, &fs.path("range-filler"), &bytes);
        raw_range_reads_match_pread(&path, &bytes, true);
    }
}
