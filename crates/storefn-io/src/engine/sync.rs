//! The synchronous calls (XRP's `read_xrp`, plain reads) on an idle engine: one chain or read,
//! submitted and waited for.

use super::complete::ring_error;
use super::{ChainStats, Engine, NoFunction, SYNC_TOKEN};
use crate::error::ChainError;
use crate::file::FileId;
use crate::StorageFn;

impl Engine {
    /// XRP's `read_xrp`: run a chain from `[offset, offset + len)` to completion with `prog`;
    /// `scratch` is copied into the chain's scratch first and back out at the end (results).
    ///
    /// # Errors
    /// The chain's error; [`ChainError::NotIdle`] if batch chains are live.
    pub fn read_xrp<P: StorageFn + ?Sized>(
        &mut self,
        file: FileId,
        offset: u64,
        len: u64,
        prog: &mut P,
        scratch: &mut [u8],
    ) -> Result<ChainStats, ChainError> {
        if self.live != 0 {
            return Err(ChainError::NotIdle { active: self.live });
        }
        self.submit_chain_args(file, offset, len, SYNC_TOKEN, scratch)
            .map_err(ChainError::Submit)?;
        let mut out = None;
        let n = scratch.len();
        self.wait(1, prog, |c| {
            scratch.copy_from_slice(&c.scratch[..n]);
            out = Some(c.result);
        })
        .map_err(|e| ring_error(&e))?;
        out.expect("wait(1) on an engine with one live chain delivers it")
    }

    /// A plain synchronous read of `buf.len()` bytes at `offset` through the ring (the KV
    /// store's `uring` path; one hop).
    ///
    /// # Errors
    /// The read's error; [`ChainError::NotIdle`] if batch chains are live.
    pub fn read(
        &mut self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<ChainStats, ChainError> {
        self.read_sync(file, offset, buf, false)
    }

    /// [`Engine::read`] without the raw-mode staleness check: for a caller that chains
    /// dependent reads itself (a B+-tree walk of plain reads) and checks once at the end, as a
    /// storage-function chain is checked once after its last hop. Take [`Engine::raw_epoch`]
    /// before the first read and call [`Engine::check_raw`] with it before trusting any byte
    /// of a read whose `device_hops` was non-zero. Reads are still translated and confined to
    /// the file (`OutsideFile`).
    ///
    /// # Errors
    /// As [`Engine::read`], never [`ChainError::Stale`].
    pub fn read_deferred(
        &mut self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<ChainStats, ChainError> {
        self.read_sync(file, offset, buf, true)
    }

    pub(super) fn read_sync(
        &mut self,
        file: FileId,
        offset: u64,
        buf: &mut [u8],
        deferred_check: bool,
    ) -> Result<ChainStats, ChainError> {
        if self.live != 0 {
            return Err(ChainError::NotIdle { active: self.live });
        }
        self.submit_plain(file, offset, buf.len() as u64, SYNC_TOKEN, deferred_check)
            .map_err(ChainError::Submit)?;
        let mut out = None;
        self.wait(1, &mut NoFunction, |c| {
            if c.result.is_ok() {
                buf.copy_from_slice(c.data);
            }
            out = Some(c.result);
        })
        .map_err(|e| ring_error(&e))?;
        out.expect("wait(1) on an engine with one live read delivers it")
    }
}
