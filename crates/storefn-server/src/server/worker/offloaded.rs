//! DDS's offloaded reads: one range read of the thread's engine each (completed with everything
//! else it runs), straight into a range buffer behind room for the answer's head; the answer
//! (head + data) is sent from that buffer as a frame of its own. The page's bytes are copied
//! once, by the kernel, from the page cache (or the device) into the buffer the response is
//! sent from. The hook's files are registered with the engine (reopened through their
//! descriptor, buffered like the host's own writes), a few at a time.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use storefn_io::{Completion, FileId, IoMode, RangeBuf};

use super::job::{token, Job};
use super::out::OutFrame;
use super::ranges::place;
use super::{OffloadState, Worker};
use crate::server::offload::{OffloadHook, ReadCheck};
use crate::server::{DDS_ENGINE_FILES, MAX_OFFLOAD_READS};
use storefn_wire::layout::OFFLOAD_R_OFF_DATA;
use storefn_wire::layout::{FRAME_HEADER_BYTES, MSG_HEADER_BYTES};
use storefn_wire::SERVED_BY_OFFLOAD;
use storefn_wire::{op, put_answer_head, Response, StatusCode};

/// Bytes of an OFFLOAD answer in front of its data: frame header, message header, prefix.
const OFFLOAD_HEAD_BYTES: usize = FRAME_HEADER_BYTES + MSG_HEADER_BYTES + OFFLOAD_R_OFF_DATA;

/// One offloaded read in flight and what its answer needs (a [`Job`] of its own kind: it holds
/// no file slot, program or tenant-queue entry; its file is the hook's, registered below).
#[derive(Debug)]
pub(super) struct OffloadedRead {
    pub(super) conn: u32,
    pub(super) conn_gen: u32,
    pub(super) req_id: u64,
    check: ReadCheck,
    /// The request message, for the fallback forward when the read may have raced a change.
    msg: Vec<u8>,
    /// The kernel's until the completion is delivered; the data lands at `at`.
    buf: RangeBuf,
    at: usize,
    len: usize,
    queued_at: Instant,
    /// Set by the completion.
    result: Result<(), String>,
}

/// A hook file registered with the engine.
#[derive(Debug)]
struct EngineFile {
    hook_file: u32,
    /// The hook's open file (its identity: a reopened file is registered anew).
    file: Arc<std::fs::File>,
    id: FileId,
    last_used: u64,
}

/// The thread's offloaded reads: how many are in flight (each is a job), the hook's files.
#[derive(Debug, Default)]
pub(super) struct OffloadedReads {
    /// Submitted and not finished.
    pub(super) live: usize,
    files: Vec<EngineFile>,
    clock: u64,
}

impl OffloadedRead {
    /// Records the read's completion (answered after the reap, by `finish_offloaded`).
    pub(super) fn complete(&mut self, c: &Completion<'_>) {
        if let Err(e) = &c.result {
            self.result = Err(crate::server::files::chain_fail(e).1);
        }
    }
}

impl OffloadedReads {
    /// Whether another read may start.
    pub(super) fn has_room(&self) -> bool {
        self.live < MAX_OFFLOAD_READS
    }
}

/// One offloaded read as decided.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadReq {
    pub(super) ci: u32,
    pub(super) req_id: u64,
    pub(super) file: u32,
    pub(super) offset: u64,
    pub(super) size: u32,
    pub(super) epoch: u64,
}

