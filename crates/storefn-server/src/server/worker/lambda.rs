//! The worker's λ path (LAMBDA): a job's range is staged in the job's one range buffer by
//! range reads of the engine, [`LAMBDA_PIECE_BYTES`] each (cut at aligned file offsets, each
//! landing at its place), up to [`LAMBDA_READS_PER_JOB`] in flight, completed with everything
//! else the engine runs; once the whole range landed the program runs once over it in place,
//! on the thread's runner thread (`runs`), and its output is copied into the response.

use storefn_io::{Completion, RangeBuf};
use storefn_vm::ProgType;

use super::job::{token, Job, JobHead, Target};
use super::out::open_frame;
use super::ranges::place;
use super::{Conn, Worker};
use crate::registry::ProgHash;
use crate::server::files::FileFail;
use crate::server::{CONTENDED_LAMBDA_READS, LAMBDA_PIECE_BYTES, LAMBDA_READS_PER_JOB};
use storefn_wire::layout::{FRAME_HEADER_BYTES, MSG_HEADER_BYTES};
use storefn_wire::limits::MAX_LAMBDA_IN_BYTES;
use storefn_wire::{op, put_status, StatusCode};

// The whole range fits the largest range buffer.
const _: () = assert!(MAX_LAMBDA_IN_BYTES <= storefn_wire::limits::MAX_READ_BYTES);

/// Bytes of a LAMBDA answer in front of its output: frame header, message header, file version
/// and the program's return value.
pub(super) const LAMBDA_HEAD_BYTES: usize =
    FRAME_HEADER_BYTES + MSG_HEADER_BYTES + storefn_wire::layout::LAMBDA_R_OFF_OUT;

/// A LAMBDA request's own state.
#[derive(Debug)]
pub(super) struct LambdaJob {
    pub(super) inst: u32,
    /// Output bytes the client accepts.
    pub(super) out_cap: u32,
    /// The range's buffer: taken from the pool when the job is admitted; the kernel writes it
    /// while any piece is in flight.
    pub(super) buf: Option<RangeBuf>,
    /// Where the range starts in `buf`.
    pub(super) at: usize,
    /// Bytes of the range whose reads were submitted, and that landed.
    submitted: u32,
    landed: u32,
    /// Pieces in flight (the job is released only when none is), and how many of them
    /// completed in the current reap (each may be replaced by the next piece).
    in_flight: u32,
    reaped_now: u32,
    /// A piece failed or could not be submitted (its error is answered).
    failed: bool,
    /// The whole range landed and the run was queued for the runner (the job is released
    /// when the run is answered).
    staged: bool,
}

impl LambdaJob {
    /// Bytes of the range that landed, 0 once a piece failed (its error was the answer).
    pub(super) fn landed_ok(&self) -> u32 {
        if self.failed {
            0
        } else {
            self.landed
        }
    }

    pub(super) fn complete(
        &mut self,
        h: &JobHead,
        c: &Completion<'_>,
        conn: Option<&mut Conn>,
        code: u8,
    ) {
        self.in_flight -= 1;
        self.reaped_now += 1;
        match &c.result {
            Ok(_) => self.landed += u32::try_from(c.data.len()).expect("<= a piece"),
            Err(_) if self.failed => {} // an earlier piece failed and was answered
            Err(e) => {
                self.failed = true;
                if let Some(conn) = conn {
                    let (st, m) = crate::server::files::chain_fail(e);
                    open_frame(conn);
                    put_status(&mut conn.frame, h.req_id, code, st, &m);
                }
            }
        }
    }

    /// Its range landed and its run was queued for the runner.
    pub(super) fn staged(&self) -> bool {
        self.staged
    }

    /// Pieces in flight.
    pub(super) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The whole range landed.
    pub(super) fn ready(&self, h: &JobHead) -> bool {
        !self.failed && self.landed == h.len
    }
}

