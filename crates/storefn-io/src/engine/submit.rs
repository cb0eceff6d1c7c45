//! Submission: chain and plain-read slots, request validation, buffers and SQEs (a hop is
//! queued on the chain until a buffer frees up; SQEs go out in one `io_uring_enter` per pass).

use io_uring::{opcode, types};

use super::{Chain, Engine, Kind, Op, Req, State};
use crate::error::{ChainError, SubmitError};
use crate::file::{resolve, widen, FileEntry, FileId, ResolveError};
use crate::limits::{MAX_OUTSTANDING_PER_CHAIN, MAX_RANGE_BYTES, SCRATCH_BYTES};

impl Engine {
    pub(super) fn buf_ptr(&self, b: u16) -> *mut u8 {
        debug_assert!(usize::from(b) < self.cfg.buffers);
        // SAFETY: b < buffers, so the offset is inside the region.
        unsafe { self.bufs.base().add(usize::from(b) * self.slot_bytes) }
    }

    pub(super) fn scratch_ptr(&self, ci: usize) -> *mut u8 {
        debug_assert!(ci < self.cfg.chains);
        debug_assert!((ci + 1) * SCRATCH_BYTES <= self.scratch.len());
        // SAFETY: ci < chains, so the offset is inside the region.
        unsafe { self.scratch.base().add(ci * SCRATCH_BYTES) }
    }

    pub(super) fn push(&mut self, sqe: &io_uring::squeue::Entry) {
        // Reads in flight + SQEs pushed <= buffers <= SQ entries (check_config), so the queue
        // always has room; a failure here is a bookkeeping bug.
        // SAFETY: the SQE reads into a registered buffer that belongs to this op alone until its
        // CQE is reaped, and into a registered file that stays open while the engine lives.
        let pushed = unsafe { self.ring.submission().push(sqe) };
        assert!(pushed.is_ok(), "submission queue full: in-flight accounting is broken");
        self.unsubmitted = true;
    }

    pub(super) fn alloc_chain(
        &mut self,
        kind: Kind,
        file: FileId,
        start: u64,
        token: u64,
    ) -> Result<usize, SubmitError> {
        self.file_usable(file)?;
        let ci = self.free_chains.pop().ok_or(SubmitError::Full { chains: self.cfg.chains })?;
        self.chain_started(file);
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

    pub(super) fn submit_plain(
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

    pub(super) fn start(&mut self, ci: usize, offset: u64, len: u64) {
        let lim = self.request_limits();
        let r = add_request(&mut self.chains[ci], &self.files, lim, offset, len, 0);
        if let Err(e) = r {
            self.chains[ci].error = Some(e);
        }
        self.issue(ci);
        self.maybe_finish(ci);
    }

    /// What [`add_request`] checks a request against.
    pub(super) fn request_limits(&self) -> Limits {
        Limits { max_hops: self.cfg.max_hops, hop_bytes: self.cfg.hop_bytes }
    }

    /// Issues the chain's pending requests while buffers last; queues it otherwise.
    pub(super) fn issue(&mut self, ci: usize) {
        if self.chains[ci].kind == Kind::Range {
            self.issue_range(ci);
            return;
        }
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
            assert!(len <= self.slot_bytes as u64, "widened read exceeds the slot buffer");
            self.ops[usize::from(b)] =
                Op { chain: ci as u32, pair: r.pair, hop: r.hop, addr: r.addr, size: r.size, skip };
            if r.device {
                let file = self.chains[ci].file;
                let epoch = self.chains[ci].raw_epoch;
                if let Some(fd) = self.inline_device_fd(file, epoch) {
                    // SAFETY: buffer b belongs to this op alone until its completion is
                    // handled and holds slot_bytes >= len bytes (asserted above).
                    let res = unsafe { read_inline(fd, self.buf_ptr(b), len, start) };
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
    pub(super) fn inline_device_fd(&self, file: u32, epoch: u32) -> Option<std::os::fd::RawFd> {
        let raw = self.files.get(file as usize)?.as_ref()?.raw.as_ref()?;
        (raw.inline && raw.epoch == epoch).then(|| raw.access.device_fd())
    }
}

/// One synchronous O_DIRECT read of `len` bytes at `offset` into `dst`: the byte count or
/// `-errno`, as a CQE has.
///
/// # Safety
/// `dst` is valid for `len` bytes of writes and nothing else reads or writes them meanwhile;
/// `fd` is open.
pub(super) unsafe fn read_inline(
    fd: std::os::fd::RawFd,
    dst: *mut u8,
    len: u64,
    offset: u64,
) -> i32 {
    let Ok(off) = libc::off_t::try_from(offset) else { return -libc::EINVAL };
    loop {
        // SAFETY: the caller's contract: `dst` holds `len` writable bytes no one else touches.
        let n = unsafe { libc::pread(fd, dst.cast(), len as usize, off) };
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

/// The bounds [`add_request`] checks: the hop limit and the largest hop (a range read's bound
/// is [`MAX_RANGE_BYTES`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_hops: u32,
    pub(super) hop_bytes: usize,
}

/// Validates one request against the limits and the target and queues it on the chain.
pub(super) fn add_request(
    c: &mut Chain,
    files: &[Option<FileEntry>],
    lim: Limits,
    addr: u64,
    size: u64,
    pair: u8,
) -> Result<(), ChainError> {
    let hop = c.issued + 1;
    let at = c.at(hop, addr);
    let max = if c.kind == Kind::Range { MAX_RANGE_BYTES } else { lim.hop_bytes };
    if size == 0 || size > max as u64 {
        return Err(ChainError::RequestTooLarge { at, size, max });
    }
    if c.issued >= lim.max_hops {
        return Err(ChainError::ChainTooLong { at, max: lim.max_hops });
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
