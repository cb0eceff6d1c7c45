//! The wire protocol (docs/FORMAT.md, "Wire protocol"): length-prefixed binary frames over
//! TCP, each carrying many messages, every integer little-endian.
//!
//! Offsets are named constants; `tests/format_doc.rs` checks them against the document.
//! Decoding borrows from the caller's buffer (no allocation); encoding appends to a caller's
//! `Vec<u8>` that is reused between frames. Every decoding error names the frame (its sequence
//! number on the connection), the message index and the byte offset in the frame body.

use crate::limits::{MAX_FRAME_BYTES, MAX_MSGS_PER_FRAME};

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"SFNP";
/// The protocol version this build speaks; a frame with another is refused.
pub const VERSION: u8 = 1;

/// Frame header bytes.
pub const FRAME_HEADER_BYTES: usize = 16;
pub const FRAME_OFF_MAGIC: usize = 0;
pub const FRAME_OFF_VERSION: usize = 4;
pub const FRAME_OFF_KIND: usize = 5;
pub const FRAME_OFF_RESERVED: usize = 6;
pub const FRAME_OFF_BODY_BYTES: usize = 8;
pub const FRAME_OFF_COUNT: usize = 12;

/// Message header bytes (each message in a frame body starts with one).
pub const MSG_HEADER_BYTES: usize = 16;
pub const MSG_OFF_REQ_ID: usize = 0;
pub const MSG_OFF_OP: usize = 8;
pub const MSG_OFF_FLAGS: usize = 9;
pub const MSG_OFF_STATUS: usize = 10;
pub const MSG_OFF_LEN: usize = 12;

/// Message `flags` bit 0 (requests only): the payload opens with a `u64` placement version the
/// client routed the request by (a cluster's fencing); the op's own payload follows it.
pub const MSG_FLAG_FENCED: u8 = 1;
/// Bytes of the fence a [`MSG_FLAG_FENCED`] message's payload opens with.
pub const FENCE_BYTES: usize = 8;

/// Bytes of an HMAC-SHA256 tag, an auth challenge and a program hash (SHA-256).
pub const HASH_BYTES: usize = 32;

/// Frame kinds (byte 5).
pub const KIND_REQUEST: u8 = 0;
pub const KIND_RESPONSE: u8 = 1;

/// Operation codes (message byte 8).
pub mod op {
    pub const HELLO: u8 = 1;
    pub const AUTH: u8 = 2;
    pub const LOAD_PROG: u8 = 3;
    pub const READ: u8 = 4;
    pub const XRP: u8 = 5;
    pub const LAMBDA: u8 = 6;
    pub const WRITE: u8 = 7;
    pub const STAT: u8 = 8;
    /// DDS: an application message judged by the server's offload functions (served next to
    /// the data, or forwarded to the host application).
    pub const OFFLOAD: u8 = 9;
    /// λ-IO's `pwrite_λ`: the server runs a λ program over the carried input and writes its
    /// output, durably, at an offset of a file.
    pub const LAMBDA_WRITE: u8 = 10;
    /// Every op, for tables and tests.
    pub const ALL: [(u8, &str); 10] = [
        (HELLO, "HELLO"),
        (AUTH, "AUTH"),
        (LOAD_PROG, "LOAD_PROG"),
        (READ, "READ"),
        (XRP, "XRP"),
        (LAMBDA, "LAMBDA"),
        (WRITE, "WRITE"),
        (STAT, "STAT"),
        (OFFLOAD, "OFFLOAD"),
        (LAMBDA_WRITE, "LAMBDA_WRITE"),
    ];
}

/// Why bytes are not a valid frame. `frame` is the frame's sequence number on its connection
/// (0 first), `msg` the message index in it, `offset` the byte offset in the frame body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    #[error("frame {frame}: bad magic {got:02x?} (expected \"SFNP\")")]
    BadMagic { frame: u64, got: [u8; 4] },
    #[error("frame {frame}: protocol version {got}, this build speaks {VERSION}")]
    BadVersion { frame: u64, got: u8 },
    #[error("frame {frame}: kind {got} (expected {expected})")]
    BadKind { frame: u64, got: u8, expected: u8 },
    #[error("frame {frame}: reserved header bytes are not zero")]
    Reserved { frame: u64 },
    #[error("frame {frame}: {bytes} bytes, more than the {max}-byte limit")]
    FrameTooLarge { frame: u64, bytes: u64, max: usize },
    #[error("frame {frame}: {count} messages, more than the limit of {max}")]
    TooManyMessages { frame: u64, count: u32, max: u32 },
    #[error("frame {frame}: no messages")]
    Empty { frame: u64 },
    #[error("frame {frame}, message {msg}: truncated at body offset {offset}: {need} bytes needed, {have} left")]
    Truncated { frame: u64, msg: u32, offset: usize, need: usize, have: usize },
    #[error("frame {frame}: {bytes} bytes after the last message")]
    TrailingBytes { frame: u64, bytes: usize },
    #[error("frame {frame}, message {msg}: unknown op {op}")]
    UnknownOp { frame: u64, msg: u32, op: u8 },
    #[error("frame {frame}, message {msg}: field {field} at body offset {offset}: {why}")]
    BadField { frame: u64, msg: u32, offset: usize, field: &'static str, why: &'static str },
}

