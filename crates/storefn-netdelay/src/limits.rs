//! Every bound of the delay proxy, named once with its reason (docs/DESIGN.md, "Named
//! limits"; a test checks the table).

use std::time::Duration;

/// Largest chunk one read takes from a socket: the unit that is stamped and delivered.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks queued per direction (at most `QUEUE_CHUNKS * CHUNK_BYTES` = 32 MiB in flight): the
/// emulated link's buffer. A full queue stops reading that side, which is TCP back-pressure; it is
/// far above any bandwidth-delay product the tests use (10 Gbit/s x 10 ms = 12.5 MB).
pub const QUEUE_CHUNKS: usize = 512;
/// Connections served at once; later ones are closed at accept (and counted).
pub const MAX_CONNECTIONS: usize = 1024;
/// How often a connection's thread waiting on its sockets looks at the stop flag: the bound on
/// [`crate::DelayProxy::shutdown`]'s latency.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Deadline for connecting to the target.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The last stretch before a delivery time is waited by yielding rather than sleeping:
/// nanosleep overshoots by tens of microseconds, which would add to every emulated RTT.
pub const SPIN_BELOW: Duration = Duration::from_micros(30);
/// Largest RTT accepted (10 s): beyond it the proxy would only be hiding a mistake.
pub const MAX_RTT_US: u64 = 10_000_000;
