//! Write-ahead log beside a BPF-KV database (`DB.wal`): every acknowledged `put` is in it.
//!
//! The log is a sequence of batches, one per group commit (docs/FORMAT.md "WAL"), all
//! little-endian:
//!
//! ```text
//! batch:  | header (32 B) | count records (72 B each) | commit (16 B) |
//! header: 0 magic "SFWB" | 4 count | 8 first_seq | 16 payload_bytes | 20 header_crc | 24 zero
//! record: 0 key | 8 value (64 B)
//! commit: 0 magic "SFWC" | 4 batch_crc | 8 last_seq
//! ```
//!
//! `header_crc` is CRC-32 (crc32fast) of header bytes 0..20, so a header is recognised without
//! its payload; `batch_crc` is CRC-32 of the payload, then header bytes 0..24, then commit bytes
//! 8..16. A batch counts only once its commit is complete and both checksums hold.
//!
//! Replay ([`scan`]) reads batches in order. The first one that is incomplete or fails a check
//! ends the committed prefix. A crash can only damage the batch being written when it struck
//! (one batch is written and synced at a time), so if any complete, valid batch lies anywhere
//! after that point the damage is corruption in the middle of the log: [`WalError::Corrupt`]
//! names its offset, and only `storefn kv recover --point-in-time` ([`cut_at_corruption`])
//! drops it and everything after. Otherwise the rest is a torn tail: readers ignore it, and the
//! writer (holding the database lock) truncates it when it opens the log.

mod writer;

use std::io;
use std::path::{Path, PathBuf};

pub use writer::{Ticket, Wal};

use crate::limits::MAX_BATCH_RECORDS;
use crate::storage::Storage;

/// Bytes of a BPF-KV value.
pub const VALUE_BYTES: usize = 64;
/// First four bytes of every batch: "SFWB".
pub const BATCH_MAGIC: [u8; 4] = *b"SFWB";
/// First four bytes of every commit marker: "SFWC".
pub const COMMIT_MAGIC: [u8; 4] = *b"SFWC";
/// Batch header bytes.
pub const HEADER_BYTES: usize = 32;
/// Header field offsets.
pub const HDR_OFF_COUNT: usize = 4;
pub const HDR_OFF_FIRST_SEQ: usize = 8;
pub const HDR_OFF_PAYLOAD_BYTES: usize = 16;
pub const HDR_OFF_CRC: usize = 20;
pub const HDR_OFF_ZERO: usize = 24;
/// One record: key, value.
pub const RECORD_BYTES: usize = 8 + VALUE_BYTES;
/// Commit marker bytes, and its field offsets.
pub const COMMIT_BYTES: usize = 16;
pub const COMMIT_OFF_CRC: usize = 4;
pub const COMMIT_OFF_LAST_SEQ: usize = 8;
/// Most bytes one batch occupies.
pub const MAX_BATCH_BYTES: usize = HEADER_BYTES + MAX_BATCH_RECORDS * RECORD_BYTES + COMMIT_BYTES;

/// A WAL failure; offsets are byte offsets in the log file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: io::Error },
    #[error(
        "{path}: corrupt batch at offset {offset} ({reason}) before a committed batch at offset \
         {valid_offset}: corruption in the middle of the log, not a torn tail \
         (`storefn kv recover DB --point-in-time` drops it and everything after)"
    )]
    Corrupt { path: PathBuf, offset: u64, reason: &'static str, valid_offset: u64 },
    #[error("{path}: an earlier write or fdatasync failed ({reason}); the log accepts no more")]
    Poisoned { path: PathBuf, reason: String },
}

/// One logged put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub key: u64,
    pub value: [u8; VALUE_BYTES],
}

/// What replay found.
#[derive(Debug, Default)]
pub struct Replay {
    /// The committed prefix, in sequence order.
    pub records: Vec<Record>,
    /// Committed batches.
    pub batches: u64,
    /// Offset just past the last complete commit.
    pub end: u64,
    /// Bytes after it (a torn tail; 0 after a clean shutdown).
    pub torn_bytes: u64,
    /// Whether the log file exists.
    pub exists: bool,
}

impl Replay {
    /// Sequence number of the last committed record (0 for none).
    #[must_use]
    pub fn last_seq(&self) -> u64 {
        self.records.last().map_or(0, |r| r.seq)
    }
}

/// The log file name for database `db`: `DB.wal`.
#[must_use]
pub fn wal_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(".wal");
    PathBuf::from(s)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// `header_crc`: CRC-32 of header bytes 0..20.
fn header_crc(header: &[u8]) -> u32 {
    crc32fast::hash(&header[..HDR_OFF_CRC])
}

