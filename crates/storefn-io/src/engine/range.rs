//! Range reads: any length up to [`MAX_RANGE_BYTES`] per read, straight into a caller-owned,
//! pinned [`RangeBuf`] (registered with the ring where there is room), through the same chain
//! slots, raw-mode translation, staleness check and batched reaping as every other read.
//!
//! Placement: the requested bytes land at `buf[at..at + len]` and the read covers the aligned
//! blocks around them, so `at` must equal `offset` modulo [`MAX_BLOCK_ALIGN`]: the cover then
//! starts at or after `buf[0]` and ends by the next 4 KiB boundary after `at + len`, inside
//! the buffer (whose capacity is a multiple of 4 KiB). No staging copy: the caller reads the
//! bytes where the device put them.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use io_uring::{opcode, types};

use super::complete::check_read;
use super::submit::read_inline;
use super::{Engine, Kind, NoFunction, Op, State, SYNC_TOKEN};
use crate::error::{ChainError, EngineError, Errno, SubmitError};
use crate::file::{widen, FileId};
use crate::limits::{BUFFER_ALIGN, MAX_BLOCK_ALIGN, MAX_RANGE_BUF_BYTES, MAX_RANGE_BYTES};
use crate::region::Region;

/// Bit set in the `user_data` of a range read (the rest is its chain slot). Chain reads use
/// buffer indices (< 2^14) and the probe `u64::MAX`, which is checked first.
pub(super) const RANGE_USER_DATA: u64 = 1 << 62;

/// Source of [`RangeBuf`] identities: a registration slot names the buffer it holds by this id,
/// so a dropped buffer's slot is never mistaken for a new buffer at the same address (the
/// kernel still pins the old pages). Relaxed: only uniqueness matters, no other memory is
/// published through it.
static NEXT_RANGE_BUF_ID: AtomicU64 = AtomicU64::new(1);

/// A caller-owned buffer for range reads: zeroed, [`BUFFER_ALIGN`]-aligned, a whole number of
/// 4 KiB blocks, allocated once and never moved or resized (moving the `RangeBuf` value moves
/// only its handle), so its address is stable for io_uring and for registration.
#[derive(Debug)]
pub struct RangeBuf {
    region: Region,
    id: u64,
}

// SAFETY: a RangeBuf is the sole owner of its heap region (like a `Box<[u8]>`): no other handle
// to the memory exists and nothing in it is tied to the thread that allocated it, so moving it
// to another thread is sound. A read in flight into it is the `submit_range` contract's
// business, unchanged by which thread holds the value (the owner may not touch or drop it until
// the read's delivery, wherever it is).
unsafe impl Send for RangeBuf {}

impl RangeBuf {
    /// A buffer of `capacity` bytes rounded up to a multiple of 4 KiB. Size it with
    /// [`crate::limits::range_buf_bytes`] for [`Engine::read_range`] of a given length.
    ///
    /// # Errors
    /// [`EngineError::RangeBufSize`] for 0 or more than [`MAX_RANGE_BUF_BYTES`];
    /// [`EngineError::NoMemory`].
    pub fn new(capacity: usize) -> Result<Self, EngineError> {
        if capacity == 0 || capacity > MAX_RANGE_BUF_BYTES {
            return Err(EngineError::RangeBufSize { capacity, max: MAX_RANGE_BUF_BYTES });
        }
        let region = Region::new(capacity.next_multiple_of(BUFFER_ALIGN), BUFFER_ALIGN)?;
        Ok(Self { region, id: NEXT_RANGE_BUF_ID.fetch_add(1, Ordering::Relaxed) })
    }

    /// Bytes the buffer holds (a multiple of 4 KiB).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.region.len()
    }

    /// The whole buffer.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is `len` initialised (zeroed) bytes owned by `self`; the shared
        // borrow of `self` excludes `&mut` access, and a read in flight into it exists only
        // under `submit_range`'s contract, which forbids this access until its delivery.
        unsafe { std::slice::from_raw_parts(self.region.base(), self.region.len()) }
    }

    /// The whole buffer, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, with the exclusive borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.region.base(), self.region.len()) }
    }

    /// Where `data` (a completion's bytes) starts in this buffer, if it lies inside it.
    #[must_use]
    pub fn offset_of(&self, data: &[u8]) -> Option<usize> {
        let base = self.region.base() as usize;
        let p = data.as_ptr() as usize;
        (p >= base && p + data.len() <= base + self.region.len()).then(|| p - base)
    }
}

/// Aborts the process if dropped while unwinding: reads into a caller's buffer may still be
/// in flight, and returning by panic would end the buffer's borrow under the kernel.
struct AbortOnUnwind(&'static str);

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("storefn-io: panic during {} with reads in flight", self.0);
            std::process::abort();
        }
    }
}

