//! The worker's DDS path: a frame's OFFLOAD requests are judged as one batch by the
//! [`OffloadHook`]; offloaded reads are range reads of the thread's engine straight into the
//! buffer their answer is sent from (`offloaded`); the rest are forwarded to the host
//! application and answered when its reply comes back.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::offloaded::{OffloadedReads, ReadReq};
use super::out::open_frame;
use super::Worker;
use crate::server::offload::{
    HostAnswer, OffloadDecision, OffloadHook, ReadCheck, TOKEN_THREAD_SHIFT,
};
use crate::server::MAX_IN_FLIGHT_PER_CONN;
use storefn_wire::limits::MAX_OFFLOAD_DATA_BYTES;
use storefn_wire::{op, put_response, Response, StatusCode, SERVED_BY_HOST};

/// A request waiting for the host application's answer.
#[derive(Debug, Clone, Copy)]
struct Forwarded {
    conn: u32,
    conn_gen: u32,
    req_id: u64,
    /// Which host it went to (from the hook), for [`HostAnswer::HostGone`].
    host: u64,
}

/// A forwarding token: the slot's generation in the high half, so a late answer to a slot that
/// timed out and was reused is recognised and dropped; the forwarding thread and the slot in
/// the low half, so the hook routes the answer back to this thread.
fn token(thread: usize, slot: u32, gen: u32) -> u64 {
    let thread = u64::try_from(thread).expect("bounded by MAX_THREADS");
    (u64::from(gen) << 32) | (thread << TOKEN_THREAD_SHIFT) | u64::from(slot)
}

/// The slot of a token.
fn token_slot(tok: u64) -> usize {
    (tok & ((1 << TOKEN_THREAD_SHIFT) - 1)) as usize
}

/// Per-thread DDS state; buffers are reused from frame to frame.
#[derive(Debug, Default)]
pub(super) struct OffloadState {
    /// The current frame's OFFLOAD messages, back to back, and (req_id, start, end) of each.
    msgs: Vec<u8>,
    reqs: Vec<(u64, usize, usize)>,
    /// (start, end) of each message, for the hook.
    bounds: Vec<(usize, usize)>,
    decisions: Vec<OffloadDecision>,
    forwarded: Vec<Option<Forwarded>>,
    /// Generation of each slot (bumped when the slot is freed).
    slot_gens: Vec<u32>,
    free: Vec<u32>,
    /// (deadline, token) in forwarding order (deadlines grow with it); entries whose slot was
    /// answered are skipped when they reach the front.
    expiry: std::collections::VecDeque<(Instant, u64)>,
    /// Forwarded requests not answered yet.
    pub(super) forwarded_live: usize,
    answers: Vec<(u64, std::ops::Range<usize>)>,
    answer_bytes: Vec<u8>,
    /// Hosts reported gone by the last poll, with why.
    gone: Vec<(u64, String)>,
    /// The thread's offloaded reads.
    pub(super) reads: OffloadedReads,
    pub(super) spare_msgs: Vec<Vec<u8>>,
}

