//! Every bound of λ-IO, named once with its reason (docs/DESIGN.md, "Named limits"; a test
//! checks the table). A bound that is the wire's is derived from it.

use storefn_wire::limits as wire;

// Requests.
/// Largest range one λ request reads (the input buffer is at most this big).
pub const MAX_RANGE_BYTES: u64 = 64 << 20;
/// Largest range one remote λ request (LAMBDA frame) may cover, bytes.
pub const MAX_REMOTE_RANGE_BYTES: u64 = wire::MAX_LAMBDA_IN_BYTES as u64;
/// Largest range [`crate::RemoteReadSide`] reads for one request (READs of up to
/// [`wire::MAX_READ_BYTES`], each a run of missing cache blocks), bytes: bounds the client's
/// input buffer.
pub const MAX_REMOTE_READ_BYTES: u64 = MAX_RANGE_BYTES;
/// Default client block cache of a [`crate::RemoteReadSide`], bytes.
pub const DEFAULT_CLIENT_CACHE_BYTES: u64 = 64 << 20;
/// Largest input one remote λ write carries, bytes.
pub const MAX_REMOTE_WRITE_IN_BYTES: usize = wire::MAX_LAMBDA_WRITE_IN_BYTES as usize;
/// Largest output one remote λ write may write, bytes.
pub const MAX_REMOTE_WRITE_OUT_BYTES: usize = wire::MAX_LAMBDA_WRITE_OUT_BYTES as usize;
/// Pages `mincore` inspects per call (its result vector lives on the stack).
pub const MINCORE_PAGES: usize = 4096;

// The dispatcher.
/// Most samples kept per quantity (a fixed ring: no allocation per request).
pub const MAX_SAMPLES: usize = 32;
/// Samples a side needs before its estimate is trusted (cold start probes until then).
pub const MIN_SAMPLES: usize = 3;
/// Share of the winner's time always left for probing the loser, even when the dispatcher's
/// own per-request cost uses up the budget: without probes a recovered loser is never seen.
pub const MIN_PROBE_BUDGET: f64 = 0.005;
/// The dispatcher times its own work (deciding, recording) on one request in this many: four
/// clock reads on every request were a visible share of a 1 µs warm request.
pub const OWN_COST_EVERY: u64 = 32;
/// Share of the requests' time spent sampling the client's cache state (`cachestat(2)` for a
/// local file, the block cache's lookups for a remote one) when nothing signals a change. The
/// uncached fraction last sampled stands for the file's cache state in between: a local
/// sample off its level, a local probe, or this credit sampling it again.
pub const CACHE_SAMPLE_BUDGET: f64 = 0.01;
/// Fewest requests between two budgeted probes of the loser. Where the sides are close the
/// budget alone would probe very often (a loser 7% behind, every second request: the whole
/// budget spent where a wrong choice costs little, and a cold row's auto 3.5% over the better
/// side with only noise left for the margin). Once in 32 requests keeps the loser's level
/// (the median of its last [`MAX_SAMPLES`]) fresh over 1,024 requests and costs at most
/// `(loser/winner - 1) / 32`: 1% for a loser 1.33x behind (every 16 requests: 2%, and
/// 1.031x instead of 1.022x the better side for sides with rare stalls, in virtual time). A
/// loser more than `1 + 32 x budget` behind (2.1x at 3.5%) is probed less often anyway.
pub const MIN_PROBE_INTERVAL: u32 = 32;
/// Requests the local side runs without the model after one it decided, while it wins with
/// the server more than [`crate::dispatch::FAR_BEHIND`] behind (a warm client cache): they check only that
/// their time is within the bounds the model would not react to (its level, the change
/// threshold, the side's spread), and one off them goes through the model at once. Deciding
/// and recording, with the model's state out of the CPU cache after the function streamed
/// its range, cost 0.3-0.6 µs: 3-6% of a warm 64 KiB request. The estimates then follow one
/// request in eight, and probes and confirmations wait at most this many requests.
pub const SETTLED_RUN: u32 = 7;
/// Samples the tail factor of a side averages over (the weight of the newest is at least
/// `1 / TAIL_SAMPLES`).
pub const TAIL_SAMPLES: u32 = 128;
/// Samples a side's tail factor needs before it is trusted beyond the other side's.
pub const TAIL_TRUSTED: u32 = 16;

// The benchmark harnesses (feature `bench`).
/// Untimed requests before the timed ones (JIT warm-up, first-touch of the buffers).
#[cfg(feature = "bench")]
pub const WARMUP_REQUESTS: u32 = 3;
/// Stretches each half of a run is cut into for the per-round spread (`BenchRow::round_us`):
/// the per-stretch ratio of auto to the better fixed side shows the run's noise.
#[cfg(feature = "bench")]
pub const ROUNDS_PER_HALF: u32 = 6;
/// The kernel's smallest CFS quota, µs (`cpu.cfs_quota_us` refuses less).
#[cfg(feature = "bench")]
pub const MIN_CFS_QUOTA_US: u64 = 1_000;
