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

/// XRP's window: a hop of at most this many bytes shows the function
/// min(this, bytes read after the requested byte) through `data` (XRP's and BPF-KV's programs
/// read a 4 KiB window behind a 512 B request).
pub const DATA_VIEW_BYTES: usize = XRP_DATA_VIEW_BYTES;
/// Default largest hop (`size[i]`, or a plain read's length): one data view, so an engine's
/// registered buffers stay 8 KiB each unless it is built for larger hops.
pub const DEFAULT_HOP_BYTES: usize = DATA_VIEW_BYTES;
/// Largest hop an engine can be built for ([`crate::EngineConfig::hop_bytes`]): real engines'
/// pages (WiredTiger leaves default to 32 KiB, RocksDB blocks pass their 4 KiB target) fit one
/// hop. A hop larger than [`DATA_VIEW_BYTES`] shows its requested size through `data`, and the
/// context's `data_len` says how many bytes that is.
pub const MAX_HOP_BYTES: usize = 64 << 10;
/// Largest logical block (O_DIRECT offset alignment) the engine widens requests to.
pub const MAX_BLOCK_ALIGN: usize = 4096;
/// Memory alignment of every registered buffer (O_DIRECT needs at most the page size here).
pub const BUFFER_ALIGN: usize = 4096;

/// Largest range one range read ([`crate::Engine::submit_range`]) serves: one SQE. λ-IO's 1 MiB
/// requests are one read; [`crate::Engine::read_range`] cuts longer spans into reads of this
/// size (at aligned file offsets, so their aligned covers never overlap).
pub const MAX_RANGE_BYTES: usize = 1 << 20;
/// Largest [`crate::RangeBuf`]: io_uring refuses to register a buffer above 1 GiB, and a span
/// read with [`crate::Engine::read_range`] must fit one buffer.
pub const MAX_RANGE_BUF_BYTES: usize = 1 << 30;
/// Default number of range reads an engine has in flight at once (a 64 MiB span is 64 reads).
pub const DEFAULT_RANGE_READS: usize = 64;
/// Upper bound on [`crate::EngineConfig::range_reads`]; with [`MAX_RING_DEPTH`] it keeps the
/// ring within io_uring's 32768 submission entries.
pub const MAX_RANGE_READS: usize = 4096;
/// Default number of registered-buffer slots the engine keeps for callers' range buffers.
pub const DEFAULT_RANGE_BUF_SLOTS: usize = 8;

/// Scratch bytes per chain slot (XRP's 4 KiB, application-owned arguments and results).
pub const SCRATCH_BYTES: usize = XRP_SCRATCH_BYTES;

/// One registered chain buffer of an engine whose hops are at most `hop_bytes`: a widened hop
/// plus up to one alignment unit of head/tail padding always fits.
#[must_use]
pub const fn slot_buffer_bytes(hop_bytes: usize) -> usize {
    hop_bytes + MAX_BLOCK_ALIGN
}

/// Capacity a [`crate::RangeBuf`] needs for a range of `len` bytes read with
/// [`crate::Engine::read_range`] at any offset: the range lands `offset % MAX_BLOCK_ALIGN` bytes
/// in and its aligned cover ends on the next [`MAX_BLOCK_ALIGN`] boundary.
#[must_use]
pub const fn range_buf_bytes(len: usize) -> usize {
    len.next_multiple_of(MAX_BLOCK_ALIGN) + MAX_BLOCK_ALIGN
}

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
    assert!(MAX_BLOCK_ALIGN.is_power_of_two());
    assert!(BUFFER_ALIGN.is_multiple_of(MAX_BLOCK_ALIGN));
    assert!(DATA_VIEW_BYTES.is_multiple_of(MAX_BLOCK_ALIGN));
    assert!(MAX_HOP_BYTES.is_multiple_of(MAX_BLOCK_ALIGN) && MAX_HOP_BYTES >= DATA_VIEW_BYTES);
    assert!(MAX_RANGE_BYTES.is_multiple_of(MAX_BLOCK_ALIGN));
    assert!(MAX_RANGE_BYTES <= MAX_RANGE_BUF_BYTES && MAX_RANGE_BYTES < u32::MAX as usize);
    assert!(MAX_RING_DEPTH as usize + MAX_RANGE_READS <= 32768);
    assert!(MAX_OUTSTANDING_PER_CHAIN <= u8::MAX as usize);
};

// Admission filters of engines' block caches (the `admission` module).
/// Smallest doorkeeper: below this its window (a quarter of the bits) ends too often to see any
/// block twice.
pub const DOORKEEPER_MIN_BITS: u64 = 1024;
/// A frequency sketch's counter saturates here (4 bits): past a few uses per window a block is
/// simply hot, and four counters per key fit one 64-bit word's quarters.
pub const SKETCH_COUNTER_MAX: u64 = 15;
/// Records per cache entry after which a frequency sketch halves its counters (TinyLFU's sample
/// size is 10x the cache; a longer window ranks the long tail of a zipfian workload better, and
/// 100x measured best for a leaf cache under YCSB's scrambled zipfian, docs/results/ycsb.md).
pub const SKETCH_SAMPLES_PER_ENTRY: u64 = 100;
/// A frequency sketch's 64-bit words (16 counters each) per cache entry: a window's keys are
/// the file's blocks, many more than the cache holds, and with fewer counters the cold blocks'
/// counts pile onto the hot ones' (measured: 1 word per entry kept 26% of a leaf cache's hits
/// against 31% for 16, docs/results/ycsb.md). 128 bytes per entry: 0.4% of a 32 KiB slot.
pub const SKETCH_WORDS_PER_ENTRY: usize = 16;

// Raw mode (the metadata digest and its leases).
/// Largest number of extents one digest holds (24 B each: 24 MiB). A file more fragmented than
/// this is refused rather than letting a pathological file eat memory.
pub const MAX_DIGEST_EXTENTS: usize = 1 << 20;
/// Read leases held at once by this process (raw mode) (the signal handler scans a fixed table; no allocation
/// or locking is allowed there).
pub const MAX_LEASES: usize = 64;
/// Longest time between two `F_GETLEASE` polls of a held lease; must stay well below
/// `lease-break-time` (whole seconds, 45 by default; the `digest::lease` module docs).
pub const LEASE_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1);

// The benchmark harness (feature `bench`).
/// Smallest node size the pointer file takes: a node holds its next pointer and its index.
#[cfg(feature = "bench")]
pub const MIN_NODE_BYTES: u64 = 16;
/// Largest node size: one engine block (a default hop).
#[cfg(feature = "bench")]
pub const MAX_NODE_BYTES: u64 = DEFAULT_HOP_BYTES as u64;
