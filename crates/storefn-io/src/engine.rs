//! The engine: one io_uring ring per thread, registered buffers and files, and chains of block
//! reads driven by a storage function on every completion (docs/DESIGN.md, "Chains").
//!
//! Shape (guide): caller-owned slots with `user_data` = buffer index; every table is sized once
//! in [`Engine::new`]; completions are reaped in batches into a fixed array and the functions run
//! after the completion queue has been released; SQEs produced by a pass are submitted with one
//! `io_uring_enter`, before the caller's completion callbacks run.

use std::collections::VecDeque;
use std::path::Path;

use io_uring::{opcode, types, IoUring};
use storefn_vm::XrpCtx;

use crate::digest::{DigestError, RawAccess};
use crate::error::{ChainAt, ChainError, EngineError, Errno, SubmitError};
use crate::file::{
    open_file, resolve, statx_size_align, widen, FileEntry, FileId, IoMode, RawState, ResolveError,
    Target,
};
use crate::limits::{
    BUFFER_ALIGN, DATA_VIEW_BYTES, DEFAULT_BUFFERS, DEFAULT_CHAINS, DEFAULT_MAX_HOPS,
    DEFAULT_RING_DEPTH, MAX_BLOCK_ALIGN, MAX_BUFFERS, MAX_CHAINS, MAX_FANOUT, MAX_FILES,
    MAX_OUTSTANDING_PER_CHAIN, MAX_REQUEST_BYTES, MAX_RING_DEPTH, REGISTERED_FILE_SLOTS,
    SCRATCH_BYTES, SLOT_BUFFER_BYTES,
};
use crate::region::Region;
use crate::StorageFn;

/// `user_data` of the probe read [`Engine::open`] issues (never a buffer index).
const PROBE_USER_DATA: u64 = u64::MAX;
/// Token of the chain behind the synchronous calls (the engine is idle around them).
const SYNC_TOKEN: u64 = u64::MAX;

/// How to build an [`Engine`]. `Default` gives the named defaults in [`crate::limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Submission-queue entries; must be >= `buffers`.
    pub ring_depth: u32,
    /// Registered buffers = most block reads in flight.
    pub buffers: usize,
    /// Chain slots = most chains submitted and not yet reaped.
    pub chains: usize,
    /// Per-chain hop limit (reads issued, the first included).
    pub max_hops: u32,
    /// Kernel submission polling (SQPOLL) with this idle time in ms; `None` = off (default).
    pub sqpoll_idle_ms: Option<u32>,
    /// Completion polling (IOPOLL): needs a device with poll queues (not the virtio disk here).
    pub iopoll: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            ring_depth: DEFAULT_RING_DEPTH,
            buffers: DEFAULT_BUFFERS,
            chains: DEFAULT_CHAINS,
            max_hops: DEFAULT_MAX_HOPS,
            sqpoll_idle_ms: None,
            iopoll: false,
        }
    }
}

/// What a chain did, reported when it completes successfully.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainStats {
    /// Block reads completed (hops).
    pub hops: u32,
    /// Function invocations.
    pub invocations: u32,
    /// Requests set at or after `done` and therefore not issued.
    pub dropped_requests: u32,
    /// Reads that went to the block device (raw mode); the rest read the file.
    pub device_hops: u32,
}

/// One finished chain or plain read, handed to the caller's callback.
#[derive(Debug)]
pub struct Completion<'a> {
    pub token: u64,
    pub result: Result<ChainStats, ChainError>,
    /// The chain's scratch (all [`SCRATCH_BYTES`]); a plain read's is empty.
    pub scratch: &'a [u8],
    /// A plain read's bytes (exactly the requested range); empty for chains.
    pub data: &'a [u8],
}

/// A storage function that does nothing but finish the chain (for plain-read-only waits).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFunction;