/// Fills in a batch: `batch` = header space + `count` records + commit space, with `payload_crc`
/// the running CRC of the records (what the appenders hashed as they encoded them).
pub(crate) fn seal_batch(batch: &mut [u8], first_seq: u64, payload: crc32fast::Hasher) {
    let count = (batch.len() - HEADER_BYTES - COMMIT_BYTES) / RECORD_BYTES;
    assert!((1..=MAX_BATCH_RECORDS).contains(&count), "batch of {count} records");
    assert_eq!(batch.len(), HEADER_BYTES + count * RECORD_BYTES + COMMIT_BYTES);
    let last_seq = first_seq + count as u64 - 1;
    let h = &mut batch[..HEADER_BYTES];
    h[..4].copy_from_slice(&BATCH_MAGIC);
    h[HDR_OFF_COUNT..HDR_OFF_COUNT + 4]
        .copy_from_slice(&u32::try_from(count).expect("bounded").to_le_bytes());
    h[HDR_OFF_FIRST_SEQ..HDR_OFF_FIRST_SEQ + 8].copy_from_slice(&first_seq.to_le_bytes());
    let payload_bytes = u32::try_from(count * RECORD_BYTES).expect("bounded");
    h[HDR_OFF_PAYLOAD_BYTES..HDR_OFF_PAYLOAD_BYTES + 4]
        .copy_from_slice(&payload_bytes.to_le_bytes());
    let hc = header_crc(h);
    h[HDR_OFF_CRC..HDR_OFF_CRC + 4].copy_from_slice(&hc.to_le_bytes());
    h[HDR_OFF_ZERO..].fill(0);
    let mut crc = payload;
    crc.update(&batch[..HDR_OFF_ZERO]);
    crc.update(&last_seq.to_le_bytes());
    let c = batch.len() - COMMIT_BYTES;
    let commit = &mut batch[c..];
    commit[..4].copy_from_slice(&COMMIT_MAGIC);
    commit[COMMIT_OFF_CRC..COMMIT_OFF_CRC + 4].copy_from_slice(&crc.finalize().to_le_bytes());
    commit[COMMIT_OFF_LAST_SEQ..].copy_from_slice(&last_seq.to_le_bytes());
}

/// Appends one record's bytes to `out` and to the running batch CRC.
pub(crate) fn encode_record(
    key: u64,
    value: &[u8; VALUE_BYTES],
    out: &mut Vec<u8>,
    crc: &mut crc32fast::Hasher,
) {
    let start = out.len();
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(value);
    crc.update(&out[start..]);
}

/// One batch parsed at the start of `b`: (first_seq, count, total bytes), or why it is not one.
fn parse_batch(b: &[u8]) -> Result<(u64, usize, usize), &'static str> {
    if b.len() < HEADER_BYTES {
        return Err("incomplete header");
    }
    if b[..4] != BATCH_MAGIC {
        return Err("bad batch magic");
    }
    if u32_at(b, HDR_OFF_CRC) != header_crc(b) {
        return Err("bad header checksum");
    }
    let count = u32_at(b, HDR_OFF_COUNT) as usize;
    let first_seq = u64_at(b, HDR_OFF_FIRST_SEQ);
    if !(1..=MAX_BATCH_RECORDS).contains(&count)
        || u32_at(b, HDR_OFF_PAYLOAD_BYTES) as usize != count * RECORD_BYTES
        || u64_at(b, HDR_OFF_ZERO) != 0
        || first_seq == 0
    {
        return Err("bad header fields");
    }
    let total = HEADER_BYTES + count * RECORD_BYTES + COMMIT_BYTES;
    if b.len() < total {
        return Err("incomplete batch");
    }
    let commit = &b[total - COMMIT_BYTES..total];
    if commit[..4] != COMMIT_MAGIC {
        return Err("missing commit marker");
    }
    let last_seq = u64_at(commit, COMMIT_OFF_LAST_SEQ);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&b[HEADER_BYTES..total - COMMIT_BYTES]);
    crc.update(&b[..HDR_OFF_ZERO]);
    crc.update(&last_seq.to_le_bytes());
    if u32_at(commit, COMMIT_OFF_CRC) != crc.finalize() {
        return Err("bad batch checksum");
    }
    if last_seq != first_seq + count as u64 - 1 {
        return Err("commit names the wrong last sequence number");
    }
    Ok((first_seq, count, total))
}

/// The first complete, valid batch starting after `from`, if any.
fn next_valid(bytes: &[u8], from: usize) -> Option<usize> {
    (from + 1..bytes.len().saturating_sub(HEADER_BYTES - 1))
        .filter(|&p| bytes[p..p + 4] == BATCH_MAGIC)
        .find(|&p| parse_batch(&bytes[p..]).is_ok())
}

