//! Message payloads: every request and response, parsed from and written to the byte layouts
//! of docs/FORMAT.md ("Wire protocol", "Requests", "Responses").

use crate::frame::{le_u16, le_u32, le_u64, op, FrameBuf, Msg, MsgAt, ProtoError, HASH_BYTES};
use crate::limits::{
    MAX_LAMBDA_IN_BYTES, MAX_LAMBDA_OUT_BYTES, MAX_LAMBDA_WRITE_IN_BYTES,
    MAX_LAMBDA_WRITE_OUT_BYTES, MAX_OFFLOAD_DATA_BYTES, MAX_OFFLOAD_MSG_BYTES, MAX_PATH_BYTES,
    MAX_READ_BYTES, MAX_TENANT_BYTES, MAX_WRITE_BYTES, MAX_XRP_READ_BYTES, SCRATCH_BYTES,
};

/// HELLO request: `tenant_len u16 | reserved u16 | tenant`.
pub const HELLO_OFF_TENANT_LEN: usize = 0;
pub const HELLO_OFF_TENANT: usize = 4;
/// HELLO response: `challenge [32] | flags u32 | max_frame_bytes u32 | max_in_flight u32 |
/// reserved u32`.
pub const HELLO_R_OFF_CHALLENGE: usize = 0;
pub const HELLO_R_OFF_FLAGS: usize = 32;
pub const HELLO_R_OFF_MAX_FRAME: usize = 36;
pub const HELLO_R_OFF_MAX_IN_FLIGHT: usize = 40;
pub const HELLO_R_BYTES: usize = 48;
/// HELLO response flag: the client must AUTH before anything else.
pub const HELLO_FLAG_AUTH_REQUIRED: u32 = 1;
/// AUTH request: `mac [32]`.
pub const AUTH_BYTES: usize = HASH_BYTES;
/// LOAD_PROG request: `prog_type u8 | reserved [3] | section_len u32 | section | elf`.
pub const LOAD_OFF_TYPE: usize = 0;
pub const LOAD_OFF_SECTION_LEN: usize = 4;
pub const LOAD_OFF_SECTION: usize = 8;
/// LOAD_PROG `prog_type`: an XRP program (XRP, the chains of BPF-KV lookups).
pub const PROG_TYPE_XRP: u8 = 0;
/// LOAD_PROG `prog_type`: a λ program (LAMBDA, LAMBDA_WRITE).
pub const PROG_TYPE_LAMBDA: u8 = 1;
/// LOAD_PROG response: `hash [32] | insns u32 | reserved u32`.
pub const LOAD_R_BYTES: usize = 40;
/// READ request: `offset u64 | len u32 | path_len u16 | reserved u16 | path`.
pub const READ_OFF_OFFSET: usize = 0;
pub const READ_OFF_LEN: usize = 8;
pub const READ_OFF_PATH_LEN: usize = 12;
pub const READ_OFF_PATH: usize = 16;
/// XRP request: `offset u64 | len u32 | scratch_len u32 | out_len u32 | path_len u16 |
/// reserved u16 | hash [32] | path | scratch`.
pub const XRP_OFF_OFFSET: usize = 0;
pub const XRP_OFF_LEN: usize = 8;
pub const XRP_OFF_SCRATCH_LEN: usize = 12;
pub const XRP_OFF_OUT_LEN: usize = 16;
pub const XRP_OFF_PATH_LEN: usize = 20;
pub const XRP_OFF_HASH: usize = 24;
pub const XRP_OFF_PATH: usize = 56;
/// XRP response: `version [24] | hops u32 | reserved u32 | scratch [out_len]`.
pub const XRP_R_OFF_HOPS: usize = 24;
pub const XRP_R_OFF_SCRATCH: usize = 32;
/// LAMBDA request: `offset u64 | len u32 | out_cap u32 | path_len u16 | reserved [6] |
/// hash [32] | path`.
pub const LAMBDA_OFF_OFFSET: usize = 0;
pub const LAMBDA_OFF_LEN: usize = 8;
pub const LAMBDA_OFF_OUT_CAP: usize = 12;
pub const LAMBDA_OFF_PATH_LEN: usize = 16;
pub const LAMBDA_OFF_HASH: usize = 24;
pub const LAMBDA_OFF_PATH: usize = 56;
/// LAMBDA response: `version [24] | ret u64 | output`.
pub const LAMBDA_R_OFF_RET: usize = 24;
pub const LAMBDA_R_OFF_OUT: usize = 32;
/// LAMBDA_WRITE request: `offset u64 | in_len u32 | out_cap u32 | path_len u16 |
/// reserved [6] | hash [32] | path | input`.
pub const LWRITE_OFF_OFFSET: usize = 0;
pub const LWRITE_OFF_IN_LEN: usize = 8;
pub const LWRITE_OFF_OUT_CAP: usize = 12;
pub const LWRITE_OFF_PATH_LEN: usize = 16;
pub const LWRITE_OFF_HASH: usize = 24;
pub const LWRITE_OFF_PATH: usize = 56;
/// LAMBDA_WRITE response: `version [24] | written u64`.
pub const LWRITE_R_OFF_WRITTEN: usize = 24;
pub const LWRITE_R_BYTES: usize = 32;
/// WRITE request: `offset u64 | data_len u32 | path_len u16 | reserved u16 | path | data`.
pub const WRITE_OFF_OFFSET: usize = 0;
pub const WRITE_OFF_DATA_LEN: usize = 8;
pub const WRITE_OFF_PATH_LEN: usize = 12;
pub const WRITE_OFF_PATH: usize = 16;
/// WRITE response: `version [24] | written u32 | reserved u32`.
pub const WRITE_R_BYTES: usize = 32;
/// STAT request: `path_len u16 | reserved u16 | path`.
/// OFFLOAD request: `msg_len u32 | reserved [4] | msg`.
pub const OFFLOAD_OFF_MSG_LEN: usize = 0;
pub const OFFLOAD_OFF_MSG: usize = 8;
/// OFFLOAD response: `served_by u8 | reserved [7] | data`.
pub const OFFLOAD_R_OFF_SERVED_BY: usize = 0;
pub const OFFLOAD_R_OFF_DATA: usize = 8;
/// `served_by`: read next to the data by the offload engine.
pub const SERVED_BY_OFFLOAD: u8 = 0;
/// `served_by`: answered by the host application.
pub const SERVED_BY_HOST: u8 = 1;
pub const STAT_OFF_PATH_LEN: usize = 0;
pub const STAT_OFF_PATH: usize = 4;
/// STAT response: `version [24] | size u64`.
pub const STAT_R_BYTES: usize = 32;
/// READ response: `version [24] | data`.
pub const READ_R_OFF_DATA: usize = 24;
/// File version: `dev u64 | ino u64 | change u64`.
pub const VERSION_BYTES: usize = 24;
pub const VERSION_OFF_DEV: usize = 0;
pub const VERSION_OFF_INO: usize = 8;
pub const VERSION_OFF_CHANGE: usize = 16;