impl StorageFn for NoFunction {
    fn invoke(
        &mut self,
        ctx: &mut XrpCtx,
        _data: &[u8],
        _scratch: &mut [u8],
    ) -> Result<u64, storefn_vm::VmError> {
        ctx.done = 1;
        Ok(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Run the function on every completed block.
    Xrp,
    /// One read, no function: the bytes are handed to the caller.
    Plain,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Running,
    /// Finished, waiting in `ready` to be delivered.
    Ready,
}

/// A validated request waiting for a buffer.
#[derive(Debug, Clone, Copy, Default)]
struct Req {
    addr: u64,
    dev_offset: u64,
    /// Reads the block device (raw mode).
    device: bool,
    /// O_DIRECT alignment of the fd the read goes to.
    align: u64,
    fd_index: u32,
    size: u32,
    pair: u8,
    hop: u32,
}

/// One read in flight, indexed by its buffer (= `user_data`).
#[derive(Debug, Clone, Copy, Default)]
struct Op {
    chain: u32,
    pair: u8,
    hop: u32,
    addr: u64,
    size: u32,
    /// Bytes between the aligned read start and the requested byte.
    skip: u32,
}

#[derive(Debug)]
struct Chain {
    state: State,
    kind: Kind,
    file: u32,
    token: u64,
    start: u64,
    ctx: XrpCtx,
    inflight: u8,
    pending: [Req; MAX_OUTSTANDING_PER_CHAIN],
    npending: u8,
    /// In `waiting` (has pending requests and found no free buffer).
    queued: bool,
    issued: u32,
    completed: u32,
    invocations: u32,
    dropped: u32,
    done: bool,
    last_addr: u64,
    error: Option<ChainError>,
    /// A plain read's buffer, held until delivery: (buffer, skip, len).
    plain: Option<(u16, u32, u32)>,
    /// Some hop was read from the block device (raw mode): check staleness before delivery.
    used_device: bool,
    /// Raw-mode epoch of the first device hop (a refresh in between makes the chain stale).
    raw_epoch: u32,
    /// Reads issued to the block device.
    device_hops: u32,
    /// The caller checks staleness itself after a run of reads ([`Engine::read_deferred`]).
    deferred_check: bool,
}

impl Chain {
    fn empty() -> Self {
        Self {
            state: State::Free,
            kind: Kind::Plain,
            file: 0,
            token: 0,
            start: 0,
            ctx: XrpCtx::default(),
            inflight: 0,
            pending: [Req::default(); MAX_OUTSTANDING_PER_CHAIN],
            npending: 0,
            queued: false,
            issued: 0,
            completed: 0,
            invocations: 0,
            dropped: 0,
            done: false,
            last_addr: 0,
            error: None,
            plain: None,
            used_device: false,
            raw_epoch: 0,
            device_hops: 0,
            deferred_check: false,
        }
    }

    fn at(&self, hop: u32, addr: u64) -> ChainAt {
        ChainAt { token: self.token, start: self.start, hop, addr }
    }

    fn outstanding(&self) -> usize {
        usize::from(self.inflight) + usize::from(self.npending)
    }
}

/// An io_uring engine owned by one thread (it holds raw buffer pointers: neither `Send` nor
/// `Sync`; build one per thread).
pub struct Engine {
    // Dropped first: the ring must go before the memory it has registered.
    ring: IoUring,
    cfg: EngineConfig,
    bufs: Region,
    scratch: Region,
    ops: Box<[Op]>,
    free_bufs: Vec<u16>,
    chains: Box<[Chain]>,
    free_chains: Vec<u32>,
    /// Chains with pending requests that found no free buffer, served FIFO as buffers free up.
    waiting: VecDeque<u32>,
    /// Finished chains not yet delivered.
    ready: VecDeque<u32>,
    /// Completions of one pass: (user_data, res).
    cqes: Box<[(u64, i32)]>,
    /// Device reads done inline (raw mode on a device without NOWAIT support, see
    /// `RawState::inline`): (buffer, res), handled like CQEs in the next pass. At most one per
    /// buffer, so the capacity reserved in `new` is never exceeded (no allocation).
    inline_cqes: VecDeque<(u64, i32)>,
    files: Vec<Option<FileEntry>>,
    in_flight: usize,
    live: usize,
    unsubmitted: bool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("live", &self.live)
            .field("in_flight", &self.in_flight)
            .field("free_buffers", &self.free_bufs.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.quiesce();
        // Unregistering waits until the kernel drops its file references, so the files are
        // really closed when the engine is gone (closing the ring alone releases them later,
        // from a workqueue, and an immediate umount would find the file system busy).
        let _ = self.ring.submitter().unregister_files();
    }
}

impl Engine {
    /// Waits for every read in flight (reads target the registered buffers).
    fn quiesce(&mut self) {
        // Reads in flight still target the registered buffers; wait for every one before the
        // memory goes back to the allocator (closing the ring does not wait for them).
        // Inline reads are already complete; only ring reads can still write into buffers.
        self.in_flight -= self.inline_cqes.len();
        self.inline_cqes.clear();
        while self.in_flight > 0 {
            let n = self.drain_cq();
            self.in_flight -= self.cqes[..n].iter().filter(|c| c.0 != PROBE_USER_DATA).count();
            if self.in_flight == 0 {
                break;
            }
            match self.ring.submit_and_wait(1) {
                Err(e) if e.raw_os_error() != Some(libc::EINTR) => {
                    // No way left to learn of completions: leak the buffers rather than let
                    // the device write into memory the allocator has reused.
                    let spare = Region::new(BUFFER_ALIGN, BUFFER_ALIGN);
                    if let Ok(spare) = spare {
                        std::mem::forget(std::mem::replace(&mut self.bufs, spare));
                    }
                    return;
                }
                _ => {}
            }
        }
    }
}

fn check_config(cfg: &EngineConfig) -> Result<(), EngineError> {
    let bad = |what, value: u64, limit| Err(EngineError::BadConfig { what, value, limit });
    if cfg.ring_depth == 0 || cfg.ring_depth > MAX_RING_DEPTH {
        return bad("ring_depth", cfg.ring_depth.into(), "1..=16384");
    }
    if cfg.buffers == 0 || cfg.buffers > MAX_BUFFERS || cfg.buffers > cfg.ring_depth as usize {
        return bad("buffers", cfg.buffers as u64, "1..=min(16384, ring_depth)");
    }
    if cfg.chains == 0 || cfg.chains > MAX_CHAINS {
        return bad("chains", cfg.chains as u64, "1..=1048576");
    }
    if cfg.max_hops == 0 {
        return bad("max_hops", 0, ">= 1");
    }
    Ok(())
}

impl Engine {
    /// Builds the ring, registers `cfg.buffers` aligned buffers and an empty file table.
    ///
    /// # Errors
    /// A bad config, a ring the kernel refuses (SQPOLL/IOPOLL say so by name), or a failed
    /// registration.
    pub fn new(cfg: EngineConfig) -> Result<Self, EngineError> {
        check_config(&cfg)?;
        let ring = build_ring(&cfg)?;
        let bufs = Region::new(cfg.buffers * SLOT_BUFFER_BYTES, BUFFER_ALIGN)?;
        let iovecs: Vec<libc::iovec> = (0..cfg.buffers)
            .map(|i| libc::iovec {
                // SAFETY: i < buffers, so the offset stays inside the region.
                iov_base: unsafe { bufs.base().add(i * SLOT_BUFFER_BYTES) }.cast(),
                iov_len: SLOT_BUFFER_BYTES,
            })
            .collect();
        // SAFETY: the iovecs describe `bufs`, which lives in the engine and is dropped after the
        // ring (field order) and after every read in flight has completed (Drop).
        unsafe { ring.submitter().register_buffers(&iovecs) }.map_err(|e| {
            EngineError::RegisterBuffers {
                count: cfg.buffers,
                bytes: SLOT_BUFFER_BYTES,
                errno: Errno::from_io(&e),
            }
        })?;
        ring.submitter()
            .register_files_sparse(REGISTERED_FILE_SLOTS as u32)
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        let scratch = Region::new(cfg.chains * SCRATCH_BYTES, 64)?;
        let cq_cap = ring.params().cq_entries() as usize;
        Ok(Self {
            ring,
            bufs,
            scratch,
            ops: vec![Op::default(); cfg.buffers].into_boxed_slice(),
            // Popped from the end: buffer 0 is handed out first.
            free_bufs: (0..cfg.buffers).rev().map(|b| b as u16).collect(),
            chains: (0..cfg.chains).map(|_| Chain::empty()).collect(),
            free_chains: (0..cfg.chains).rev().map(|c| c as u32).collect(),
            waiting: VecDeque::with_capacity(cfg.chains),
            ready: VecDeque::with_capacity(cfg.chains),
            cqes: vec![(0, 0); cq_cap].into_boxed_slice(),
            inline_cqes: VecDeque::with_capacity(cfg.buffers),
            files: (0..MAX_FILES).map(|_| None).collect(),
            in_flight: 0,
            live: 0,
            unsubmitted: false,
            cfg,
        })
    }

    /// The configuration the engine was built with.
    #[must_use]
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Chains and plain reads submitted and not yet delivered.
    #[must_use]
    pub fn live(&self) -> usize {
        self.live
    }

    /// Block reads currently in flight in the kernel.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The ring's file descriptor: it polls readable (`POLLIN`) when completions are waiting,
    /// so an event loop can wait for sockets and the engine at once. Call [`Engine::reap`]
    /// after submitting (it submits the queued SQEs) and when the fd is readable.
    #[must_use]
    pub fn ring_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.ring)
    }

