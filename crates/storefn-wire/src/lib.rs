//! storefn-wire: how a client talks to a storefn server (docs/FORMAT.md, "Wire protocol").
//!
//! Length-prefixed binary frames over TCP, each carrying many messages; one borrowed type
//! family, [`Request`] and [`Response`], is both parsed from a frame's bytes and written into
//! a reused [`FrameBuf`]. [`Client`] is a pipelined, reconnecting client over it. Token auth is
//! an HMAC-SHA256 challenge-response ([`mac`], [`verify`], [`challenge`]); programs are named
//! by [`prog_hash`]. Every bound is in [`limits`]; every byte offset in [`layout`].
//!
//! This crate knows nothing of the engine or of any application: an application reaches the
//! server through it, and runs code there through a program type ([`PROG_TYPE_XRP`],
//! [`PROG_TYPE_LAMBDA`]) or the server's plug-in trait (DDS's OFFLOAD messages).
//!
//! ```
//! use storefn_wire::{decode_frame, put_request, FrameBuf, Request, KIND_REQUEST};
//! let mut f = FrameBuf::default();
//! f.begin(KIND_REQUEST);
//! put_request(&mut f, 7, &Request::Stat { path: b"db" });
//! let (_, mut msgs) = decode_frame(f.finish(), 0, KIND_REQUEST).unwrap();
//! let m = msgs.next().unwrap().unwrap();
//! assert_eq!(Request::parse(&m).unwrap(), Request::Stat { path: b"db" });
//! ```

mod auth;
mod client;
mod frame;
#[cfg(feature = "fuzz")]
pub mod fuzz;
mod hash;
pub mod limits;
mod msg;

pub use auth::{challenge, mac, verify};
pub use client::{read_response_frame, Client, ClientConfig, ClientError, Reply};
pub use frame::{
    decode_frame, decode_header, op, put_answer_head, FrameBuf, FrameHeader, Messages, Msg, MsgAt,
    ProtoError, FENCE_BYTES, HASH_BYTES, KIND_REQUEST, KIND_RESPONSE, MAGIC, MSG_FLAG_FENCED,
    VERSION,
};
pub use hash::{prog_hash, ProgHash};
pub use msg::{
    put_request, put_response, put_status, FileVersion, Request, Response, StatusCode,
    HELLO_FLAG_AUTH_REQUIRED, PROG_TYPE_LAMBDA, PROG_TYPE_XRP, SERVED_BY_HOST, SERVED_BY_OFFLOAD,
};

/// The byte layouts of docs/FORMAT.md's wire section: header and payload offsets and sizes
/// (`tests/format_doc.rs` checks them against the document).
pub mod layout {
    pub use crate::frame::{
        FRAME_HEADER_BYTES, FRAME_OFF_BODY_BYTES, FRAME_OFF_COUNT, FRAME_OFF_KIND, FRAME_OFF_MAGIC,
        FRAME_OFF_RESERVED, FRAME_OFF_VERSION, MSG_HEADER_BYTES, MSG_OFF_FLAGS, MSG_OFF_LEN,
        MSG_OFF_OP, MSG_OFF_REQ_ID, MSG_OFF_STATUS,
    };
    pub use crate::msg::{
        AUTH_BYTES, HELLO_OFF_TENANT, HELLO_OFF_TENANT_LEN, HELLO_R_BYTES, HELLO_R_OFF_CHALLENGE,
        HELLO_R_OFF_FLAGS, HELLO_R_OFF_MAX_FRAME, HELLO_R_OFF_MAX_IN_FLIGHT, LAMBDA_OFF_HASH,
        LAMBDA_OFF_LEN, LAMBDA_OFF_OFFSET, LAMBDA_OFF_OUT_CAP, LAMBDA_OFF_PATH,
        LAMBDA_OFF_PATH_LEN, LAMBDA_R_OFF_OUT, LAMBDA_R_OFF_RET, LOAD_OFF_SECTION,
        LOAD_OFF_SECTION_LEN, LOAD_OFF_TYPE, LOAD_R_BYTES, LWRITE_OFF_HASH, LWRITE_OFF_IN_LEN,
        LWRITE_OFF_OFFSET, LWRITE_OFF_OUT_CAP, LWRITE_OFF_PATH, LWRITE_OFF_PATH_LEN,
        LWRITE_R_BYTES, LWRITE_R_OFF_WRITTEN, OFFLOAD_OFF_MSG, OFFLOAD_OFF_MSG_LEN,
        OFFLOAD_R_OFF_DATA, OFFLOAD_R_OFF_SERVED_BY, READ_OFF_LEN, READ_OFF_OFFSET, READ_OFF_PATH,
        READ_OFF_PATH_LEN, READ_R_OFF_DATA, STAT_OFF_PATH, STAT_OFF_PATH_LEN, STAT_R_BYTES,
        VERSION_BYTES, VERSION_OFF_CHANGE, VERSION_OFF_DEV, VERSION_OFF_INO, WRITE_OFF_DATA_LEN,
        WRITE_OFF_OFFSET, WRITE_OFF_PATH, WRITE_OFF_PATH_LEN, WRITE_R_BYTES, XRP_OFF_HASH,
        XRP_OFF_LEN, XRP_OFF_OFFSET, XRP_OFF_OUT_LEN, XRP_OFF_PATH, XRP_OFF_PATH_LEN,
        XRP_OFF_SCRATCH_LEN, XRP_R_OFF_HOPS, XRP_R_OFF_SCRATCH,
    };
}
