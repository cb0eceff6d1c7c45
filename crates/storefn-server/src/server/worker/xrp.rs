//! XRP: a pushed-down chain; its scratch goes in with the request and comes back in the answer.

use std::sync::atomic::Ordering;

use storefn_io::Completion;
use storefn_vm::ProgType;

use super::job::{token, Job, JobHead, Target};
use super::out::open_frame;
use super::{Conn, Worker};
use crate::registry::ProgHash;
use crate::server::files::FileFail;
use storefn_wire::limits::SCRATCH_BYTES;
use storefn_wire::{op, put_response, put_status, Response, StatusCode};

/// An XRP request's own state.
#[derive(Debug)]
pub(super) struct XrpJob {
    pub(super) inst: u32,
    /// The scratch the request carried (`scratch_len` bytes; a reused 4 KiB buffer).
    pub(super) scratch: Box<[u8]>,
    pub(super) scratch_len: u32,
    /// Scratch bytes the answer returns.
    pub(super) out_len: u32,
}

impl XrpJob {
    pub(super) fn complete(&mut self, h: &JobHead, c: &Completion<'_>, conn: Option<&mut Conn>) {
        let Some(conn) = conn else { return };
        open_frame(conn);
        match &c.result {
            Err(e) => {
                let (st, m) = crate::server::files::chain_fail(e);
                put_status(&mut conn.frame, h.req_id, op::XRP, st, &m);
            }
            Ok(st) => {
                let n = self.out_len as usize;
                let r =
                    Response::Xrp { version: h.version, hops: st.hops, scratch: &c.scratch[..n] };
                put_response(&mut conn.frame, h.req_id, op::XRP, &r);
            }
        }
    }
}

impl Worker<'_> {
    pub(super) fn queue_xrp(
        &mut self,
        ci: u32,
        req_id: u64,
        t: Target<'_>,
        hash: &ProgHash,
        scratch: &[u8],
        out_len: u32,
    ) {
        let prog = Some((hash, ProgType::Xrp));
        self.queue(ci, req_id, op::XRP, t, prog, |w, h, inst| {
            let mut buf =
                w.spare_bufs.pop().unwrap_or_else(|| vec![0u8; SCRATCH_BYTES].into_boxed_slice());
            buf[..scratch.len()].copy_from_slice(scratch);
            let x = XrpJob {
                inst: inst.expect("XRP holds its program"),
                scratch: buf,
                scratch_len: u32::try_from(scratch.len()).expect("<= SCRATCH_BYTES"),
                out_len,
            };
            Job::Xrp(h, x)
        });
    }

    pub(super) fn submit_xrp(&mut self, ji: u32) -> Result<(), FileFail> {
        let Some(Job::Xrp(h, x)) = self.jobs[ji as usize].as_ref() else {
            unreachable!("an XRP job")
        };
        let src = &x.scratch[..x.scratch_len as usize];
        self.engine
            .submit_chain(h.file, h.offset, u64::from(h.len), token(ji), |s| {
                s[..src.len()].copy_from_slice(src);
            })
            .map_err(|e| (StatusCode::Io, format!("submit: {e}")))?;
        // Relaxed: a statistic.
        self.shared.stats.chains.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