    /// Free chain slots (a submit succeeds while this is non-zero).
    #[must_use]
    pub fn free_slots(&self) -> usize {
        self.free_chains.len()
    }

    /// Opens `path` read-only and registers it. With [`IoMode::Direct`], a file system that
    /// refuses O_DIRECT gives [`EngineError::DirectRefused`]. When the engine is idle and the
    /// file is not empty, one block is read through the ring to prove the mode works (this is
    /// where IOPOLL on a device without poll queues is reported).
    ///
    /// # Errors
    /// Open/statx failures, refusal of O_DIRECT or IOPOLL, a full file table.
    pub fn open(&mut self, path: &Path, mode: IoMode) -> Result<FileId, EngineError> {
        let idx = self
            .files
            .iter()
            .position(Option::is_none)
            .ok_or(EngineError::TooManyFiles { max: MAX_FILES })?;
        let idx32 = idx as u32;
        let mut entry = open_file(path, mode, idx32)?;
        if mode == IoMode::Raw {
            self.setup_raw(&mut entry)?;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&entry.file);
        self.ring
            .submitter()
            .register_files_update(idx32, &[fd])
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        if self.live == 0 && self.in_flight == 0 && entry.target.size_bytes() > 0 {
            if let Err(e) = self.probe(idx32, &entry) {
                let _ = self.ring.submitter().register_files_update(idx32, &[-1]);
                let _ = self.ring.submitter().register_files_update(device_index(idx32), &[-1]);
                return Err(e);
            }
        }
        self.files[idx] = Some(entry);
        Ok(FileId(idx32))
    }

    /// Raw mode: lease, digest and device ([`RawAccess::open`]); registers the device fd at the
    /// file's device slot and turns the target into [`Target::Raw`].
    fn setup_raw(&mut self, entry: &mut FileEntry) -> Result<(), EngineError> {
        let path = || entry.path.clone();
        let access = RawAccess::open(&entry.file)
            .map_err(|source| EngineError::RawUnavailable { path: path(), source })?;
        let Target::File { fd_index, size_bytes } = entry.target else {
            unreachable!("open_file builds file targets")
        };
        let block = access.logical_block_size();
        // The widened device window must fit a slot buffer (SLOT_BUFFER_BYTES).
        if !block.is_power_of_two() || block > MAX_BLOCK_ALIGN as u64 {
            return Err(EngineError::RawBlockSize { path: path(), block, max: MAX_BLOCK_ALIGN });
        }
        let dev_index = device_index(fd_index);
        self.ring
            .submitter()
            .register_files_update(dev_index, &[access.device_fd()])
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        entry.target = Target::Raw { fd_index, dev_index, size_bytes };
        let inline = device_lacks_nowait(&access);
        entry.raw = Some(RawState { access, epoch: 0, broken: false, inline });
        Ok(())
    }

    /// True when `file` is in raw mode and its digest has not gone stale (hops read the device).
    #[must_use]
    pub fn is_raw(&self, file: FileId) -> bool {
        self.raw_state(file).is_some_and(|r| !r.broken)
    }

    /// True when raw-mode device reads of `file` are done inline (synchronous `pread` in the
    /// engine thread) because the device cannot take non-blocking reads; `None` outside raw
    /// mode.
    #[must_use]
    pub fn raw_reads_inline(&self, file: FileId) -> Option<bool> {
        self.raw_state(file).map(|r| r.inline)
    }

    /// The file's raw-mode digest and device, if raw mode is set up (stale or not).
    #[must_use]
    pub fn raw_access(&self, file: FileId) -> Option<&RawAccess> {
        self.raw_state(file).map(|r| &r.access)
    }

    fn raw_state(&self, file: FileId) -> Option<&RawState> {
        self.files.get(file.0 as usize)?.as_ref()?.raw.as_ref()
    }

    /// After [`ChainError::Stale`]: drop the old lease and digest and set raw mode up again
    /// ([`RawAccess::refresh`]). Chains still running that read the device under the old digest
    /// complete as `Stale`. On error the file stays open and is served through the file.
    ///
    /// # Errors
    /// [`EngineError::NotRaw`] for a file not opened in raw mode; [`EngineError::RawUnavailable`]
    /// when raw mode cannot be set up again (e.g. a writer still has the file open).
    pub fn refresh_raw(&mut self, file: FileId) -> Result<(), EngineError> {
        let not_raw = EngineError::NotRaw { file: file.0 };
        let Some(Some(entry)) = self.files.get_mut(file.0 as usize) else { return Err(not_raw) };
        let Target::Raw { dev_index, .. } = entry.target else { return Err(not_raw) };
        let refreshed = match entry.raw.take() {
            Some(r) => r.access.refresh(&entry.file),
            None => RawAccess::open(&entry.file),
        };
        let access = refreshed
            .map_err(|source| EngineError::RawUnavailable { path: entry.path.clone(), source })?;
        let (size, _) = statx_size_align(&entry.file, &entry.path)?;
        entry.target.set_size_bytes(size);
        self.ring
            .submitter()
            .register_files_update(dev_index, &[access.device_fd()])
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        let inline = device_lacks_nowait(&access);
        entry.last_epoch = entry.last_epoch.wrapping_add(1);
        entry.raw = Some(RawState { access, epoch: entry.last_epoch, broken: false, inline });
        Ok(())
    }

