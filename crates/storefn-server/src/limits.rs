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
pub use crate::server::offload_reads::MAX_OFFLOAD_READS;
pub use crate::server::sched::RESERVE_DIV;
pub use crate::server::{
    ENGINE_CHAINS, FORWARD_TIMEOUT, IDLE_TIMEOUT, MAX_CONNS_PER_THREAD, MAX_CONN_OUT_BYTES,
    MAX_INSTANCES_PER_THREAD, MAX_IN_FLIGHT_PER_CONN, MAX_OPEN_FILES_PER_THREAD,
    MAX_TENANTS_PER_THREAD, MAX_THREADS, POLL_INTERVAL, SERVER_HOP_BYTES, SERVER_MAX_HOPS,
    SHUTDOWN_FLUSH_TIMEOUT, SLOW_CLIENT_TIMEOUT,
};

use storefn_io::limits as io;
use storefn_wire::limits as wire;

// A READ is one engine read on a default engine: the wire's READ bound is its hop.
const _: () = assert!(wire::MAX_READ_BYTES as usize == io::DEFAULT_HOP_BYTES);
// An XRP request's scratch is the chain's scratch page.
const _: () = assert!(wire::SCRATCH_BYTES == io::SCRATCH_BYTES);
// A LAMBDA range is staged in whole engine reads.
const _: () = assert!(wire::MAX_LAMBDA_IN_BYTES.is_multiple_of(wire::MAX_READ_BYTES));
// The server's engine: chains, buffers and hops inside what the engine accepts.
const _: () = assert!(ENGINE_CHAINS <= io::MAX_CHAINS && ENGINE_CHAINS <= io::MAX_BUFFERS);
const _: () = assert!(SERVER_MAX_HOPS == io::DEFAULT_MAX_HOPS);
const _: () = assert!(SERVER_HOP_BYTES <= io::MAX_HOP_BYTES);
// Each open file is one of the engine's registered files.
const _: () = assert!(MAX_OPEN_FILES_PER_THREAD <= io::MAX_FILES);
// The in-flight bound the HELLO response advertises fits in one frame's messages.
const _: () = assert!(MAX_IN_FLIGHT_PER_CONN <= wire::MAX_MSGS_PER_FRAME);
