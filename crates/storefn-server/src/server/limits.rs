//! Every bound of the server thread, named once with its reason (docs/design/server.md,
//! "Security and limits"). A bound that is another crate's is derived from it.

use std::time::Duration;

/// Requests outstanding per connection (queued or running); more are answered `LIMIT`, and the
/// connection is not read while it is at the limit.
pub const MAX_IN_FLIGHT_PER_CONN: u32 = 256;
/// Response bytes waiting to be sent per connection before it is no longer read.
pub const MAX_CONN_OUT_BYTES: usize = 4 << 20;
/// A connection with nothing in flight and nothing received for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A connection that does not finish sending a started frame, or does not take its
/// responses, for this long is closed (slow-loris and stalled readers).
pub const SLOW_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Hops per chain, whatever the client asks (the engine's hop limit).
pub const SERVER_MAX_HOPS: u32 = 64;
/// Largest hop a pushed-down chain may read by default: the engine's own bound, so
/// WiredTiger's 32 KiB leaves and RocksDB's overflowing data blocks are one hop each.
pub const SERVER_HOP_BYTES: usize = storefn_io::limits::MAX_HOP_BYTES;
/// Bytes one range read of a LAMBDA range covers at most (pieces are cut at multiples of it in
/// the file): a failed piece names where the range broke to within this, and the pieces'
/// device reads overlap.
pub const LAMBDA_PIECE_BYTES: u32 = 64 * 1024;
/// Range reads one LAMBDA request keeps in flight: a 1 MiB range is 16 pieces, all overlapped,
/// while one request holds at most 1/16 of the engine's `ENGINE_CHAINS` slots (the scheduler
/// counts the request once).
pub const LAMBDA_READS_PER_JOB: u32 = 16;
/// DDS: offloaded reads in flight per server thread (each also takes one of the engine's chain
/// slots); more are forwarded to the host.
pub const MAX_OFFLOAD_READS: usize = 256;
/// DDS: the offload hook's files a server thread keeps registered with its engine (beside
/// `MAX_OPEN_FILES_PER_THREAD` served files); the least recently read is closed for another.
pub const DDS_ENGINE_FILES: usize = 8;
/// Chain slots (and registered buffers) per server thread's engine.
pub const ENGINE_CHAINS: usize = 256;
/// Connections per server thread; more are refused at accept (closed at once).
pub const MAX_CONNS_PER_THREAD: usize = 8192;
/// Open files per server thread (the engine registers at most 64).
pub const MAX_OPEN_FILES_PER_THREAD: usize = 48;
/// Distinct tenant names per server thread (each has a queue); HELLO beyond it gets `LIMIT`.
pub const MAX_TENANTS_PER_THREAD: usize = 1024;
/// Compiled programs per server thread.
pub const MAX_INSTANCES_PER_THREAD: usize = 32;
/// Longest time `poll` sleeps: timeouts and the stop flag are checked at least this often.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// At shutdown, how long responses already built may take to drain before sockets close.
pub const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// Most server threads.
pub const MAX_THREADS: usize = 64;
/// DDS: how long a request forwarded to the host application may wait for its answer before
/// the client gets `HOST_TIMEOUT` (the host's late answer is then dropped). Long enough for a
/// host that replays a page before answering; short enough that a stuck host fails its
/// clients' requests instead of hanging them.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// Receive buffer a connection starts with: enough for HELLO and AUTH, so a connection that
/// never authenticates holds little; it grows to the frames the client sends.
pub const CONN_RX_START_BYTES: usize = 1024;
/// After a large frame, a connection's receive, response and send buffers shrink back to this
/// once they drained (steady traffic of smaller frames reuses them without allocating).
pub const CONN_KEEP_BYTES: usize = 64 * 1024;
/// Largest frame a connection may send before it authenticated (when the server requires
/// authentication): a HELLO and an AUTH with the longest tenant name. A frame header announcing
/// more closes the connection before any of it is buffered.
pub const MAX_PREAUTH_FRAME_BYTES: usize = crate::proto::FRAME_HEADER_BYTES
    + 2 * (crate::proto::MSG_HEADER_BYTES
        + 8
        + crate::proto::MAX_TENANT_BYTES
        + crate::proto::HASH_BYTES);
/// WRITE and LAMBDA_WRITE bytes handed to a server thread's writer thread and not yet
/// answered. Past it the thread reads no connection (each frame is handled whole) and a write
/// that would pass it is answered `LIMIT`; one write of any allowed size always goes.
pub const MAX_PENDING_WRITE_BYTES: usize = 64 << 20;
/// Connections the whole server keeps open; more are closed at accept.
pub const MAX_CONNS: usize = 16 * 1024;
/// Connections from one peer address (all threads).
pub const MAX_CONNS_PER_PEER: usize = 1024;
/// Connections not yet authenticated (before HELLO, or between HELLO and AUTH when the
/// server requires it), in all: what a flood of sockets that never authenticate can hold.
pub const MAX_PREAUTH_CONNS: usize = 1024;
/// Connections not yet authenticated from one peer address: one host cannot take every
/// pre-auth slot.
pub const MAX_PREAUTH_CONNS_PER_PEER: usize = 64;
/// A connection that has not authenticated this long after it was accepted is closed.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection limits a server runs with (tests lower them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    pub total: usize,
    pub per_thread: usize,
    pub per_peer: usize,
    pub preauth: usize,
    pub preauth_per_peer: usize,
    pub auth_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            total: MAX_CONNS,
            per_thread: MAX_CONNS_PER_THREAD,
            per_peer: MAX_CONNS_PER_PEER,
            preauth: MAX_PREAUTH_CONNS,
            preauth_per_peer: MAX_PREAUTH_CONNS_PER_PEER,
            auth_timeout: AUTH_TIMEOUT,
        }
    }
}
/// The largest answer one request produces, its headers included: a READ's range buffer (the
/// data with the answer's head in front, to the end of its aligned cover); a λ's output or an
/// XRP's scratch with their header and fixed fields is smaller.
pub const MAX_RESPONSE_MSG_BYTES: usize = {
    let l = crate::proto::MAX_LAMBDA_OUT_BYTES as usize;
    let s = crate::proto::SCRATCH_BYTES;
    let msg = crate::proto::MSG_HEADER_BYTES + 64 + if l > s { l } else { s };
    if super::worker::LARGEST_RANGE_BUF > msg {
        super::worker::LARGEST_RANGE_BUF
    } else {
        msg
    }
};

