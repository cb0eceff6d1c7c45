//! Test support for the metadata digest: real file systems on loop devices and zram, built by
//! the tests and always torn down (Drop runs on panic too), plus data helpers.
//! Everything that needs root or a missing tool returns `None` after printing why.

#![allow(dead_code)] // each test binary uses a different subset

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use std::time::Duration;

use storefn_io::{DigestError, RawAccess, RawDevice};

#[allow(unused_imports)] // not every test binary skips
pub use storefn_testkit::skip;

static NEXT_ID: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> PathBuf {
    // Relaxed: only uniqueness matters, no other memory is published through it.
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("storefn-digest-{}-{n}-{tag}", std::process::id()))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn have(tool: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().any(|d| Path::new(d).join(tool).exists())
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Which file system to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    Ext4,
    Xfs,
}

impl FsKind {
    fn mkfs(self) -> &'static str {
        match self {
            Self::Ext4 => "mkfs.ext4",
            Self::Xfs => "mkfs.xfs",
        }
    }
}

/// A file system on a loop device over a sparse temp image, mounted on a temp dir.
/// Drop unmounts, detaches and removes everything that was set up, in reverse order.
#[derive(Debug)]
pub struct LoopFs {
    image: PathBuf,
    loopdev: Option<String>,
    mnt: PathBuf,
    mounted: bool,
}

impl LoopFs {
    /// `size_mib` sparse image; `mkfs_args` extra options (e.g. `["-O", "inline_data"]`).
    /// `None` (after printing the reason) when not root or a tool is missing.
    pub fn new(kind: FsKind, size_mib: u64, mkfs_args: &[&str]) -> Option<Self> {
        if !is_root() {
            skip("loop-device file systems need root");
            return None;
        }
        for tool in ["losetup", "mount", "umount", kind.mkfs()] {
            if !have(tool) {
                skip(&format!("{tool} not installed"));
                return None;
            }
        }
        let mut fs =
            Self { image: unique("img"), loopdev: None, mnt: unique("mnt"), mounted: false };
        let img = File::create(&fs.image).expect("create image");
        img.set_len(size_mib << 20).expect("size image");
        drop(img);
        let dev =
            run("losetup", &["--find", "--show", fs.image.to_str().unwrap()]).expect("losetup");
        fs.loopdev = Some(dev.clone());
        let mut args: Vec<&str> = vec!["-q"];
        if kind == FsKind::Xfs {
            args.push("-f");
        }
        args.extend_from_slice(mkfs_args);
        args.push(&dev);
        run(kind.mkfs(), &args).expect("mkfs");
        std::fs::create_dir(&fs.mnt).expect("mkdir mount point");
        run("mount", &[&dev, fs.mnt.to_str().unwrap()]).expect("mount");
        fs.mounted = true;
        Some(fs)
    }

    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }

    pub fn device(&self) -> &str {
        self.loopdev.as_deref().unwrap()
    }

    /// Make ext4 share one allocation stream between files (mballoc's locality-group
    /// preallocation for every size), so interleaved writes fragment at block granularity.
    pub fn ext4_interleave_allocations(&self) {
        ext4_interleave_allocations(Path::new(self.device()));
    }
}

/// See [`LoopFs::ext4_interleave_allocations`]; `dev` is the ext4 file system's device.
pub fn ext4_interleave_allocations(dev: &Path) {
    let name = dev.file_name().unwrap().to_str().unwrap();
    std::fs::write(format!("/sys/fs/ext4/{name}/mb_stream_req"), "1000000000")
        .expect("set mb_stream_req");
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let m = self.mnt.to_str().unwrap().to_string();
            if let Err(e) = run("umount", &[&m]) {
                eprintln!("umount {m} failed ({e}); lazy unmount");
                let _ = run("umount", &["-l", &m]);
            }
        }
        if let Some(dev) = &self.loopdev {
            if let Err(e) = run("losetup", &["-d", dev]) {
                eprintln!("losetup -d {dev}: {e}");
            }
        }
        let _ = std::fs::remove_dir(&self.mnt);
        let _ = std::fs::remove_file(&self.image);
    }
}

/// ext4 on /dev/zram0, only when zram0 exists and is unused (disksize 0). Drop unmounts and
/// resets the device.
#[derive(Debug)]
pub struct ZramFs {
    mnt: PathBuf,
    mounted: bool,
}

