//! The file service: executes the host's requests on files beneath one directory.
//!
//! Confinement: every path is resolved by `openat2(dir, path, RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS)`, so `..`, absolute paths and symlinks leading out of the directory
//! fail in the kernel (EXDEV) rather than by string checks. Every length is bounded
//! ([`MAX_IO_BYTES`], [`MAX_PATH_BYTES`], [`MAX_OPEN_FILES`]); a bad request gets an errno
//! answer, never a panic. The read buffer is allocated once.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::wire::{Op, RequestHeader, ResponseHeader};
use super::{HostChannel, HostError, DEFAULT_TIMEOUT};
use crate::limits::{MAX_BATCH_RECORDS, MAX_IO_BYTES, MAX_PATH_BYTES, PARK_SLICE, SPIN_POLLS};
use crate::limits::{MAX_OPEN_FILES, STAMP_BUCKETS, STAMP_GRAIN_BYTES};
use crate::ring::progressive::Consumer;

/// Called by the service around file I/O: DDS's `cache` runs on writes, `invalidate` on reads
/// and writes. Runs on the service's thread, after a successful write / before a read.
pub trait FileHooks: Send {
    /// `data` was written at `offset` of file `file` (and acknowledged after this returns).
    fn on_write(&mut self, file: u32, offset: u64, data: &[u8]);
    /// `len` bytes at `offset` of `file` are about to be read for the host.
    fn on_read(&mut self, file: u32, offset: u64, len: u32);
}

/// Most buckets one change bumps: a write of `MAX_IO_BYTES` spans at most 17 blocks.
const MAX_WRITE_BUCKETS: usize = MAX_IO_BYTES / STAMP_GRAIN_BYTES as usize + 1;

/// What the storage server's own reads of the service's files need, shared without the
/// service's lock: the open files by id; a mapping epoch, odd while a create, open or close
/// runs and +2 per such change; and per-block change stamps, a bucket odd while a write of a
/// block hashing to it runs and +2 per write. A read that saw the same even epoch and the same
/// (all even) stamps of its blocks before and after it overlapped no change of its bytes.
#[derive(Debug)]
pub struct SharedFiles {
    files: Mutex<Vec<Option<Arc<File>>>>,
    mapping: AtomicU64,
    stamps: Box<[AtomicU64]>,
}

