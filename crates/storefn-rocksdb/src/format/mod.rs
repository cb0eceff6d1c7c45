//! The one place that knows RocksDB's byte layouts (docs/FORMAT.md, "RocksDB"): integers, block
//! handles, the block-based table footer and block trailers, blocks with restart points,
//! internal keys, the log format shared by the MANIFEST and the WAL, version edits and write
//! batches. Everything here reads foreign bytes and answers with [`Malformed`] (an offset into
//! the bytes it was given and what was wrong), never a panic.

pub(crate) mod block;
pub(crate) mod compress;
pub(crate) mod edit;
pub(crate) mod filter;
pub(crate) mod log;
pub(crate) mod table;
pub(crate) mod xxph3;

/// What was wrong and where, relative to the slice the parser was given; the caller adds the
/// file and the slice's own offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed {
    pub at: usize,
    pub what: &'static str,
}

pub(crate) type Parsed<T> = Result<T, Malformed>;

/// A reading position over foreign bytes.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }
    pub(crate) fn at(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos }
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    fn fail<T>(&self, what: &'static str) -> Parsed<T> {
        Err(Malformed { at: self.pos, what })
    }
    pub(crate) fn u8(&mut self, what: &'static str) -> Parsed<u8> {
        let b = *self.buf.get(self.pos).ok_or(Malformed { at: self.pos, what })?;
        self.pos += 1;
        Ok(b)
    }
    pub(crate) fn bytes(&mut self, n: usize, what: &'static str) -> Parsed<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let Some(end) = end else { return self.fail(what) };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn fixed32(&mut self, what: &'static str) -> Parsed<u32> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn fixed64(&mut self, what: &'static str) -> Parsed<u64> {
        let b = self.bytes(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// LevelDB/RocksDB varint: 7 bits a byte, low group first; at most 10 bytes for 64 bits.
    pub(crate) fn varint64(&mut self, what: &'static str) -> Parsed<u64> {
        // One byte (lengths under 128: nearly every length in a block) without the loop.
        if let Some(&b) = self.buf.get(self.pos).filter(|b| **b < 0x80) {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        let start = self.pos;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Malformed { at: start, what })
    }
    pub(crate) fn varint32(&mut self, what: &'static str) -> Parsed<u32> {
        let start = self.pos;
        let v = self.varint64(what)?;
        u32::try_from(v).map_err(|_| Malformed { at: start, what })
    }
    /// A varint length followed by that many bytes.
    pub(crate) fn length_prefixed(&mut self, what: &'static str) -> Parsed<&'a [u8]> {
        let n = self.varint32(what)? as usize;
        self.bytes(n, what)
    }
}

/// Where a block lives in its file: `varint64 offset, varint64 size` (the size excludes the
/// 5-byte trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockHandle {
    pub offset: u64,
    pub size: u64,
}

impl BlockHandle {
    /// Longest encoding: two 10-byte varints.
    pub const MAX_ENCODED_BYTES: usize = 20;

    pub(crate) fn decode(c: &mut Cursor<'_>) -> Parsed<Self> {
        let offset = c.varint64("block handle offset")?;
        let size = c.varint64("block handle size")?;
        Ok(BlockHandle { offset, size })
    }
}

/// The type byte RocksDB stores after a user key's sequence number (the low 8 bits of an
/// internal key's trailer). Only the types a point lookup meets are named; any other is
/// [`ValueType::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Deletion,
    Value,
    Merge,
    SingleDeletion,
    RangeDeletion,
    BlobIndex,
    Other(u8),
}

impl ValueType {
    pub const DELETION: u8 = 0x0;
    pub const VALUE: u8 = 0x1;
    pub const MERGE: u8 = 0x2;
    pub const SINGLE_DELETION: u8 = 0x7;
    pub const RANGE_DELETION: u8 = 0xf;
    pub const BLOB_INDEX: u8 = 0x11;

    pub fn from_byte(b: u8) -> Self {
        match b {
            Self::DELETION => ValueType::Deletion,
            Self::VALUE => ValueType::Value,
            Self::MERGE => ValueType::Merge,
            Self::SINGLE_DELETION => ValueType::SingleDeletion,
            Self::RANGE_DELETION => ValueType::RangeDeletion,
            Self::BLOB_INDEX => ValueType::BlobIndex,
            o => ValueType::Other(o),
        }
    }
}

