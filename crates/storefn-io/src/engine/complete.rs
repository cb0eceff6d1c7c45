//! Completion: reaping CQEs in batches, running the storage function on each completed block
//! outside the reap loop, checking raw-mode staleness and delivering finished chains.

use super::range::RANGE_USER_DATA;
use super::submit::add_request;
use super::{ChainStats, Completion, Engine, Kind, Op, State, PROBE_USER_DATA};
use crate::digest::DigestError;
use crate::error::{ChainAt, ChainError, EngineError, Errno};
use crate::limits::{DATA_VIEW_BYTES, MAX_FANOUT, SCRATCH_BYTES};
use crate::StorageFn;

impl Engine {
    /// Moves a chain with nothing outstanding to `ready`.
    pub(super) fn maybe_finish(&mut self, ci: usize) {
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
    pub(super) fn raw_stale(&mut self, file: u32, epoch: u32) -> Option<&'static str> {
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
    pub(super) fn pass<P, F>(
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

    pub(super) fn drain_cq(&mut self) -> usize {
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

    pub(super) fn on_cqe<P: StorageFn + ?Sized>(&mut self, ud: u64, res: i32, prog: &mut P) {
        if ud == PROBE_USER_DATA {
            return;
        }
        if ud & RANGE_USER_DATA != 0 {
            self.on_range_cqe((ud & !RANGE_USER_DATA) as usize, res);
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
                    Kind::Range => unreachable!("range reads complete in on_range_cqe"),
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

    pub(super) fn invoke<P: StorageFn + ?Sized>(
        &mut self,
        ci: usize,
        b: u16,
        op: &Op,
        view: usize,
        prog: &mut P,
    ) {
        // SAFETY: buffer b's read has completed (its CQE is being handled) and the buffer is not
        // reissued before this function returns; `skip + view <= slot_bytes` (check_read).
        let data =
            unsafe { std::slice::from_raw_parts(self.buf_ptr(b).add(op.skip as usize), view) };
        let sp = self.scratch_ptr(ci);
        // SAFETY: the scratch of slot ci belongs to this chain alone, and `data` (buffer region)
        // and the chain table are disjoint from it.
        let scratch = unsafe { std::slice::from_raw_parts_mut(sp, SCRATCH_BYTES) };
        let lim = self.request_limits();
        let c = &mut self.chains[ci];
        c.ctx.reset_outputs();
        c.ctx.slot = u32::from(op.pair);
        c.ctx.data = data.as_ptr() as u64;
        c.ctx.data_len = data.len() as u64;
        c.ctx.scratch = sp as u64;
        c.invocations += 1;
        prog.on_block(c.token, op.addr, &data[..op.size as usize]);
        if let Err(fault) = prog.invoke(c.token, &mut c.ctx, data, scratch) {
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
            if let Err(e) = add_request(c, &self.files, lim, addr, size, pair as u8) {
                c.error = Some(e);
                return;
            }
        }
    }

    pub(super) fn serve_waiting(&mut self) {
        while !self.free_bufs.is_empty() {
            let Some(ci) = self.waiting.pop_front() else { break };
            let ci = ci as usize;
            self.chains[ci].queued = false;
            self.issue(ci);
        }
    }

    pub(super) fn flush(&mut self) -> Result<(), EngineError> {
        if self.unsubmitted {
            self.enter(0)?;
        }
        Ok(())
    }

    /// Submits pushed SQEs and waits for `want` completions (retrying on EINTR).
    pub(super) fn enter(&mut self, want: usize) -> Result<(), EngineError> {
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

    pub(super) fn deliver<F: FnMut(Completion<'_>)>(&mut self, on_done: &mut F) -> usize {
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
            let range = c.range.take();
            let ok = result.is_ok();
            let (scratch, data): (&[u8], &[u8]) = match (c.kind, plain) {
                // SAFETY: a plain read's held buffer is not reissued until it is freed below.
                (Kind::Plain, Some((b, skip, len))) => (&[], unsafe {
                    std::slice::from_raw_parts(
                        self.bufs.base().add(usize::from(b) * self.slot_bytes + skip as usize),
                        len as usize,
                    )
                }),
                (Kind::Plain, None) => (&[], &[]),
                (Kind::Range, _) => {
                    self.ranges_live -= 1;
                    match range {
                        // SAFETY: the read into the caller's buffer has completed; the
                        // `submit_range` contract keeps the buffer alive and untouched until
                        // this delivery, and the slice does not outlive the callback.
                        Some(d) if ok => (&[], unsafe { d.data() }),
                        _ => (&[], &[]),
                    }
                }
                // SAFETY: the finished chain's scratch is not touched until its slot is reused,
                // which needs `&mut self` after the callback returns.
                (Kind::Xrp, _) => (unsafe { std::slice::from_raw_parts(sp, SCRATCH_BYTES) }, &[]),
            };
            let (token, file) = (c.token, c.file);
            c.state = State::Free;
            on_done(Completion { token, result, scratch, data });
            if let Some((b, _, _)) = plain {
                self.free_bufs.push(b);
            }
            self.free_chains.push(ci as u32);
            self.live -= 1;
            self.chain_delivered(file);
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
}

pub(super) fn ring_error(e: &EngineError) -> ChainError {
    match e {
        EngineError::Submit { errno } => ChainError::Ring { errno: *errno },
        _ => ChainError::Ring { errno: Errno::Other(0) },
    }
}

/// Why a completed read is unusable.
#[derive(Debug, Clone, Copy)]
pub(super) enum ReadFail {
    Errno(Errno),
    Short { got: u64, want: u64 },
}

impl ReadFail {
    pub(super) fn at(self, at: ChainAt) -> ChainError {
        match self {
            Self::Errno(errno) => ChainError::Io { at, errno },
            Self::Short { got, want } => ChainError::ShortRead { at, got, want },
        }
    }
}

/// The data view of a completed read: min(max(requested size, 4 KiB), bytes read after the
/// requested byte), which is at least the requested size: XRP's 4 KiB window for hops up to
/// 4 KiB, the requested size for larger hops.
pub(super) fn check_read(res: i32, op: &Op) -> Result<usize, ReadFail> {
    if res < 0 {
        return Err(ReadFail::Errno(Errno::from_raw(-res)));
    }
    let got = res as usize;
    let skip = op.skip as usize;
    if got < skip + op.size as usize {
        let got = got.saturating_sub(skip) as u64;
        return Err(ReadFail::Short { got, want: u64::from(op.size) });
    }
    Ok((got - skip).min((op.size as usize).max(DATA_VIEW_BYTES)))
}
