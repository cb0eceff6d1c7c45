//! libstorefn: storefn's C API (`include/storefn.h`, generated from this crate by cbindgen).
//!
//! Every exported function returns a [`Status`]; on failure `storefn_last_error()` (per
//! thread) says what was wrong. No panic crosses the boundary: each body runs under
//! `catch_unwind` and a panic becomes `STOREFN_STATUS_PANIC`. Handles are opaque boxes the
//! caller frees with the matching `*_free`.

mod engine;
mod kv;
mod limits;
mod prog;
mod ptr;
mod remote;
mod status;

pub use engine::*;
pub use kv::*;
pub use prog::*;
pub use remote::{
    storefn_client_call, storefn_client_connect, storefn_client_free, storefn_client_lambda,
    storefn_client_push, storefn_client_read, storefn_client_read_xrp, Client, RemoteReq, ReqKind,
};
pub use status::{storefn_last_error, storefn_status_name, Status};

/// Most bytes of scratch a chain carries (XRP's 4 KiB); a larger scratch is refused with
/// STOREFN_STATUS_SCRATCH_TOO_LARGE.
pub const STOREFN_SCRATCH_BYTES: usize = 4096;
/// Bytes of a BPF-KV value.
pub const STOREFN_VALUE_BYTES: usize = 64;
const _: () = assert!(
    STOREFN_SCRATCH_BYTES == limits::SCRATCH_BYTES && STOREFN_VALUE_BYTES == limits::VALUE_BYTES
);