impl Default for SharedFiles {
    fn default() -> Self {
        Self {
            files: Mutex::default(),
            mapping: AtomicU64::new(0),
            stamps: (0..STAMP_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn bucket(file: u32, block: u64) -> usize {
    let h = (u64::from(file) << 40 ^ block).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 32) as usize % STAMP_BUCKETS
}

/// The buckets of `[offset, offset + len)` of `file`, each once (sorted), in `out`.
fn buckets_of(file: u32, offset: u64, len: u64, out: &mut [usize; MAX_WRITE_BUCKETS]) -> usize {
    let first = offset / STAMP_GRAIN_BYTES;
    let last = offset.saturating_add(len.max(1) - 1) / STAMP_GRAIN_BYTES;
    let mut n = 0;
    for block in first..=last.min(first + MAX_WRITE_BUCKETS as u64 - 1) {
        out[n] = bucket(file, block);
        n += 1;
    }
    out[..n].sort_unstable();
    let mut k = 0;
    for i in 0..n {
        if i == 0 || out[i] != out[k - 1] {
            out[k] = out[i];
            k += 1;
        }
    }
    k
}

impl SharedFiles {
    /// The open file behind `id`; holding the `Arc` keeps the descriptor open for a read in
    /// flight even if the host closes the id meanwhile.
    pub fn file(&self, id: u32) -> Option<Arc<File>> {
        self.files.lock().ok()?.get(id as usize).and_then(Clone::clone)
    }

    /// The mapping epoch now (file ids to files).
    pub fn epoch(&self) -> u64 {
        // SeqCst: pairs with the service's increments around each change (see the type's
        // comment); a reader compares two loads around its read.
        self.mapping.load(Ordering::SeqCst)
    }

    /// The change stamp of `[offset, offset + len)` of `file` now: `None` while a write of it
    /// runs. Stamps only grow, so a later equal stamp means no write of these bytes began.
    pub fn stamp(&self, file: u32, offset: u64, len: u64) -> Option<u64> {
        let mut b = [0; MAX_WRITE_BUCKETS];
        let n = buckets_of(file, offset, len, &mut b);
        let mut sum = 0u64;
        for &i in &b[..n] {
            // SeqCst: as for `epoch`.
            let v = self.stamps[i].load(Ordering::SeqCst);
            if v % 2 == 1 {
                return None;
            }
            sum = sum.wrapping_add(v);
        }
        Some(sum)
    }

    /// Runs `change` with the stamps of `[offset, offset + len)` odd around it.
    fn writing<T>(&self, file: u32, offset: u64, len: u64, change: impl FnOnce() -> T) -> T {
        let mut b = [0; MAX_WRITE_BUCKETS];
        let n = buckets_of(file, offset, len, &mut b);
        for &i in &b[..n] {
            // SeqCst, odd: a server read of these blocks overlapping the write sees it.
            self.stamps[i].fetch_add(1, Ordering::SeqCst);
        }
        let r = change();
        for &i in &b[..n] {
            // SeqCst, even again: the write is complete (pwrite returned).
            self.stamps[i].fetch_add(1, Ordering::SeqCst);
        }
        r
    }
}

/// Counters (all requests, by outcome).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// Requests answered.
    pub requests: u64,
    /// Requests answered with an errno.
    pub errors: u64,
    /// Messages too short to carry a request id (dropped, unanswerable).
    pub malformed: u64,
}

/// The file service of one host channel.
pub struct FileService {
    dir: OwnedFd,
    files: Vec<Option<Arc<File>>>,
    shared: Arc<SharedFiles>,
    buf: Vec<u8>,
    consumer: Consumer,
    hooks: Option<Box<dyn FileHooks>>,
    stats: ServiceStats,
    response_timeout: Duration,
}

impl std::fmt::Debug for FileService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileService")
            .field("dir", &self.dir)
            .field("open_files", &self.files.iter().filter(|f| f.is_some()).count())
            .field("hooks", &self.hooks.is_some())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl FileService {
    /// A service for `channel`'s requests on files beneath `dir`.
    ///
    /// # Errors
    /// `Dir` when `dir` cannot be opened as a directory.
    pub fn new(dir: &Path, channel: &HostChannel) -> Result<Self, HostError> {
        let dir_err = |source| HostError::Dir { path: dir.display().to_string(), source };
        let c = CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| dir_err(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
        // SAFETY: valid NUL-terminated path; plain syscall.
        let raw =
            unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(dir_err(std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh fd we own.
        let dir = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            dir,
            files: (0..MAX_OPEN_FILES).map(|_| None).collect(),
            shared: Arc::new(SharedFiles::default()),
            buf: vec![0; MAX_IO_BYTES],
            consumer: channel.requests().consumer(MAX_IO_BYTES + 64),
            hooks: None,
            stats: ServiceStats::default(),
            response_timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Serves a new host application's `channel`: closes every file the previous host opened
    /// (the mapping epoch moves, so an offloaded read decided before fails its check) and takes
    /// requests from `channel` from now on.
    pub fn rebind(&mut self, channel: &HostChannel) {
        // SeqCst, odd then even: as around a create, open or close (see `SharedFiles`).
        self.shared.mapping.fetch_add(1, Ordering::SeqCst);
        self.files.iter_mut().for_each(|f| *f = None);
        if let Ok(mut sf) = self.shared.files.lock() {
            sf.clone_from(&self.files);
        }
        self.shared.mapping.fetch_add(1, Ordering::SeqCst);
        self.consumer = channel.requests().consumer(MAX_IO_BYTES + 64);
    }

    /// Installs the write/read hooks.
    pub fn set_hooks(&mut self, hooks: Box<dyn FileHooks>) {
        self.hooks = Some(hooks);
    }

    /// The open file behind `id` (the server's offloaded reads use the same files).
    pub fn file(&self, id: u32) -> Option<&File> {
        self.files.get(id as usize).and_then(Option::as_deref)
    }

    /// The files and change epoch the server's offloaded reads use, without this service's lock.
    pub fn shared_files(&self) -> Arc<SharedFiles> {
        Arc::clone(&self.shared)
    }

    /// Counters.
    pub fn stats(&self) -> ServiceStats {
        self.stats
    }

    /// Executes one batch of requests (at most [`MAX_BATCH_RECORDS`]) and pushes their
    /// responses. Returns how many requests it took (0: none ready).
    ///
    /// # Errors
    /// `Ring` when the request ring is corrupt or the host left the response ring full for the
    /// response timeout (the channel is then unusable; other channels are unaffected).
    pub fn serve_batch(&mut self, channel: &HostChannel) -> Result<usize, HostError> {
        let Self { dir, files, shared, buf, consumer, hooks, stats, response_timeout } = self;
        let responses = channel.responses();
        let mut failed = None;
        let n = consumer.pop_batch(&channel.requests(), MAX_BATCH_RECORDS, |msg| {
            if failed.is_some() {
                return;
            }
            let Ok((h, payload)) = RequestHeader::decode(msg) else {
                stats.malformed += 1;
                return;
            };
            let op = Op::from_byte(h.op);
            let remaps = matches!(op, Some(Op::Create | Op::Open | Op::Close));
            if remaps {
                // SeqCst, odd: a server read racing a remap of file ids sees the epoch move.
                shared.mapping.fetch_add(1, Ordering::SeqCst);
            }
            let mut device_ns = 0;
            let mut run = || execute(dir, files, buf, hooks, &h, payload, &mut device_ns);
            let (status, value, data_len) = if op == Some(Op::Write) {
                shared.writing(h.file, h.offset, u64::from(h.len), run)
            } else {
                run()
            };
            if remaps {
                if let Ok(mut sf) = shared.files.lock() {
                    sf.clone_from(files);
                }
                // SeqCst, even again: the remap is complete.
                shared.mapping.fetch_add(1, Ordering::SeqCst);
            }
            stats.requests += 1;
            stats.errors += u64::from(status != 0);
            let head = ResponseHeader { id: h.id, status, device_ns, value }.encode();
            if let Err(e) = responses.push(&[&head, &buf[..data_len]], *response_timeout) {
                failed = Some(e);
            }
        })?;
        if n > 0 {
            // After the batch's responses are published: wake a host sleeping in a blocking call.
            channel.response_bell().ring();
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(n),
        }
    }

    /// Serves until `stop` is set (checked between batches), sleeping on the request ring's
    /// doorbell while idle.
    ///
    /// # Errors
    /// As [`serve_batch`](Self::serve_batch).
    pub fn serve_until(
        &mut self,
        channel: &HostChannel,
        stop: &AtomicBool,
    ) -> Result<(), HostError> {
        let mut idle = 0;
        // Relaxed: a stop flag; nothing is published through it.
        while !stop.load(Ordering::Relaxed) {
            if self.serve_batch(channel)? == 0 {
                idle_wait(channel, &mut idle);
            } else {
                idle = 0;
            }
        }
        Ok(())
    }
}

/// What a file service does after finding no request: a few polls with a CPU pause, then a
/// sleep of at most one [`PARK_SLICE`] on the request ring's doorbell (the host library rings
/// it on every submit), so an idle service costs no CPU and a stop flag is seen promptly.
pub(crate) fn idle_wait(channel: &HostChannel, idle: &mut u32) {
    *idle += 1;
    if *idle < SPIN_POLLS {
        std::hint::spin_loop();
        return;
    }
    let requests = channel.requests();
    let _ = channel
        .request_bell()
        .park_unless(PARK_SLICE, || Ok::<bool, std::convert::Infallible>(requests.has_unread()));
}

/// Nanoseconds since `t0`, saturating.
fn ns_since(t0: std::time::Instant) -> u32 {
    u32::try_from(t0.elapsed().as_nanos()).unwrap_or(u32::MAX)
}

/// Runs one request; returns (status, value, bytes of `buf` to send back) and sets
/// `device_ns` to the time in the system calls that moved the data (read, write, fdatasync).
fn execute(
    dir: &OwnedFd,
    files: &mut [Option<Arc<File>>],
    buf: &mut [u8],
    hooks: &mut Option<Box<dyn FileHooks>>,
    h: &RequestHeader,
    payload: &[u8],
    device_ns: &mut u32,
) -> (i32, u64, usize) {
    let err = |errno: i32| (-errno, 0, 0);
    let Some(op) = Op::from_byte(h.op) else { return err(libc::EINVAL) };
    let file =
        |files: &mut [Option<Arc<File>>]| files.get(h.file as usize).is_some_and(Option::is_some);
    match op {
        Op::Create | Op::Open => {
            if payload.len() != h.len as usize || payload.is_empty() {
                return err(libc::EINVAL);
            }
            if payload.len() > MAX_PATH_BYTES {
                return err(libc::ENAMETOOLONG);
            }
            let Some(slot) = files.iter().position(Option::is_none) else {
                return err(libc::EMFILE);
            };
            let flags = if op == Op::Create {
                libc::O_CREAT | libc::O_TRUNC | libc::O_RDWR
            } else {
                libc::O_RDWR
            };
            match open_beneath(dir, payload, flags) {
                Ok(f) => {
                    files[slot] = Some(Arc::new(f));
                    (0, slot as u64, 0)
                }
                Err(e) => err(e),
            }
        }
        Op::Read => {
            let len = h.len as usize;
            if len > MAX_IO_BYTES || h.offset.checked_add(u64::from(h.len)).is_none() {
                return err(libc::EINVAL);
            }
            if !file(files) {
                return err(libc::EBADF);
            }
            if let Some(hk) = hooks.as_mut() {
                hk.on_read(h.file, h.offset, h.len);
            }
            let f = files[h.file as usize].as_ref().expect("checked above");
            let mut done = 0;
            let t0 = std::time::Instant::now();
            while done < len {
                match f.read_at(&mut buf[done..len], h.offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return err(e.raw_os_error().unwrap_or(libc::EIO)),
                }
            }
            *device_ns = ns_since(t0);
            (0, done as u64, done)
        }
        Op::Write => {
            if payload.len() != h.len as usize
                || payload.len() > MAX_IO_BYTES
                || h.offset.checked_add(u64::from(h.len)).is_none()
            {
                return err(libc::EINVAL);
            }
            if !file(files) {
                return err(libc::EBADF);
            }
            let f = files[h.file as usize].as_ref().expect("checked above");
            let t0 = std::time::Instant::now();
            let written = f.write_all_at(payload, h.offset);
            *device_ns = ns_since(t0);
            if let Err(e) = written {
                return err(e.raw_os_error().unwrap_or(libc::EIO));
            }
            if let Some(hk) = hooks.as_mut() {
                hk.on_write(h.file, h.offset, payload);
            }
            (0, payload.len() as u64, 0)
        }
        Op::Flush => match files.get(h.file as usize).and_then(Option::as_ref) {
            None => err(libc::EBADF),
            Some(f) => {
                let t0 = std::time::Instant::now();
                let synced = f.sync_data();
                *device_ns = ns_since(t0);
                match synced {
                    Ok(()) => (0, 0, 0),
                    Err(e) => err(e.raw_os_error().unwrap_or(libc::EIO)),
                }
            }
        },
        Op::Close => match files.get_mut(h.file as usize).and_then(Option::take) {
            None => err(libc::EBADF),
            Some(_) => (0, 0, 0),
        },
    }
}

/// `openat2(dir, path, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`; Err(errno).
fn open_beneath(dir: &OwnedFd, path: &[u8], flags: libc::c_int) -> Result<File, i32> {
    let c = CString::new(path).map_err(|_| libc::EINVAL)?;
    // SAFETY: open_how is plain old data; zero is a valid value for every field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 { 0o644 } else { 0 };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: valid dirfd, NUL-terminated path and an open_how of the size we pass.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &raw const how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    // SAFETY: openat2 returned a fresh fd we own.
    Ok(unsafe { File::from_raw_fd(raw as i32) })
}

#[cfg(test)]
mod tests {
    use super::{buckets_of, SharedFiles, MAX_WRITE_BUCKETS, STAMP_GRAIN_BYTES};

    /// A read's stamp is unavailable while a write of any of its blocks runs, differs after
    /// such a write, and is unchanged by a write of blocks in other buckets.
    #[test]
    fn stamps_see_overlapping_writes_only() {
        let s = SharedFiles::default();
        let page = 8192;
        let before = s.stamp(3, 5 * page, page).unwrap();
        // A 64 KiB write starting 100 bytes into the page's second block spans 17 blocks.
        let at = 5 * page + 4096 + 100;
        s.writing(3, at, 65_536, || {
            assert_eq!(s.stamp(3, 5 * page, page), None, "stamp during an overlapping write");
            for block in 0..17 {
                let b = (at / STAMP_GRAIN_BYTES + block) * STAMP_GRAIN_BYTES;
                assert_eq!(s.stamp(3, b, 1), None, "block {block} not marked");
            }
        });
        let after = s.stamp(3, 5 * page, page).unwrap();
        assert_ne!(before, after);
        // Another file's block in disjoint buckets: no effect on the page's stamp.
        let (mut a, mut b) = ([0; MAX_WRITE_BUCKETS], [0; MAX_WRITE_BUCKETS]);
        let na = buckets_of(3, 5 * page, page, &mut a);
        let other = (0..1000u64)
            .find(|&blk| {
                let nb = buckets_of(4, blk * STAMP_GRAIN_BYTES, 1, &mut b);
                b[..nb].iter().all(|x| !a[..na].contains(x))
            })
            .unwrap();
        s.writing(4, other * STAMP_GRAIN_BYTES, 1, || {});
        assert_eq!(s.stamp(3, 5 * page, page), Some(after));
        // Mapping changes move the epoch (checked by the front end next to the stamp).
        assert_eq!(s.epoch(), 0);
    }
}