impl Worker<'_> {
    pub(super) fn queue_lambda(
        &mut self,
        ci: u32,
        req_id: u64,
        t: Target<'_>,
        hash: &ProgHash,
        out_cap: u32,
    ) {
        let prog = Some((hash, ProgType::Lambda));
        self.queue(ci, req_id, op::LAMBDA, t, prog, |_, h, inst| {
            let inst = inst.expect("LAMBDA holds its program");
            let l = LambdaJob {
                inst,
                out_cap,
                buf: None,
                at: 0,
                submitted: 0,
                landed: 0,
                in_flight: 0,
                reaped_now: 0,
                failed: false,
                staged: false,
            };
            Job::Lambda(h, l)
        });
    }

    /// Admitted: takes the range's buffer and submits the first pieces.
    pub(super) fn submit_lambda(&mut self, ji: u32) -> Result<(), FileFail> {
        let Some(Job::Lambda(h, l)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a LAMBDA job")
        };
        let (at, need) = place(h.offset, h.len, 0);
        let b = self.ranges.take(need).map_err(|e| (StatusCode::Io, format!("λ buffer: {e}")))?;
        l.buf = Some(b);
        l.at = at;
        self.submit_pieces(ji, LAMBDA_READS_PER_JOB)
    }

    /// Submits up to `most` of the job's next pieces (fewer when the engine has no room, and
    /// while another tenant shares the device, beyond one in flight only while its tenant has
    /// fewer than `CONTENDED_LAMBDA_READS` in flight).
    ///
    /// After a reap a job replaces at most the pieces that completed: the range reads they
    /// freed are its own to reuse, so no other job's replacement can take them and leave it
    /// with nothing in flight and nothing to revisit it.
    fn submit_pieces(&mut self, ji: u32, most: u32) -> Result<(), FileFail> {
        let Some(Job::Lambda(h, l)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a LAMBDA job")
        };
        let t = h.tenant as usize;
        if self.lambda_reads.len() <= t {
            self.lambda_reads.resize(t + 1, 0);
        }
        let shared = self.sched.contended(h.tenant);
        let buf = l.buf.as_mut().expect("admitted");
        let mut sent = 0;
        while l.submitted < h.len
            && sent < most
            && self.engine.free_range_reads() > 0
            && (l.in_flight == 0 || !shared || self.lambda_reads[t] < CONTENDED_LAMBDA_READS)
        {
            let start = h.offset + u64::from(l.submitted);
            let piece = u64::from(LAMBDA_PIECE_BYTES);
            let end = (start / piece + 1) * piece;
            let n = (end - start).min(u64::from(h.len - l.submitted));
            let at = l.at + l.submitted as usize;
            // SAFETY: the buffer is the job's (`l.buf`) while any piece is in flight: the job
            // is released only once none is, and the engine, dropped before the jobs, waits for
            // every read in flight; pieces cover disjoint aligned blocks, and nothing else
            // touches the buffer meanwhile.
            let r = unsafe { self.engine.submit_range(h.file, start, n, buf, at, token(ji)) };
            r.map_err(|e| (StatusCode::Io, format!("submit: {e}")))?;
            l.submitted += u32::try_from(n).expect("<= a piece");
            l.in_flight += 1;
            self.lambda_reads[t] += 1;
            sent += 1;
        }
        Ok(())
    }

    /// After the reap that completed some of a λ job's pieces: queues the run for the runner
    /// once the whole range landed, else replaces each completed piece by the next one. Returns
    /// whether the job is done (answered, nothing in flight, not waiting for its run).
    pub(super) fn finish_lambda(&mut self, ji: u32, live: bool) -> bool {
        let Some(Job::Lambda(h, l)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a LAMBDA job")
        };
        let more = std::mem::take(&mut l.reaped_now);
        if more > 0 {
            // Pieces were submitted, so the tenant has its count.
            self.lambda_reads[h.tenant as usize] -= more;
        }
        if l.staged {
            // Listed again in the reap that landed it (one listing per piece).
            return false;
        }
        if l.ready(h) {
            if !live {
                return true;
            }
            l.staged = true;
            let t = h.tenant;
            self.queue_run(ji, t);
            return false;
        }
        if !live || l.failed {
            return l.in_flight == 0;
        }
        match self.submit_pieces(ji, more) {
            Ok(()) => false,
            Err(e) => self.fail_lambda(ji, e),
        }
    }

    /// A piece could not be submitted: answers the error once (the connection is live);
    /// returns whether the job is done (no piece in flight).
    pub(super) fn fail_lambda(&mut self, ji: u32, (st, m): FileFail) -> bool {
        let Some(Job::Lambda(h, l)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a LAMBDA job")
        };
        l.failed = true;
        let (conn, req_id, idle) = (h.conn, h.req_id, l.in_flight == 0);
        self.respond_err(conn, req_id, op::LAMBDA, st, &m);
        idle
    }
}
