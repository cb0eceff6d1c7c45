//! The engine: one io_uring ring per thread, registered buffers and files, and chains of block
//! reads driven by a storage function on every completion (docs/design/io.md, "Chains").
//!
//! Shape (guide): caller-owned slots with `user_data` = buffer index; every table is sized once
//! in [`Engine::new`]; completions are reaped in batches into a fixed array and the functions run
//! after the completion queue has been released; SQEs produced by a pass are submitted with one
//! `io_uring_enter`, before the caller's completion callbacks run.
//!
//! Files: this one holds the engine's state (config, chain slots, buffers) and its
//! construction; `files` opening files and raw-device mode; `submit` slots, request validation
//! and SQEs; `complete` reaping, running the function and delivery; `sync` the synchronous
//! calls (`read_xrp`, `read`).

use std::collections::VecDeque;

use io_uring::IoUring;
use storefn_vm::XrpCtx;

use crate::error::{ChainAt, ChainError, EngineError, Errno};
use crate::file::FileEntry;
use crate::limits::{
    slot_buffer_bytes, BUFFER_ALIGN, DATA_VIEW_BYTES, DEFAULT_BUFFERS, DEFAULT_CHAINS,
    DEFAULT_HOP_BYTES, DEFAULT_MAX_HOPS, DEFAULT_RANGE_BUF_SLOTS, DEFAULT_RANGE_READS,
    DEFAULT_RING_DEPTH, MAX_BLOCK_ALIGN, MAX_BUFFERS, MAX_CHAINS, MAX_FILES, MAX_HOP_BYTES,
    MAX_OUTSTANDING_PER_CHAIN, MAX_RANGE_READS, MAX_RING_DEPTH, REGISTERED_FILE_SLOTS,
    SCRATCH_BYTES,
};
use crate::region::Region;
use crate::StorageFn;

mod complete;
mod files;
mod range;
mod submit;
mod sync;

pub use range::RangeBuf;
use range::{RangeDst, RangeReg};

/// `user_data` of the probe read [`Engine::open`] issues (never a buffer index).
const PROBE_USER_DATA: u64 = u64::MAX;
/// Token of the chain behind the synchronous calls (the engine is idle around them).
const SYNC_TOKEN: u64 = u64::MAX;

/// How to build an [`Engine`]. `Default` gives the named defaults in [`crate::limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Submission-queue entries; must be >= `buffers`.
    pub ring_depth: u32,
    /// Registered buffers = most block reads in flight.
    pub buffers: usize,
    /// Chain slots = most chains submitted and not yet reaped.
    pub chains: usize,
    /// Per-chain hop limit (reads issued, the first included).
    pub max_hops: u32,
    /// Kernel submission polling (SQPOLL) with this idle time in ms; `None` = off (default).
    pub sqpoll_idle_ms: Option<u32>,
    /// Completion polling (IOPOLL): needs a device with poll queues (not the virtio disk here).
    pub iopoll: bool,
    /// Largest hop (and plain read) in bytes: a multiple of 4 KiB from 4 KiB to
    /// [`MAX_HOP_BYTES`](crate::limits::MAX_HOP_BYTES). Each registered buffer holds one hop
    /// plus 4 KiB of alignment slack, so this sizes the engine's buffer memory.
    pub hop_bytes: usize,
    /// Range reads ([`Engine::submit_range`]) in flight at once, beside the chain reads: the
    /// ring gets this many more submission entries.
    pub range_reads: usize,
    /// Registered-buffer slots kept for callers' [`RangeBuf`]s
    /// ([`Engine::register_range_buf`]); fewer if the buffer table has no room.
    pub range_buf_slots: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            ring_depth: DEFAULT_RING_DEPTH,
            buffers: DEFAULT_BUFFERS,
            chains: DEFAULT_CHAINS,
            max_hops: DEFAULT_MAX_HOPS,
            sqpoll_idle_ms: None,
            iopoll: false,
            hop_bytes: DEFAULT_HOP_BYTES,
            range_reads: DEFAULT_RANGE_READS,
            range_buf_slots: DEFAULT_RANGE_BUF_SLOTS,
        }
    }
}

/// What a chain did, reported when it completes successfully.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainStats {
    /// Block reads completed (hops).
    pub hops: u32,
    /// Function invocations.
    pub invocations: u32,
    /// Requests set at or after `done` and therefore not issued.
    pub dropped_requests: u32,
    /// Reads that went to the block device (raw mode); the rest read the file.
    pub device_hops: u32,
}

