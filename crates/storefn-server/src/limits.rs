//! Every bound of the server, named once with its reason (docs/DESIGN.md, "Named limits"; a
//! test checks the table; docs/design/server.md, "Security and limits"). The bounds the server
//! shares with the wire protocol, the engine and the VM are derived from those crates' own
//! limits (or checked against them at compile time), never typed twice.

use std::time::Duration;

pub use crate::metrics::{
    MAX_METRICS_CONNS, MAX_METRICS_REQUEST_BYTES, MAX_METRIC_TENANTS,
    MAX_REFUSED_LOG_LINES_PER_SEC, METRICS_IO_TIMEOUT,
};

use storefn_io::limits as io;
use storefn_vm::limits as vm;
use storefn_wire as wire;
use storefn_wire::limits as wl;

/// Requests outstanding per connection (queued or running); more are answered `LIMIT`, and the
/// connection is not read while it is at the limit.
pub const MAX_IN_FLIGHT_PER_CONN: u32 = 256;
/// Response bytes waiting to be sent per connection before it is no longer read.
pub const MAX_CONN_OUT_BYTES: usize = 4 << 20;
/// READ and LAMBDA answer bytes one connection may have in flight: the range buffers and λ
/// outputs of its admitted jobs plus the response bytes it holds unsent. A READ or LAMBDA that
/// would pass it waits (queued behind the connection's earlier ones, not refused) until answers
/// are sent; one always goes when the connection holds nothing. Two whole READs: one is sent
/// while the next is read.
pub const MAX_CONN_READ_BYTES: usize = 2 * crate::server::LARGEST_RANGE_BUF;
/// A connection with nothing in flight and nothing received for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A connection that does not finish sending a started frame, or does not take its
/// responses, for this long is closed (slow-loris and stalled readers).
pub const SLOW_CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Hops per chain, whatever the client asks (the engine's hop limit).
pub const SERVER_MAX_HOPS: u32 = io::DEFAULT_MAX_HOPS;
/// Largest hop a pushed-down chain may read by default: the engine's own bound, so
/// WiredTiger's 32 KiB leaves and RocksDB's overflowing data blocks are one hop each.
pub const SERVER_HOP_BYTES: usize = io::MAX_HOP_BYTES;
/// Bytes one range read of a LAMBDA range covers at most (pieces are cut at multiples of it in
/// the file): a failed piece names where the range broke to within this, and the pieces'
/// device reads overlap.
pub const LAMBDA_PIECE_BYTES: u32 = 64 * 1024;
/// Range reads one LAMBDA request keeps in flight: a 1 MiB range is 16 pieces, all overlapped,
/// while one request holds at most 1/16 of the engine's `ENGINE_CHAINS` slots (the scheduler
/// counts the request once).
pub const LAMBDA_READS_PER_JOB: u32 = 16;
/// λ runs handed to a server thread's runner thread at once (the one running and the next):
/// the runner never waits for the loop, and the rest wait in their tenants' queues on the loop,
/// where the least-used tenant's goes next, not behind a long queue.
pub const MAX_QUEUED_RUNS: usize = 2;
/// λ piece reads one tenant keeps in flight (beside one per job, so no job is left with
/// nothing to complete it) while another tenant has queued work within `CONTENTION_WINDOW`.
/// The device serves reads in about the order they come: behind a whole 1 MiB range
/// (`LAMBDA_READS_PER_JOB` pieces) another tenant's 4 KiB read waited ~1.3 ms instead of
/// ~60 µs (measured per request on the worker: admission to completion); two 64 KiB pieces
/// keep that wait near one piece's transfer. A tenant alone keeps every piece in flight.
pub const CONTENDED_LAMBDA_READS: u32 = 2;
/// How recently another tenant must have queued work for a tenant's λ reads to be held to
/// `CONTENDED_LAMBDA_READS`: longer than a closed-loop client's gap between two requests, so
/// its next read does not find the device queue full again.
pub const CONTENTION_WINDOW: Duration = Duration::from_millis(50);
/// λ jobs of one tenant whose ranges landed and wait for (or are on) the runner: its further
/// jobs wait in the scheduler, holding no range buffer, so one tenant's λs cannot fill the
/// thread's memory with staged ranges the runner has not reached, while its next range is
/// still read during a run.
pub const MAX_STAGED_RUNS_PER_TENANT: u32 = 2;
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
pub const MAX_PREAUTH_FRAME_BYTES: usize = wire::layout::FRAME_HEADER_BYTES
    + 2 * (wire::layout::MSG_HEADER_BYTES + 8 + wl::MAX_TENANT_BYTES + wire::HASH_BYTES);
/// WRITE and LAMBDA_WRITE bytes handed to a server thread's writer thread and not yet
/// answered. Past it the thread reads no connection (each frame is handled whole) and a write
/// that would pass it is answered `LIMIT`; one write of any allowed size always goes.
pub const MAX_PENDING_WRITE_BYTES: usize = 64 << 20;
/// LOAD_PROGs a server thread's verifier thread holds queued (each a copy of its program, at
/// most a frame); past it LOAD_PROG is answered `LIMIT`. Verification takes milliseconds per
/// large program: a deeper queue would only hold more memory, not verify more.
pub const MAX_PENDING_LOADS: usize = 16;
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
/// XRP's scratch with their header and fixed fields is smaller. READ and LAMBDA answers in
/// flight are bounded together by `MAX_CONN_READ_BYTES`.
pub const MAX_RESPONSE_MSG_BYTES: usize = {
    let l = wl::MAX_LAMBDA_OUT_BYTES as usize;
    let s = wl::SCRATCH_BYTES;
    let msg = wire::layout::MSG_HEADER_BYTES + 64 + if l > s { l } else { s };
    if crate::server::LARGEST_RANGE_BUF > msg {
        crate::server::LARGEST_RANGE_BUF
    } else {
        msg
    }
};

/// The largest answer of a request outside the READ/LAMBDA budget (an XRP's scratch, a status
/// or a short answer), its headers included.
pub const MAX_SMALL_ANSWER_BYTES: usize =
    wire::layout::FRAME_HEADER_BYTES + wire::layout::MSG_HEADER_BYTES + 64 + wl::SCRATCH_BYTES;

/// Worst-case bytes one connection holds: its receive buffer (one whole frame), the response
/// frame being built, the send buffer (`MAX_CONN_OUT_BYTES` before the connection stops being
/// read, plus its READ and LAMBDA answers in flight (`MAX_CONN_READ_BYTES`), the small answers
/// of every other request it has in flight and one rolled frame; twice that for the vectors'
/// growth) and its queued jobs' 4 KiB buffers. DDS's OFFLOAD answers (up to
/// `MAX_OFFLOAD_DATA_BYTES` each) are outside it: `DDS_CONN_MEMORY_BOUND`.
pub const CONN_MEMORY_BOUND: usize = wl::MAX_FRAME_BYTES
    + wl::MAX_FRAME_BYTES
    + 2 * (MAX_CONN_OUT_BYTES
        + MAX_CONN_READ_BYTES
        + MAX_IN_FLIGHT_PER_CONN as usize * MAX_SMALL_ANSWER_BYTES
        + wl::MAX_FRAME_BYTES)
    + MAX_IN_FLIGHT_PER_CONN as usize * (wl::SCRATCH_BYTES + 256);

/// `CONN_MEMORY_BOUND` on a server with an offload hook (DDS): every request in flight may be
/// an OFFLOAD whose answer carries a whole `MAX_OFFLOAD_DATA_BYTES` (twice, for the vectors'
/// growth).
pub const DDS_CONN_MEMORY_BOUND: usize = CONN_MEMORY_BOUND
    + 2 * MAX_IN_FLIGHT_PER_CONN as usize
        * (MAX_SMALL_ANSWER_BYTES + wl::MAX_OFFLOAD_DATA_BYTES as usize);

/// Per thread, beside its connections: the engine's registered buffers and chain scratch
/// (one registered hop buffer of the largest hop plus an estimated 12 KiB of scratch and ring
/// per chain slot), the range buffers of admitted READ and λ jobs (at most one per chain slot,
/// each at most a whole READ's) and the spare ones kept for reuse, LAMBDA_WRITE's output
/// staging, the writer thread's queue, the verifier thread's (the queued programs and the
/// one being verified, each at most a frame) and the λ runner's output buffers (the runs
/// handed to it and as many spares, each at most a λ output; a staged run's range is one of
/// the admitted jobs' buffers above).
pub const THREAD_MEMORY_BOUND: usize = ENGINE_CHAINS
    * (io::slot_buffer_bytes(SERVER_HOP_BYTES) + 12 * 1024)
    + ENGINE_CHAINS * crate::server::LARGEST_RANGE_BUF
    + crate::server::SPARE_RANGE_BUF_BYTES
    + wl::MAX_LAMBDA_WRITE_OUT_BYTES as usize
    + MAX_PENDING_WRITE_BYTES
    + (MAX_PENDING_LOADS + 1) * wl::MAX_FRAME_BYTES
    + 2 * MAX_QUEUED_RUNS * wl::MAX_LAMBDA_OUT_BYTES as usize;

/// The server's worst-case memory in bytes: `threads x (connections per thread x
/// CONN_MEMORY_BOUND + THREAD_MEMORY_BOUND) + registry`, with `conns` connections in all
/// spread over the threads (at most `ConnLimits::total`); with DDS's offload hook, count
/// `DDS_CONN_MEMORY_BOUND` per connection instead.
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
pub const DEFAULT_TENANT_INSN_BUDGET: u64 = vm::DEFAULT_INSN_BUDGET / 4;
const _: () = assert!(DEFAULT_TENANT_INSN_BUDGET < vm::DEFAULT_INSN_BUDGET);

/// Default bound on the program registry, bytes (ELF bytes + linked instructions of every
/// program).
pub const DEFAULT_REGISTRY_BYTES: usize = 64 << 20;
/// Instructions per invocation the server allows any program, whatever the client asks: every
/// instance the server runs is capped at this (storefn-vm's default, which stops the worst
/// verified program within about 10 ms on the JIT here); a chain is bounded by hops x this.
pub const SERVER_INSN_BUDGET: u64 = vm::DEFAULT_INSN_BUDGET;

/// Shortest token secret accepted, bytes: a guessable secret defeats the MAC.
pub const MIN_SECRET_BYTES: usize = 16;

/// Growth quota of a scope that does not name one: enough for any file the tests and tools
/// write, far below what a single WRITE at a huge offset would otherwise create (a sparse
/// 1 TiB file from one request).
pub const DEFAULT_GROW_QUOTA: u64 = 1 << 30;
/// Most `dir=` options per tenant (each is a directory the server holds open).
pub const MAX_SCOPE_DIRS: usize = 64;

/// Offloaded reads in flight per server thread; more are forwarded to the host.
pub const MAX_OFFLOAD_READS: usize = 256;

/// A tenant alone may hold all but `slots / RESERVE_DIV` engine chain slots, so a tenant that
/// arrives finds a slot free at once instead of waiting for a long chain to finish.
pub const RESERVE_DIV: u32 = 8;
/// The CPU time the worker spends for one tenant in one pass of its loop, ns. Everything it
/// does for a tenant is charged (frame validation, each request's handling, submissions,
/// answers, program runs): a tenant that spent it gets nothing more in this pass (its remaining
/// requests stay in the receive buffer, its queued jobs in the scheduler) and the next pass
/// follows at once. The worker runs every completed hop's program inline, so a tenant whose jobs
/// cost `c` each also holds at most `PASS_CPU_NS / c` jobs (at least one) on the engine.
/// Another tenant's request waits about one pass of each busy tenant: at 50 µs a point read's
/// p99 (~130 µs idle, release build) stays within 3x next to CPU, STAT and WRITE floods
/// (`storefn attack`); at 100 µs it was 3.7-4.4x. A pass's own overhead is a few µs.
pub const PASS_CPU_NS: u64 = 50_000;

// A whole READ and a whole λ output fit the connection's answer budget.
const _: () = assert!(MAX_CONN_READ_BYTES >= crate::server::LARGEST_RANGE_BUF);
const _: () = assert!(MAX_CONN_READ_BYTES >= wl::MAX_LAMBDA_OUT_BYTES as usize + 4096);
// A READ is one range read of the engine.
const _: () = assert!(wl::MAX_READ_BYTES as usize == io::MAX_RANGE_BYTES);
// An XRP request's first read is one hop of the engine at its largest.
const _: () = assert!(wl::MAX_XRP_READ_BYTES as usize == io::MAX_HOP_BYTES);
// An XRP request's scratch is the chain's scratch page.
const _: () = assert!(wl::SCRATCH_BYTES == io::SCRATCH_BYTES);
// A LAMBDA range is staged with one range read.
const _: () = assert!(wl::MAX_LAMBDA_IN_BYTES as usize <= io::MAX_RANGE_BYTES);
// A LAMBDA range's pieces are range reads, cut at aligned offsets; all of a whole range's
// pieces may be in flight at once.
const _: () = assert!(LAMBDA_PIECE_BYTES as usize <= io::MAX_RANGE_BYTES);
const _: () = assert!((LAMBDA_PIECE_BYTES as usize).is_multiple_of(io::MAX_BLOCK_ALIGN));
const _: () = assert!(LAMBDA_READS_PER_JOB as usize <= ENGINE_CHAINS);
const _: () =
    assert!(CONTENDED_LAMBDA_READS >= 1 && CONTENDED_LAMBDA_READS <= LAMBDA_READS_PER_JOB);
// The server's engine: chains, buffers and hops inside what the engine accepts.
const _: () = assert!(ENGINE_CHAINS <= io::MAX_CHAINS && ENGINE_CHAINS <= io::MAX_BUFFERS);
const _: () = assert!(SERVER_HOP_BYTES <= io::MAX_HOP_BYTES);
// Each open file, and each DDS file registered for offloaded reads, is one of the engine's
// registered files.
const _: () = assert!(MAX_OPEN_FILES_PER_THREAD + DDS_ENGINE_FILES <= io::MAX_FILES);
// The in-flight bound the HELLO response advertises fits in one frame's messages.
const _: () = assert!(MAX_IN_FLIGHT_PER_CONN <= wl::MAX_MSGS_PER_FRAME);