/// Which file state a response was served from: identity (device, inode) and a change counter
/// (the inode's ctime in ns, moved by every write, truncate or attribute change). A compaction
/// renames a new file over the old one, so the identity changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileVersion {
    pub dev: u64,
    pub ino: u64,
    pub change: u64,
}

impl FileVersion {
    /// The version's wire bytes (`VERSION_BYTES`), as every response carrying it starts.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; VERSION_BYTES] {
        let mut b = [0; VERSION_BYTES];
        b[VERSION_OFF_DEV..VERSION_OFF_DEV + 8].copy_from_slice(&self.dev.to_le_bytes());
        b[VERSION_OFF_INO..VERSION_OFF_INO + 8].copy_from_slice(&self.ino.to_le_bytes());
        b[VERSION_OFF_CHANGE..VERSION_OFF_CHANGE + 8].copy_from_slice(&self.change.to_le_bytes());
        b
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dev.to_le_bytes());
        out.extend_from_slice(&self.ino.to_le_bytes());
        out.extend_from_slice(&self.change.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        Self {
            dev: le_u64(b, VERSION_OFF_DEV),
            ino: le_u64(b, VERSION_OFF_INO),
            change: le_u64(b, VERSION_OFF_CHANGE),
        }
    }
}

/// Status codes (message bytes 10..12); every non-OK response carries a UTF-8 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
#[non_exhaustive]
pub enum StatusCode {
    Ok = 0,
    /// The request is malformed (a field out of range); the connection stays open.
    BadRequest = 1,
    /// AUTH first.
    AuthRequired = 2,
    /// Wrong MAC or unknown tenant; the connection is closed.
    AuthFailed = 3,
    /// No such file beneath the served directory.
    NotFound = 4,
    /// The path leaves the served directory (`..`, absolute, a symlink out).
    OutsideRoot = 5,
    /// No program with that hash: send LOAD_PROG and retry.
    UnknownProg = 6,
    /// LOAD_PROG: the loader or verifier refused the program (message says where).
    ProgRejected = 7,
    /// The chain failed (fault, hop or instruction budget, request outside the file).
    ChainFailed = 8,
    /// An I/O error on the server.
    Io = 9,
    /// Over a limit (frames in flight, program registry bytes, sizes).
    Limit = 10,
    /// The server is shutting down; the request was not run.
    ShuttingDown = 11,
    /// The range is outside the file.
    OutOfRange = 12,
    /// DDS: the host application did not answer a forwarded request in time.
    HostTimeout = 13,
    /// The tenant's scope does not allow it: the path is outside its directories, or a write
    /// by a read-only tenant.
    Forbidden = 14,
    /// A write over the tenant's quota of bytes written or file growth; nothing was written.
    QuotaExceeded = 15,
    /// The path names something other than a regular file (FIFO, device, directory, socket):
    /// it was not opened for reading or writing.
    NotRegular = 16,
    /// Fencing: the server is not a current replica of the file's shard at the placement
    /// version the request was routed by (or lost its cluster lease): try another replica
    /// after refreshing the placement.
    StalePlacement = 17,
}