    /// Sets raw mode up again for a file opened in raw mode whose raw mode is off (a check
    /// failed, or an earlier refresh failed because a writer held the file), at most once per
    /// [`RAW_RETRY_INTERVAL`](crate::limits::RAW_RETRY_INTERVAL) and only while no chain is live. `None` when nothing was due;
    /// otherwise the refresh's result. Call it where a lookup starts: a path that lost raw mode
    /// to a passing writer gets it back once the writer is gone.
    pub fn retry_raw(&mut self, file: FileId) -> Option<Result<(), EngineError>> {
        let entry = self.files.get_mut(file.0 as usize)?.as_mut()?;
        let wanted = matches!(entry.target, Target::Raw { .. });
        if !wanted || entry.raw.as_ref().is_some_and(|r| !r.broken) || self.live != 0 {
            return None;
        }
        if !entry.raw_retry.try_now() {
            return None;
        }
        Some(self.refresh_raw(file))
    }

    /// Reads the first block through the ring, synchronously (the engine is idle).
    fn probe(&mut self, idx: u32, entry: &FileEntry) -> Result<(), EngineError> {
        let b = *self.free_bufs.last().expect("idle engine has every buffer free");
        let len = entry.align.max(512).min(entry.target.size_bytes().next_multiple_of(entry.align));
        let sqe = opcode::ReadFixed::new(types::Fixed(idx), self.buf_ptr(b), len as u32, b)
            .offset(0)
            .build()
            .user_data(PROBE_USER_DATA);
        self.push(&sqe);
        let res = loop {
            self.enter(1)?;
            if let Some(c) = self.ring.completion().next() {
                debug_assert_eq!(c.user_data(), PROBE_USER_DATA);
                break c.result();
            }
        };
        if res >= 0 {
            return Ok(());
        }
        let errno = Errno::from_raw(-res);
        let path = entry.path.clone();
        Err(match errno {
            Errno::NotSupported if self.cfg.iopoll => {
                EngineError::IopollUnsupported { path, errno }
            }
            Errno::InvalidArgument if entry.mode != IoMode::Buffered => {
                EngineError::DirectRefused {
                    path,
                    reason: "the first O_DIRECT read returned EINVAL".into(),
                }
            }
            _ => EngineError::Probe { path, errno },
        })
    }

    /// Closes a file. The engine must be idle.
    ///
    /// # Errors
    /// [`EngineError::NotIdle`] with chains live; [`EngineError::RegisterFiles`].
    pub fn close(&mut self, file: FileId) -> Result<(), EngineError> {
        if self.live != 0 {
            return Err(EngineError::NotIdle { active: self.live });
        }
        if self.files.get(file.0 as usize).is_some_and(Option::is_some) {
            self.ring
                .submitter()
                .register_files_update(file.0, &[-1])
                .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
            self.ring
                .submitter()
                .register_files_update(device_index(file.0), &[-1])
                .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
            self.files[file.0 as usize] = None;
        }
        Ok(())
    }

    /// The file's size as the engine's range checks see it.
    #[must_use]
    pub fn file_size(&self, file: FileId) -> Option<u64> {
        self.files.get(file.0 as usize)?.as_ref().map(|e| e.target.size_bytes())
    }

    /// O_DIRECT offset alignment of the file (1 when buffered).
    #[must_use]
    pub fn file_align(&self, file: FileId) -> Option<u64> {
        Some(self.files.get(file.0 as usize)?.as_ref()?.align)
    }

    /// Re-reads the file's size (after it grew or shrank); returns the new size.
    ///
    /// # Errors
    /// statx failure; an unknown file is `Ok(None)`.
    pub fn refresh_size(&mut self, file: FileId) -> Result<Option<u64>, EngineError> {
        let Some(Some(entry)) = self.files.get_mut(file.0 as usize) else { return Ok(None) };
        let (size, _) = statx_size_align(&entry.file, &entry.path)?;
        entry.target.set_size_bytes(size);
        Ok(Some(size))
    }

    fn buf_ptr(&self, b: u16) -> *mut u8 {
        debug_assert!(usize::from(b) < self.cfg.buffers);
        // SAFETY: b < buffers, so the offset is inside the region.
        unsafe { self.bufs.base().add(usize::from(b) * SLOT_BUFFER_BYTES) }
    }

    fn scratch_ptr(&self, ci: usize) -> *mut u8 {
        debug_assert!(ci < self.cfg.chains);
        debug_assert!((ci + 1) * SCRATCH_BYTES <= self.scratch.len());
        // SAFETY: ci < chains, so the offset is inside the region.
        unsafe { self.scratch.base().add(ci * SCRATCH_BYTES) }
    }

    fn push(&mut self, sqe: &io_uring::squeue::Entry) {
        // Reads in flight + SQEs pushed <= buffers <= SQ entries (check_config), so the queue
        // always has room; a failure here is a bookkeeping bug.
        // SAFETY: the SQE reads into a registered buffer that belongs to this op alone until its
        // CQE is reaped, and into a registered file that stays open while the engine lives.
        let pushed = unsafe { self.ring.submission().push(sqe) };
        assert!(pushed.is_ok(), "submission queue full: in-flight accounting is broken");
        self.unsubmitted = true;
    }

    fn alloc_chain(
        &mut self,
        kind: Kind,
        file: FileId,
        start: u64,
        token: u64,
    ) -> Result<usize, SubmitError> {
        if !self.files.get(file.0 as usize).is_some_and(Option::is_some) {
            return Err(SubmitError::UnknownFile { file: file.0 });
        }
        let ci = self.free_chains.pop().ok_or(SubmitError::Full { chains: self.cfg.chains })?;
        let ci = ci as usize;
        let c = &mut self.chains[ci];
        debug_assert_eq!(c.state, State::Free);
        *c = Chain { state: State::Running, kind, file: file.0, token, start, ..Chain::empty() };
        self.live += 1;
        Ok(ci)
    }

