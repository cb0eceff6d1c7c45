//! The log format RocksDB writes its MANIFEST and its WAL in (docs/FORMAT.md, "RocksDB: logs").
//!
//! ```text
//! the file: 32 KiB blocks; a block's tail shorter than a header is zero padding
//! record  = crc: fixed32 (masked CRC32C of type [, log number] and payload)
//!         | length: fixed16 | type: u8 [| log number: fixed32, recyclable types]
//!         | payload[length]
//! type    = 1 full, 2 first, 3 middle, 4 last; 5..8 the same in recyclable logs; 0 padding
//! ```

use super::{Cursor, Malformed};
use crate::format::table::mask_crc;

/// Bytes of a log block.
pub const LOG_BLOCK_BYTES: usize = 32 * 1024;
/// Bytes of a record header.
pub const HEADER_BYTES: usize = 7;
/// Bytes of a recyclable record's header (the log number follows the type).
pub const RECYCLABLE_HEADER_BYTES: usize = 11;

const FULL: u8 = 1;
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;
const LAST: u8 = 4;
const RECYCLABLE_OFFSET: u8 = 4;

/// Why reading stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEnd {
    /// At the end of the file (a record cut short by the end, as a crash leaves it, ends the
    /// log there: it was never acknowledged).
    Clean,
    /// Damage inside the log: the offset of the record and what was wrong.
    Damaged(Malformed),
}

/// One physical record: where it starts, its type (recyclable types folded) and payload.
#[derive(Debug)]
struct Fragment<'a> {
    at: usize,
    kind: u8,
    payload: &'a [u8],
}

/// Reassembles the records of a whole log file held in memory.
#[derive(Debug)]
pub(crate) struct LogReader<'a> {
    file: &'a [u8],
    pos: usize,
    /// The log number recyclable records must carry (the file's own number).
    log_number: Option<u32>,
    record: Vec<u8>,
}

impl<'a> LogReader<'a> {
    pub(crate) fn new(file: &'a [u8], log_number: Option<u32>) -> Self {
        LogReader { file, pos: 0, log_number, record: Vec::new() }
    }

    /// The next whole record and its starting offset, or why there is none.
    pub(crate) fn next_record(&mut self) -> Result<(usize, &[u8]), LogEnd> {
        self.record.clear();
        let mut start = None;
        loop {
            let Some(Fragment { at, kind, payload }) = self.fragment()? else { continue };
            match (kind, start) {
                (FULL, None) => {
                    self.record.extend_from_slice(payload);
                    return Ok((at, &self.record));
                }
                (FIRST, None) => {
                    start = Some(at);
                    self.record.extend_from_slice(payload);
                }
                (MIDDLE, Some(_)) => self.record.extend_from_slice(payload),
                (LAST, Some(s)) => {
                    self.record.extend_from_slice(payload);
                    return Ok((s, &self.record));
                }
                _ => {
                    return Err(LogEnd::Damaged(Malformed {
                        at,
                        what: "record fragment out of order",
                    }))
                }
            }
        }
    }

    /// One physical fragment: `Ok(None)` for block padding skipped.
    fn fragment(&mut self) -> Result<Option<Fragment<'a>>, LogEnd> {
        let in_block = LOG_BLOCK_BYTES - self.pos % LOG_BLOCK_BYTES;
        if self.pos >= self.file.len() {
            return Err(LogEnd::Clean);
        }
        if in_block < HEADER_BYTES {
            self.pos += in_block;
            return Ok(None);
        }
        let at = self.pos;
        let mut c = Cursor::at(self.file, at);
        let cut = |_| LogEnd::Clean;
        let crc = c.fixed32("record crc").map_err(cut)?;
        let len = c.bytes(2, "record length").map_err(cut)?;
        let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
        let kind = c.u8("record type").map_err(cut)?;
        if kind == 0 && crc == 0 && len == 0 {
            // Preallocated, never written: the rest of the block is padding.
            self.pos += in_block;
            return Ok(None);
        }
        let (kind, header) = self.header_kind(kind, &mut c, at)?;
        if header + len > in_block {
            return Err(LogEnd::Damaged(Malformed { at, what: "record crosses its block" }));
        }
        let payload = c.bytes(len, "record payload").map_err(cut)?;
        let covered = &self.file[at + 6..at + header + len];
        if mask_crc(crc32c::crc32c(covered)) != crc {
            return Err(LogEnd::Damaged(Malformed { at, what: "record checksum mismatch" }));
        }
        self.pos = at + header + len;
        Ok(Some(Fragment { at, kind, payload }))
    }

    fn header_kind(&self, kind: u8, c: &mut Cursor<'_>, at: usize) -> Result<(u8, usize), LogEnd> {
        match kind {
            FULL..=LAST => Ok((kind, HEADER_BYTES)),
            k if (FULL + RECYCLABLE_OFFSET..=LAST + RECYCLABLE_OFFSET).contains(&k) => {
                let n = c.fixed32("record log number").map_err(|_| LogEnd::Clean)?;
                if self.log_number.is_some_and(|want| want != n) {
                    // A recycled file's old records: the log ends where they begin.
                    return Err(LogEnd::Clean);
                }
                Ok((k - RECYCLABLE_OFFSET, RECYCLABLE_HEADER_BYTES))
            }
            _ => Err(LogEnd::Damaged(Malformed { at, what: "unknown record type" })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut covered = vec![kind];
        covered.extend_from_slice(payload);
        let mut out = mask_crc(crc32c::crc32c(&covered)).to_le_bytes().to_vec();
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend_from_slice(&covered);
        out
    }

    #[test]
    fn fragments_join_and_a_cut_tail_ends_the_log() {
        let mut f = record(FULL, b"one");
        f.extend(record(FIRST, b"tw"));
        f.extend(record(LAST, b"o"));
        let whole = f.len();
        f.extend(record(FULL, b"three"));
        f.truncate(f.len() - 2);
        let mut r = LogReader::new(&f, None);
        assert_eq!(r.next_record().unwrap().1, b"one");
        assert_eq!(r.next_record().unwrap(), (10, &b"two"[..]));
        assert_eq!(r.next_record(), Err(LogEnd::Clean));
        let mut bad = f[..whole].to_vec();
        bad[HEADER_BYTES] ^= 1;
        assert!(matches!(LogReader::new(&bad, None).next_record(), Err(LogEnd::Damaged(_))));
    }
}