/// A registration slot: the id of the [`RangeBuf`] registered there (0: empty).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RangeReg {
    id: u64,
}

/// A range read's destination: the caller's buffer, where the requested bytes land, and,
/// once issued, how many bytes before them the aligned cover starts.
#[derive(Debug, Clone, Copy)]
pub(super) struct RangeDst {
    base: *mut u8,
    cap: usize,
    at: usize,
    len: u32,
    /// Buffer-table index when the buffer is registered with this engine.
    reg: Option<u16>,
    skip: u32,
}

impl RangeDst {
    /// The requested bytes.
    ///
    /// # Safety
    /// The read has completed successfully and the caller's buffer is alive and not written
    /// for as long as the slice is used (`submit_range`'s contract).
    pub(super) unsafe fn data<'a>(&self) -> &'a [u8] {
        // SAFETY: at + len <= cap (checked at submit); the rest is the caller's contract.
        unsafe { std::slice::from_raw_parts(self.base.add(self.at), self.len as usize) }
    }
}

/// Checks a range read's arguments against the limits and the buffer.
fn check_range(offset: u64, len: u64, cap: usize, at: usize) -> Result<(), SubmitError> {
    let bad = |why| Err(SubmitError::BadRange { offset, len, at, capacity: cap, why });
    if len > MAX_RANGE_BYTES as u64 {
        return Err(SubmitError::RangeTooLong { len, max: MAX_RANGE_BYTES });
    }
    if len == 0 {
        return bad("the range is empty");
    }
    if at as u64 % MAX_BLOCK_ALIGN as u64 != offset % MAX_BLOCK_ALIGN as u64 {
        return bad("`at` must equal `offset` modulo 4096 (the read covers whole blocks)");
    }
    if at.checked_add(len as usize).is_none_or(|end| end > cap) {
        return bad("the range does not fit the buffer at `at`");
    }
    Ok(())
}

impl Engine {
    /// Registers `buf` with the ring (io_uring fixed buffer): its reads then skip pinning the
    /// pages per read. `Ok(false)`: this engine has no range-buffer slots (a kernel without
    /// sparse buffer tables, or `range_buf_slots` = 0); reads into it still work, unregistered.
    /// Registering a registered buffer again is a no-op. Unregister a buffer before dropping
    /// it, or its slot (and the pinned pages) stays taken until the engine is dropped; a
    /// dropped buffer's slot is never used for another buffer's reads.
    ///
    /// # Errors
    /// [`EngineError::RangeBufSlotsFull`]; [`EngineError::RegisterRangeBuf`].
    pub fn register_range_buf(&mut self, buf: &RangeBuf) -> Result<bool, EngineError> {
        if self.range_regs.is_empty() {
            return Ok(false);
        }
        if self.range_reg_index(buf).is_some() {
            return Ok(true);
        }
        let slots = self.range_regs.len();
        let slot = self
            .range_regs
            .iter()
            .position(|r| r.id == 0)
            .ok_or(EngineError::RangeBufSlotsFull { slots })?;
        let iov = libc::iovec { iov_base: buf.region.base().cast(), iov_len: buf.capacity() };
        let index = (self.cfg.buffers + slot) as u32;
        // SAFETY: the iovec describes `buf`'s allocation. The kernel pins its pages, so the
        // registration stays valid memory even if `buf` is dropped first; reads use the slot
        // only for the buffer whose id it records (`range_reg_index`).
        unsafe { self.ring.submitter().register_buffers_update(index, &[iov], None) }.map_err(
            |e| EngineError::RegisterRangeBuf { bytes: buf.capacity(), errno: Errno::from_io(&e) },
        )?;
        self.range_regs[slot].id = buf.id;
        Ok(true)
    }

    /// Drops `buf`'s registration (a no-op if it has none). Reads in flight into it are
    /// unaffected (the kernel keeps the pages pinned until they complete).
    ///
    /// # Errors
    /// [`EngineError::RegisterRangeBuf`].
    pub fn unregister_range_buf(&mut self, buf: &RangeBuf) -> Result<(), EngineError> {
        let Some(index) = self.range_reg_index(buf) else { return Ok(()) };
        let empty = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
        // SAFETY: an empty iovec clears the slot; no memory is described.
        unsafe { self.ring.submitter().register_buffers_update(u32::from(index), &[empty], None) }
            .map_err(|e| EngineError::RegisterRangeBuf { bytes: 0, errno: Errno::from_io(&e) })?;
        self.range_regs[usize::from(index) - self.cfg.buffers].id = 0;
        Ok(())
    }