    /// Submits a chain: read `[offset, offset + len)`, run the function on it (at reap time),
    /// follow its requests until `done`. `fill` writes the chain's arguments into its (zeroed)
    /// scratch. A bad first request is reported as the chain's completion, not here.
    ///
    /// # Errors
    /// [`SubmitError::Full`] when every chain slot is taken (reap first); unknown file.
    pub fn submit_chain(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        token: u64,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), SubmitError> {
        let ci = self.alloc_chain(Kind::Xrp, file, offset, token)?;
        let sp = self.scratch_ptr(ci);
        // SAFETY: the scratch of slot `ci` is owned by this chain alone; no other reference
        // to it exists while the engine holds `&mut self`.
        let scratch = unsafe { std::slice::from_raw_parts_mut(sp, SCRATCH_BYTES) };
        scratch.fill(0);
        fill(scratch);
        self.start(ci, offset, len);
        Ok(())
    }

    /// [`Engine::submit_chain`] copying `args` into the start of the chain's scratch.
    ///
    /// # Errors
    /// As `submit_chain`, and [`SubmitError::ScratchTooLarge`].
    pub fn submit_chain_args(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        token: u64,
        args: &[u8],
    ) -> Result<(), SubmitError> {
        if args.len() > SCRATCH_BYTES {
            return Err(SubmitError::ScratchTooLarge { len: args.len(), max: SCRATCH_BYTES });
        }
        self.submit_chain(file, offset, len, token, |s| s[..args.len()].copy_from_slice(args))
    }

    /// Submits a plain read of `[offset, offset + len)` (no function) through the same slots;
    /// its completion carries the bytes in [`Completion::data`].
    ///
    /// # Errors
    /// [`SubmitError::Full`]; unknown file.
    pub fn submit_read(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        token: u64,
    ) -> Result<(), SubmitError> {
        self.submit_plain(file, offset, len, token, false)
    }

    fn submit_plain(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        token: u64,
        deferred_check: bool,
    ) -> Result<(), SubmitError> {
        let ci = self.alloc_chain(Kind::Plain, file, offset, token)?;
        self.chains[ci].deferred_check = deferred_check;
        self.start(ci, offset, len);
        Ok(())
    }

    fn start(&mut self, ci: usize, offset: u64, len: u64) {
        let r = add_request(&mut self.chains[ci], &self.files, self.cfg.max_hops, offset, len, 0);
        if let Err(e) = r {
            self.chains[ci].error = Some(e);
        }
        self.issue(ci);
        self.maybe_finish(ci);
    }

    /// Issues the chain's pending requests while buffers last; queues it otherwise.
    fn issue(&mut self, ci: usize) {
        while self.chains[ci].npending > 0 {
            let Some(b) = self.free_bufs.pop() else {
                let c = &mut self.chains[ci];
                if !c.queued {
                    c.queued = true;
                    self.waiting.push_back(ci as u32);
                }
                return;
            };
            let c = &mut self.chains[ci];
            let r = c.pending[0];
            let n = usize::from(c.npending);
            c.pending.copy_within(1..n, 0);
            c.npending -= 1;
            c.inflight += 1;
            c.last_addr = r.addr;
            let (start, end) = widen(r.dev_offset, u64::from(r.size), r.align);
            let skip = (r.dev_offset - start) as u32;
            let len = end - start;
            assert!(len <= SLOT_BUFFER_BYTES as u64, "widened read exceeds the slot buffer");
            self.ops[usize::from(b)] =
                Op { chain: ci as u32, pair: r.pair, hop: r.hop, addr: r.addr, size: r.size, skip };
            if r.device {
                let file = self.chains[ci].file;
                let epoch = self.chains[ci].raw_epoch;
                if let Some(fd) = self.inline_device_fd(file, epoch) {
                    let res = self.read_inline(fd, b, len, start);
                    self.inline_cqes.push_back((u64::from(b), res));
                    self.in_flight += 1;
                    continue;
                }
            }
            let sqe =
                opcode::ReadFixed::new(types::Fixed(r.fd_index), self.buf_ptr(b), len as u32, b)
                    .offset(start)
                    .build()
                    .user_data(u64::from(b));
            self.push(&sqe);
            self.in_flight += 1;
        }
    }

    /// The device fd for an inline read by a chain that translated under `epoch`; `None` for
    /// ring reads. A chain from an older epoch (refreshed since) reads the same block device
    /// through its registered slot instead: its result is discarded as stale anyway, and the
    /// old fd may be closed.
    fn inline_device_fd(&self, file: u32, epoch: u32) -> Option<std::os::fd::RawFd> {
        let raw = self.files.get(file as usize)?.as_ref()?.raw.as_ref()?;
        (raw.inline && raw.epoch == epoch).then(|| raw.access.device_fd())
    }

    /// One synchronous O_DIRECT read into buffer `b`: the byte count or `-errno`, as a CQE has.
    fn read_inline(&self, fd: std::os::fd::RawFd, b: u16, len: u64, offset: u64) -> i32 {
        debug_assert!(len <= SLOT_BUFFER_BYTES as u64);
        let Ok(off) = libc::off_t::try_from(offset) else { return -libc::EINVAL };
        loop {
            // SAFETY: buffer b belongs to this op alone until its completion is handled, and
            // holds SLOT_BUFFER_BYTES >= len bytes; the fd is open while its RawState lives.
            let n = unsafe { libc::pread(fd, self.buf_ptr(b).cast(), len as usize, off) };
            if n >= 0 {
                return n as i32;
            }
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            // The lease-break signal may interrupt the read; retry it.
            if errno != libc::EINTR {
                return -errno;
            }
        }
    }

    /// Moves a chain with nothing outstanding to `ready`.
    fn maybe_finish(&mut self, ci: usize) {
        let c = &mut self.chains[ci];
        if c.state != State::Running || c.outstanding() != 0 {
            return;
        }
        if c.error.is_none() && c.kind == Kind::Xrp && !c.done {
            c.error = Some(ChainError::Stalled { at: c.at(c.completed, c.last_addr) });
        }
        if c.error.is_none() && c.used_device && !c.deferred_check {
            let (file, epoch, at) = (c.file, c.raw_epoch, c.at(c.completed, c.last_addr));
            if let Some(why) = self.raw_stale(file, epoch) {
                self.chains[ci].error = Some(ChainError::Stale { at, why });
            }
        }
        let c = &mut self.chains[ci];
        c.state = State::Ready;
        if c.queued {
            c.queued = false;
            let ci32 = ci as u32;
            self.waiting.retain(|&w| w != ci32);
        }
        self.ready.push_back(ci as u32);
    }