const ZRAM_SYS: &str = "/sys/block/zram0";
/// How long to wait for another test run to release zram0.
const ZRAM_WAIT: Duration = Duration::from_secs(120);

impl ZramFs {
    pub fn new(disksize: &str) -> Option<Self> {
        if !is_root() {
            skip("zram needs root");
            return None;
        }
        if !Path::new("/dev/zram0").exists() || !have("mkfs.ext4") {
            skip("no /dev/zram0 or mkfs.ext4");
            return None;
        }
        // Another test run may hold zram0 for a while: wait (bounded) before giving up.
        let deadline = std::time::Instant::now() + ZRAM_WAIT;
        loop {
            let size = std::fs::read_to_string(format!("{ZRAM_SYS}/disksize")).unwrap_or_default();
            if size.trim() == "0" {
                break;
            }
            if std::time::Instant::now() > deadline {
                skip(&format!("/dev/zram0 is in use (disksize {})", size.trim()));
                return None;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // Best effort: lz4 as in BRIEF §5; the default algorithm works too.
        let _ = std::fs::write(format!("{ZRAM_SYS}/comp_algorithm"), "lz4");
        // Writing disksize fails with EBUSY if someone initialised it since we looked: that is
        // the claim. From here on Drop resets it.
        if let Err(e) = std::fs::write(format!("{ZRAM_SYS}/disksize"), disksize) {
            skip(&format!("cannot claim /dev/zram0 ({e})"));
            return None;
        }
        let mut fs = Self { mnt: unique("zram-mnt"), mounted: false };
        run("mkfs.ext4", &["-q", "/dev/zram0"]).expect("mkfs.ext4 zram0");
        std::fs::create_dir(&fs.mnt).expect("mkdir");
        run("mount", &["/dev/zram0", fs.mnt.to_str().unwrap()]).expect("mount zram0");
        fs.mounted = true;
        Some(fs)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }
}

impl Drop for ZramFs {
    fn drop(&mut self) {
        let m = self.mnt.to_str().unwrap().to_string();
        if self.mounted && run("umount", &[&m]).is_err() {
            let _ = run("umount", &["-l", &m]);
        }
        let _ = std::fs::remove_dir(&self.mnt);
        if let Err(e) = std::fs::write(format!("{ZRAM_SYS}/reset"), "1") {
            eprintln!("zram0 reset failed: {e}");
        }
    }
}

/// Deterministic content: each 8-byte word holds `(offset / 8) * K ^ seed`, so a read of the
/// wrong place, of another file, or of an older version does not match.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    assert_eq!(offset % 8, 0);
    let mut v = Vec::with_capacity(len + 8);
    let mut w = offset / 8;
    while v.len() < len {
        v.extend_from_slice(&(w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).to_le_bytes());
        w += 1;
    }
    v.truncate(len);
    v
}

/// Write `size` bytes of `pattern(seed)` in 1 MiB chunks and fsync.
pub fn write_pattern_file(path: &Path, seed: u64, size: u64) {
    let mut f = File::create(path).expect("create");
    let mut off = 0;
    while off < size {
        let n = (size - off).min(1 << 20);
        f.write_all(&pattern(seed, off, usize::try_from(n).unwrap())).expect("write");
        off += n;
    }
    f.sync_all().expect("fsync");
}

/// Creates (or truncates) `p` for writing with O_DIRECT, so each write allocates its blocks now.
pub fn create_direct(p: &Path) -> File {
    use std::os::unix::fs::OpenOptionsExt;
    File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(p)
        .unwrap()
}

/// Write two files in interleaved chunks with O_DIRECT (no delayed allocation, no xfs
/// speculative preallocation) so both end up fragmented.
pub fn write_interleaved(a: &Path, b: &Path, chunk: u64, chunks: u64) {
    let (fa, fb) = (create_direct(a), create_direct(b));
    let n = usize::try_from(chunk).unwrap();
    let mut buf = AlignedBuf::new(n, 4096);
    for i in 0..chunks {
        for (f, seed) in [(&fa, 1), (&fb, 2)] {
            buf.as_mut().copy_from_slice(&pattern(seed, i * chunk, n));
            f.write_all_at(buf.as_ref(), i * chunk).unwrap();
        }
    }
    fa.sync_all().unwrap();
    fb.sync_all().unwrap();
}

/// A heap buffer aligned for O_DIRECT.
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize, align: usize) -> Self {
        let raw = vec![0u8; len + align];
        let start = raw.as_ptr().align_offset(align);
        Self { raw, start, len }
    }

    pub fn as_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }

    pub fn as_ref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

