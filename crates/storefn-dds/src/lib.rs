//! DDS on storefn: the pieces of the offload engine that stand on their own.
//!
//! - [`table`]: the cache table, a concurrent cuckoo hash with per-bucket seqlocks, mapping a
//!   request key to `{version, file, offset, size}`.
//! - [`ring`]: the progressive ring (DDS's lock-free multi-producer ring: reserve by CAS on
//!   `tail`, publish by adding to `progress`, the consumer takes a batch only when
//!   `tail == progress`), in shared memory between processes, plus a mutex ring and a
//!   flag-per-slot ring it is measured against.
//! - [`host`]: the host file library (create/open/read/write/flush/poll) and the file service it
//!   talks to over a pair of progressive rings.
//!
//! - offload functions ([`OffloadFunctions`]): DDS's four offload functions (pred, func, cache, invalidate) as verified
//!   storefn-vm programs of type `offload`, reaching the cache table through the VM's
//!   `OffloadTable` trait, and the file-service hooks that run `cache` and `invalidate`.
//!
//! - the front end ([`FrontEnd`]): the offload engine inside storefn-server (its `OffloadHook`): batches a
//!   frame's OFFLOAD requests through `pred`/`func`, reads offloaded ones next to the data,
//!   forwards the rest to the host application and routes its answers back to the server
//!   thread that forwarded each request; watches the host's heartbeat and lets a new host
//!   attach when it is gone.
//!
//! - [`pageserver`]: the paper's page server as a host application (stores pages, replays
//!   updates, answers forwarded GetPage requests).
//!
//! Layouts: docs/FORMAT.md ("DDS"); concurrency arguments: docs/design/dds.md.

mod frontend;
pub mod host;
pub mod limits;
mod offload;
pub mod pageserver;
pub mod ring;
pub mod table;

pub use frontend::{
    encode_batch, FrontEnd, FrontEndStats, LinkStats, TimingSamples, BATCH_ENTRY_BYTES,
    BATCH_HEADER_BYTES,
};
pub use host::{FileService, HostChannel, HostError, HostFiles};
pub use offload::{OffloadError, OffloadFunctions, OffloadHooks, Verdicts, ENTRY_SECTIONS};
pub use pageserver::{Deployment, PageHost};
pub use ring::{ProgressiveRing, RingError, SharedMemory};
pub use table::{CacheTable, Inserted, Item, Lookup, TableError};