impl StatusCode {
    /// Every code with its name, for the document check.
    pub const ALL: [(StatusCode, &'static str); 18] = [
        (Self::Ok, "OK"),
        (Self::BadRequest, "BAD_REQUEST"),
        (Self::AuthRequired, "AUTH_REQUIRED"),
        (Self::AuthFailed, "AUTH_FAILED"),
        (Self::NotFound, "NOT_FOUND"),
        (Self::OutsideRoot, "OUTSIDE_ROOT"),
        (Self::UnknownProg, "UNKNOWN_PROG"),
        (Self::ProgRejected, "PROG_REJECTED"),
        (Self::ChainFailed, "CHAIN_FAILED"),
        (Self::Io, "IO"),
        (Self::Limit, "LIMIT"),
        (Self::ShuttingDown, "SHUTTING_DOWN"),
        (Self::OutOfRange, "OUT_OF_RANGE"),
        (Self::HostTimeout, "HOST_TIMEOUT"),
        (Self::Forbidden, "FORBIDDEN"),
        (Self::QuotaExceeded, "QUOTA_EXCEEDED"),
        (Self::NotRegular, "NOT_REGULAR"),
        (Self::StalePlacement, "STALE_PLACEMENT"),
    ];

    /// The code for a wire value; `None` for values this build does not know.
    #[must_use]
    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.iter().find(|(c, _)| *c as u16 == v).map(|(c, _)| *c)
    }

    /// The name the document uses.
    #[must_use]
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(c, _)| *c == self).map_or("?", |(_, n)| n)
    }
}

mod request;
mod response;

pub use request::{put_request, Request};
pub use response::{put_response, put_status, Response};

pub(super) fn need(p: &[u8], at: MsgAt, n: usize) -> Result<(), ProtoError> {
    if p.len() < n {
        return Err(at.short(p.len(), n, p.len()));
    }
    Ok(())
}

/// `path_len` at `len_off`, path bytes at `path_off`; returns the path and the offset after it.
pub(super) fn path_at(
    p: &[u8],
    at: MsgAt,
    len_off: usize,
    path_off: usize,
) -> Result<(&[u8], usize), ProtoError> {
    let n = le_u16(p, len_off) as usize;
    if n == 0 {
        return Err(at.bad(len_off, "path_len", "empty path"));
    }
    if n > MAX_PATH_BYTES {
        return Err(at.bad(len_off, "path_len", "longer than MAX_PATH_BYTES"));
    }
    need(p, at, path_off + n)?;
    Ok((&p[path_off..path_off + n], path_off + n))
}

pub(super) fn zero(p: &[u8], at: MsgAt, range: std::ops::Range<usize>) -> Result<(), ProtoError> {
    if p[range.clone()].iter().any(|&b| b != 0) {
        return Err(at.bad(range.start, "reserved", "must be 0"));
    }
    Ok(())
}

pub(super) fn exact(p: &[u8], at: MsgAt, end: usize) -> Result<(), ProtoError> {
    if p.len() != end {
        return Err(at.bad(end, "payload", "bytes after the last field"));
    }
    Ok(())
}

pub(super) fn put_u16(o: &mut Vec<u8>, v: u16) {
    o.extend_from_slice(&v.to_le_bytes());
}
pub(super) fn put_u32(o: &mut Vec<u8>, v: u32) {
    o.extend_from_slice(&v.to_le_bytes());
}
pub(super) fn put_u64(o: &mut Vec<u8>, v: u64) {
    o.extend_from_slice(&v.to_le_bytes());
}
pub(super) fn len16(n: usize) -> u16 {
    u16::try_from(n).expect("path lengths are checked by the caller")
}
pub(super) fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("payload lengths are below MAX_FRAME_BYTES")
}
