//! DDS on storefn: the pieces of the offload engine that stand on their own.
//!
//! - the cache table ([`CacheTable`]), a concurrent cuckoo hash with per-bucket seqlocks, mapping a
//!   request key to `{version, file, offset, size}`.
//! - the progressive ring ([`ProgressiveRing`]) (DDS's lock-free multi-producer ring: reserve by CAS on
//!   `tail`, publish by adding to `progress`, the consumer takes a batch only when
//!   `tail == progress`), in shared memory between processes, plus a mutex ring and a
//!   flag-per-slot ring it is measured against.
//! - the host file library ([`HostFiles`], [`FileService`]) (create/open/read/write/flush/poll) and the file service it
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
//! - the page server ([`PageHost`], [`Deployment`]): the paper's page server as a host application (stores pages, replays
//!   updates, answers forwarded GetPage requests).
//!
//! Layouts: docs/FORMAT.md ("DDS"); concurrency arguments: docs/design/dds.md.

mod frontend;
mod host;
pub mod limits;
mod offload;
mod pageserver;
mod ring;
mod table;

pub use frontend::{
    encode_batch, FrontEnd, FrontEndStats, LinkStats, TimingSamples, BATCH_ENTRY_BYTES,
    BATCH_HEADER_BYTES,
};
pub use host::forward::AnswerTiming;
pub use host::{
    connect, ChannelListener, Completion, Doorbell, FileHooks, FileService, ForwardEnd,
    HostChannel, HostError, HostFiles, ServiceStats, SharedFiles, Side,
};
pub use offload::{OffloadError, OffloadFunctions, OffloadHooks, Verdicts, ENTRY_SECTIONS};
pub use pageserver::{
    client_config_from_token_file, fill_page, get_page, host_loop, page_lsn, thread_cpu_ns,
    DeployError, DeployOptions, Deployment, HostStats, PageHost, PageServerAuth, GET_PAGE_BYTES,
    HOST_STATS_BYTES, PAGE_BYTES, STATS_PAGE,
};
pub use ring::{Consumer, FlagRing, MutexRing, ProgressiveRing, RingError, SharedMemory, ShmError};
pub use table::{CacheTable, Inserted, Item, Lookup, TableError};

/// The byte layouts DDS shares with other processes (docs/FORMAT.md, "DDS"): the host
/// channel's header, the file service's messages, forwarded requests and the progressive ring.
pub mod layout {
    pub use crate::host::forward::{ANSWER_HEADER_BYTES, FORWARD_HEADER_BYTES, MAX_FORWARD_BYTES};
    pub use crate::host::handoff::HANDOFF_MAGIC;
    pub use crate::host::wire::{
        Op, RequestHeader, ResponseHeader, REQUEST_HEADER_BYTES, REQ_FILE, REQ_ID, REQ_LEN,
        REQ_OFFSET, REQ_OP, RESPONSE_HEADER_BYTES, RESP_DEVICE_NS, RESP_ID, RESP_STATUS,
        RESP_VALUE,
    };
    pub use crate::host::{
        CHANNEL_HEADER_BYTES, CHANNEL_MAGIC, CHANNEL_MAX_MESSAGE, CHANNEL_VERSION, CH_HEARTBEAT,
        CH_MAGIC, CH_REQ_BELL_SEQ, CH_REQ_BELL_WAITERS, CH_RESP_BELL_SEQ, CH_RESP_BELL_WAITERS,
        CH_RING_BYTES, CH_VERSION,
    };
    pub use crate::ring::progressive::{
        record_bytes, ring_words, CAPACITY_OFFSET, DATA_OFFSET, HEADER_BYTES, HEAD_OFFSET,
        MAGIC_OFFSET, MAX_MESSAGE_OFFSET, PROGRESS_OFFSET, RECORD_HEADER_BYTES, RECORD_TAG,
        RING_LAYOUT_VERSION, RING_MAGIC, TAIL_OFFSET, VERSION_OFFSET,
    };
    pub use crate::table::SLOTS_PER_BUCKET;
}

/// Benchmark harnesses (the CLI's `storefn dds ...` and `storefn pageserver bench`).
#[cfg(feature = "bench")]
pub mod bench {
    pub use crate::host::bench as host;
    pub use crate::pageserver::bench as pageserver;
    pub use crate::pageserver::spawn;
    pub use crate::ring::bench as ring;
    pub use crate::table::bench as table;
}
