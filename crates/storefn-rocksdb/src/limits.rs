//! The reader's named limits: every bound it enforces on another engine's files, with its reason.

/// Largest block (data, index, metaindex, properties) the reader loads. RocksDB's blocks pass
/// their target size by one entry; a configured block size is at most a few MiB in practice, and
/// a handle beyond this is taken as damage rather than a reason to allocate.
pub const MAX_BLOCK_BYTES: u64 = 64 << 20;

/// Largest key the reader accepts in a block, a MANIFEST or a WAL (RocksDB allows up to 8 MiB
/// user keys in practice; longer lengths are damage).
pub const MAX_KEY_BYTES: usize = 8 << 20;

/// Largest MANIFEST the reader replays: a MANIFEST is rolled over at `max_manifest_file_size`
/// (1 GiB by default), so a bigger one is not RocksDB's.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 30;

/// Largest WAL bytes replayed into the client-side memtable, all live logs together: a closed
/// database's WALs hold at most a few write buffers (64 MiB by default each).
pub const MAX_WAL_BYTES: u64 = 1 << 30;

/// Levels a version may name (RocksDB's `num_levels` is 7 by default; the MANIFEST names the
/// level of every file, so a larger level is damage).
pub const MAX_LEVELS: u32 = 64;

/// Length of `CURRENT` (the MANIFEST's name and a newline).
pub const MAX_CURRENT_BYTES: u64 = 4096;

/// WAL numbers a remote open asks for past the MANIFEST's next file number: RocksDB takes a
/// new WAL's number from the counter without always recording it first.
pub const WAL_PROBE_SLACK: u64 = 16;

/// Most WAL numbers a remote open asks the server about (one STAT each, in one frame).
pub const MAX_WAL_PROBES: u64 = 1024;

/// Reopens one remote Get may make when files change under it (each a compaction finishing
/// between the open and the Get); more means the database is changing faster than it can be
/// read.
pub const MAX_STALE_REOPENS: u32 = 8;

/// The pushdown client's sampled cache refresh (BPF-oF's): one in this many Gets whose first
/// asked file's index block is not in the client's cache also reads that block, in the same
/// frame as the Get's XRP requests (no extra round trip), into the cache, evicting only entries
/// no Get used since the previous sample. Hot files' index blocks come back into a small cache
/// without pushing out the filters every Get asks; one Get in 16 pays a block's bytes.
pub const REFRESH_SAMPLE_EVERY: u64 = 16;