/// Bytes of an internal key's trailer: `fixed64 (sequence << 8 | type)` after the user key.
pub const INTERNAL_KEY_TRAILER_BYTES: usize = 8;
/// Largest sequence number (56 bits): a lookup seeks `(user key, MAX_SEQUENCE)`, the newest.
pub const MAX_SEQUENCE: u64 = (1 << 56) - 1;

/// An internal key split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InternalKey<'a> {
    pub user_key: &'a [u8],
    pub sequence: u64,
    pub kind: ValueType,
}

impl<'a> InternalKey<'a> {
    pub(crate) fn parse(k: &'a [u8]) -> Option<Self> {
        let split = k.len().checked_sub(INTERNAL_KEY_TRAILER_BYTES)?;
        let (user_key, t) = k.split_at(split);
        let mut a = [0u8; 8];
        a.copy_from_slice(t);
        let trailer = u64::from_le_bytes(a);
        // The low byte is the type; truncation to it is the format.
        Some(InternalKey {
            user_key,
            sequence: trailer >> 8,
            kind: ValueType::from_byte(trailer as u8),
        })
    }
}

/// RocksDB's internal-key order (BytewiseComparator): user keys ascending, then trailers
/// (sequence, type) descending, so the newest version of a key comes first.
pub(crate) fn cmp_internal(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (Some(x), Some(y)) = (split_trailer(a), split_trailer(b)) else {
        return a.cmp(b);
    };
    x.0.cmp(y.0).then(y.1.cmp(&x.1))
}

fn split_trailer(k: &[u8]) -> Option<(&[u8], u64)> {
    let split = k.len().checked_sub(INTERNAL_KEY_TRAILER_BYTES)?;
    let (u, t) = k.split_at(split);
    let mut a = [0u8; 8];
    a.copy_from_slice(t);
    Some((u, u64::from_le_bytes(a)))
}

/// The internal key a point lookup seeks: the user key with the largest trailer.
pub(crate) fn seek_key(user_key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(user_key);
    out.extend_from_slice(&SEEK_TRAILER.to_le_bytes());
}

/// The trailer of the key a point lookup seeks (the newest sequence, a value).
const SEEK_TRAILER: u64 = (MAX_SEQUENCE << 8) | ValueType::VALUE as u64;

/// User keys up to this long get their seek key built on the stack (no allocation per Get).
const STACK_SEEK_KEY_BYTES: usize = 256;

/// Runs `f` with the internal key a point lookup of `user_key` seeks ([`seek_key`]), built on
/// the stack for keys of ordinary length: an index and a data-block search per Get would
/// otherwise allocate it twice.
pub(crate) fn with_seek_key<R>(user_key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let n = user_key.len() + INTERNAL_KEY_TRAILER_BYTES;
    if n > STACK_SEEK_KEY_BYTES {
        let mut v = Vec::with_capacity(n);
        seek_key(user_key, &mut v);
        return f(&v);
    }
    let mut buf = [0u8; STACK_SEEK_KEY_BYTES];
    buf[..user_key.len()].copy_from_slice(user_key);
    buf[user_key.len()..n].copy_from_slice(&SEEK_TRAILER.to_le_bytes());
    f(&buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_the_way_rocksdb_writes_them() {
        let mut c = Cursor::new(&[0xa9, 0x07, 0x20, 0x80]);
        assert_eq!(c.varint64("x"), Ok(937));
        assert_eq!(c.varint32("x"), Ok(32));
        assert_eq!(c.varint64("cut"), Err(Malformed { at: 4, what: "cut" }));
        let eleven = [0xffu8; 11];
        assert!(Cursor::new(&eleven).varint64("long").is_err());
    }

    #[test]
    fn the_stack_seek_key_is_the_heap_one_at_every_length() {
        for n in [0, 1, STACK_SEEK_KEY_BYTES - 8, STACK_SEEK_KEY_BYTES - 7, 1000] {
            let user: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let mut want = Vec::new();
            seek_key(&user, &mut want);
            with_seek_key(&user, |k| assert_eq!(k, &want[..], "{n}-byte key"));
        }
    }

    #[test]
    fn internal_keys_order_newest_first() {
        let mut a = Vec::new();
        seek_key(b"k", &mut a);
        let mut b = b"k".to_vec();
        b.extend_from_slice(&((5u64 << 8) | 1).to_le_bytes());
        assert_eq!(cmp_internal(&a, &b), std::cmp::Ordering::Less);
        let p = InternalKey::parse(&b).unwrap();
        assert_eq!((p.user_key, p.sequence, p.kind), (&b"k"[..], 5, ValueType::Value));
    }
}