/// One finished chain or plain read, handed to the caller's callback.
#[derive(Debug)]
pub struct Completion<'a> {
    pub token: u64,
    pub result: Result<ChainStats, ChainError>,
    /// The chain's scratch (all [`SCRATCH_BYTES`]); a plain read's is empty.
    pub scratch: &'a [u8],
    /// A plain read's bytes (exactly the requested range, in the engine's buffer) or a range
    /// read's (exactly the requested range, inside the caller's [`RangeBuf`]); empty for chains
    /// and failed reads.
    pub data: &'a [u8],
}

/// A storage function that does nothing but finish the chain (for plain-read-only waits).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFunction;

impl StorageFn for NoFunction {
    fn invoke(
        &mut self,
        _token: u64,
        ctx: &mut XrpCtx,
        _data: &[u8],
        _scratch: &mut [u8],
    ) -> Result<u64, storefn_vm::VmError> {
        ctx.done = 1;
        Ok(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Run the function on every completed block.
    Xrp,
    /// One read, no function: the bytes are handed to the caller.
    Plain,
    /// One read into the caller's buffer ([`Engine::submit_range`]).
    Range,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Running,
    /// Finished, waiting in `ready` to be delivered.
    Ready,
}

/// A validated request waiting for a buffer.
#[derive(Debug, Clone, Copy, Default)]
struct Req {
    addr: u64,
    dev_offset: u64,
    /// Reads the block device (raw mode).
    device: bool,
    /// O_DIRECT alignment of the fd the read goes to.
    align: u64,
    fd_index: u32,
    size: u32,
    pair: u8,
    hop: u32,
}

/// One read in flight, indexed by its buffer (= `user_data`).
#[derive(Debug, Clone, Copy, Default)]
struct Op {
    chain: u32,
    pair: u8,
    hop: u32,
    addr: u64,
    size: u32,
    /// Bytes between the aligned read start and the requested byte.
    skip: u32,
}

#[derive(Debug)]
struct Chain {
    state: State,
    kind: Kind,
    file: u32,
    token: u64,
    start: u64,
    ctx: XrpCtx,
    inflight: u8,
    pending: [Req; MAX_OUTSTANDING_PER_CHAIN],
    npending: u8,
    /// In `waiting` (has pending requests and found no free buffer).
    queued: bool,
    issued: u32,
    completed: u32,
    invocations: u32,
    dropped: u32,
    done: bool,
    last_addr: u64,
    error: Option<ChainError>,
    /// A plain read's buffer, held until delivery: (buffer, skip, len).
    plain: Option<(u16, u32, u32)>,
    /// Some hop was read from the block device (raw mode): check staleness before delivery.
    used_device: bool,
    /// Raw-mode epoch of the first device hop (a refresh in between makes the chain stale).
    raw_epoch: u32,
    /// Reads issued to the block device.
    device_hops: u32,
    /// The caller checks staleness itself after a run of reads ([`Engine::read_deferred`]).
    deferred_check: bool,
    /// A range read's destination in the caller's buffer.
    range: Option<RangeDst>,
}

impl Chain {
    fn empty() -> Self {
        Self {
            state: State::Free,
            kind: Kind::Plain,
            file: 0,
            token: 0,
            start: 0,
            ctx: XrpCtx::default(),
            inflight: 0,
            pending: [Req::default(); MAX_OUTSTANDING_PER_CHAIN],
            npending: 0,
            queued: false,
            issued: 0,
            completed: 0,
            invocations: 0,
            dropped: 0,
            done: false,
            last_addr: 0,
            error: None,
            plain: None,
            used_device: false,
            raw_epoch: 0,
            device_hops: 0,
            deferred_check: false,
            range: None,
        }
    }

    fn at(&self, hop: u32, addr: u64) -> ChainAt {
        ChainAt { token: self.token, start: self.start, hop, addr }
    }

    fn outstanding(&self) -> usize {
        usize::from(self.inflight) + usize::from(self.npending)
    }
}

/// An io_uring engine owned by one thread (it holds raw buffer pointers: neither `Send` nor
/// `Sync`; build one per thread).
pub struct Engine {
    // Dropped first: the ring must go before the memory it has registered.
    ring: IoUring,
    cfg: EngineConfig,
    bufs: Region,
    scratch: Region,
    ops: Box<[Op]>,
    free_bufs: Vec<u16>,
    chains: Box<[Chain]>,
    free_chains: Vec<u32>,
    /// Chains with pending requests that found no free buffer, served FIFO as buffers free up.
    waiting: VecDeque<u32>,
    /// Finished chains not yet delivered.
    ready: VecDeque<u32>,
    /// Completions of one pass: (user_data, res).
    cqes: Box<[(u64, i32)]>,
    /// Device reads done inline (raw mode on a device without NOWAIT support, see
    /// `RawState::inline`): (buffer, res), handled like CQEs in the next pass. At most one per
    /// buffer, so the capacity reserved in `new` is never exceeded (no allocation).
    inline_cqes: VecDeque<(u64, i32)>,
    files: Vec<Option<FileEntry>>,
    in_flight: usize,
    live: usize,
    unsubmitted: bool,
    /// Bytes of one registered chain buffer ([`slot_buffer_bytes`] of `cfg.hop_bytes`).
    slot_bytes: usize,
    /// Range reads submitted and not yet delivered (at most `cfg.range_reads`).
    ranges_live: usize,
    /// Callers' registered range buffers: slot `i` is buffer-table index `buffers + i`.
    range_regs: Box<[RangeReg]>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("cfg", &self.cfg)
            .field("live", &self.live)
            .field("in_flight", &self.in_flight)
            .field("free_buffers", &self.free_bufs.len())
            .field("ranges_live", &self.ranges_live)
            .finish_non_exhaustive()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.quiesce();
        // Unregistering waits until the kernel drops its file references, so the files are
        // really closed when the engine is gone (closing the ring alone releases them later,
        // from a workqueue, and an immediate umount would find the file system busy).
        let _ = self.ring.submitter().unregister_files();
    }
}

impl Engine {
    /// Waits for every read in flight (reads target the registered buffers).
    fn quiesce(&mut self) {
        // Reads in flight still target the registered buffers; wait for every one before the
        // memory goes back to the allocator (closing the ring does not wait for them).
        // Inline reads are already complete; only ring reads can still write into buffers.
        self.in_flight -= self.inline_cqes.len();
        self.inline_cqes.clear();
        while self.in_flight > 0 {
            let n = self.drain_cq();
            self.in_flight -= self.cqes[..n].iter().filter(|c| c.0 != PROBE_USER_DATA).count();
            if self.in_flight == 0 {
                break;
            }
            match self.ring.submit_and_wait(1) {
                Err(e) if e.raw_os_error() != Some(libc::EINTR) => {
                    if self.ranges_live > 0 {
                        // Range reads target callers' buffers, which their owners free once
                        // the engine is gone; the kernel could still write into them.
                        eprintln!("storefn-io: ring failed ({e}) with range reads in flight");
                        std::process::abort();
                    }
                    // No way left to learn of completions: leak the buffers rather than let
                    // the device write into memory the allocator has reused.
                    let spare = Region::new(BUFFER_ALIGN, BUFFER_ALIGN);
                    if let Ok(spare) = spare {
                        std::mem::forget(std::mem::replace(&mut self.bufs, spare));
                    }
                    return;
                }
                _ => {}
            }
        }
    }
}

fn check_config(cfg: &EngineConfig) -> Result<(), EngineError> {
    let bad = |what, value: u64, limit| Err(EngineError::BadConfig { what, value, limit });
    if cfg.ring_depth == 0 || cfg.ring_depth > MAX_RING_DEPTH {
        return bad("ring_depth", cfg.ring_depth.into(), "1..=16384");
    }
    if cfg.buffers == 0 || cfg.buffers > MAX_BUFFERS || cfg.buffers > cfg.ring_depth as usize {
        return bad("buffers", cfg.buffers as u64, "1..=min(16384, ring_depth)");
    }
    if cfg.chains == 0 || cfg.chains > MAX_CHAINS {
        return bad("chains", cfg.chains as u64, "1..=1048576");
    }
    if cfg.max_hops == 0 {
        return bad("max_hops", 0, ">= 1");
    }
    let hop = cfg.hop_bytes;
    if !(DATA_VIEW_BYTES..=MAX_HOP_BYTES).contains(&hop) || !hop.is_multiple_of(MAX_BLOCK_ALIGN) {
        return bad("hop_bytes", hop as u64, "4096..=65536, a multiple of 4096");
    }
    if cfg.range_reads > MAX_RANGE_READS {
        return bad("range_reads", cfg.range_reads as u64, "0..=4096");
    }
    Ok(())
}

impl Engine {
    /// Builds the ring, registers `cfg.buffers` aligned buffers and an empty file table.
    ///
    /// # Errors
    /// A bad config, a ring the kernel refuses (SQPOLL/IOPOLL say so by name), or a failed
    /// registration.
    pub fn new(cfg: EngineConfig) -> Result<Self, EngineError> {
        check_config(&cfg)?;
        let ring = build_ring(&cfg)?;
        let slot_bytes = slot_buffer_bytes(cfg.hop_bytes);
        let bufs = Region::new(cfg.buffers * slot_bytes, BUFFER_ALIGN)?;
        let range_slots = register_buffers(&ring, &bufs, &cfg, slot_bytes)?;
        ring.submitter()
            .register_files_sparse(REGISTERED_FILE_SLOTS as u32)
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        let scratch = Region::new(cfg.chains * SCRATCH_BYTES, 64)?;
        let cq_cap = ring.params().cq_entries() as usize;
        Ok(Self {
            ring,
            bufs,
            scratch,
            ops: vec![Op::default(); cfg.buffers].into_boxed_slice(),
            // Popped from the end: buffer 0 is handed out first.
            free_bufs: (0..cfg.buffers).rev().map(|b| b as u16).collect(),
            chains: (0..cfg.chains).map(|_| Chain::empty()).collect(),
            free_chains: (0..cfg.chains).rev().map(|c| c as u32).collect(),
            waiting: VecDeque::with_capacity(cfg.chains),
            ready: VecDeque::with_capacity(cfg.chains),
            cqes: vec![(0, 0); cq_cap].into_boxed_slice(),
            inline_cqes: VecDeque::with_capacity(cfg.buffers + cfg.range_reads),
            files: (0..MAX_FILES).map(|_| None).collect(),
            in_flight: 0,
            live: 0,
            unsubmitted: false,
            slot_bytes,
            ranges_live: 0,
            range_regs: vec![RangeReg::default(); range_slots].into_boxed_slice(),
            cfg,
        })
    }