impl ProtoError {
    /// The frame the error is about.
    #[must_use]
    pub fn frame(&self) -> u64 {
        match *self {
            Self::BadMagic { frame, .. }
            | Self::BadVersion { frame, .. }
            | Self::BadKind { frame, .. }
            | Self::Reserved { frame }
            | Self::FrameTooLarge { frame, .. }
            | Self::TooManyMessages { frame, .. }
            | Self::Empty { frame }
            | Self::Truncated { frame, .. }
            | Self::TrailingBytes { frame, .. }
            | Self::UnknownOp { frame, .. }
            | Self::BadField { frame, .. } => frame,
        }
    }
}

/// A checked frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: u8,
    /// Bytes after the header.
    pub body_bytes: u32,
    /// Messages in the body.
    pub count: u32,
}

impl FrameHeader {
    /// Header + body bytes.
    #[must_use]
    pub fn frame_bytes(&self) -> usize {
        FRAME_HEADER_BYTES + self.body_bytes as usize
    }
}

pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Checks the 16-byte header of frame number `frame`, which must be of kind `expected`.
///
/// # Errors
/// Bad magic, version, kind, reserved bytes, a frame over [`MAX_FRAME_BYTES`], a count over
/// [`MAX_MSGS_PER_FRAME`] or zero.
pub fn decode_header(
    h: &[u8; FRAME_HEADER_BYTES],
    frame: u64,
    expected: u8,
) -> Result<FrameHeader, ProtoError> {
    let magic: [u8; 4] = h[FRAME_OFF_MAGIC..FRAME_OFF_MAGIC + 4].try_into().expect("4 bytes");
    if magic != MAGIC {
        return Err(ProtoError::BadMagic { frame, got: magic });
    }
    if h[FRAME_OFF_VERSION] != VERSION {
        return Err(ProtoError::BadVersion { frame, got: h[FRAME_OFF_VERSION] });
    }
    if h[FRAME_OFF_KIND] != expected {
        return Err(ProtoError::BadKind { frame, got: h[FRAME_OFF_KIND], expected });
    }
    if le_u16(h, FRAME_OFF_RESERVED) != 0 {
        return Err(ProtoError::Reserved { frame });
    }
    let body_bytes = le_u32(h, FRAME_OFF_BODY_BYTES);
    let total = FRAME_HEADER_BYTES as u64 + u64::from(body_bytes);
    if total > MAX_FRAME_BYTES as u64 {
        return Err(ProtoError::FrameTooLarge { frame, bytes: total, max: MAX_FRAME_BYTES });
    }
    let count = le_u32(h, FRAME_OFF_COUNT);
    if count > MAX_MSGS_PER_FRAME {
        return Err(ProtoError::TooManyMessages { frame, count, max: MAX_MSGS_PER_FRAME });
    }
    if count == 0 {
        return Err(ProtoError::Empty { frame });
    }
    Ok(FrameHeader { kind: expected, body_bytes, count })
}

/// One message of a frame, borrowed from the frame's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg<'a> {
    pub req_id: u64,
    pub op: u8,
    pub status: u16,
    /// The placement version the request was routed by ([`MSG_FLAG_FENCED`]); `None` in
    /// frames without the flag (every frame before fencing existed).
    pub fence: Option<u64>,
    pub payload: &'a [u8],
    /// Where the message sits, for errors: frame number, index, body offset of its payload.
    pub at: MsgAt,
}

/// The position of a message, carried into field errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgAt {
    pub frame: u64,
    pub msg: u32,
    /// Body offset of the payload's first byte.
    pub offset: usize,
}

impl MsgAt {
    pub(crate) fn bad(self, rel: usize, field: &'static str, why: &'static str) -> ProtoError {
        ProtoError::BadField {
            frame: self.frame,
            msg: self.msg,
            offset: self.offset + rel,
            field,
            why,
        }
    }
    pub(crate) fn short(self, rel: usize, need: usize, have: usize) -> ProtoError {
        ProtoError::Truncated {
            frame: self.frame,
            msg: self.msg,
            offset: self.offset + rel,
            need,
            have,
        }
    }
}

