//! READ: one range read of the engine straight into a buffer of the thread's pool, behind room
//! for the answer's head; the answer (head + data) is sent from that buffer as a frame of its
//! own, with no copy of the data.

use storefn_io::{Completion, RangeBuf};

use super::job::{token, Job, JobHead, Target};
use super::out::{open_frame, OutFrame};
use super::ranges::place;
use super::{Conn, Worker};
use crate::server::files::FileFail;
use storefn_wire::layout::{FRAME_HEADER_BYTES, MSG_HEADER_BYTES, READ_R_OFF_DATA};
use storefn_wire::{op, put_answer_head, put_status, StatusCode};

/// Bytes of a READ answer in front of its data: frame header, message header, file version.
pub(super) const READ_HEAD_BYTES: usize = FRAME_HEADER_BYTES + MSG_HEADER_BYTES + READ_R_OFF_DATA;

/// A READ's own state.
#[derive(Debug, Default)]
pub(super) struct ReadJob {
    /// Taken from the pool when the read is submitted; the kernel's until its completion.
    pub(super) buf: Option<RangeBuf>,
    /// Where the data lands in `buf` (the head goes right before it).
    pub(super) at: usize,
    /// The read completed with all its bytes: answer from the buffer.
    pub(super) landed: bool,
}

impl ReadJob {
    pub(super) fn complete(
        &mut self,
        h: &JobHead,
        c: &Completion<'_>,
        conn: Option<&mut Conn>,
        code: u8,
    ) {
        match &c.result {
            Ok(_) => self.landed = true,
            Err(e) => {
                if let Some(conn) = conn {
                    let (st, m) = crate::server::files::chain_fail(e);
                    open_frame(conn);
                    put_status(&mut conn.frame, h.req_id, code, st, &m);
                }
            }
        }
    }
}

impl Worker<'_> {
    pub(super) fn queue_read(&mut self, ci: u32, req_id: u64, t: Target<'_>) {
        self.queue(ci, req_id, op::READ, t, None, |_, h, _| Job::Read(h, ReadJob::default()));
    }

    pub(super) fn submit_read(&mut self, ji: u32) -> Result<(), FileFail> {
        let Some(Job::Read(h, r)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a READ job")
        };
        let (at, need) = place(h.offset, h.len, READ_HEAD_BYTES);
        let buf = r.buf.insert(
            self.ranges.take(need).map_err(|e| (StatusCode::Io, format!("read buffer: {e}")))?,
        );
        r.at = at;
        // SAFETY: the buffer is the job's (`r.buf`) from here until its completion is
        // delivered by `reap`: the job is released only after that (or, on a refused submit,
        // with no read in flight), and the engine, dropped before the jobs, waits for every
        // read in flight; nothing touches the buffer meanwhile.
        let res = unsafe {
            self.engine.submit_range(h.file, h.offset, u64::from(h.len), buf, at, token(ji))
        };
        res.map_err(|e| (StatusCode::Io, format!("submit: {e}")))
    }

    /// Writes the answer's head in front of the data and queues the buffer on the connection.
    pub(super) fn answer_read(&mut self, ji: u32) {
        let Some(Job::Read(h, r)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("a READ job")
        };
        let at = r.at;
        let mut buf = r.buf.take().expect("a landed READ holds its buffer");
        let start = at - READ_HEAD_BYTES;
        let n = put_answer_head(
            &mut buf.as_mut_slice()[start..at],
            h.req_id,
            op::READ,
            &h.version.to_bytes(),
            h.len as usize,
        );
        debug_assert_eq!(n, READ_HEAD_BYTES);
        let bytes = start..at + h.len as usize;
        let c = self.conns[h.conn as usize].as_mut().expect("checked live");
        c.push_out(OutFrame { buf, bytes });
    }
}
