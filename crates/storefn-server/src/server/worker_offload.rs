//! The worker's DDS path: a frame's OFFLOAD requests are judged as one batch by the
//! [`OffloadHook`]; offloaded reads are read straight into the response frame; the rest are
//! forwarded to the host application and answered when its reply comes back.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::super::offload::{OffloadDecision, OffloadHook};
use super::super::MAX_IN_FLIGHT_PER_CONN;
use super::{open_frame, Worker};
use crate::proto::msg::{
    MAX_OFFLOAD_DATA_BYTES, OFFLOAD_R_OFF_DATA, SERVED_BY_HOST, SERVED_BY_OFFLOAD,
};
use crate::proto::{op, put_response, Response, StatusCode};

/// A request waiting for the host application's answer.
#[derive(Debug, Clone, Copy)]
struct Forwarded {
    conn: u32,
    conn_gen: u32,
    req_id: u64,
}

/// A forwarding token: the slot in the low half, the slot's generation in the high half, so a
/// late answer to a slot that timed out and was reused is recognised and dropped.
fn token(slot: u32, gen: u32) -> u64 {
    (u64::from(gen) << 32) | u64::from(slot)
}

/// Per-thread DDS state; buffers are reused from frame to frame.
#[derive(Debug, Default)]
pub(super) struct OffloadState {
    /// The current frame's OFFLOAD messages, back to back, and (req_id, start, end) of each.
    msgs: Vec<u8>,
    reqs: Vec<(u64, usize, usize)>,
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
        let views: Vec<&[u8]> = o.reqs.iter().map(|&(_, a, b)| &o.msgs[a..b]).collect();
        o.decisions.clear();
        hook.decide(&views, &mut o.decisions);
        drop(views);
        for (k, &(req_id, a, b)) in o.reqs.iter().enumerate() {
            let d = o.decisions.get(k).copied().unwrap_or(OffloadDecision::Forward);
            let live = self.conns[ci as usize].is_some();
            if !live {
                break;
            }
            match d {
                OffloadDecision::Read { file, offset, size } => {
                    self.conn(ci).in_flight -= 1;
                    self.serve_offloaded(ci, req_id, &*hook, file, offset, size);
                }
                OffloadDecision::Forward => {
                    let slot = match o.free.pop() {
                        Some(t) => t,
                        None => {
                            o.forwarded.push(None);
                            o.slot_gens.push(0);
                            u32::try_from(o.forwarded.len() - 1).expect("bounded by in-flight")
                        }
                    };
                    let tok = token(slot, o.slot_gens[slot as usize]);
                    match hook.forward(tok, &o.msgs[a..b]) {
                        Ok(()) => {
                            let conn_gen = self.conn(ci).gen;
                            let deadline = Instant::now() + self.shared.cfg.forward_timeout;
                            o.forwarded[slot as usize] =
                                Some(Forwarded { conn: ci, conn_gen, req_id });
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
            }
        }
        o.reqs.clear();
        o.msgs.clear();
        self.offload = o;
    }

    /// An offloaded read, read by the hook straight into the response frame.
    fn serve_offloaded(
        &mut self,
        ci: u32,
        req_id: u64,
        hook: &dyn OffloadHook,
        file: u32,
        offset: u64,
        size: u32,
    ) {
        if size > MAX_OFFLOAD_DATA_BYTES {
            let m = format!("offload read of {size} bytes is over MAX_OFFLOAD_DATA_BYTES");
            return self.respond_err(ci, req_id, op::OFFLOAD, StatusCode::Limit, &m);
        }
        let c = self.conn(ci);
        open_frame(c);
        let start = c.frame.begin_msg(req_id, op::OFFLOAD, StatusCode::Ok as u16);
        c.frame.buf.push(SERVED_BY_OFFLOAD);
        c.frame.buf.extend_from_slice(&[0; OFFLOAD_R_OFF_DATA - 1]);
        let at = c.frame.buf.len();
        c.frame.buf.resize(at + size as usize, 0);
        match hook.read(file, offset, &mut c.frame.buf[at..]) {
            Ok(n) => {
                c.frame.buf.truncate(at + n);
                c.frame.end_msg(start);
            }
            Err(errno) => {
                c.frame.buf.truncate(start);
                let e = std::io::Error::from_raw_os_error(errno);
                let m = format!("offload read of file {file} at {offset}: {e}");
                self.respond_err(ci, req_id, op::OFFLOAD, StatusCode::Io, &m);
            }
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
        let (answers, bytes) = (&mut o.answers, &mut o.answer_bytes);
        hook.poll_answers(&mut |token, data| {
            let a = bytes.len();
            bytes.extend_from_slice(data);
            answers.push((token, a..bytes.len()));
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
        self.offload = o;
        self.expire_forwarded();
    }

    /// Answers `HOST_TIMEOUT` to every forwarded request past its deadline; their slots get a
    /// new generation, so the host's late answers are dropped.
    fn expire_forwarded(&mut self) {
        let now = Instant::now();
        while let Some(&(deadline, tok)) = self.offload.expiry.front() {
            let o = &mut self.offload;
            let slot = (tok & u64::from(u32::MAX)) as usize;
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
        let slot = usize::try_from(tok & u64::from(u32::MAX)).ok()?;
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
