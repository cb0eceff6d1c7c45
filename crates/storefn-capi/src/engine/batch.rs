//! Many chains in flight on one engine: submit with a token, reap completions in batches.
//! Each chain's scratch is the caller's buffer: copied in at submit and the final scratch
//! copied back into it when the chain is reaped.

use std::collections::VecDeque;

use storefn_io::{StorageFn, XrpCtx};
use storefn_vm::{Instance, VerifiedProgram, VmError};

use super::{chain_err, Engine};
use crate::prog::{Prog, ProgType};
use crate::status::{set_last, Fail, Res, Status};

/// One finished chain, as `storefn_reap` reports it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    /// The token given to `storefn_submit_xrp`.
    pub token: u64,
    /// A `storefn_status` value: STOREFN_STATUS_OK, or why the chain failed (the last error
    /// holds the message of the last failed chain of the reap). An int, not the enum, so the
    /// caller's array may hold anything before the call.
    pub status: i32,
    /// Blocks the chain read.
    pub hops: u32,
}

/// A chain slot's caller-side state.
#[derive(Debug, Clone, Copy)]
struct Slot {
    token: u64,
    /// Index into the engine's prepared programs.
    prog: usize,
    /// The caller's scratch (results are copied back here) and its length.
    out: *mut u8,
    out_len: usize,
}

#[derive(Debug)]
pub(crate) struct Batch {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Completions a reap found beyond its caller's array, handed out first next time
    /// (capacity: every chain slot, reserved once).
    overflow: VecDeque<Completion>,
}

impl Batch {
    pub(crate) fn new(chains: usize) -> Self {
        let empty = Slot { token: 0, prog: 0, out: std::ptr::null_mut(), out_len: 0 };
        Self {
            slots: vec![empty; chains],
            free: (0..chains as u32).rev().collect(),
            overflow: VecDeque::with_capacity(chains),
        }
    }
}

/// Runs each chain's own program, picked by the chain's slot.
struct Dispatch<'a> {
    progs: &'a mut [(std::sync::Arc<VerifiedProgram>, Instance)],
    slots: &'a [Slot],
}

impl StorageFn for Dispatch<'_> {
    fn invoke(
        &mut self,
        token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        let p = self.slots[usize::try_from(token).expect("slot index")].prog;
        self.progs[p].1.run_xrp(ctx, data, scratch)
    }
}

impl Engine {
    /// Submits one chain; `scratch` is read now and written when the chain is reaped.
    ///
    /// # Safety
    /// `scratch` points at `len` bytes that stay valid and untouched by the caller until the
    /// chain is reaped.
    // The C call's arguments, passed through as they came.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn submit_xrp(
        &mut self,
        id: storefn_io::FileId,
        offset: u64,
        count: u64,
        prog: &Prog,
        scratch: *mut u8,
        len: usize,
        token: u64,
    ) -> Res {
        prog.expect(ProgType::Xrp)?;
        super::check_scratch(len)?;
        // SAFETY: the caller's contract (NULL only with len 0, checked inside).
        let args = unsafe { crate::ptr::bytes(scratch, len, "scratch")? };
        let prog = self.instance(prog)?;
        let Some(slot) = self.batch.free.pop() else {
            return Err(Fail::new(
                Status::Full,
                format!(
                    "all {} chain slots are in use: reap completions first",
                    self.batch.slots.len()
                ),
            ));
        };
        self.batch.slots[slot as usize] = Slot { token, prog, out: scratch, out_len: len };
        if let Err(e) = self.io.submit_chain_args(id, offset, count, u64::from(slot), args) {
            self.batch.free.push(slot);
            return Err(chain_err(&storefn_io::ChainError::Submit(e)));
        }
        Ok(())
    }

    /// Reaps finished chains into `out`, waiting until at least `min` were delivered (or
    /// nothing is in flight). Returns how many were written.
    pub(crate) fn reap(&mut self, min: usize, out: &mut [Completion]) -> Res<usize> {
        let mut n = 0;
        while n < out.len() {
            let Some(c) = self.batch.overflow.pop_front() else { break };
            out[n] = c;
            n += 1;
        }
        if n >= out.len() || (n >= min && self.batch.overflow.is_empty() && min > 0) {
            return Ok(n);
        }
        let n_before = n;
        let Batch { slots, free, overflow } = &mut self.batch;
        let mut disp = Dispatch { progs: &mut self.progs, slots };
        let slots: &[Slot] = slots;
        let mut on_done = |c: storefn_io::Completion<'_>| {
            let ci = usize::try_from(c.token).expect("slot index");
            let s = slots[ci];
            let (status, hops) = match c.result {
                Ok(st) => {
                    if s.out_len > 0 {
                        // SAFETY: submit_xrp's contract: `out` holds `out_len` bytes, untouched
                        // by the caller until this reap; `out_len` <= the chain's scratch.
                        unsafe {
                            std::ptr::copy_nonoverlapping(c.scratch.as_ptr(), s.out, s.out_len);
                        };
                    }
                    (Status::Ok, st.hops)
                }
                Err(e) => {
                    let f = chain_err(&e);
                    set_last(&format!("storefn_reap: chain {}: {}", s.token, f.message));
                    (f.status, 0)
                }
            };
            free.push(ci as u32);
            let done = Completion { token: s.token, status: status as i32, hops };
            if n < out.len() {
                out[n] = done;
                n += 1;
            } else {
                overflow.push_back(done);
            }
        };
        let want = min.saturating_sub(n_before);
        let r = if min == 0 {
            self.io.reap(&mut disp, &mut on_done)
        } else {
            self.io.wait(want, &mut disp, &mut on_done)
        };
        r.map_err(|e| super::engine_err(&e))?;
        Ok(n)
    }

    /// Chains submitted and not yet reaped.
    pub(crate) fn in_flight(&self) -> usize {
        self.io.live() + self.batch.overflow.len()
    }
}
