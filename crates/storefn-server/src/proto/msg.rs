//! Message payloads: every request and response, parsed from and written to the byte layouts
//! of docs/FORMAT.md ("Wire protocol", "Requests", "Responses").

use super::{
    le_u16, le_u32, le_u64, op, FrameBuf, Msg, MsgAt, ProtoError, HASH_BYTES, MAX_LAMBDA_IN_BYTES,
    MAX_LAMBDA_OUT_BYTES, MAX_LAMBDA_WRITE_IN_BYTES, MAX_LAMBDA_WRITE_OUT_BYTES, MAX_PATH_BYTES,
    MAX_READ_BYTES, MAX_TENANT_BYTES, MAX_WRITE_BYTES, SCRATCH_BYTES,
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
/// Largest OFFLOAD application message (request) and answer (response data).
pub const MAX_OFFLOAD_MSG_BYTES: u32 = 4096;
pub const MAX_OFFLOAD_DATA_BYTES: u32 = 64 * 1024;
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
}

impl StatusCode {
    /// Every code with its name, for the document check.
    pub const ALL: [(StatusCode, &'static str); 14] = [
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

/// A request, borrowed from its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    Hello {
        tenant: &'a [u8],
    },
    Auth {
        mac: &'a [u8; HASH_BYTES],
    },
    /// `prog_type`: 0 xrp, 1 lambda. `section` empty = the loader's default.
    LoadProg {
        prog_type: u8,
        section: &'a [u8],
        elf: &'a [u8],
    },
    Read {
        path: &'a [u8],
        offset: u64,
        len: u32,
    },
    Xrp {
        path: &'a [u8],
        offset: u64,
        len: u32,
        hash: &'a [u8; HASH_BYTES],
        scratch: &'a [u8],
        out_len: u32,
    },
    Lambda {
        path: &'a [u8],
        offset: u64,
        len: u32,
        hash: &'a [u8; HASH_BYTES],
        out_cap: u32,
    },
    Write {
        path: &'a [u8],
        offset: u64,
        data: &'a [u8],
    },
    Stat {
        path: &'a [u8],
    },
    Offload {
        msg: &'a [u8],
    },
    /// Run program `hash` (type lambda) over `input` (`buf_o` = `out_cap` zeroed bytes) and
    /// write its output at `offset` of `path`, durably.
    LambdaWrite {
        path: &'a [u8],
        offset: u64,
        hash: &'a [u8; HASH_BYTES],
        input: &'a [u8],
        out_cap: u32,
    },
}

fn need(p: &[u8], at: MsgAt, n: usize) -> Result<(), ProtoError> {
    if p.len() < n {
        return Err(at.short(p.len(), n, p.len()));
    }
    Ok(())
}

/// `path_len` at `len_off`, path bytes at `path_off`; returns the path and the offset after it.
fn path_at(
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

fn zero(p: &[u8], at: MsgAt, range: std::ops::Range<usize>) -> Result<(), ProtoError> {
    if p[range.clone()].iter().any(|&b| b != 0) {
        return Err(at.bad(range.start, "reserved", "must be 0"));
    }
    Ok(())
}

fn exact(p: &[u8], at: MsgAt, end: usize) -> Result<(), ProtoError> {
    if p.len() != end {
        return Err(at.bad(end, "payload", "bytes after the last field"));
    }
    Ok(())
}

impl<'a> Request<'a> {
    /// The op code.
    #[must_use]
    pub fn op(&self) -> u8 {
        match self {
            Self::Hello { .. } => op::HELLO,
            Self::Auth { .. } => op::AUTH,
            Self::LoadProg { .. } => op::LOAD_PROG,
            Self::Read { .. } => op::READ,
            Self::Xrp { .. } => op::XRP,
            Self::Lambda { .. } => op::LAMBDA,
            Self::Write { .. } => op::WRITE,
            Self::Stat { .. } => op::STAT,
            Self::Offload { .. } => op::OFFLOAD,
            Self::LambdaWrite { .. } => op::LAMBDA_WRITE,
        }
    }

    /// Parses a request message. Every length is checked against the payload and its limit;
    /// reserved bytes must be zero; no bytes may follow the last field.
    ///
    /// # Errors
    /// `UnknownOp`, `Truncated` or `BadField` naming the frame, message and offset.
    pub fn parse(m: &Msg<'a>) -> Result<Self, ProtoError> {
        let (p, at) = (m.payload, m.at);
        if m.status != 0 {
            return Err(at.bad(0, "status", "must be 0 in a request"));
        }
        match m.op {
            op::HELLO => {
                need(p, at, HELLO_OFF_TENANT)?;
                zero(p, at, 2..4)?;
                let n = le_u16(p, HELLO_OFF_TENANT_LEN) as usize;
                if n > MAX_TENANT_BYTES {
                    return Err(at.bad(
                        HELLO_OFF_TENANT_LEN,
                        "tenant_len",
                        "over MAX_TENANT_BYTES",
                    ));
                }
                need(p, at, HELLO_OFF_TENANT + n)?;
                exact(p, at, HELLO_OFF_TENANT + n)?;
                Ok(Self::Hello { tenant: &p[HELLO_OFF_TENANT..HELLO_OFF_TENANT + n] })
            }
            op::AUTH => {
                need(p, at, AUTH_BYTES)?;
                exact(p, at, AUTH_BYTES)?;
                Ok(Self::Auth { mac: p[..AUTH_BYTES].try_into().expect("32 bytes") })
            }
            op::LOAD_PROG => {
                need(p, at, LOAD_OFF_SECTION)?;
                zero(p, at, 1..4)?;
                let prog_type = p[LOAD_OFF_TYPE];
                if prog_type > 1 {
                    return Err(at.bad(LOAD_OFF_TYPE, "prog_type", "not 0 (xrp) or 1 (lambda)"));
                }
                let n = le_u32(p, LOAD_OFF_SECTION_LEN) as usize;
                if n > MAX_PATH_BYTES {
                    return Err(at.bad(LOAD_OFF_SECTION_LEN, "section_len", "over MAX_PATH_BYTES"));
                }
                need(p, at, LOAD_OFF_SECTION + n)?;
                let elf = &p[LOAD_OFF_SECTION + n..];
                if elf.is_empty() {
                    return Err(at.bad(LOAD_OFF_SECTION + n, "elf", "empty"));
                }
                Ok(Self::LoadProg {
                    prog_type,
                    section: &p[LOAD_OFF_SECTION..LOAD_OFF_SECTION + n],
                    elf,
                })
            }
            op::READ => {
                need(p, at, READ_OFF_PATH)?;
                zero(p, at, READ_OFF_PATH_LEN + 2..READ_OFF_PATH)?;
                let len = le_u32(p, READ_OFF_LEN);
                if len == 0 || len > MAX_READ_BYTES {
                    return Err(at.bad(READ_OFF_LEN, "len", "not in 1..=MAX_READ_BYTES"));
                }
                let (path, end) = path_at(p, at, READ_OFF_PATH_LEN, READ_OFF_PATH)?;
                exact(p, at, end)?;
                Ok(Self::Read { path, offset: le_u64(p, READ_OFF_OFFSET), len })
            }
            op::XRP => {
                need(p, at, XRP_OFF_PATH)?;
                zero(p, at, XRP_OFF_PATH_LEN + 2..XRP_OFF_HASH)?;
                let len = le_u32(p, XRP_OFF_LEN);
                if len == 0 || len > MAX_READ_BYTES {
                    return Err(at.bad(XRP_OFF_LEN, "len", "not in 1..=MAX_READ_BYTES"));
                }
                let sl = le_u32(p, XRP_OFF_SCRATCH_LEN) as usize;
                if sl > SCRATCH_BYTES {
                    return Err(at.bad(XRP_OFF_SCRATCH_LEN, "scratch_len", "over SCRATCH_BYTES"));
                }
                let out_len = le_u32(p, XRP_OFF_OUT_LEN);
                if out_len as usize > SCRATCH_BYTES {
                    return Err(at.bad(XRP_OFF_OUT_LEN, "out_len", "over SCRATCH_BYTES"));
                }
                let (path, end) = path_at(p, at, XRP_OFF_PATH_LEN, XRP_OFF_PATH)?;
                need(p, at, end + sl)?;
                exact(p, at, end + sl)?;
                Ok(Self::Xrp {
                    path,
                    offset: le_u64(p, XRP_OFF_OFFSET),
                    len,
                    hash: p[XRP_OFF_HASH..XRP_OFF_HASH + HASH_BYTES].try_into().expect("32"),
                    scratch: &p[end..end + sl],
                    out_len,
                })
            }
            op::LAMBDA => {
                need(p, at, LAMBDA_OFF_PATH)?;
                zero(p, at, LAMBDA_OFF_PATH_LEN + 2..LAMBDA_OFF_HASH)?;
                let len = le_u32(p, LAMBDA_OFF_LEN);
                if len == 0 || len > MAX_LAMBDA_IN_BYTES {
                    return Err(at.bad(LAMBDA_OFF_LEN, "len", "not in 1..=MAX_LAMBDA_IN_BYTES"));
                }
                let out_cap = le_u32(p, LAMBDA_OFF_OUT_CAP);
                if out_cap > MAX_LAMBDA_OUT_BYTES {
                    return Err(at.bad(LAMBDA_OFF_OUT_CAP, "out_cap", "over MAX_LAMBDA_OUT_BYTES"));
                }
                let (path, end) = path_at(p, at, LAMBDA_OFF_PATH_LEN, LAMBDA_OFF_PATH)?;
                exact(p, at, end)?;
                Ok(Self::Lambda {
                    path,
                    offset: le_u64(p, LAMBDA_OFF_OFFSET),
                    len,
                    hash: p[LAMBDA_OFF_HASH..LAMBDA_OFF_HASH + HASH_BYTES].try_into().expect("32"),
                    out_cap,
                })
            }
            op::WRITE => {
                need(p, at, WRITE_OFF_PATH)?;
                zero(p, at, WRITE_OFF_PATH_LEN + 2..WRITE_OFF_PATH)?;
                let dl = le_u32(p, WRITE_OFF_DATA_LEN);
                if dl == 0 || dl > MAX_WRITE_BYTES {
                    return Err(at.bad(
                        WRITE_OFF_DATA_LEN,
                        "data_len",
                        "not in 1..=MAX_WRITE_BYTES",
                    ));
                }
                let (path, end) = path_at(p, at, WRITE_OFF_PATH_LEN, WRITE_OFF_PATH)?;
                need(p, at, end + dl as usize)?;
                exact(p, at, end + dl as usize)?;
                Ok(Self::Write { path, offset: le_u64(p, WRITE_OFF_OFFSET), data: &p[end..] })
            }
            op::STAT => {
                need(p, at, STAT_OFF_PATH)?;
                zero(p, at, STAT_OFF_PATH_LEN + 2..STAT_OFF_PATH)?;
                let (path, end) = path_at(p, at, STAT_OFF_PATH_LEN, STAT_OFF_PATH)?;
                exact(p, at, end)?;
                Ok(Self::Stat { path })
            }
            op::OFFLOAD => {
                need(p, at, OFFLOAD_OFF_MSG)?;
                zero(p, at, OFFLOAD_OFF_MSG_LEN + 4..OFFLOAD_OFF_MSG)?;
                let n = le_u32(p, OFFLOAD_OFF_MSG_LEN);
                if n == 0 || n > MAX_OFFLOAD_MSG_BYTES {
                    return Err(at.bad(
                        OFFLOAD_OFF_MSG_LEN,
                        "msg_len",
                        "not in 1..=MAX_OFFLOAD_MSG_BYTES",
                    ));
                }
                let end = OFFLOAD_OFF_MSG + n as usize;
                need(p, at, end)?;
                exact(p, at, end)?;
                Ok(Self::Offload { msg: &p[OFFLOAD_OFF_MSG..end] })
            }
            op::LAMBDA_WRITE => {
                need(p, at, LWRITE_OFF_PATH)?;
                zero(p, at, LWRITE_OFF_PATH_LEN + 2..LWRITE_OFF_HASH)?;
                let n = le_u32(p, LWRITE_OFF_IN_LEN);
                if n == 0 || n > MAX_LAMBDA_WRITE_IN_BYTES {
                    return Err(at.bad(
                        LWRITE_OFF_IN_LEN,
                        "in_len",
                        "not in 1..=MAX_LAMBDA_WRITE_IN_BYTES",
                    ));
                }
                let out_cap = le_u32(p, LWRITE_OFF_OUT_CAP);
                if out_cap == 0 || out_cap > MAX_LAMBDA_WRITE_OUT_BYTES {
                    return Err(at.bad(
                        LWRITE_OFF_OUT_CAP,
                        "out_cap",
                        "not in 1..=MAX_LAMBDA_WRITE_OUT_BYTES",
                    ));
                }
                let (path, end) = path_at(p, at, LWRITE_OFF_PATH_LEN, LWRITE_OFF_PATH)?;
                need(p, at, end + n as usize)?;
                exact(p, at, end + n as usize)?;
                Ok(Self::LambdaWrite {
                    path,
                    offset: le_u64(p, LWRITE_OFF_OFFSET),
                    hash: p[LWRITE_OFF_HASH..LWRITE_OFF_HASH + HASH_BYTES].try_into().expect("32"),
                    input: &p[end..],
                    out_cap,
                })
            }
            other => Err(ProtoError::UnknownOp { frame: at.frame, msg: at.msg, op: other }),
        }
    }
}

fn put_u16(o: &mut Vec<u8>, v: u16) {
    o.extend_from_slice(&v.to_le_bytes());
}
fn put_u32(o: &mut Vec<u8>, v: u32) {
    o.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(o: &mut Vec<u8>, v: u64) {
    o.extend_from_slice(&v.to_le_bytes());
}
fn len16(n: usize) -> u16 {
    u16::try_from(n).expect("path lengths are checked by the caller")
}
fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("payload lengths are below MAX_FRAME_BYTES")
}

/// Appends `r` as message `req_id` to the frame being built. The caller keeps fields within
/// their limits (the client checks them before encoding; the server's parser re-checks).
pub fn put_request(f: &mut FrameBuf, req_id: u64, r: &Request<'_>) {
    let start = f.begin_msg(req_id, r.op(), 0);
    let o = &mut f.buf;
    match *r {
        Request::Hello { tenant } => {
            put_u16(o, len16(tenant.len()));
            put_u16(o, 0);
            o.extend_from_slice(tenant);
        }
        Request::Auth { mac } => o.extend_from_slice(mac),
        Request::LoadProg { prog_type, section, elf } => {
            o.extend_from_slice(&[prog_type, 0, 0, 0]);
            put_u32(o, len32(section.len()));
            o.extend_from_slice(section);
            o.extend_from_slice(elf);
        }
        Request::Read { path, offset, len } => {
            put_u64(o, offset);
            put_u32(o, len);
            put_u16(o, len16(path.len()));
            put_u16(o, 0);
            o.extend_from_slice(path);
        }
        Request::Xrp { path, offset, len, hash, scratch, out_len } => {
            put_u64(o, offset);
            put_u32(o, len);
            put_u32(o, len32(scratch.len()));
            put_u32(o, out_len);
            put_u16(o, len16(path.len()));
            put_u16(o, 0);
            o.extend_from_slice(hash);
            o.extend_from_slice(path);
            o.extend_from_slice(scratch);
        }
        Request::Lambda { path, offset, len, hash, out_cap } => {
            put_u64(o, offset);
            put_u32(o, len);
            put_u32(o, out_cap);
            put_u16(o, len16(path.len()));
            o.extend_from_slice(&[0; 6]);
            o.extend_from_slice(hash);
            o.extend_from_slice(path);
        }
        Request::Write { path, offset, data } => {
            put_u64(o, offset);
            put_u32(o, len32(data.len()));
            put_u16(o, len16(path.len()));
            put_u16(o, 0);
            o.extend_from_slice(path);
            o.extend_from_slice(data);
        }
        Request::Stat { path } => {
            put_u16(o, len16(path.len()));
            put_u16(o, 0);
            o.extend_from_slice(path);
        }
        Request::Offload { msg } => {
            put_u32(o, len32(msg.len()));
            put_u32(o, 0);
            o.extend_from_slice(msg);
        }
        Request::LambdaWrite { path, offset, hash, input, out_cap } => {
            put_u64(o, offset);
            put_u32(o, len32(input.len()));
            put_u32(o, out_cap);
            put_u16(o, len16(path.len()));
            o.extend_from_slice(&[0; LWRITE_OFF_HASH - LWRITE_OFF_PATH_LEN - 2]);
            o.extend_from_slice(hash);
            o.extend_from_slice(path);
            o.extend_from_slice(input);
        }
    }
    f.end_msg(start);
}

/// A successful response, borrowed from its frame (errors are [`Response::Error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response<'a> {
    Hello {
        challenge: &'a [u8; HASH_BYTES],
        flags: u32,
        max_frame_bytes: u32,
        max_in_flight: u32,
    },
    Auth,
    LoadProg {
        hash: &'a [u8; HASH_BYTES],
        insns: u32,
    },
    Read {
        version: FileVersion,
        data: &'a [u8],
    },
    Xrp {
        version: FileVersion,
        hops: u32,
        scratch: &'a [u8],
    },
    Lambda {
        version: FileVersion,
        ret: u64,
        out: &'a [u8],
    },
    Write {
        version: FileVersion,
        written: u32,
    },
    Stat {
        version: FileVersion,
        size: u64,
    },
    /// `served_by`: [`SERVED_BY_OFFLOAD`] or [`SERVED_BY_HOST`].
    Offload {
        served_by: u8,
        data: &'a [u8],
    },
    /// The output bytes the program produced, all written and synced.
    LambdaWrite {
        version: FileVersion,
        written: u64,
    },
    /// Any op with a non-OK status; `code` is `None` for a status this build does not know.
    Error {
        status: u16,
        code: Option<StatusCode>,
        message: &'a [u8],
    },
}

impl<'a> Response<'a> {
    /// Parses a response message.
    ///
    /// # Errors
    /// `UnknownOp`, `Truncated` or `BadField` naming the frame, message and offset.
    pub fn parse(m: &Msg<'a>) -> Result<Self, ProtoError> {
        let (p, at) = (m.payload, m.at);
        if !op::ALL.iter().any(|(o, _)| *o == m.op) {
            return Err(ProtoError::UnknownOp { frame: at.frame, msg: at.msg, op: m.op });
        }
        if m.status != StatusCode::Ok as u16 {
            return Ok(Self::Error {
                status: m.status,
                code: StatusCode::from_u16(m.status),
                message: p,
            });
        }
        let version = |p: &[u8]| -> Result<FileVersion, ProtoError> {
            need(p, at, VERSION_BYTES)?;
            Ok(FileVersion::get(p))
        };
        match m.op {
            op::HELLO => {
                need(p, at, HELLO_R_BYTES)?;
                exact(p, at, HELLO_R_BYTES)?;
                Ok(Self::Hello {
                    challenge: p[..HASH_BYTES].try_into().expect("32"),
                    flags: le_u32(p, HELLO_R_OFF_FLAGS),
                    max_frame_bytes: le_u32(p, HELLO_R_OFF_MAX_FRAME),
                    max_in_flight: le_u32(p, HELLO_R_OFF_MAX_IN_FLIGHT),
                })
            }
            op::AUTH => {
                exact(p, at, 0)?;
                Ok(Self::Auth)
            }
            op::LOAD_PROG => {
                need(p, at, LOAD_R_BYTES)?;
                exact(p, at, LOAD_R_BYTES)?;
                Ok(Self::LoadProg {
                    hash: p[..HASH_BYTES].try_into().expect("32"),
                    insns: le_u32(p, HASH_BYTES),
                })
            }
            op::READ => Ok(Self::Read { version: version(p)?, data: &p[READ_R_OFF_DATA..] }),
            op::XRP => {
                let version = version(p)?;
                need(p, at, XRP_R_OFF_SCRATCH)?;
                let scratch = &p[XRP_R_OFF_SCRATCH..];
                if scratch.len() > SCRATCH_BYTES {
                    return Err(at.bad(XRP_R_OFF_SCRATCH, "scratch", "over SCRATCH_BYTES"));
                }
                Ok(Self::Xrp { version, hops: le_u32(p, XRP_R_OFF_HOPS), scratch })
            }
            op::LAMBDA => {
                let version = version(p)?;
                need(p, at, LAMBDA_R_OFF_OUT)?;
                Ok(Self::Lambda {
                    version,
                    ret: le_u64(p, LAMBDA_R_OFF_RET),
                    out: &p[LAMBDA_R_OFF_OUT..],
                })
            }
            op::WRITE => {
                need(p, at, WRITE_R_BYTES)?;
                exact(p, at, WRITE_R_BYTES)?;
                Ok(Self::Write { version: version(p)?, written: le_u32(p, VERSION_BYTES) })
            }
            op::STAT => {
                need(p, at, STAT_R_BYTES)?;
                exact(p, at, STAT_R_BYTES)?;
                Ok(Self::Stat { version: version(p)?, size: le_u64(p, VERSION_BYTES) })
            }
            op::OFFLOAD => {
                need(p, at, OFFLOAD_R_OFF_DATA)?;
                zero(p, at, OFFLOAD_R_OFF_SERVED_BY + 1..OFFLOAD_R_OFF_DATA)?;
                let served_by = p[OFFLOAD_R_OFF_SERVED_BY];
                if served_by > SERVED_BY_HOST {
                    return Err(at.bad(OFFLOAD_R_OFF_SERVED_BY, "served_by", "not 0 or 1"));
                }
                let data = &p[OFFLOAD_R_OFF_DATA..];
                if data.len() > MAX_OFFLOAD_DATA_BYTES as usize {
                    return Err(at.bad(OFFLOAD_R_OFF_DATA, "data", "over MAX_OFFLOAD_DATA_BYTES"));
                }
                Ok(Self::Offload { served_by, data })
            }
            op::LAMBDA_WRITE => {
                need(p, at, LWRITE_R_BYTES)?;
                exact(p, at, LWRITE_R_BYTES)?;
                Ok(Self::LambdaWrite {
                    version: version(p)?,
                    written: le_u64(p, LWRITE_R_OFF_WRITTEN),
                })
            }
            _ => unreachable!("op checked above"),
        }
    }
}

/// Appends a successful response `r` (not `Error`: see [`put_status`]) for request `req_id`.
pub fn put_response(f: &mut FrameBuf, req_id: u64, op_code: u8, r: &Response<'_>) {
    let start = f.begin_msg(req_id, op_code, StatusCode::Ok as u16);
    let o = &mut f.buf;
    match *r {
        Response::Hello { challenge, flags, max_frame_bytes, max_in_flight } => {
            o.extend_from_slice(challenge);
            put_u32(o, flags);
            put_u32(o, max_frame_bytes);
            put_u32(o, max_in_flight);
            put_u32(o, 0);
        }
        Response::Auth => {}
        Response::LoadProg { hash, insns } => {
            o.extend_from_slice(hash);
            put_u32(o, insns);
            put_u32(o, 0);
        }
        Response::Read { version, data } => {
            version.put(o);
            o.extend_from_slice(data);
        }
        Response::Xrp { version, hops, scratch } => {
            version.put(o);
            put_u32(o, hops);
            put_u32(o, 0);
            o.extend_from_slice(scratch);
        }
        Response::Lambda { version, ret, out } => {
            version.put(o);
            put_u64(o, ret);
            o.extend_from_slice(out);
        }
        Response::Write { version, written } => {
            version.put(o);
            put_u32(o, written);
            put_u32(o, 0);
        }
        Response::Stat { version, size } => {
            version.put(o);
            put_u64(o, size);
        }
        Response::Offload { served_by, data } => {
            o.push(served_by);
            o.extend_from_slice(&[0; OFFLOAD_R_OFF_DATA - 1]);
            o.extend_from_slice(data);
        }
        Response::LambdaWrite { version, written } => {
            version.put(o);
            put_u64(o, written);
        }
        Response::Error { .. } => panic!("put_response: use put_status for errors"),
    }
    f.end_msg(start);
}

/// Appends an error response: `status` and a UTF-8 message.
pub fn put_status(f: &mut FrameBuf, req_id: u64, op_code: u8, status: StatusCode, message: &str) {
    debug_assert_ne!(status, StatusCode::Ok, "put_status is for errors");
    let start = f.begin_msg(req_id, op_code, status as u16);
    f.buf.extend_from_slice(message.as_bytes());
    f.end_msg(start);
}
