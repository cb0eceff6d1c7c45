//! Messages between the host file library and the file service (docs/FORMAT.md, "DDS host
//! channel"). Fixed little-endian headers; offsets are named constants the format test checks.

use super::HostError;

/// Request header bytes (payload follows: a path for create/open, data for write).
pub const REQUEST_HEADER_BYTES: usize = 32;
/// Byte offsets in a request header.
pub const REQ_OP: usize = 0;
/// File id (read, write, flush, close).
pub const REQ_FILE: usize = 4;
/// Request id, echoed in the response.
pub const REQ_ID: usize = 8;
/// File offset (read, write).
pub const REQ_OFFSET: usize = 16;
/// Bytes to read (read); payload bytes otherwise.
pub const REQ_LEN: usize = 24;

/// Response header bytes (payload follows: the data of a read).
pub const RESPONSE_HEADER_BYTES: usize = 24;
/// Request id.
pub const RESP_ID: usize = 0;
/// 0, or a negative errno.
pub const RESP_STATUS: usize = 8;
/// Nanoseconds the service spent in the request's system call (the device's share of it),
/// saturating at `u32::MAX`.
pub const RESP_DEVICE_NS: usize = 12;
/// File id (create/open) or bytes transferred (read/write).
pub const RESP_VALUE: usize = 16;

/// Operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Create (or truncate) a file beneath the service's directory; value = file id.
    Create = 1,
    /// Open an existing file; value = file id.
    Open = 2,
    /// Read `len` bytes at `offset`; value = bytes read, payload = data.
    Read = 3,
    /// Write the payload at `offset`; value = bytes written.
    Write = 4,
    /// Make the file's written data durable (fdatasync).
    Flush = 5,
    /// Forget the file id.
    Close = 6,
}

impl Op {
    /// The op for a wire byte.
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Create,
            2 => Self::Open,
            3 => Self::Read,
            4 => Self::Write,
            5 => Self::Flush,
            6 => Self::Close,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Open => "open",
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Close => "close",
        }
    }
}

/// A decoded request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Operation byte (validated by the service, so an unknown op can still be answered).
    pub op: u8,
    /// File id.
    pub file: u32,
    /// Request id.
    pub id: u64,
    /// File offset.
    pub offset: u64,
    /// Length field.
    pub len: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl RequestHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut h = [0u8; REQUEST_HEADER_BYTES];
        h[REQ_OP] = self.op;
        h[REQ_FILE..REQ_FILE + 4].copy_from_slice(&self.file.to_le_bytes());
        h[REQ_ID..REQ_ID + 8].copy_from_slice(&self.id.to_le_bytes());
        h[REQ_OFFSET..REQ_OFFSET + 8].copy_from_slice(&self.offset.to_le_bytes());
        h[REQ_LEN..REQ_LEN + 4].copy_from_slice(&self.len.to_le_bytes());
        h
    }

    /// Splits a message into header and payload.
    ///
    /// # Errors
    /// `Malformed` when shorter than a header.
    pub fn decode(msg: &[u8]) -> Result<(Self, &[u8]), HostError> {
        if msg.len() < REQUEST_HEADER_BYTES {
            return Err(HostError::Malformed(format!(
                "request of {} bytes, header is {REQUEST_HEADER_BYTES}",
                msg.len()
            )));
        }
        let h = Self {
            op: msg[REQ_OP],
            file: u32_at(msg, REQ_FILE),
            id: u64_at(msg, REQ_ID),
            offset: u64_at(msg, REQ_OFFSET),
            len: u32_at(msg, REQ_LEN),
        };
        Ok((h, &msg[REQUEST_HEADER_BYTES..]))
    }
}

/// A decoded response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// Request id.
    pub id: u64,
    /// 0 or a negative errno.
    pub status: i32,
    /// Time in the system call, ns (saturating).
    pub device_ns: u32,
    /// File id or bytes.
    pub value: u64,
}

impl ResponseHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; RESPONSE_HEADER_BYTES] {
        let mut h = [0u8; RESPONSE_HEADER_BYTES];
        h[RESP_ID..RESP_ID + 8].copy_from_slice(&self.id.to_le_bytes());
        h[RESP_STATUS..RESP_STATUS + 4].copy_from_slice(&self.status.to_le_bytes());
        h[RESP_DEVICE_NS..RESP_DEVICE_NS + 4].copy_from_slice(&self.device_ns.to_le_bytes());
        h[RESP_VALUE..RESP_VALUE + 8].copy_from_slice(&self.value.to_le_bytes());
        h
    }

    /// Splits a message into header and payload.
    ///
    /// # Errors
    /// `Malformed` when shorter than a header.
    pub fn decode(msg: &[u8]) -> Result<(Self, &[u8]), HostError> {
        if msg.len() < RESPONSE_HEADER_BYTES {
            return Err(HostError::Malformed(format!(
                "response of {} bytes, header is {RESPONSE_HEADER_BYTES}",
                msg.len()
            )));
        }
        let h = Self {
            id: u64_at(msg, RESP_ID),
            status: u32_at(msg, RESP_STATUS) as i32,
            device_ns: u32_at(msg, RESP_DEVICE_NS),
            value: u64_at(msg, RESP_VALUE),
        };
        Ok((h, &msg[RESPONSE_HEADER_BYTES..]))
    }
}