/// Worst-case bytes one connection holds: its receive buffer (one whole frame), the response
/// frame being built, the send buffer (`MAX_CONN_OUT_BYTES` before the connection stops being
/// read, plus the answers of every request it has in flight and one rolled frame; twice that
/// for the vectors' growth and the READ answers queued in their range buffers) and its queued
/// jobs' 4 KiB buffers.
pub const CONN_MEMORY_BOUND: usize = crate::proto::MAX_FRAME_BYTES
    + crate::proto::MAX_FRAME_BYTES
    + 2 * (MAX_CONN_OUT_BYTES
        + MAX_IN_FLIGHT_PER_CONN as usize * MAX_RESPONSE_MSG_BYTES
        + crate::proto::MAX_FRAME_BYTES)
    + MAX_IN_FLIGHT_PER_CONN as usize * (crate::proto::SCRATCH_BYTES + 256);

/// Per thread, beside its connections: the engine's registered buffers and chain scratch
/// (one registered hop buffer of the largest hop plus an estimated 12 KiB of scratch and ring
/// per chain slot), the range buffers of admitted READ and λ jobs (at most one per chain slot,
/// each at most a whole READ's) and the spare ones kept for reuse, LAMBDA_WRITE's output
/// staging and the writer thread's queue.
pub const THREAD_MEMORY_BOUND: usize = ENGINE_CHAINS
    * (storefn_io::limits::slot_buffer_bytes(SERVER_HOP_BYTES) + 12 * 1024)
    + ENGINE_CHAINS * super::worker::LARGEST_RANGE_BUF
    + super::worker::SPARE_RANGE_BUF_BYTES
    + crate::proto::MAX_LAMBDA_WRITE_OUT_BYTES as usize
    + MAX_PENDING_WRITE_BYTES;

/// The server's worst-case memory in bytes: `threads x (connections per thread x
/// CONN_MEMORY_BOUND + THREAD_MEMORY_BOUND) + registry`, with `conns` connections in all
/// spread over the threads (at most `ConnLimits::total`).
#[must_use]
pub fn worst_case_memory(threads: usize, conns: usize, registry_bytes: usize) -> u64 {
    conns as u64 * CONN_MEMORY_BOUND as u64
        + threads as u64 * THREAD_MEMORY_BOUND as u64
        + registry_bytes as u64
}
/// Instructions per program invocation (per XRP hop; a λ run adds the VM's per-byte
/// allowance) for a tenant the operator gave no budget of its own: a quarter of the VM's
/// default, so one request's program costs at most ~a millisecond of the thread.
/// `ServerConfig::insn_budget` and `tenant_insn_budgets` change it.
pub const DEFAULT_TENANT_INSN_BUDGET: u64 = storefn_vm::program::DEFAULT_INSN_BUDGET / 4;
const _: () = assert!(DEFAULT_TENANT_INSN_BUDGET < storefn_vm::program::DEFAULT_INSN_BUDGET);