    /// The configuration the engine was built with.
    #[must_use]
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Chains and plain reads submitted and not yet delivered.
    #[must_use]
    pub fn live(&self) -> usize {
        self.live
    }

    /// Block reads currently in flight in the kernel.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The ring's file descriptor: it polls readable (`POLLIN`) when completions are waiting,
    /// so an event loop can wait for sockets and the engine at once. Call [`Engine::reap`]
    /// after submitting (it submits the queued SQEs) and when the fd is readable.
    #[must_use]
    pub fn ring_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.ring)
    }

    /// Free chain slots (a submit succeeds while this is non-zero).
    #[must_use]
    pub fn free_slots(&self) -> usize {
        self.free_chains.len()
    }

    /// Range reads that can be submitted now: free range reads, bounded by free chain slots.
    #[must_use]
    pub fn free_range_reads(&self) -> usize {
        (self.cfg.range_reads - self.ranges_live).min(self.free_chains.len())
    }
}

/// Registers the chain buffers at table indices `0..buffers` and leaves
/// `range_buf_slots` empty entries after them for callers' range buffers (a sparse table);
/// returns how many range slots there are (0 where the kernel has no sparse tables).
fn register_buffers(
    ring: &IoUring,
    bufs: &Region,
    cfg: &EngineConfig,
    slot_bytes: usize,
) -> Result<usize, EngineError> {
    let iovecs: Vec<libc::iovec> = (0..cfg.buffers)
        .map(|i| libc::iovec {
            // SAFETY: i < buffers, so the offset stays inside the region.
            iov_base: unsafe { bufs.base().add(i * slot_bytes) }.cast(),
            iov_len: slot_bytes,
        })
        .collect();
    let failed = |e: std::io::Error| EngineError::RegisterBuffers {
        count: cfg.buffers,
        bytes: slot_bytes,
        errno: Errno::from_io(&e),
    };
    let slots = cfg.range_buf_slots.min(MAX_BUFFERS - cfg.buffers);
    let table = u32::try_from(cfg.buffers + slots).expect("at most MAX_BUFFERS");
    if slots > 0 && ring.submitter().register_buffers_sparse(table).is_ok() {
        // SAFETY: the iovecs describe `bufs`, which lives in the engine and is dropped after
        // the ring (field order) and after every read in flight has completed (Drop).
        unsafe { ring.submitter().register_buffers_update(0, &iovecs, None) }.map_err(failed)?;
        return Ok(slots);
    }
    // SAFETY: as above.
    unsafe { ring.submitter().register_buffers(&iovecs) }.map_err(failed)?;
    Ok(0)
}

pub(super) fn build_ring(cfg: &EngineConfig) -> Result<IoUring, EngineError> {
    let mut b = IoUring::builder();
    // Chain reads never exceed `buffers` <= `ring_depth` and range reads `range_reads`, so
    // neither queue can overflow.
    let entries = cfg.ring_depth + u32::try_from(cfg.range_reads).expect("<= MAX_RANGE_READS");
    b.setup_cqsize(entries * 2);
    if let Some(idle) = cfg.sqpoll_idle_ms {
        b.setup_sqpoll(idle);
    }
    if cfg.iopoll {
        b.setup_iopoll();
    }
    b.build(entries).map_err(|e| {
        let errno = Errno::from_io(&e);
        if cfg.sqpoll_idle_ms.is_some() {
            EngineError::SqpollUnavailable { errno }
        } else if cfg.iopoll {
            EngineError::IopollUnavailable { errno }
        } else {
            EngineError::RingSetup { errno }
        }
    })
}
