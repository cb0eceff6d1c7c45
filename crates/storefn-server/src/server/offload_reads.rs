//! DDS's offloaded reads, zero copy: each is an io_uring `READ` (on the worker's own small
//! ring, next to its storefn-io engine) straight into the data bytes of a complete one-message
//! response frame; when it completes, that frame is queued on the connection and written to
//! the socket from the same buffer. The worker thread never blocks on the device: a page-cache
//! hit completes inline in the kernel, a miss goes to io_uring's workers.
//!
//! Why not the storefn-io engine: its plain reads land in its own registered slot buffers and
//! are bounded by `MAX_READ_BYTES` per submit, so they would add copies (slot -> staging ->
//! frame) rather than remove one (docs/design/dds.md, "Zero copy, exactly").
//!
//! **Buffer lifetime (the soundness argument).** A read in flight writes into
//! `slot.frame.buf[at..at + size]` and reads `slot.file`'s descriptor. Both are owned by the
//! slot from submission until its completion is reaped: the slot is only taken (and the frame
//! reused or dropped) in [`OffloadReads::reap`], after the kernel posted the completion, and
//! the frame's `Vec` is not resized while in flight. Dropping `OffloadReads` with reads in
//! flight first waits for all of them (`Drop`), so the kernel never writes freed memory.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use io_uring::{opcode, types, IoUring};

use super::offload::ReadCheck;
use storefn_wire::FrameBuf;

use crate::limits::MAX_OFFLOAD_READS;

/// One read in flight and what its answer needs.
#[derive(Debug)]
pub(crate) struct ReadSlot {
    pub conn: u32,
    pub conn_gen: u32,
    pub req_id: u64,
    /// Keeps the descriptor open until the read completes.
    _file: Arc<File>,
    /// The response frame: header, message header, OFFLOAD prefix, then `size` data bytes the
    /// read fills.
    pub frame: FrameBuf,
    pub msg_start: usize,
    pub data_at: usize,
    pub check: ReadCheck,
    /// The request message, for the fallback forward when the read may have raced a change.
    pub msg: Vec<u8>,
    /// When the read was queued (the time split's device part runs to its reaped completion).
    pub queued_at: std::time::Instant,
}

/// The worker's offload ring and its slots.
pub(crate) struct OffloadReads {
    ring: IoUring,
    slots: Vec<Option<ReadSlot>>,
    free: Vec<u32>,
    /// Submitted and not reaped.
    pub live: usize,
    /// Queued in the submission queue, not yet submitted.
    unsubmitted: usize,
    /// Completions of one reap (reused: no allocation per reap).
    done: Vec<(u64, i32)>,
}

impl std::fmt::Debug for OffloadReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadReads").field("live", &self.live).finish_non_exhaustive()
    }
}

impl OffloadReads {
    pub fn new() -> std::io::Result<Self> {
        let depth = u32::try_from(MAX_OFFLOAD_READS).expect("small");
        Ok(Self {
            ring: IoUring::new(depth)?,
            slots: (0..MAX_OFFLOAD_READS).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            live: 0,
            unsubmitted: 0,
            done: Vec::with_capacity(MAX_OFFLOAD_READS),
        })
    }

    /// The ring's fd: `poll` reports it readable when completions wait.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }

    /// Whether another read can start.
    pub fn has_room(&self) -> bool {
        !self.free.is_empty()
    }

    /// Queues a read of `size` bytes at `offset` of `file` into `frame.buf[data_at..]` (the
    /// caller sized the frame); [`submit`](Self::submit) sends the queued reads.
    ///
    /// # Panics
    /// Without room ([`has_room`](Self::has_room) first) or with a frame too short.
    #[allow(clippy::too_many_arguments)]
    pub fn queue(
        &mut self,
        conn: u32,
        conn_gen: u32,
        req_id: u64,
        file: Arc<File>,
        offset: u64,
        mut frame: FrameBuf,
        msg_start: usize,
        data_at: usize,
        check: ReadCheck,
        msg: Vec<u8>,
    ) {
        let slot = self.free.pop().expect("caller checked has_room");
        let size = frame.buf.len() - data_at;
        let ptr = frame.buf[data_at..].as_mut_ptr();
        let sqe = opcode::Read::new(
            types::Fd(file.as_raw_fd()),
            ptr,
            u32::try_from(size).expect("<= MAX_OFFLOAD_DATA_BYTES"),
        )
        .offset(offset)
        .build()
        .user_data(u64::from(slot));
        self.slots[slot as usize] = Some(ReadSlot {
            conn,
            conn_gen,
            req_id,
            _file: file,
            frame,
            msg_start,
            data_at,
            check,
            msg,
            queued_at: std::time::Instant::now(),
        });
        // SAFETY: the entry's buffer (`frame.buf[data_at..]`, `size` bytes) and descriptor are
        // owned by slot `slot` until its completion is reaped (module comment); `frame` was
        // moved into the slot, which moves the Vec's header, not its heap bytes.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() {
            // The queue holds MAX_OFFLOAD_READS entries and at most that many slots exist, so
            // it is full only of unsubmitted entries: submit them and retry once.
            let _ = self.ring.submit();
            self.unsubmitted = 0;
            // SAFETY: as above.
            unsafe { self.ring.submission().push(&sqe) }.expect("room after submit");
        }
        self.unsubmitted += 1;
        self.live += 1;
    }

    /// Submits the queued reads (one system call for the batch).
    pub fn submit(&mut self) -> std::io::Result<()> {
        if self.unsubmitted > 0 {
            self.ring.submit()?;
            self.unsubmitted = 0;
        }
        Ok(())
    }

    /// Hands each completed read to `f(slot, result)` (bytes read or -errno); the slot is the
    /// caller's from here (its frame can be sent or reused).
    pub fn reap(&mut self, mut f: impl FnMut(ReadSlot, i32)) {
        if self.live == 0 {
            return;
        }
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        done.extend(self.ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
        for &(slot, res) in &done {
            let Some(s) = usize::try_from(slot).ok().and_then(|i| self.slots.get_mut(i)) else {
                continue;
            };
            let Some(s) = s.take() else { continue };
            self.free.push(u32::try_from(slot).expect("slot index"));
            self.live -= 1;
            f(s, res);
        }
        self.done = done;
    }
}

impl Drop for OffloadReads {
    /// Waits for every read in flight: the kernel must not write into freed frames.
    fn drop(&mut self) {
        let _ = self.submit();
        while self.live > 0 {
            if self.ring.submit_and_wait(1).is_err() {
                // Only EINTR and the like: the reads of regular files complete regardless.
                std::thread::yield_now();
            }
            self.reap(|_, _| {});
        }
    }
}
