//! Requests: parsing each op's payload (docs/FORMAT.md, "Requests") and encoding it.

// The layout constants (`*_OFF_*`, `*_BYTES`), the frame types and the field helpers of
// mod.rs: this file is one half of that module.
use super::*;

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

    /// The op's name, as docs/FORMAT.md spells it.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        let code = self.op();
        op::ALL.iter().find(|(c, _)| *c == code).map_or("?", |(_, n)| n)
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
                if prog_type != PROG_TYPE_XRP && prog_type != PROG_TYPE_LAMBDA {
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
                if len == 0 || len > MAX_XRP_READ_BYTES {
                    return Err(at.bad(XRP_OFF_LEN, "len", "not in 1..=MAX_XRP_READ_BYTES"));
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