/// Iterates over the messages of a frame body. Checks that exactly `count` messages fill the
/// body: a short message or bytes left over are errors.
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    body: &'a [u8],
    pos: usize,
    index: u32,
    count: u32,
    frame: u64,
    failed: bool,
}

impl<'a> Messages<'a> {
    #[must_use]
    pub fn new(body: &'a [u8], count: u32, frame: u64) -> Self {
        Self { body, pos: 0, index: 0, count, frame, failed: false }
    }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Msg<'a>, ProtoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let frame = self.frame;
        if self.index == self.count {
            if self.pos != self.body.len() {
                self.failed = true;
                return Some(Err(ProtoError::TrailingBytes {
                    frame,
                    bytes: self.body.len() - self.pos,
                }));
            }
            return None;
        }
        let rest = &self.body[self.pos..];
        let msg = self.index;
        if rest.len() < MSG_HEADER_BYTES {
            self.failed = true;
            return Some(Err(ProtoError::Truncated {
                frame,
                msg,
                offset: self.pos,
                need: MSG_HEADER_BYTES,
                have: rest.len(),
            }));
        }
        let len = le_u32(rest, MSG_OFF_LEN) as usize;
        let flags = rest[MSG_OFF_FLAGS];
        if flags & !MSG_FLAG_FENCED != 0 {
            self.failed = true;
            let at = MsgAt { frame, msg, offset: self.pos };
            return Some(Err(at.bad(MSG_OFF_FLAGS, "flags", "only bit 0 (fenced) is defined")));
        }
        let fenced = flags & MSG_FLAG_FENCED != 0;
        if fenced && len < FENCE_BYTES {
            self.failed = true;
            let at = MsgAt { frame, msg, offset: self.pos };
            return Some(Err(at.bad(
                MSG_OFF_LEN,
                "len",
                "a fenced message holds its 8-byte fence",
            )));
        }
        if rest.len() - MSG_HEADER_BYTES < len {
            self.failed = true;
            return Some(Err(ProtoError::Truncated {
                frame,
                msg,
                offset: self.pos + MSG_HEADER_BYTES,
                need: len,
                have: rest.len() - MSG_HEADER_BYTES,
            }));
        }
        let skip = if fenced { FENCE_BYTES } else { 0 };
        let m = Msg {
            req_id: le_u64(rest, MSG_OFF_REQ_ID),
            op: rest[MSG_OFF_OP],
            status: le_u16(rest, MSG_OFF_STATUS),
            fence: fenced.then(|| le_u64(rest, MSG_HEADER_BYTES)),
            payload: &rest[MSG_HEADER_BYTES + skip..MSG_HEADER_BYTES + len],
            at: MsgAt { frame, msg, offset: self.pos + MSG_HEADER_BYTES + skip },
        };
        self.pos += MSG_HEADER_BYTES + len;
        self.index += 1;
        Some(Ok(m))
    }
}

/// Builds one frame in a reused buffer: `begin`, any number of messages, `finish`.
#[derive(Debug, Default)]
pub struct FrameBuf {
    pub buf: Vec<u8>,
    count: u32,
    /// Stamped on every request message begun while set ([`FrameBuf::set_fence`]).
    fence: Option<u64>,
    kind: u8,
}

impl FrameBuf {
    #[must_use]
    pub fn with_capacity(bytes: usize) -> Self {
        Self { buf: Vec::with_capacity(bytes), count: 0, fence: None, kind: KIND_REQUEST }
    }

    /// Starts a frame of `kind`, dropping whatever the buffer held.
    pub fn begin(&mut self, kind: u8) {
        self.buf.clear();
        self.count = 0;
        self.kind = kind;
        self.buf.extend_from_slice(&MAGIC);
        self.buf.push(VERSION);
        self.buf.push(kind);
        self.buf.extend_from_slice(&[0; FRAME_HEADER_BYTES - FRAME_OFF_RESERVED]);
    }