/// O_DIRECT read of `[dev_offset, dev_offset + len)` (block-aligned) from the device.
pub fn read_device(dev: &RawDevice, dev_offset: u64, len: u64) -> Vec<u8> {
    let lbs = usize::try_from(dev.logical_block_size()).unwrap();
    let mut buf = AlignedBuf::new(usize::try_from(len).unwrap(), lbs.max(4096));
    let mut done = 0usize;
    while done < buf.len {
        let dst = &mut buf.as_mut()[done..];
        // SAFETY: dst is a valid writable buffer of dst.len() bytes; the fd is open.
        let n = unsafe {
            libc::pread(
                dev.fd(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                libc::off_t::try_from(dev_offset + done as u64).unwrap(),
            )
        };
        assert!(n > 0, "device pread at {}: {}", dev_offset, std::io::Error::last_os_error());
        done += usize::try_from(n).unwrap();
    }
    buf.as_ref().to_vec()
}

/// Buffered pread of the file.
pub fn read_file(f: &File, offset: u64, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; usize::try_from(len).unwrap()];
    f.read_exact_at(&mut v, offset).expect("pread file");
    v
}

/// `filefrag -v` extents as (logical, physical, length) in bytes.
pub fn filefrag(path: &Path) -> Option<Vec<(u64, u64, u64)>> {
    if !have("filefrag") {
        return None;
    }
    let out = run("filefrag", &["-v", path.to_str().unwrap()]).expect("filefrag");
    let bs: u64 = out
        .split("blocks of ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("filefrag block size");
    let mut v = Vec::new();
    for line in out.lines() {
        let fields: Vec<&str> = line.split(':').map(str::trim).collect();
        if fields.len() < 4 || fields[0].parse::<u64>().is_err() {
            continue;
        }
        let first = |s: &str| s.split("..").next().unwrap().trim().parse::<u64>().unwrap();
        v.push((
            first(fields[1]) * bs,
            first(fields[2]) * bs,
            fields[3].parse::<u64>().unwrap() * bs,
        ));
    }
    Some(v)
}

/// The fd's raw number (for messages).
pub fn fd_of(f: &File) -> i32 {
    f.as_raw_fd()
}

/// Tries for a lease that fails with EAGAIN only because another test thread's spawned child,
/// between fork and exec, still holds copies of this process's writable fds.
pub const LEASE_RETRIES: u32 = 200;

pub fn lease_retry<T>(mut f: impl FnMut() -> Result<T, DigestError>) -> Result<T, DigestError> {
    for _ in 0..LEASE_RETRIES {
        match f() {
            Err(DigestError::Lease { err, .. }) if err.raw_os_error() == Some(libc::EAGAIN) => {
                std::thread::sleep(Duration::from_millis(10));
            }
            r => return r,
        }
    }
    panic!("lease still refused after {LEASE_RETRIES} tries")
}

pub fn with_lease_retry<T>(f: impl FnMut() -> Result<T, DigestError>) -> T {
    lease_retry(f).unwrap()
}

pub fn open_raw(f: &File) -> RawAccess {
    with_lease_retry(|| RawAccess::open(f))
}

/// `RawAccess::refresh`, then plain re-opens while the lease is transiently refused.
pub fn refresh_raw(raw: RawAccess, f: &File) -> Result<RawAccess, DigestError> {
    match raw.refresh(f) {
        Err(DigestError::Lease { err, .. }) if err.raw_os_error() == Some(libc::EAGAIN) => {
            lease_retry(|| RawAccess::open(f))
        }
        r => r,
    }
}

/// Attempts for a tool that opens with O_NONBLOCK (coreutils truncate, util-linux fallocate):
/// its first open starts the lease break and fails with EAGAIN; a retry succeeds once the
/// holder released the lease.
pub const NONBLOCK_RETRIES: u32 = 200;

/// Runs `cmd args`, retrying while it fails with EAGAIN ("temporarily unavailable") because a
/// lease break is under way; any other failure panics with the tool's stderr.
pub fn sh(cmd: &str, args: &[&str]) {
    let mut last = String::new();
    for _ in 0..NONBLOCK_RETRIES {
        let out = Command::new(cmd).args(args).output().unwrap();
        if out.status.success() {
            return;
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(last.contains("temporarily unavailable"), "{cmd} {args:?}: {last}");
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{cmd} {args:?}: {last}");
}