    /// True when reads into `buf` use its registration with this engine.
    #[must_use]
    pub fn range_buf_registered(&self, buf: &RangeBuf) -> bool {
        self.range_reg_index(buf).is_some()
    }

    fn range_reg_index(&self, buf: &RangeBuf) -> Option<u16> {
        let slot = self.range_regs.iter().position(|r| r.id == buf.id)?;
        Some(u16::try_from(self.cfg.buffers + slot).expect("buffer table <= MAX_BUFFERS"))
    }

    /// Submits a range read: `[offset, offset + len)` of `file` lands at `buf[at..at + len]`.
    /// Its completion (from [`Engine::reap`]/[`Engine::wait`], with any storage function) has
    /// `data` = exactly those bytes, in `buf`; on error `data` is empty and `result` names the
    /// offset (`OutOfRange` past the end of the file, `Io`, `ShortRead`, raw mode's `Stale`).
    /// The read may also write the rest of the aligned blocks around the range:
    /// `buf[at & !4095 .. (at + len).next_multiple_of(4096)]`.
    ///
    /// # Errors
    /// Refused before any I/O: [`SubmitError::RangeTooLong`] above [`MAX_RANGE_BYTES`],
    /// [`SubmitError::BadRange`] (empty, `at` not congruent to `offset` modulo 4096, or not
    /// fitting `buf`), [`SubmitError::RangeReadsFull`], [`SubmitError::Full`], unknown file.
    ///
    /// # Safety
    /// As with any io_uring read into user memory, the kernel writes `buf` after this call
    /// returns. Until the completion carrying `token` for this read has been delivered to the
    /// caller's callback (or the engine has been dropped, which waits for every read), the
    /// caller must not drop `buf`, and must not read or write the blocks the read covers
    /// (above) through `buf` or any other path; the completion's `data` borrow ends with the
    /// callback. Moving the `RangeBuf` value is fine (its memory does not move).
    pub unsafe fn submit_range(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        buf: &mut RangeBuf,
        at: usize,
        token: u64,
    ) -> Result<(), SubmitError> {
        check_range(offset, len, buf.capacity(), at)?;
        if self.ranges_live >= self.cfg.range_reads {
            return Err(SubmitError::RangeReadsFull { max: self.cfg.range_reads });
        }
        let reg = self.range_reg_index(buf);
        let ci = self.alloc_chain(Kind::Range, file, offset, token)?;
        self.chains[ci].range = Some(RangeDst {
            base: buf.region.base(),
            cap: buf.capacity(),
            at,
            len: len as u32,
            reg,
            skip: 0,
        });
        self.ranges_live += 1;
        self.start(ci, offset, len);
        Ok(())
    }

    /// Reads `[offset, offset + len)` of `file` into `buf` and returns where the bytes are
    /// (`buf.as_slice()[range]`; they start at `offset % 4096`). Spans longer than
    /// [`MAX_RANGE_BYTES`] are cut at aligned file offsets into concurrent range reads (up to
    /// `range_reads` in flight). Needs `buf.capacity() >=
    /// `[`range_buf_bytes`](crate::limits::range_buf_bytes)`(len)` in general (exactly
    /// `offset % 4096 + len`, rounded up to 4 KiB). The engine must be idle.
    ///
    /// # Errors
    /// [`ChainError::NotIdle`]; [`ChainError::Submit`] with [`SubmitError::BadRange`] (empty,
    /// does not fit `buf`); the first failed read's error (its `at` names the offset).
    pub fn read_range(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        buf: &mut RangeBuf,
    ) -> Result<Range<usize>, ChainError> {
        if self.live != 0 {
            return Err(ChainError::NotIdle { active: self.live });
        }
        if self.cfg.range_reads == 0 {
            return Err(ChainError::Submit(SubmitError::RangeReadsFull { max: 0 }));
        }
        let head = (offset % MAX_BLOCK_ALIGN as u64) as usize;
        let cap = buf.capacity();
        let bad = |why| {
            ChainError::Submit(SubmitError::BadRange { offset, len, at: head, capacity: cap, why })
        };
        let end = offset.checked_add(len).ok_or_else(|| bad("offset + len overflows"))?;
        if len == 0 {
            return Err(bad("the range is empty"));
        }
        if (head as u64).checked_add(len).is_none_or(|e| e > cap as u64) {
            return Err(bad("the range does not fit the buffer"));
        }
        let origin = offset - head as u64;
        let (mut next, mut failed) = (offset, None);
        // A panic between the first submit and the last completion (a bookkeeping assertion)
        // would unwind past reads into `buf`, which the caller could then free.
        let guard = AbortOnUnwind("a synchronous range read");
        while next < end || self.live > 0 {
            while next < end && failed.is_none() && self.free_range_reads() > 0 {
                let piece_end = end
                    .min(next - (next - origin) % MAX_RANGE_BYTES as u64 + MAX_RANGE_BYTES as u64);
                let at = (next - origin) as usize;
                // SAFETY: `buf` is borrowed exclusively for this whole call, pieces cover
                // disjoint aligned blocks (cut at aligned offsets), and every read is reaped
                // before this returns (`reap_all_ranges` aborts rather than return early).
                let r =
                    unsafe { self.submit_range(file, next, piece_end - next, buf, at, SYNC_TOKEN) };
                if let Err(e) = r {
                    failed = Some(ChainError::Submit(e));
                }
                next = piece_end;
            }
            if failed.is_some() && self.live == 0 {
                break;
            }
            self.wait_ranges(&mut failed);
            if failed.is_some() {
                next = end;
            }
        }
        std::mem::forget(guard);
        failed.map_or(Ok(head..head + len as usize), Err)
    }