    /// Messages added since `begin`.
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Bytes the frame holds now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True before any message was added.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Stamps `fence` (a cluster's placement version) on every request message begun from now
    /// on ([`MSG_FLAG_FENCED`]); `None` = plain messages, as before fencing existed.
    pub fn set_fence(&mut self, fence: Option<u64>) {
        self.fence = fence;
    }

    /// Opens a message; returns its start for [`FrameBuf::end_msg`].
    pub fn begin_msg(&mut self, req_id: u64, op: u8, status: u16) -> usize {
        let start = self.buf.len();
        let fence = self.fence.filter(|_| self.kind == KIND_REQUEST);
        self.buf.extend_from_slice(&req_id.to_le_bytes());
        self.buf.push(op);
        self.buf.push(if fence.is_some() { MSG_FLAG_FENCED } else { 0 });
        self.buf.extend_from_slice(&status.to_le_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        if let Some(v) = fence {
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        start
    }

    /// Closes the message opened at `start` (writes its payload length).
    pub fn end_msg(&mut self, start: usize) {
        let len = self.buf.len() - start - MSG_HEADER_BYTES;
        let len = u32::try_from(len).expect("payload below MAX_FRAME_BYTES");
        self.buf[start + MSG_OFF_LEN..start + MSG_OFF_LEN + 4].copy_from_slice(&len.to_le_bytes());
        self.count += 1;
    }

    /// Writes the header's body length and count; the frame is `self.buf`.
    pub fn finish(&mut self) -> &[u8] {
        debug_assert!(self.count > 0, "a frame carries at least one message");
        debug_assert!(self.buf.len() <= MAX_FRAME_BYTES, "frame over MAX_FRAME_BYTES");
        let body = u32::try_from(self.buf.len() - FRAME_HEADER_BYTES).expect("bounded");
        self.buf[FRAME_OFF_BODY_BYTES..FRAME_OFF_BODY_BYTES + 4]
            .copy_from_slice(&body.to_le_bytes());
        self.buf[FRAME_OFF_COUNT..FRAME_OFF_COUNT + 4].copy_from_slice(&self.count.to_le_bytes());
        &self.buf
    }
}

/// Writes the head of a one-message response frame into `out`: the frame header, the message
/// header (status OK) and `prefix`, the payload's fixed fields, for a payload of `prefix` and
/// then `data_len` bytes that the caller sends right after the head (an answer sent from the
/// buffer its data was read into, with no copy of the data). Returns the head's length.
///
/// # Panics
/// When `out` is shorter than the head, or the frame would pass [`MAX_FRAME_BYTES`] (the
/// caller bounds `data_len` by its request's limit).
pub fn put_answer_head(
    out: &mut [u8],
    req_id: u64,
    op: u8,
    prefix: &[u8],
    data_len: usize,
) -> usize {
    let head = FRAME_HEADER_BYTES + MSG_HEADER_BYTES + prefix.len();
    let payload = prefix.len() + data_len;
    assert!(head + data_len <= MAX_FRAME_BYTES, "answer over MAX_FRAME_BYTES");
    let body = u32::try_from(MSG_HEADER_BYTES + payload).expect("below MAX_FRAME_BYTES");
    let out = &mut out[..head];
    out.fill(0);
    out[FRAME_OFF_MAGIC..FRAME_OFF_MAGIC + 4].copy_from_slice(&MAGIC);
    out[FRAME_OFF_VERSION] = VERSION;
    out[FRAME_OFF_KIND] = KIND_RESPONSE;
    out[FRAME_OFF_BODY_BYTES..FRAME_OFF_BODY_BYTES + 4].copy_from_slice(&body.to_le_bytes());
    out[FRAME_OFF_COUNT..FRAME_OFF_COUNT + 4].copy_from_slice(&1u32.to_le_bytes());
    let m = &mut out[FRAME_HEADER_BYTES..];
    m[MSG_OFF_REQ_ID..MSG_OFF_REQ_ID + 8].copy_from_slice(&req_id.to_le_bytes());
    m[MSG_OFF_OP] = op;
    let len = u32::try_from(payload).expect("below MAX_FRAME_BYTES");
    m[MSG_OFF_LEN..MSG_OFF_LEN + 4].copy_from_slice(&len.to_le_bytes());
    m[MSG_HEADER_BYTES..].copy_from_slice(prefix);
    head
}

/// Decodes a whole frame from `bytes` (header + body): the header and its messages.
/// For tests and the fuzz target; connections decode the header first, then read the body.
///
/// # Errors
/// As [`decode_header`]; `Truncated` when `bytes` is shorter than the header says.
pub fn decode_frame(
    bytes: &[u8],
    frame: u64,
    kind: u8,
) -> Result<(FrameHeader, Messages<'_>), ProtoError> {
    let Some(h) = bytes.get(..FRAME_HEADER_BYTES) else {
        return Err(ProtoError::Truncated {
            frame,
            msg: 0,
            offset: 0,
            need: FRAME_HEADER_BYTES,
            have: bytes.len(),
        });
    };
    let h = decode_header(h.try_into().expect("16 bytes"), frame, kind)?;
    let body = &bytes[FRAME_HEADER_BYTES..];
    if body.len() < h.body_bytes as usize {
        return Err(ProtoError::Truncated {
            frame,
            msg: 0,
            offset: 0,
            need: h.body_bytes as usize,
            have: body.len(),
        });
    }
    if body.len() > h.body_bytes as usize {
        return Err(ProtoError::TrailingBytes { frame, bytes: body.len() - h.body_bytes as usize });
    }
    Ok((h, Messages::new(body, h.count, frame)))
}
