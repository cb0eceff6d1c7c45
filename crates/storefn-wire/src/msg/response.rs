//! Responses: parsing each op's successful payload and error statuses (docs/FORMAT.md,
//! "Responses") and encoding them.

// The layout constants (`*_OFF_*`, `*_BYTES`), the frame types and the field helpers of
// mod.rs: this file is one half of that module.
use super::*;

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
        if m.fence.is_some() {
            return Err(at.bad(0, "flags", "a response carries no fence"));
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