    /// The staleness check after a chain whose hops read the device (XRP's post-read version
    /// check): `Some(why)` when its data may not be the file's. A failed check switches the
    /// file to the file path until [`Engine::refresh_raw`].
    fn raw_stale(&mut self, file: u32, epoch: u32) -> Option<&'static str> {
        let Some(Some(entry)) = self.files.get_mut(file as usize) else {
            return Some("the file was closed");
        };
        let Some(raw) = entry.raw.as_mut() else { return Some("raw mode was dropped") };
        if raw.broken {
            return Some("an earlier check found the digest stale");
        }
        if raw.epoch != epoch {
            return Some("the digest was refreshed while the chain ran");
        }
        let why = match raw.access.check_after_chain() {
            Ok(()) => return None,
            Err(DigestError::Stale { why }) => why,
            Err(_) => "the identity check (fstat) failed",
        };
        raw.broken = true;
        Some(why)
    }

    /// One pass: reap every available completion, run functions, queue the next reads, then
    /// deliver finished chains. New SQEs are submitted before any callback runs (the device
    /// works while the caller handles results); with nothing to deliver and `eager` false they
    /// are left for the caller's next `io_uring_enter` (wait's submit-and-wait: one syscall).
    /// Returns the number delivered.
    fn pass<P, F>(
        &mut self,
        prog: &mut P,
        on_done: &mut F,
        eager: bool,
    ) -> Result<usize, EngineError>
    where
        P: StorageFn + ?Sized,
        F: FnMut(Completion<'_>),
    {
        if self.cfg.iopoll && self.in_flight > 0 {
            // IOPOLL rings only complete inside io_uring_enter(GETEVENTS).
            self.enter(0)?;
        }
        let n = self.drain_cq();
        for i in 0..n {
            let (ud, res) = self.cqes[i];
            self.on_cqe(ud, res, prog);
        }
        self.serve_waiting();
        // Inline reads (and the reads their functions request) complete here, in this pass.
        while let Some((ud, res)) = self.inline_cqes.pop_front() {
            self.on_cqe(ud, res, prog);
            if self.inline_cqes.is_empty() {
                self.serve_waiting();
            }
        }
        if eager || !self.ready.is_empty() {
            self.flush()?;
        }
        let delivered = self.deliver(on_done);
        if delivered > 0 && !self.waiting.is_empty() {
            self.serve_waiting();
        }
        if eager {
            self.flush()?;
        }
        Ok(delivered)
    }

    fn drain_cq(&mut self) -> usize {
        let mut n = 0;
        let cap = self.cqes.len();
        let mut cq = self.ring.completion();
        while n < cap {
            let Some(cqe) = cq.next() else { break };
            self.cqes[n] = (cqe.user_data(), cqe.result());
            n += 1;
        }
        n
    }

    fn on_cqe<P: StorageFn + ?Sized>(&mut self, ud: u64, res: i32, prog: &mut P) {
        if ud == PROBE_USER_DATA {
            return;
        }
        let b = ud as usize;
        assert!(b < self.ops.len(), "CQE with unknown user_data {ud}");
        let op = self.ops[b];
        let ci = op.chain as usize;
        self.in_flight -= 1;
        let c = &mut self.chains[ci];
        assert!(c.state == State::Running && c.inflight > 0, "CQE for a chain not in flight");
        c.inflight -= 1;
        c.completed += 1;
        let mut keep_buf = false;
        if c.error.is_none() {
            match check_read(res, &op) {
                Err(e) => c.error = Some(e.at(c.at(op.hop, op.addr))),
                Ok(view) => match c.kind {
                    Kind::Plain => {
                        c.plain = Some((b as u16, op.skip, op.size));
                        c.done = true;
                        keep_buf = true;
                    }
                    Kind::Xrp => self.invoke(ci, b as u16, &op, view, prog),
                },
            }
        }
        if !keep_buf {
            self.free_bufs.push(b as u16);
        }
        let c = &mut self.chains[ci];
        if c.error.is_some() {
            c.npending = 0;
        }
        self.issue(ci);
        self.maybe_finish(ci);
    }

    fn invoke<P: StorageFn + ?Sized>(
        &mut self,
        ci: usize,
        b: u16,
        op: &Op,
        view: usize,
        prog: &mut P,
    ) {
        // SAFETY: buffer b's read has completed (its CQE is being handled) and the buffer is not
        // reissued before this function returns; `skip + view <= SLOT_BUFFER_BYTES` (check_read).
        let data =
            unsafe { std::slice::from_raw_parts(self.buf_ptr(b).add(op.skip as usize), view) };
        let sp = self.scratch_ptr(ci);
        // SAFETY: the scratch of slot ci belongs to this chain alone, and `data` (buffer region)
        // and the chain table are disjoint from it.
        let scratch = unsafe { std::slice::from_raw_parts_mut(sp, SCRATCH_BYTES) };
        let max_hops = self.cfg.max_hops;
        let c = &mut self.chains[ci];
        c.ctx.reset_outputs();
        c.ctx.slot = u32::from(op.pair);
        c.ctx.data = data.as_ptr() as u64;
        c.ctx.scratch = sp as u64;
        c.invocations += 1;
        prog.on_block(c.token, op.addr, &data[..op.size as usize]);
        if let Err(fault) = prog.invoke_chain(c.token, &mut c.ctx, data, scratch) {
            c.error = Some(ChainError::Fault { at: c.at(op.hop, op.addr), fault });
            return;
        }
        if c.ctx.done != 0 {
            c.done = true;
        }
        for pair in 0..MAX_FANOUT {
            let size = c.ctx.size[pair];
            if size == 0 {
                continue;
            }
            if c.done {
                c.dropped += 1;
                continue;
            }
            let addr = c.ctx.next_addr[pair];
            if let Err(e) = add_request(c, &self.files, max_hops, addr, size, pair as u8) {
                c.error = Some(e);
                return;
            }
        }
    }

    fn serve_waiting(&mut self) {
        while !self.free_bufs.is_empty() {
            let Some(ci) = self.waiting.pop_front() else { break };
            let ci = ci as usize;
            self.chains[ci].queued = false;
            self.issue(ci);
        }
    }

    fn flush(&mut self) -> Result<(), EngineError> {
        if self.unsubmitted {
            self.enter(0)?;
        }
        Ok(())
    }

    /// Submits pushed SQEs and waits for `want` completions (retrying on EINTR).
    fn enter(&mut self, want: usize) -> Result<(), EngineError> {
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(EngineError::Submit { errno: Errno::from_io(&e) }),
            }
        }
        self.unsubmitted = !self.ring.submission().is_empty();
        Ok(())
    }

    fn deliver<F: FnMut(Completion<'_>)>(&mut self, on_done: &mut F) -> usize {
        let mut count = 0;
        while let Some(ci) = self.ready.pop_front() {
            let ci = ci as usize;
            let sp = self.scratch_ptr(ci);
            let c = &mut self.chains[ci];
            debug_assert_eq!(c.state, State::Ready);
            let stats = ChainStats {
                hops: c.completed,
                invocations: c.invocations,
                dropped_requests: c.dropped,
                device_hops: c.device_hops,
            };
            let result = c.error.take().map_or(Ok(stats), Err);
            let plain = c.plain.take();
            let (scratch, data): (&[u8], &[u8]) = match (c.kind, plain) {
                // SAFETY: a plain read's held buffer is not reissued until it is freed below.
                (Kind::Plain, Some((b, skip, len))) => (&[], unsafe {
                    std::slice::from_raw_parts(
                        self.bufs.base().add(usize::from(b) * SLOT_BUFFER_BYTES + skip as usize),
                        len as usize,
                    )
                }),
                (Kind::Plain, None) => (&[], &[]),
                // SAFETY: the finished chain's scratch is not touched until its slot is reused,
                // which needs `&mut self` after the callback returns.
                (Kind::Xrp, _) => (unsafe { std::slice::from_raw_parts(sp, SCRATCH_BYTES) }, &[]),
            };
            let token = c.token;
            c.state = State::Free;
            on_done(Completion { token, result, scratch, data });
            if let Some((b, _, _)) = plain {
                self.free_bufs.push(b);
            }
            self.free_chains.push(ci as u32);
            self.live -= 1;
            count += 1;
        }
        count
    }

    /// Reaps whatever has completed without blocking; calls `on_done` per finished chain.
    ///
    /// # Errors
    /// io_uring_enter failures ([`EngineError::Submit`]).
    pub fn reap<P, F>(&mut self, prog: &mut P, mut on_done: F) -> Result<usize, EngineError>
    where
        P: StorageFn + ?Sized,
        F: FnMut(Completion<'_>),
    {
        self.pass(prog, &mut on_done, true)
    }

    /// Like [`Engine::reap`], blocking until at least `min` chains were delivered or nothing
    /// is live any more.
    ///
    /// # Errors
    /// io_uring_enter failures ([`EngineError::Submit`]).
    pub fn wait<P, F>(
        &mut self,
        min: usize,
        prog: &mut P,
        mut on_done: F,
    ) -> Result<usize, EngineError>
    where
        P: StorageFn + ?Sized,
        F: FnMut(Completion<'_>),
    {
        let mut got = 0;
        loop {
            got += self.pass(prog, &mut on_done, false)?;
            if got >= min || self.live == 0 {
                self.flush()?;
                return Ok(got);
            }
            // Live chains are either ready (delivered next pass) or behind reads in flight.
            // Inline reads queued after the last pass's delivery complete in the next pass.
            if self.ready.is_empty() && self.inline_cqes.is_empty() {
                assert!(self.in_flight > 0, "live chains with nothing in flight");
                self.enter(1)?;
            }
        }
    }

    /// XRP's `read_xrp`: run a chain from `[offset, offset + len)` to completion with `prog`;
    /// `scratch` is copied into the chain's scratch first and back out at the end (results).
    ///
    /// # Errors
    /// The chain's error; [`ChainError::NotIdle`] if batch chains are live.
    pub fn read_xrp<P: StorageFn + ?Sized>(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        prog: &mut P,
        scratch: &mut [u8],
    ) -> Result<ChainStats, ChainError> {
        if self.live != 0 {
            return Err(ChainError::NotIdle { active: self.live });
        }
        self.submit_chain_args(file, offset, len, SYNC_TOKEN, scratch)
            .map_err(ChainError::Submit)?;
        let mut out = None;
        let n = scratch.len();
        self.wait(1, prog, |c| {
            scratch.copy_from_slice(&c.scratch[..n]);
            out = Some(c.result);
        })
        .map_err(|e| ring_error(&e))?;
        out.expect("wait(1) on an engine with one live chain delivers it")
    }

    /// A plain synchronous read of `buf.len()` bytes at `offset` through the ring (the KV
    /// store's `uring` path; one hop).
    ///
    /// # Errors
    /// The read's error; [`ChainError::NotIdle`] if batch chains are live.
    pub fn read(
        &mut self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<ChainStats, ChainError> {
        self.read_sync(file, offset, buf, false)
    }

    /// [`Engine::read`] without the raw-mode staleness check: for a caller that chains
    /// dependent reads itself (a B+-tree walk of plain reads) and checks once at the end, as a
    /// storage-function chain is checked once after its last hop. Take [`Engine::raw_epoch`]
    /// before the first read and call [`Engine::check_raw`] with it before trusting any byte
    /// of a read whose `device_hops` was non-zero. Reads are still translated and confined to
    /// the file (`OutsideFile`).
    ///
    /// # Errors
    /// As [`Engine::read`], never [`ChainError::Stale`].
    pub fn read_deferred(
        &mut self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<ChainStats, ChainError> {
        self.read_sync(file, offset, buf, true)
    }

    /// The raw-mode epoch of `file` now (0 outside raw mode), for [`Engine::check_raw`].
    #[must_use]
    pub fn raw_epoch(&self, file: FileId) -> u32 {
        self.raw_state(file).map_or(0, |r| r.epoch)
    }

    /// The staleness check of a chain, for reads done with [`Engine::read_deferred`] since
    /// [`Engine::raw_epoch`] returned `epoch`: lease intact, identity unchanged, no refresh in
    /// between. A failure turns raw mode off for `file` until [`Engine::refresh_raw`], exactly
    /// as a failed chain check does.
    ///
    /// # Errors
    /// [`ChainError::Stale`] (`at` names the file offset 0 and hop 0: the check covers a run
    /// of reads, not one).
    pub fn check_raw(&mut self, file: FileId, epoch: u32) -> Result<(), ChainError> {
        match self.raw_stale(file.0, epoch) {
            None => Ok(()),
            Some(why) => {
                Err(ChainError::Stale { at: ChainAt { token: 0, start: 0, hop: 0, addr: 0 }, why })
            }
        }
    }

    fn read_sync(
        &mut self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
        deferred_check: bool,
    ) -> Result<ChainStats, ChainError> {
        if self.live != 0 {
            return Err(ChainError::NotIdle { active: self.live });
        }
        self.submit_plain(file, offset, buf.len() as u64, SYNC_TOKEN, deferred_check)
            .map_err(ChainError::Submit)?;
        let mut out = None;
        self.wait(1, &mut NoFunction, |c| {
            if c.result.is_ok() {
                buf.copy_from_slice(c.data);
            }
            out = Some(c.result);
        })
        .map_err(|e| ring_error(&e))?;
        out.expect("wait(1) on an engine with one live read delivers it")
    }
}

/// True when the device refuses non-blocking reads (`preadv2(RWF_NOWAIT)` gives EOPNOTSUPP, as
/// zram and other bio-based drivers without NOWAIT support do). io_uring would hand every such
/// read to an io-wq worker thread (a wake-up and a thread switch per hop, several µs here); a
/// synchronous read in the engine thread is faster for these devices, which complete reads in
/// the submitter's context anyway. The probe reads the first block of the file's first run.
fn device_lacks_nowait(access: &RawAccess) -> bool {
    let block = access.logical_block_size();
    let Some(first) = access.digest().extents().first() else { return false };
    let Ok(buf) = Region::new(block as usize, BUFFER_ALIGN) else { return false };
    let iov = libc::iovec { iov_base: buf.base().cast(), iov_len: block as usize };
    let Ok(off) = libc::off_t::try_from(first.physical & !(block - 1)) else { return false };
    // SAFETY: one iovec over `buf` (block bytes, aligned for O_DIRECT); the fd is open.
    let n = unsafe { libc::preadv2(access.device_fd(), &raw const iov, 1, off, libc::RWF_NOWAIT) };
    n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Fixed-file index of file `fd_index`'s block device ([`REGISTERED_FILE_SLOTS`]).
fn device_index(fd_index: u32) -> u32 {
    debug_assert!((fd_index as usize) < MAX_FILES);
    fd_index + MAX_FILES as u32
}

fn ring_error(e: &EngineError) -> ChainError {
    match e {
        EngineError::Submit { errno } => ChainError::Ring { errno: *errno },
        _ => ChainError::Ring { errno: Errno::Other(0) },
    }
}

fn build_ring(cfg: &EngineConfig) -> Result<IoUring, EngineError> {
    let mut b = IoUring::builder();
    b.setup_cqsize(cfg.ring_depth * 2);
    if let Some(idle) = cfg.sqpoll_idle_ms {
        b.setup_sqpoll(idle);
    }
    if cfg.iopoll {
        b.setup_iopoll();
    }
    b.build(cfg.ring_depth).map_err(|e| {
        let errno = Errno::from_io(&e);
        if cfg.sqpoll_idle_ms.is_some() {
            EngineError::SqpollUnavailable { errno }
        } else if cfg.iopoll {
            EngineError::IopollUnavailable { errno }
        } else {
            EngineError::RingSetup { errno }
        }
    })
}

/// Validates one request against the limits and the target and queues it on the chain.
fn add_request(
    c: &mut Chain,
    files: &[Option<FileEntry>],
    max_hops: u32,
    addr: u64,
    size: u64,
    pair: u8,
) -> Result<(), ChainError> {
    let hop = c.issued + 1;
    let at = c.at(hop, addr);
    if size == 0 || size > MAX_REQUEST_BYTES as u64 {
        return Err(ChainError::RequestTooLarge { at, size, max: MAX_REQUEST_BYTES });
    }
    if c.issued >= max_hops {
        return Err(ChainError::ChainTooLong { at, max: max_hops });
    }
    if c.outstanding() >= MAX_OUTSTANDING_PER_CHAIN {
        return Err(ChainError::FanOutExceeded { at, max: MAX_OUTSTANDING_PER_CHAIN });
    }
    let entry = files[c.file as usize].as_ref().expect("chain's file is open");
    let raw = entry.raw.as_ref().filter(|r| !r.broken);
    let r = resolve(&entry.target, entry.align, raw.map(|r| &r.access), addr, size).map_err(
        |e| match e {
            ResolveError::OutOfRange { file_size } => {
                ChainError::OutOfRange { at, size, file_size }
            }
            ResolveError::OutsideFile { file_size } => {
                ChainError::OutsideFile { at, size, file_size }
            }
        },
    )?;
    if r.device {
        if !c.used_device {
            c.used_device = true;
            c.raw_epoch = raw.map_or(0, |r| r.epoch);
        }
        c.device_hops += 1;
    }
    let n = usize::from(c.npending);
    c.pending[n] = Req {
        addr,
        dev_offset: r.dev_offset,
        device: r.device,
        align: r.align,
        fd_index: r.fd_index,
        size: size as u32,
        pair,
        hop,
    };
    c.npending += 1;
    c.issued += 1;
    Ok(())
}

/// Why a completed read is unusable.
#[derive(Debug, Clone, Copy)]
enum ReadFail {
    Errno(Errno),
    Short { got: u64, want: u64 },
}

impl ReadFail {
    fn at(self, at: ChainAt) -> ChainError {
        match self {
            Self::Errno(errno) => ChainError::Io { at, errno },
            Self::Short { got, want } => ChainError::ShortRead { at, got, want },
        }
    }
}

/// The data view of a completed read: min(4 KiB, bytes read after the requested byte), which is
/// at least the requested size.
fn check_read(res: i32, op: &Op) -> Result<usize, ReadFail> {
    if res < 0 {
        return Err(ReadFail::Errno(Errno::from_raw(-res)));
    }
    let got = res as usize;
    let skip = op.skip as usize;
    if got < skip + op.size as usize {
        let got = got.saturating_sub(skip) as u64;
        return Err(ReadFail::Short { got, want: u64::from(op.size) });
    }
    debug_assert!(got <= SLOT_BUFFER_BYTES);
    Ok((got - skip).min(DATA_VIEW_BYTES))
}
