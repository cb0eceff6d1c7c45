//! storefn-io: the io_uring engine that runs storage functions on the completion path.
//!
//! An [`Engine`] owns one ring (one per thread), registered aligned buffers, registered files and
//! a table of chain slots. A *chain* starts with one block read; each completed block is handed
//! to a [`StorageFn`] with an XRP context; the function's `next_addr[]`/`size[]` requests are read
//! next, concurrently, until it sets `done`. Semantics: docs/design/io.md, "Chains".
//!
//! **Range reads** move any length up to [`limits::MAX_RANGE_BYTES`] (1 MiB) per read straight
//! into a caller-owned, pinned [`RangeBuf`] (registered with the ring by
//! [`Engine::register_range_buf`] where there is room), O_DIRECT alignment handled by the
//! engine: the requested bytes land at `buf[at..at + len]` with `at == offset % 4096`, and the
//! aligned cover around them stays inside the buffer. Two ways in:
//! - [`Engine::read_range`] (safe, synchronous, idle engine): any span that fits the buffer,
//!   cut into concurrent 1 MiB reads; returns where the bytes are. λ-IO's local side uses it.
//! - [`Engine::submit_range`] (`unsafe`, io_uring's contract: the buffer stays alive and
//!   untouched until the read's completion is delivered): for an event loop that mixes range
//!   reads with chains and sockets. Completions come from [`Engine::reap`]/[`Engine::wait`]
//!   with the others, `data` = the requested bytes inside the caller's buffer (send them from
//!   there: no staging copy). Bound the reads in flight with [`Engine::free_range_reads`].
//!
//! Hops of a chain are at most [`EngineConfig::hop_bytes`] (default 4 KiB, up to
//! [`limits::MAX_HOP_BYTES`] = 64 KiB); the context's `data_len` tells the function how many
//! bytes `data` holds.

mod admission;
mod digest;
mod engine;
mod error;
mod file;
#[cfg(feature = "bench")]
pub mod harness;
pub mod limits;
mod region;
mod storage;

pub use admission::{Doorkeeper, FrequencySketch};
pub use digest::{
    find_block_device, lease_breaks_seen, BlockDeviceInfo, DeviceWindow, Digest, DigestError,
    Extent, ExtentProblem, FileIdentity, LeaseGuard, RawAccess, RawDevice, RetryGate, Timestamp,
};
pub use engine::{ChainStats, Completion, Engine, EngineConfig, NoFunction, RangeBuf};
pub use error::{ChainAt, ChainError, EngineError, Errno, SubmitError};
pub use file::{statx_size_align, widen, FileId, IoMode, Target};
pub use storage::sim::CrashSim;
pub use storage::{
    parent_dir, real as real_storage, RealStorage, Storage, StorageFile, StorageRef,
};
pub use storefn_vm::{VmError, XrpCtx};

/// A storage function as the engine calls it: one invocation per completed block.
///
/// `data` is the block's view (read-only: up to max(requested size, 4 KiB) bytes, the hop's
/// `data_len`), `scratch` the chain's scratch; the
/// engine has cleared `ctx.done`/`next_addr`/`size` and set `ctx.slot` before the call.
pub trait StorageFn {
    /// Runs the function once on a block of the chain submitted with `token`. A function that
    /// serves chains of several programs (a server's per-thread dispatcher) picks the program by
    /// token; most ignore it.
    ///
    /// # Errors
    /// A fault (bad access, budget): the engine fails the chain with [`ChainError::Fault`].
    fn invoke(
        &mut self,
        token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError>;

    /// Called with every block a chain read, just before [`StorageFn::invoke`] runs on it:
    /// `token` is the chain's, `addr` the requested file offset and `data` exactly the requested
    /// bytes. Default: nothing. The KV store's block cache keeps what chains read through it
    /// (it commits a chain's blocks only once the chain completed without error).
    fn on_block(&mut self, _token: u64, _addr: u64, _data: &[u8]) {}
}

/// A closure is a storage function that does not need the chain's token.
impl<F> StorageFn for F
where
    F: FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, VmError>,
{
    fn invoke(
        &mut self,
        _token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        self(ctx, data, scratch)
    }
}

/// Types a closure as a [`StorageFn`] (lets Rust infer the argument types).
pub fn func<F>(f: F) -> F
where
    F: FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, VmError>,
{
    f
}

/// A verified eBPF program of type `xrp`, run by the JIT or the interpreter. `run_xrp` points
/// `ctx.data`/`ctx.scratch` at the slices and bounds every access by them (data read-only).
impl StorageFn for storefn_vm::Instance {
    fn invoke(
        &mut self,
        _token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        self.run_xrp(ctx, data, scratch)
    }
}
