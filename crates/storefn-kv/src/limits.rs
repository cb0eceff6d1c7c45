//! Every bound of BPF-KV, named once with its reason (docs/DESIGN.md, "Named limits"; a test
//! checks the table). A bound that is the engine's or the VM's is derived from theirs.

use std::time::Duration;

use storefn_io::limits as io;

// The file.
/// Deepest tree accepted: 2^64 keys fit in 13 levels of fan-out 31, so more is corruption.
pub const MAX_LAYERS: u32 = 14;
/// Deepest database `create` makes (and the deepest sidecar-less file opening infers):
/// 8 levels of 31 is 852 TB already.
pub const MAX_CREATE_LAYERS: u32 = 8;
/// Bytes per write: large enough to reach the disk's sequential bandwidth, a multiple of both
/// node sizes and of the 4 KiB alignment O_DIRECT needs.
pub const BUILD_CHUNK_BYTES: usize = 4 << 20;
/// Alignment of every I/O buffer: a page, which covers 512 B and 4 KiB logical blocks.
pub const IO_ALIGN: usize = io::BUFFER_ALIGN;

// Lookups.
/// Scratch bytes lent to each chain: the engine's (XRP's 4 KiB).
pub const SCRATCH_BYTES: usize = io::SCRATCH_BYTES;
/// Chains in flight per thread on `xrp-batch` when the caller does not say.
pub const DEFAULT_BATCH: usize = 32;
/// Most chains in flight per thread (the virtio disk has 128 tags in all).
pub const MAX_BATCH: usize = 1024;
/// Results per call (BPF-KV's range function returns when 32 are buffered).
pub const RANGE_BATCH: usize = 32;
/// Times one lookup is redone after a version change before giving up.
pub const MAX_STALE_RETRIES: u32 = 16;

// Writes.
/// Most records one group commit carries; bounds the syncer's buffers.
pub const MAX_BATCH_RECORDS: usize = 4096;
/// Default memtable limit: 4 MiB of entries (~52 K puts) before a put triggers compaction.
/// Small enough that compaction of a 3-layer tree stays sub-second; configurable per `Db`.
pub const DEFAULT_MEMTABLE_LIMIT_BYTES: usize = 4 << 20;
/// Bytes per sequential read of either cursor: large enough that a sweep runs at disk bandwidth,
/// a multiple of both node sizes so every read stays block-aligned for O_DIRECT.
pub const COMPACT_READ_BYTES: usize = 1 << 20;
/// How often a writer told to wait (`--wait-lock`) tries the lock again.
pub const LOCK_RETRY_INTERVAL: Duration = Duration::from_millis(10);

const _: () = {
    assert!(COMPACT_READ_BYTES.is_multiple_of(IO_ALIGN));
    assert!(BUILD_CHUNK_BYTES.is_multiple_of(IO_ALIGN));
    // BPF-KV's range query carries as many results as one call returns.
    assert!(RANGE_BATCH == crate::abi::RQ_KEYS);
};

// The benchmark harnesses (feature `bench`).
/// `kv compare`: rounds when the caller does not say: enough for a stable median of per-round ratios.
#[cfg(feature = "bench")]
pub const DEFAULT_ROUNDS: u32 = 20;
/// Most rounds (each round runs both modes once; more would make rounds too short to time).
#[cfg(feature = "bench")]
pub const MAX_ROUNDS: u32 = 10_000;
/// The device reference: most reads in flight per thread (the virtio disk has 128 tags).
#[cfg(feature = "bench")]
pub const DEVICE_MAX_BATCH: usize = 128;
/// `pushdown --batch B` keeps B lookups in flight in frames of B / PIPELINE_FRAMES lookups.
#[cfg(feature = "bench")]
pub const PIPELINE_FRAMES: usize = 4;
/// Round trips timed to measure the RTT before a run (STAT of the database; median).
#[cfg(feature = "bench")]
pub const RTT_PROBES: usize = 200;