impl Worker<'_> {
    /// OFFLOAD: checks and collects the message; the frame's batch runs after its last message.
    pub(in crate::server) fn queue_offload(&mut self, ci: u32, req_id: u64, msg: &[u8]) {
        let code = op::OFFLOAD;
        if self.shared.cfg.offload.is_none() {
            let m = "this server runs no offload engine (storefn serve without DDS)";
            return self.respond_err(ci, req_id, code, StatusCode::BadRequest, m);
        }
        if self.stopping() {
            let m = "server is stopping";
            return self.respond_err(ci, req_id, code, StatusCode::ShuttingDown, m);
        }
        let c = self.conn(ci);
        if c.in_flight >= MAX_IN_FLIGHT_PER_CONN {
            let m = "too many requests in flight";
            return self.respond_err(ci, req_id, code, StatusCode::Limit, m);
        }
        c.in_flight += 1;
        let o = &mut self.offload;
        let start = o.msgs.len();
        o.msgs.extend_from_slice(msg);
        o.reqs.push((req_id, start, o.msgs.len()));
    }

    /// Runs `pred`/`func` on the frame's OFFLOAD batch; serves or forwards each request.
    pub(in crate::server) fn run_offload_batch(&mut self, ci: u32) {
        if self.offload.reqs.is_empty() {
            return;
        }
        let hook = std::sync::Arc::clone(self.shared.cfg.offload.as_ref().expect("checked"));
        let mut o = std::mem::take(&mut self.offload);
        o.bounds.clear();
        o.bounds.extend(o.reqs.iter().map(|&(_, a, b)| (a, b)));
        o.decisions.clear();
        hook.decide(&o.msgs, &o.bounds, &mut o.decisions);
        let reqs = std::mem::take(&mut o.reqs);
        let msgs = std::mem::take(&mut o.msgs);
        for (k, &(req_id, a, b)) in reqs.iter().enumerate() {
            let d = o.decisions.get(k).copied().unwrap_or(OffloadDecision::Forward);
            let live = self.conns[ci as usize].is_some();
            if !live {
                break;
            }
            let msg = &msgs[a..b];
            match d {
                OffloadDecision::Read { file, offset, size, epoch } => {
                    let read = ReadReq { ci, req_id, file, offset, size, epoch };
                    self.serve_offloaded(&mut o, &*hook, read, msg);
                }
                OffloadDecision::Forward => self.forward_one(&mut o, &*hook, ci, req_id, msg),
            }
        }
        o.reqs = reqs;
        o.reqs.clear();
        o.msgs = msgs;
        o.msgs.clear();
        self.offload = o;
    }

    /// Forwards one request to the host application (its in-flight count stays until the
    /// answer, the timeout or a refusal answers it).
    pub(super) fn forward_one(
        &mut self,
        o: &mut OffloadState,
        hook: &dyn OffloadHook,
        ci: u32,
        req_id: u64,
        msg: &[u8],
    ) {
        let slot = match o.free.pop() {
            Some(t) => t,
            None => {
                o.forwarded.push(None);
                o.slot_gens.push(0);
                u32::try_from(o.forwarded.len() - 1).expect("bounded by in-flight")
            }
        };
        let tok = token(self.id, slot, o.slot_gens[slot as usize]);
        match hook.forward(tok, msg) {
            Ok(host) => {
                self.shared.stats.forwarded.fetch_add(1, Ordering::Relaxed); // a statistic
                let conn_gen = self.conn(ci).gen;
                let deadline = Instant::now() + self.shared.cfg.forward_timeout;
                o.forwarded[slot as usize] = Some(Forwarded { conn: ci, conn_gen, req_id, host });
                o.expiry.push_back((deadline, tok));
                o.forwarded_live += 1;
            }
            Err(m) => {
                o.free.push(slot);
                self.conn(ci).in_flight -= 1;
                let m = format!("forward to the host application: {m}");
                self.respond_err(ci, req_id, op::OFFLOAD, StatusCode::Io, &m);
            }
        }
    }

    /// An offloaded read: a range read of the engine straight into the buffer its answer is
    /// sent from (module `offloaded`). Forwarded instead when the hook no longer has the file,
    /// every read slot is busy or the engine cannot take it.
    fn serve_offloaded(
        &mut self,
        o: &mut OffloadState,
        hook: &dyn OffloadHook,
        r: ReadReq,
        msg: &[u8],
    ) {
        let ReadReq { ci, req_id, file, offset, size, epoch } = r;
        if size > MAX_OFFLOAD_DATA_BYTES {
            self.conn(ci).in_flight -= 1;
            let m = format!("offload read of {size} bytes is over MAX_OFFLOAD_DATA_BYTES");
            return self.respond_err(ci, req_id, op::OFFLOAD, StatusCode::Limit, &m);
        }
        let room = o.reads.has_room() && self.engine.free_range_reads() > 0;
        let Some((f, stamp)) = hook.file(file, offset, size).filter(|_| room) else {
            return self.forward_one(o, hook, ci, req_id, msg);
        };
        let check = ReadCheck { file, offset, size, epoch, stamp };
        match self.submit_offloaded(o, r, &f, check, msg) {
            Ok(true) => {}
            Ok(false) => self.answer_empty_offloaded(ci, req_id),
            // The engine could not take it (its file table is full, ...): the host can.
            Err(_) => self.forward_one(o, hook, ci, req_id, msg),
        }
    }

    /// Relays the host application's answers to their clients.
    pub(super) fn poll_forwarded(&mut self) {
        if self.offload.forwarded_live == 0 {
            self.offload.expiry.clear(); // every entry left was answered
            return;
        }
        let Some(hook) = self.shared.cfg.offload.as_ref() else { return };
        let o = &mut self.offload;
        o.answers.clear();
        o.answer_bytes.clear();
        o.gone.clear();
        let (answers, bytes, gone) = (&mut o.answers, &mut o.answer_bytes, &mut o.gone);
        hook.poll_answers(self.id, &mut |a| match a {
            HostAnswer::Data { token, data } => {
                let at = bytes.len();
                bytes.extend_from_slice(data);
                answers.push((token, at..bytes.len()));
            }
            HostAnswer::HostGone { host, reason } => {
                if gone.iter().all(|(h, _)| *h != host) {
                    gone.push((host, reason.to_string()));
                }
            }
        });
        let mut o = std::mem::take(&mut self.offload);
        let answers = std::mem::take(&mut o.answers);
        for (tok, range) in &answers {
            let Some(f) = o.take(*tok) else {
                // Not a live request: a late answer to one that timed out, or garbage.
                self.shared.stats.late_answers.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let Some(c) = self.conns[f.conn as usize].as_mut().filter(|c| c.gen == f.conn_gen)
            else {
                continue;
            };
            c.in_flight -= 1;
            let data = &o.answer_bytes[range.clone()];
            if data.len() > MAX_OFFLOAD_DATA_BYTES as usize {
                let m = "host answer over MAX_OFFLOAD_DATA_BYTES";
                self.respond_err(f.conn, f.req_id, op::OFFLOAD, StatusCode::Io, m);
                continue;
            }
            open_frame(c);
            let r = Response::Offload { served_by: SERVED_BY_HOST, data };
            put_response(&mut c.frame, f.req_id, op::OFFLOAD, &r);
        }
        o.answers = answers;
        let gone = std::mem::take(&mut o.gone);
        self.offload = o;
        for (host, reason) in &gone {
            self.fail_forwarded_to(*host, reason);
        }
        self.offload.gone = gone;
        self.expire_forwarded();
    }

    /// Fails every request still waiting for the answer of host `host` (which is gone).
    fn fail_forwarded_to(&mut self, host: u64, reason: &str) {
        for slot in 0..self.offload.forwarded.len() {
            let o = &mut self.offload;
            let Some(f) = o.forwarded[slot].filter(|f| f.host == host) else { continue };
            let tok =
                token(self.id, u32::try_from(slot).expect("slots are u32"), o.slot_gens[slot]);
            o.take(tok);
            let Some(c) = self.conns[f.conn as usize].as_mut().filter(|c| c.gen == f.conn_gen)
            else {
                continue;
            };
            c.in_flight -= 1;
            let m = format!("forwarded to the host application: {reason}");
            self.respond_err(f.conn, f.req_id, op::OFFLOAD, StatusCode::Io, &m);
        }
    }

    /// Answers `HOST_TIMEOUT` to every forwarded request past its deadline; their slots get a
    /// new generation, so the host's late answers are dropped.
    fn expire_forwarded(&mut self) {
        let now = Instant::now();
        while let Some(&(deadline, tok)) = self.offload.expiry.front() {
            let o = &mut self.offload;
            let slot = token_slot(tok);
            let live = o.slot_gens.get(slot).is_some_and(|&g| u64::from(g) == tok >> 32)
                && o.forwarded[slot].is_some();
            if live && deadline > now {
                break;
            }
            o.expiry.pop_front();
            if !live {
                continue; // answered already
            }
            let f = o.take(tok).expect("checked live");
            self.shared.stats.forward_timeouts.fetch_add(1, Ordering::Relaxed);
            let Some(c) = self.conns[f.conn as usize].as_mut().filter(|c| c.gen == f.conn_gen)
            else {
                continue;
            };
            c.in_flight -= 1;
            let m = format!(
                "the host application did not answer this forwarded request within {} ms",
                self.shared.cfg.forward_timeout.as_millis()
            );
            self.respond_err(f.conn, f.req_id, op::OFFLOAD, StatusCode::HostTimeout, &m);
        }
    }
}

impl OffloadState {
    /// Takes the live request of `tok` (slot and generation must match), freeing its slot
    /// under a new generation.
    fn take(&mut self, tok: u64) -> Option<Forwarded> {
        let slot = token_slot(tok);
        if self.slot_gens.get(slot).map(|&g| u64::from(g)) != Some(tok >> 32) {
            return None;
        }
        let f = self.forwarded[slot].take()?;
        self.slot_gens[slot] = self.slot_gens[slot].wrapping_add(1);
        self.free.push(u32::try_from(slot).expect("slots are u32"));
        self.forwarded_live -= 1;
        Some(f)
    }
}