impl Worker<'_> {
    /// The engine's file for the hook's file `hook_file` (open file `f`), registered now if
    /// it was not (or was reopened by the host).
    fn engine_file(
        &mut self,
        o: &mut OffloadState,
        hook_file: u32,
        f: &Arc<std::fs::File>,
    ) -> Result<FileId, String> {
        let r = &mut o.reads;
        r.clock += 1;
        if let Some(k) = r.files.iter().position(|e| e.hook_file == hook_file) {
            if Arc::ptr_eq(&r.files[k].file, f) {
                r.files[k].last_used = r.clock;
                return Ok(r.files[k].id);
            }
            // The engine frees the slot once the file's reads in flight are delivered.
            let _ = self.engine.close(r.files.swap_remove(k).id);
        }
        if r.files.len() >= DDS_ENGINE_FILES {
            let k = (0..r.files.len()).min_by_key(|&k| r.files[k].last_used).expect("full");
            let _ = self.engine.close(r.files.swap_remove(k).id);
        }
        // The magic link reopens exactly the hook's inode.
        let path = format!("/proc/self/fd/{}", f.as_raw_fd());
        let id = self
            .engine
            .open(std::path::Path::new(&path), IoMode::Buffered)
            .map_err(|e| format!("engine open: {e}"))?;
        let file = Arc::clone(f);
        r.files.push(EngineFile { hook_file, file, id, last_used: r.clock });
        Ok(id)
    }

    /// Submits an offloaded read of what the file holds of `[offset, +size)`; `Ok(false)`
    /// when the range is empty (nothing to read: the caller answers at once).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit_offloaded(
        &mut self,
        o: &mut OffloadState,
        r: ReadReq,
        f: &Arc<std::fs::File>,
        check: ReadCheck,
        msg: &[u8],
    ) -> Result<bool, String> {
        let id = self.engine_file(o, r.file, f)?;
        let end = r.offset.saturating_add(u64::from(r.size));
        let mut size = self.engine.file_size(id).unwrap_or(0);
        if end > size {
            // The host's files grow: the engine's size may be older than the decision.
            let now = self.engine.refresh_size(id).map_err(|e| format!("file size: {e}"))?;
            size = now.unwrap_or(size);
        }
        let len = size.saturating_sub(r.offset).min(u64::from(r.size));
        if len == 0 {
            return Ok(false);
        }
        let len32 = u32::try_from(len).expect("<= size");
        let (at, need) = place(r.offset, len32, OFFLOAD_HEAD_BYTES);
        let buf = self.ranges.take(need).map_err(|e| format!("offload buffer: {e}"))?;
        let mut m = o.spare_msgs.pop().unwrap_or_default();
        m.clear();
        m.extend_from_slice(msg);
        let c = self.conn(r.ci);
        let read = OffloadedRead {
            conn: r.ci,
            conn_gen: c.gen,
            req_id: r.req_id,
            check,
            msg: m,
            buf,
            at,
            len: len as usize,
            queued_at: Instant::now(),
            result: Ok(()),
        };
        let ji = self.add_job(Job::Offloaded(read));
        let Some(Job::Offloaded(s)) = self.jobs[ji as usize].as_mut() else {
            unreachable!("just added")
        };
        // SAFETY: the buffer is the job's (`s.buf`) from here until its completion is
        // delivered by `reap` (the job is taken only in `finish_offloaded`, after that), and
        // the engine, dropped before the jobs, waits for every read in flight; nothing touches
        // the buffer meanwhile.
        let res = unsafe { self.engine.submit_range(id, r.offset, len, &mut s.buf, at, token(ji)) };
        if let Err(e) = res {
            let Job::Offloaded(s) = self.take_job(ji) else { unreachable!("just added") };
            self.ranges.give(s.buf);
            o.spare_msgs.push(s.msg);
            return Err(format!("submit: {e}"));
        }
        o.reads.live += 1;
        Ok(true)
    }

    /// Answers offloaded read `ji`, completed by the last reap: the answer's head is written in
    /// front of the data and the buffer queued on the connection as it is; a read that may have
    /// overlapped a host change (the hook's epoch or the range's change stamp moved) is
    /// forwarded to the host instead; an error is answered `IO`.
    pub(super) fn finish_offloaded(&mut self, ji: u32) {
        let Job::Offloaded(s) = self.take_job(ji) else { unreachable!("an offloaded read") };
        let hook = Arc::clone(self.shared.cfg.offload.as_ref().expect("reads imply a hook"));
        let mut o = std::mem::take(&mut self.offload);
        o.reads.live -= 1;
        let ns = u64::try_from(s.queued_at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        hook.offloaded_read_time(ns);
        let msg = self.answer_offloaded(&mut o, &*hook, s);
        if o.spare_msgs.len() < MAX_OFFLOAD_READS {
            o.spare_msgs.push(msg);
        }
        self.offload = o;
    }

    /// Answers one completed offloaded read; returns its message buffer for reuse.
    fn answer_offloaded(
        &mut self,
        o: &mut OffloadState,
        hook: &dyn OffloadHook,
        s: OffloadedRead,
    ) -> Vec<u8> {
        let OffloadedRead { conn, conn_gen, req_id, check, msg, mut buf, at, len, .. } = s;
        let live = self.conns[conn as usize].as_ref().is_some_and(|c| c.gen == conn_gen);
        match s.result {
            _ if !live => {}
            Ok(()) if !hook.unchanged_since(&check) => {
                // Relaxed: a statistic.
                self.shared.stats.offload_raced.fetch_add(1, Ordering::Relaxed);
                self.forward_one(o, hook, conn, req_id, &msg);
            }
            Err(m) => {
                self.conn(conn).in_flight -= 1;
                let m = format!("offload read: {m}");
                self.respond_err(conn, req_id, op::OFFLOAD, StatusCode::Io, &m);
            }
            Ok(()) => {
                let start = at - OFFLOAD_HEAD_BYTES;
                let mut prefix = [0u8; OFFLOAD_R_OFF_DATA];
                prefix[0] = SERVED_BY_OFFLOAD;
                let head = &mut buf.as_mut_slice()[start..at];
                put_answer_head(head, req_id, op::OFFLOAD, &prefix, len);
                let c = self.conn(conn);
                c.in_flight -= 1;
                c.push_out(OutFrame { buf, bytes: start..at + len });
                return msg;
            }
        }
        self.ranges.give(buf);
        msg
    }

    /// An offloaded read of nothing (the range starts at the file's end): answered at once.
    pub(super) fn answer_empty_offloaded(&mut self, ci: u32, req_id: u64) {
        self.conn(ci).in_flight -= 1;
        let r = Response::Offload { served_by: SERVED_BY_OFFLOAD, data: &[] };
        self.respond(ci, req_id, op::OFFLOAD, &r);
    }
}