/// A scan of the log's bytes: the committed prefix, and where and why it ends.
#[derive(Debug)]
pub struct Scan {
    pub replay: Replay,
    /// The first bad batch: offset and reason (None when the log ends on a commit).
    pub bad: Option<(u64, &'static str)>,
    /// A complete valid batch after the bad one: corruption, not a torn tail.
    pub valid_after: Option<u64>,
}

/// Scans `bytes` (a whole log); never fails.
#[must_use]
pub fn scan(bytes: &[u8]) -> Scan {
    let mut r = Replay { exists: true, ..Replay::default() };
    let mut off = 0usize;
    let mut bad = None;
    while off < bytes.len() {
        match parse_batch(&bytes[off..]) {
            Ok((first, _, _)) if r.last_seq() != 0 && first != r.last_seq() + 1 => {
                bad = Some((off as u64, "sequence break"));
                break;
            }
            Ok((first, count, total)) => {
                for i in 0..count {
                    let at = off + HEADER_BYTES + i * RECORD_BYTES;
                    let value = bytes[at + 8..at + RECORD_BYTES].try_into().expect("64 bytes");
                    r.records.push(Record { seq: first + i as u64, key: u64_at(bytes, at), value });
                }
                r.batches += 1;
                off += total;
            }
            Err(reason) => {
                bad = Some((off as u64, reason));
                break;
            }
        }
    }
    r.end = off as u64;
    r.torn_bytes = (bytes.len() - off) as u64;
    let valid_after = bad.and_then(|_| next_valid(bytes, off)).map(|p| p as u64);
    Scan { replay: r, bad, valid_after }
}

fn read_log(path: &Path) -> Result<Option<Vec<u8>>, WalError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(WalError::Io { path: path.to_owned(), op: "read", source }),
    }
}

/// Reads the log's committed prefix. Changes nothing on disk: a torn tail is reported in
/// [`Replay::torn_bytes`] and left for the writer ([`Wal::open`]) to cut.
///
/// # Errors
/// I/O errors, and [`WalError::Corrupt`] when a committed batch follows a damaged one.
pub fn replay(path: &Path) -> Result<Replay, WalError> {
    let Some(bytes) = read_log(path)? else {
        return Ok(Replay::default());
    };
    let s = scan(&bytes);
    match (s.bad, s.valid_after) {
        (Some((offset, reason)), Some(valid_offset)) => {
            Err(WalError::Corrupt { path: path.to_owned(), offset, reason, valid_offset })
        }
        _ => Ok(s.replay),
    }
}

/// What [`cut_at_corruption`] dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// Where the log now ends (the corrupt batch's offset), and the bytes cut from there.
    pub offset: u64,
    pub bytes: u64,
    pub reason: &'static str,
    /// Committed batches after the corruption that went with it, their records, and the
    /// sequence numbers they carried (first, last).
    pub batches: u64,
    pub records: u64,
    pub seqs: Option<(u64, u64)>,
}

/// Point-in-time recovery: truncates the log at its first damaged batch when committed batches
/// follow it (dropping them too), so the database opens at the last state before the damage.
/// Returns None when the log has no such corruption. The caller must hold the database lock.
///
/// # Errors
/// I/O errors.
pub fn cut_at_corruption(storage: &dyn Storage, path: &Path) -> Result<Option<Dropped>, WalError> {
    let io_err = |op, source| WalError::Io { path: path.to_owned(), op, source };
    let Some(bytes) = read_log(path)? else { return Ok(None) };
    let s = scan(&bytes);
    let (Some((offset, reason)), Some(valid)) = (s.bad, s.valid_after) else {
        return Ok(None);
    };
    // Count what lies after, batch by batch from the first valid one, skipping damage.
    let (mut batches, mut records, mut seqs) = (0u64, 0u64, None::<(u64, u64)>);
    let mut p = usize::try_from(valid).expect("in the file");
    loop {
        match parse_batch(&bytes[p..]) {
            Ok((first, count, total)) => {
                batches += 1;
                records += count as u64;
                let last = first + count as u64 - 1;
                seqs = Some(seqs.map_or((first, last), |(a, b)| (a.min(first), b.max(last))));
                p += total;
            }
            Err(_) => match next_valid(&bytes, p) {
                Some(n) => p = n,
                None => break,
            },
        }
    }
    let f = storage.open_write(path).map_err(|e| io_err("open", e))?;
    f.set_len(offset).map_err(|e| io_err("truncate", e))?;
    f.sync().map_err(|e| io_err("fdatasync", e))?;
    Ok(Some(Dropped { offset, bytes: bytes.len() as u64 - offset, reason, batches, records, seqs }))
}

/// Empties the log after its records were merged into the tree. No [`Wal`] may be open on it.
///
/// # Errors
/// I/O errors.
pub fn truncate(storage: &dyn Storage, path: &Path) -> Result<(), WalError> {
    let io_err = |op, source| WalError::Io { path: path.to_owned(), op, source };
    let f = match storage.open_write(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("open", e)),
    };
    f.set_len(0).map_err(|e| io_err("truncate", e))?;
    f.sync().map_err(|e| io_err("fdatasync", e))
}
