//! Every bound of the server in one place (docs/DESIGN.md, "Named limits"; a test checks the
//! table). The constants are defined beside the code that enforces them and named here; the
//! bounds the server shares with the wire protocol and the engine are checked against those
//! crates' own limits at compile time, never typed twice.

pub use crate::auth::MIN_SECRET_BYTES;
pub use crate::metrics::{
    MAX_METRICS_CONNS, MAX_METRICS_REQUEST_BYTES, MAX_METRIC_TENANTS,
    MAX_REFUSED_LOG_LINES_PER_SEC, METRICS_IO_TIMEOUT,
};
pub use crate::registry::{DEFAULT_REGISTRY_BYTES, SERVER_INSN_BUDGET};
pub use crate::server::sched::RESERVE_DIV;
pub use crate::server::{
    DDS_ENGINE_FILES, ENGINE_CHAINS, FORWARD_TIMEOUT, IDLE_TIMEOUT, LAMBDA_PIECE_BYTES,
    LAMBDA_READS_PER_JOB, MAX_CONNS_PER_THREAD, MAX_CONN_OUT_BYTES, MAX_INSTANCES_PER_THREAD,
    MAX_IN_FLIGHT_PER_CONN, MAX_OFFLOAD_READS, MAX_OPEN_FILES_PER_THREAD, MAX_TENANTS_PER_THREAD,
    MAX_THREADS, POLL_INTERVAL, SERVER_HOP_BYTES, SERVER_MAX_HOPS, SHUTDOWN_FLUSH_TIMEOUT,
    SLOW_CLIENT_TIMEOUT,
};

use storefn_io::limits as io;
use storefn_wire::limits as wire;

// A READ is one range read of the engine.
const _: () = assert!(wire::MAX_READ_BYTES as usize == io::MAX_RANGE_BYTES);
// An XRP request's first read is the data view its programs are verified against.
const _: () = assert!(wire::MAX_XRP_READ_BYTES as usize == io::DATA_VIEW_BYTES);
// An XRP request's scratch is the chain's scratch page.
const _: () = assert!(wire::SCRATCH_BYTES == io::SCRATCH_BYTES);
// A LAMBDA range is staged with one range read.
const _: () = assert!(wire::MAX_LAMBDA_IN_BYTES as usize <= io::MAX_RANGE_BYTES);
// A LAMBDA range's pieces are range reads, cut at aligned offsets; all of a whole range's
// pieces may be in flight at once.
const _: () = assert!(LAMBDA_PIECE_BYTES as usize <= io::MAX_RANGE_BYTES);
const _: () = assert!((LAMBDA_PIECE_BYTES as usize).is_multiple_of(io::MAX_BLOCK_ALIGN));
const _: () = assert!(LAMBDA_READS_PER_JOB as usize <= ENGINE_CHAINS);
// The server's engine: chains, buffers and hops inside what the engine accepts.
const _: () = assert!(ENGINE_CHAINS <= io::MAX_CHAINS && ENGINE_CHAINS <= io::MAX_BUFFERS);
const _: () = assert!(SERVER_MAX_HOPS == io::DEFAULT_MAX_HOPS);
const _: () = assert!(SERVER_HOP_BYTES <= io::MAX_HOP_BYTES);
// Each open file, and each DDS file registered for offloaded reads, is one of the engine's
// registered files.
const _: () = assert!(MAX_OPEN_FILES_PER_THREAD + DDS_ENGINE_FILES <= io::MAX_FILES);
// The in-flight bound the HELLO response advertises fits in one frame's messages.
const _: () = assert!(MAX_IN_FLIGHT_PER_CONN <= wire::MAX_MSGS_PER_FRAME);
