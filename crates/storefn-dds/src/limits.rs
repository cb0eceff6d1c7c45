//! Every bound of DDS on storefn, named once with its reason (docs/DESIGN.md, "Named limits";
//! a test checks the table). A bound that is another crate's is derived from it.

use std::time::Duration;

// The cache table.
/// Largest table, in items (buckets x slots); keeps bucket indices in `u32`.
pub const MAX_CAPACITY_ITEMS: usize = 1 << 30;
/// Longest cuckoo path an insert tries (items moved to make room), as in libcuckoo's BFS.
pub const MAX_DISPLACEMENTS: usize = 5;
/// Slots the breadth-first path search may visit per insert (8 roots, 4 children per slot; the
/// bound cuts the fifth level short). Preallocated once, so an insert never allocates.
pub const MAX_SEARCH_SLOTS: usize = 2048;
/// Times a reader re-reads one bucket whose `seq` changed under it before reporting a miss.
pub const MAX_READ_RETRIES: usize = 64;

// The progressive ring and its shared memory.
/// Smallest ring data area (a power of two up to [`MAX_RING_BYTES`]).
pub const MIN_RING_BYTES: usize = 4096;
/// Largest ring data area.
pub const MAX_RING_BYTES: usize = 1 << 28;
/// Most records a ring's consumer takes per batch (DDS bounds its batches the same way).
pub const MAX_BATCH_RECORDS: usize = 256;
/// Largest shared-memory region mapped (rings are far smaller; the bound keeps sizes sane).
pub const MAX_SHM_BYTES: usize = 1 << 30;

// The host file library and its file service.
/// Largest read or write one host-library request carries.
pub const MAX_IO_BYTES: usize = 64 * 1024;
/// Longest path (bytes) in a host-library create/open: the system's own `PATH_MAX`.
pub const MAX_PATH_BYTES: usize = libc::PATH_MAX as usize;
/// Default data bytes per host channel ring (a power of two; must hold two largest messages).
pub const DEFAULT_CHANNEL_RING_BYTES: usize = 1 << 20;
/// How long a blocking host-library call or a response push waits before giving up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// A host whose heartbeat (after its first) has not moved for this long is gone: requests
/// forwarded to it fail at once rather than each waiting for the forward timeout. Well above
/// the host's longest idle sleep ([`PARK_SLICE`]) and a descheduled time slice.
pub const HOST_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest a channel handoff waits on the socket.
pub const HANDOFF_TIMEOUT: Duration = Duration::from_secs(5);
/// Polls a doorbell waiter makes (with a CPU pause between) before it sleeps: an answer that comes
/// within a few microseconds costs no system call; a longer wait costs no CPU.
pub const SPIN_POLLS: u32 = 64;
/// Longest one doorbell sleep: a lost or forged wake-up (or a stop flag) is noticed this late at worst.
pub const PARK_SLICE: Duration = Duration::from_millis(10);
/// Files one file service keeps open (file ids are `0..MAX_OPEN_FILES`).
pub const MAX_OPEN_FILES: usize = 1024;
/// The file service's change stamps cover the files in blocks of this many bytes.
pub const STAMP_GRAIN_BYTES: u64 = 4096;
/// Change-stamp buckets (blocks of every file hash into them).
pub const STAMP_BUCKETS: usize = 4096;

// The offload functions and the offload engine in the server.
/// Most requests one `pred` call judges (verdict bytes offered).
pub const MAX_BATCH_REQUESTS: usize = 256;
/// Most items one `cache` call may return.
pub const MAX_CACHE_ITEMS: usize = 64;
/// Most keys one `invalidate` call may return.
pub const MAX_INVALIDATE_KEYS: usize = 64;
/// Answer bytes one server thread's queue holds before further answers for it are dropped
/// (a thread drains its queue whenever it has requests forwarded; a host answering requests
/// nobody forwarded must not grow the server without bound).
pub const MAX_ROUTE_BYTES: usize = 16 << 20;
/// Samples of each kind the offload engine's timing recorder keeps (later ones are dropped, and counted).
pub const MAX_TIMING_SAMPLES: usize = 1 << 20;

// The page server.
/// Highest LSN a page may carry: a GetPage asking for a newer one is refused (answered
/// empty, like any message that is no GetPage of a stored page), so a client cannot push the
/// host's LSN counter to its end and make it wrap (2^62 updates at a billion a second take
/// 146 years).
pub const MAX_LSN: u64 = 1 << 62;
/// Most requests one `pred` call of the page server's functions judges (`PS_MAX_BATCH`).
pub const PAGE_SERVER_BATCH: usize = 64;
/// `pageserver --spawn`: how long the host application may take to connect its two channels.
#[cfg(feature = "bench")]
pub const HOST_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// `pageserver --spawn`: how long the host may take to store its pages and start answering.
#[cfg(feature = "bench")]
pub const HOST_READY_TIMEOUT: Duration = Duration::from_secs(300);
/// `pageserver --spawn`: how long the host may take to exit after SIGTERM before it is killed.
#[cfg(feature = "bench")]
pub const HOST_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of the page server's generated token secret (alphanumeric, ~190 bits).
pub const GENERATED_SECRET_BYTES: usize = 32;

// The benchmark harnesses (feature `bench`).
/// Ring bench: most producer threads per case.
#[cfg(feature = "bench")]
pub const MAX_PRODUCERS: usize = 1024;
/// Ring bench: a case that has not finished after this long is abandoned with an error (bounded run).
#[cfg(feature = "bench")]
pub const MAX_CASE_TIME: Duration = Duration::from_secs(120);
/// Ring bench: smallest message, the 8-byte (producer, sequence) stamp the consumer checks.
#[cfg(feature = "bench")]
pub const MIN_MESSAGE_BYTES: usize = 8;
/// Host bench: most requests in flight the async case keeps.
#[cfg(feature = "bench")]
pub const MAX_DEPTH: usize = 1024;
/// Host bench: most reads per case.
#[cfg(feature = "bench")]
pub const MAX_OPS: usize = 10_000_000;
/// Table bench: most reader threads.
#[cfg(feature = "bench")]
pub const MAX_READERS: usize = 256;
/// Table bench: longest measured phase.
#[cfg(feature = "bench")]
pub const MAX_DURATION: Duration = Duration::from_secs(600);
