//! The worker's DDS path: a frame's OFFLOAD requests are judged as one batch by the
//! [`OffloadHook`]; offloaded reads are read straight into the response frame; the rest are
//! forwarded to the host application and answered when its reply comes back.

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

/// Per-thread DDS state; buffers are reused from frame to frame.
#[derive(Debug, Default)]
pub(super) struct OffloadState {
    /// The current frame's OFFLOAD messages, back to back, and (req_id, start, end) of each.
    msgs: Vec<u8>,
    reqs: Vec<(u64, usize, usize)>,
    decisions: Vec<OffloadDecision>,
    forwarded: Vec<Option<Forwarded>>,
    free: Vec<u32>,
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
                    let token = match o.free.pop() {
                        Some(t) => t,
                        None => {
                            o.forwarded.push(None);
                            u32::try_from(o.forwarded.len() - 1).expect("bounded by in-flight")
                        }
                    };
                    match hook.forward(u64::from(token), &o.msgs[a..b]) {
                        Ok(()) => {
                            let conn_gen = self.conn(ci).gen;
                            o.forwarded[token as usize] =
                                Some(Forwarded { conn: ci, conn_gen, req_id });
                            o.forwarded_live += 1;
                        }
                        Err(m) => {
                            o.free.push(token);
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
        for (token, range) in &o.answers {
            let Some(f) = usize::try_from(*token)
                .ok()
                .and_then(|t| o.forwarded.get_mut(t))
                .and_then(Option::take)
            else {
                continue; // not ours (a corrupt or late answer): nothing to relay
            };
            o.free.push(u32::try_from(*token).expect("checked"));
            o.forwarded_live -= 1;
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
        self.offload = o;
    }
}
