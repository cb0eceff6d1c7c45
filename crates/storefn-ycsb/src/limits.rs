//! The driver's named bounds, each with its reason.

/// YCSB's scrambled zipfian draws from this many items and folds them onto the key space by
/// hashing (YCSB's `ScrambledZipfianGenerator.ITEM_COUNT`).
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;

/// zeta(`SCRAMBLED_ITEM_COUNT`, 0.99), YCSB's precomputed constant: summing 10^10 terms per
/// run would take minutes.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// YCSB's zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// Largest record a run accepts (fields x length): WiredTiger and BPF-KV values are held in
/// one buffer per thread, and YCSB's default record is 1 KB.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// Most threads a run starts: each holds a store session (a WiredTiger session, an io engine)
/// and one latency sample per operation.
pub const MAX_THREADS: usize = 1024;

/// Most operations one run measures: every operation keeps one 8-byte latency sample.
pub const MAX_OPERATIONS: u64 = 1 << 30;

/// Smallest memory budget: WiredTiger refuses a cache under 1 MB, and the process itself
/// (binary, io engine rings, per-thread buffers) needs some megabytes beside it.
pub const MIN_MEMORY_LIMIT: u64 = 16 << 20;

/// The share of the budget given to WiredTiger's cache (per mille): the rest is the process
/// itself and the page cache, which the cgroup counts too and which must not push the group
/// into the OOM killer.
pub const WT_CACHE_PER_MILLE: u64 = 600;

/// The share of the budget given to RocksDB's block cache (per mille), index and filter
/// blocks charged to it: the same split as WiredTiger's cache, for the same reason.
pub const ROCKS_CACHE_PER_MILLE: u64 = WT_CACHE_PER_MILLE;
/// WiredTiger's cache share (per mille) beside the storefn function (`wiredtiger:`): WiredTiger
/// serves only writes, scans and keys written since the checkpoint, while the function's reads
/// go through the page cache, which the memory group charges and which gets the rest.
pub const WT_FN_CACHE_PER_MILLE: u64 = 100;
/// The storefn function's block cache beside it (per mille): with WiredTiger's share above,
/// the function store keeps the same bytes as caches as WiredTiger alone
/// ([`WT_CACHE_PER_MILLE`]). Its reads are O_DIRECT, so no page cache doubles it.
pub const WT_FN_BLOCK_CACHE_PER_MILLE: u64 = WT_CACHE_PER_MILLE - WT_FN_CACHE_PER_MILLE;

/// Most reads one batch (`--batch`) hands a store: each thread holds a key and a record
/// buffer per read of its batch.
pub const MAX_READ_BATCH: usize = 1024;

/// RocksDB's block cache share (per mille) beside the storefn function (`rocksdb:`), for the
/// reason [`WT_FN_CACHE_PER_MILLE`] gives.
pub const ROCKS_FN_CACHE_PER_MILLE: u64 = WT_FN_CACHE_PER_MILLE;

/// Most chains a `rocksdb:` session keeps in flight (its engine's registered buffers, one
/// data block each): a larger batch runs in rounds of this many.
pub const MAX_SESSION_CHAINS: usize = 256;

/// The share of the budget (per mille) the `rocksdb:` store's data block cache holds: the data
/// blocks its chains read, shared by its threads (RocksDB's block cache, for the function's
/// path). With RocksDB's own 10% beside it and the reader's index and filters, the store's
/// memory stays under the 60% `rocksdb-native` gives RocksDB's cache plus what RocksDB holds
/// outside it; the chains read with O_DIRECT, so the page cache is not needed for them.
pub const ROCKS_FN_DATA_CACHE_PER_MILLE: u64 = 400;

/// Writer threads of one `wiredtiger` session with `--batch-updates`: a batch's updates run on
/// them while its reads run as chains. One: each update still commits (and syncs its log
/// record) alone, as WiredTiger alone does it, and with four, concurrent commits in WiredTiger
/// 3.2.1 waited on each other's log syncs (measured slower than one: docs/results/ycsb.md).
pub const BATCH_WRITERS: usize = 1;
