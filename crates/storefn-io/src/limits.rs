//! The engine's named limits. Every bound the engine enforces is one of these constants.

use storefn_vm::xrp::{XRP_DATA_VIEW_BYTES, XRP_MAX_FANOUT, XRP_SCRATCH_BYTES};

/// Default submission-queue depth of the engine's ring. The completion queue is twice this, and
/// reads in flight never exceed the buffer count, which is capped at the ring depth, so the
/// submission queue cannot overflow and the completion queue cannot either.
pub const DEFAULT_RING_DEPTH: u32 = 256;
/// Largest ring depth the engine asks for (io_uring accepts up to 32768 SQ entries).
pub const MAX_RING_DEPTH: u32 = 16384;

/// Default number of registered I/O buffers: the most block reads the engine has in flight.
/// The virtio disk here has 128 tags; 256 keeps it saturated with room for fan-out.
pub const DEFAULT_BUFFERS: usize = 256;
/// io_uring accepts at most 16384 registered buffers, and `buf_index` is a u16.
pub const MAX_BUFFERS: usize = 16384;

/// Default number of chain slots: chains the caller may have submitted and not yet reaped.
/// Each owns a scratch of [`SCRATCH_BYTES`] (4 MiB in all at the default).
pub const DEFAULT_CHAINS: usize = 1024;
/// Upper bound on chain slots (token bookkeeping is u32-indexed; memory is chains x 4 KiB).
pub const MAX_CHAINS: usize = 1 << 20;

/// Default per-chain hop limit: block reads one chain may issue, its first read included.
/// XRP had no limit and said one was needed; 64 covers any B+-tree a 64-bit file can hold.
pub const DEFAULT_MAX_HOPS: u32 = 64;

/// Requests one invocation may set (`next_addr[]`/`size[]` pairs): XRP's fan-out.
pub const MAX_FANOUT: usize = XRP_MAX_FANOUT;
/// Reads one chain may have outstanding (in flight or queued for a buffer) at once. Equal to the
/// fan-out so a per-chain request table of fixed size suffices (no allocation per I/O).
pub const MAX_OUTSTANDING_PER_CHAIN: usize = XRP_MAX_FANOUT;

/// Bytes of a block the function may read through `data`: min(this, bytes read after `data`).
pub const DATA_VIEW_BYTES: usize = XRP_DATA_VIEW_BYTES;
/// Largest request (`size[i]`, or a plain read's length) in bytes: one data view.
pub const MAX_REQUEST_BYTES: usize = DATA_VIEW_BYTES;
/// Largest logical block (O_DIRECT offset alignment) the engine widens requests to.
pub const MAX_BLOCK_ALIGN: usize = 4096;
/// One registered buffer: a widened request of at most [`MAX_REQUEST_BYTES`] plus up to one
/// alignment unit of head/tail padding always fits.
pub const SLOT_BUFFER_BYTES: usize = DATA_VIEW_BYTES + MAX_BLOCK_ALIGN;
/// Memory alignment of every registered buffer (O_DIRECT needs at most the page size here).
pub const BUFFER_ALIGN: usize = 4096;

/// Scratch bytes per chain slot (XRP's 4 KiB, application-owned arguments and results).
pub const SCRATCH_BYTES: usize = XRP_SCRATCH_BYTES;

/// Least time between two attempts of [`crate::Engine::retry_raw`] to set raw mode up again
/// after it was dropped (a writer held the file): each attempt takes a lease and runs FIEMAP,
/// so retrying per lookup would cost more than the file path it replaces.
pub const RAW_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Files one engine can have registered at once.
pub const MAX_FILES: usize = 64;
/// Registered-file table size: file `i` at fixed index `i`, its block device (raw mode) at
/// `MAX_FILES + i`, so every raw file has its own device slot and no lookup is needed per hop.
pub const REGISTERED_FILE_SLOTS: usize = 2 * MAX_FILES;

const _: () = {
    assert!(DEFAULT_BUFFERS <= DEFAULT_RING_DEPTH as usize);
    assert!(MAX_BUFFERS <= u16::MAX as usize + 1);
    assert!(SLOT_BUFFER_BYTES.is_multiple_of(BUFFER_ALIGN));
    assert!(MAX_BLOCK_ALIGN.is_power_of_two());
    assert!(DATA_VIEW_BYTES.is_multiple_of(MAX_BLOCK_ALIGN));
    assert!(MAX_OUTSTANDING_PER_CHAIN <= u8::MAX as usize);
};