    /// Waits for at least one range read of a synchronous call, keeping the first error. A
    /// ring failure here cannot be returned while reads into the caller's buffer are in
    /// flight: it is retried, and after many failures the process aborts.
    fn wait_ranges(&mut self, failed: &mut Option<ChainError>) {
        for _ in 0..1000 {
            let r = self.wait(1, &mut NoFunction, |c| {
                if let Err(e) = c.result {
                    failed.get_or_insert(e);
                }
            });
            match r {
                Ok(_) => return,
                Err(_) => std::thread::yield_now(),
            }
        }
        eprintln!("storefn-io: the ring keeps failing with range reads in flight");
        std::process::abort();
    }

    /// Issues a range read's one request (no engine buffer: the caller's).
    pub(super) fn issue_range(&mut self, ci: usize) {
        let c = &mut self.chains[ci];
        if c.npending == 0 {
            return;
        }
        let r = c.pending[0];
        c.npending = 0;
        c.last_addr = r.addr;
        let mut dst = c.range.expect("a range read has a destination");
        let (start, end) = widen(r.dev_offset, u64::from(r.size), r.align);
        let skip = r.dev_offset - start;
        // The cover must stay inside the buffer: true for file reads (align divides 4096 and
        // `at` = offset mod 4096) and for device reads (runs keep offsets mod the block).
        let cover =
            (dst.at as u64).checked_sub(skip).filter(|s| s + (end - start) <= dst.cap as u64);
        let Some(cover_at) = cover else {
            c.error = Some(ChainError::RangeCover { at: c.at(r.hop, r.addr), skip });
            return;
        };
        dst.skip = skip as u32;
        c.range = Some(dst);
        c.inflight = 1;
        let ud = RANGE_USER_DATA | ci as u64;
        // SAFETY: cover_at + (end - start) <= cap, checked above.
        let ptr = unsafe { dst.base.add(cover_at as usize) };
        let len = (end - start) as u32;
        if r.device {
            let (file, epoch) = (c.file, c.raw_epoch);
            if let Some(fd) = self.inline_device_fd(file, epoch) {
                // SAFETY: the cover lies in the caller's buffer, which `submit_range`'s
                // contract reserves for this read; the fd is open while its RawState lives.
                let res = unsafe { read_inline(fd, ptr, u64::from(len), start) };
                self.inline_cqes.push_back((ud, res));
                self.in_flight += 1;
                return;
            }
        }
        let fd = types::Fixed(r.fd_index);
        let sqe = match dst.reg {
            Some(index) => opcode::ReadFixed::new(fd, ptr, len, index).offset(start).build(),
            None => opcode::Read::new(fd, ptr, len).offset(start).build(),
        };
        self.push(&sqe.user_data(ud));
        self.in_flight += 1;
    }

    /// Handles a range read's completion.
    pub(super) fn on_range_cqe(&mut self, ci: usize, res: i32) {
        self.in_flight -= 1;
        let c = &mut self.chains[ci];
        assert!(
            c.state == State::Running && c.kind == Kind::Range && c.inflight == 1,
            "range completion for a chain slot not reading a range"
        );
        c.inflight = 0;
        c.completed += 1;
        let dst = c.range.expect("a range read has a destination");
        if c.error.is_none() {
            let op = Op {
                chain: ci as u32,
                pair: 0,
                hop: 1,
                addr: c.start,
                size: dst.len,
                skip: dst.skip,
            };
            match check_read(res, &op) {
                Ok(_) => c.done = true,
                Err(e) => c.error = Some(e.at(c.at(1, c.start))),
            }
        }
        self.maybe_finish(ci);
    }
}
