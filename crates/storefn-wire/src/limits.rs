//! Every bound of the wire protocol, named once with its reason. A receiver checks each before
//! it allocates or queues anything; docs/DESIGN.md's limits table lists them (a test checks it).

/// Largest frame, header included: bounds every receive buffer. Twice a READ: a whole READ
/// answer (`MAX_READ_BYTES` and its headers) fits, as do 64 KiB writes with theirs.
pub const MAX_FRAME_BYTES: usize = 2 * MAX_READ_BYTES as usize;
/// Most messages per frame: bounds the work one frame can queue.
pub const MAX_MSGS_PER_FRAME: u32 = 1024;
/// Longest path in a request, bytes (relative to the served directory).
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest tenant name in HELLO.
pub const MAX_TENANT_BYTES: usize = 64;
/// Largest READ, bytes: one range read of the engine, landing in the buffer the answer is sent
/// from (storefn-server asserts it equals storefn-io's `MAX_RANGE_BYTES` at compile time; this
/// crate does not depend on the engine).
pub const MAX_READ_BYTES: u32 = 1 << 20;
/// Largest first read of an XRP request, bytes: the engine's largest hop, so a real engine's
/// block (a 32 KiB WiredTiger leaf, an overflowing RocksDB block) is one hop from the start
/// (storefn-server asserts it equals storefn-io's `MAX_HOP_BYTES`; a server built for smaller
/// hops refuses a longer first read with an error status, not a protocol error).
pub const MAX_XRP_READ_BYTES: u32 = 64 << 10;
/// Largest WRITE payload, bytes.
pub const MAX_WRITE_BYTES: u32 = 64 * 1024;
/// XRP scratch, bytes: the chain's scratch page (checked against the engine's in
/// storefn-server).
pub const SCRATCH_BYTES: usize = 4096;
/// Largest λ output a request may ask for.
pub const MAX_LAMBDA_OUT_BYTES: u32 = 64 * 1024;
/// Largest range one LAMBDA request reads, bytes: the server stages it with one range read
/// (at most `MAX_READ_BYTES`) into the job's buffer and runs the function over it in place.
pub const MAX_LAMBDA_IN_BYTES: u32 = 1 << 20;
/// Largest input a LAMBDA_WRITE request carries, bytes (well inside one frame).
pub const MAX_LAMBDA_WRITE_IN_BYTES: u32 = 256 * 1024;
/// Largest output a LAMBDA_WRITE may write, bytes: the per-thread staging buffer's bound
/// (bitmap decoding expands ~32x).
pub const MAX_LAMBDA_WRITE_OUT_BYTES: u32 = 4 << 20;

/// Largest OFFLOAD application message (request), bytes.
pub const MAX_OFFLOAD_MSG_BYTES: u32 = 4096;
/// Largest OFFLOAD answer (response data), bytes.
pub const MAX_OFFLOAD_DATA_BYTES: u32 = 64 * 1024;

/// The client's default time a call waits for its replies before failing (then the connection
/// is dropped and the next call reconnects).
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
