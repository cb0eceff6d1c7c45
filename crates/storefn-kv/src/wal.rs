//! Write-ahead log beside a BPF-KV database (`DB.wal`): every acknowledged `put` is in it.
//!
//! Record layout (little-endian, fixed size [`RECORD_BYTES`]; docs/FORMAT.md "WAL and
//! compaction"):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 4 | magic [`RECORD_MAGIC`] |
//! | 4 | 4 | payload length, always [`PAYLOAD_BYTES`] |
//! | 8 | 4 | CRC-32 (IEEE) of bytes 4..8 and the payload |
//! | 12 | 4 | zero |
//! | 16 | 8 | sequence number (first record 1, then +1 per record) |
//! | 24 | 8 | key |
//! | 32 | 64 | value |
//!
//! Group commit with overlap (AIOS §4, "commit record prepared while the previous flush is in
//! flight"): callers encode their records (sequence number, CRC) into a *filling* buffer under a
//! short lock; one syncer thread swaps that buffer for an empty one, then writes and
//! `fdatasync`s it with the lock released. While that flush is in flight the next batch is
//! being prepared in the other buffer, so encoding work never sits on the flush's critical
//! path and one `fdatasync` covers every record that arrived during the previous one.
//! `append` returns only once its record's batch has been synced.
//!
//! Recovery: records are read in order; the first record that is short, has a bad magic,
//! length or CRC, or breaks the sequence ends the valid prefix. A crash can only tear the bytes
//! of the last unsynced batch, which is at most [`MAX_BATCH_BYTES`] long; so a valid record
//! found at least [`MAX_BATCH_BYTES`] past the bad one means corruption in the middle of the log
//! (an error, never silently dropped), while anything closer is a torn tail and is truncated.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Bytes of a BPF-KV value.
pub const VALUE_BYTES: usize = 64;
/// First four bytes of every record: "SFWL" read as a little-endian u32.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"SFWL");
/// Header bytes before the payload: magic, length, CRC, zero.
pub const HEADER_BYTES: usize = 16;
/// Payload: sequence number, key, value.
pub const PAYLOAD_BYTES: usize = 8 + 8 + VALUE_BYTES;
/// One record on disk.
pub const RECORD_BYTES: usize = HEADER_BYTES + PAYLOAD_BYTES;
/// Most bytes one group commit writes (and so the most a crash can tear): 4096 records.
/// Bounds the syncer's buffers and the torn-tail window recovery accepts.
pub const MAX_BATCH_BYTES: usize = 4096 * RECORD_BYTES;

/// A WAL failure; offsets are byte offsets in the log file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: io::Error },
    #[error(
        "{path}: corrupt record at offset {offset} ({reason}) followed by a valid record at \
         offset {valid_offset}: corruption in the middle of the log, not a torn tail"
    )]
    CorruptMiddle { path: PathBuf, offset: u64, reason: &'static str, valid_offset: u64 },
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
#[derive(Debug)]
pub struct Replay {
    /// The valid prefix, in sequence order.
    pub records: Vec<Record>,
    /// Bytes of torn tail cut off (0 after a clean shutdown).
    pub torn_bytes: u64,
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) table, built at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32 (IEEE) of `parts` concatenated.
#[must_use]
pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for part in parts {
        for &b in *part {
            c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
        }
    }
    !c
}

/// Encodes `rec` into exactly [`RECORD_BYTES`] bytes appended to `out`.
pub fn encode(rec: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    let len = u32::try_from(PAYLOAD_BYTES).expect("payload fits u32").to_le_bytes();
    let mut payload = [0u8; PAYLOAD_BYTES];
    payload[0..8].copy_from_slice(&rec.seq.to_le_bytes());
    payload[8..16].copy_from_slice(&rec.key.to_le_bytes());
    payload[16..].copy_from_slice(&rec.value);
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc32(&[&len, &payload]).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&payload);
    debug_assert_eq!(out.len() - start, RECORD_BYTES);
}

/// Decodes one record, or says why the bytes are not one.
///
/// # Errors
/// A static reason: short, bad magic, bad length, bad CRC.
pub fn decode(buf: &[u8]) -> Result<Record, &'static str> {
    if buf.len() < RECORD_BYTES {
        return Err("short record");
    }
    let word = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
    if word(0) != RECORD_MAGIC {
        return Err("bad magic");
    }
    if word(4) as usize != PAYLOAD_BYTES {
        return Err("bad length");
    }
    let payload = &buf[HEADER_BYTES..RECORD_BYTES];
    if word(8) != crc32(&[&buf[4..8], payload]) {
        return Err("bad crc");
    }
    let u64_at = |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes"));
    let mut value = [0u8; VALUE_BYTES];
    value.copy_from_slice(&payload[16..]);
    Ok(Record { seq: u64_at(0), key: u64_at(8), value })
}

/// The log file name for database `db`: `DB.wal`.
#[must_use]
pub fn wal_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(".wal");
    PathBuf::from(s)
}

/// Reads the log's valid prefix; truncates a torn tail in place (see the module comment).
///
/// # Errors
/// I/O errors, and [`WalError::CorruptMiddle`].
pub fn replay(path: &Path) -> Result<Replay, WalError> {
    let io_err = |op, source| WalError::Io { path: path.to_owned(), op, source };
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Replay { records: Vec::new(), torn_bytes: 0 })
        }
        Err(e) => return Err(io_err("open", e)),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| io_err("read", e))?;
    let mut records = Vec::with_capacity(bytes.len() / RECORD_BYTES);
    let mut offset = 0usize;
    let mut bad: Option<&'static str> = None;
    while offset < bytes.len() {
        match decode(&bytes[offset..]) {
            Ok(rec) => {
                let expected = records.last().map_or(rec.seq, |r: &Record| r.seq + 1);
                if rec.seq != expected || rec.seq == 0 {
                    bad = Some("sequence break");
                    break;
                }
                records.push(rec);
                offset += RECORD_BYTES;
            }
            Err(reason) => {
                bad = Some(reason);
                break;
            }
        }
    }
    if let Some(reason) = bad {
        // Any valid record far enough past the bad one cannot come from the torn last batch.
        let mut probe = offset + MAX_BATCH_BYTES;
        while probe + RECORD_BYTES <= bytes.len() {
            if decode(&bytes[probe..]).is_ok() {
                return Err(WalError::CorruptMiddle {
                    path: path.to_owned(),
                    offset: offset as u64,
                    reason,
                    valid_offset: probe as u64,
                });
            }
            probe += RECORD_BYTES;
        }
    }
    let torn_bytes = (bytes.len() - offset) as u64;
    if torn_bytes > 0 {
        file.set_len(offset as u64).map_err(|e| io_err("truncate torn tail", e))?;
        file.sync_data().map_err(|e| io_err("fdatasync", e))?;
    }
    Ok(Replay { records, torn_bytes })
}

/// State shared between appenders and the syncer thread, under one mutex.
#[derive(Debug)]
struct Shared {
    /// Encoded records not yet handed to the syncer.
    filling: Vec<u8>,
    /// The syncer's empty buffer, swapped with `filling` at the start of each batch.
    spare: Vec<u8>,
    /// Sequence number the next record gets.
    next_seq: u64,
    /// Every record with `seq <= durable_seq` is on stable storage.
    durable_seq: u64,
    /// Set by the first failed write or fdatasync; the log is dead after it.
    poisoned: Option<String>,
    shutdown: bool,
    /// Group commits done (for tests and stats).
    batches: u64,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    state: Mutex<Shared>,
    /// Signalled when work arrives for the syncer, and when a batch becomes durable.
    cv: Condvar,
}

/// An open log: append records, wait until they are durable.
#[derive(Debug)]
pub struct Wal {
    inner: Arc<Inner>,
    syncer: Option<JoinHandle<()>>,
}

/// Names a submitted record; [`Wal::wait`] blocks until it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(pub u64);

impl Wal {
    /// Opens (creating if absent) the log at `path` for appending after record `last_seq`
    /// (the last one [`replay`] returned, 0 for none). Call [`replay`] first: it cuts the torn
    /// tail so appends continue right after the valid prefix.
    ///
    /// # Errors
    /// I/O errors opening or seeking.
    pub fn open(path: &Path, last_seq: u64) -> Result<Self, WalError> {
        let io_err = |op, source| WalError::Io { path: path.to_owned(), op, source };
        let mut file = OpenOptions::new()
            .create(true)
            .append(false)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err("open", e))?;
        let end = file.seek(SeekFrom::End(0)).map_err(|e| io_err("seek", e))?;
        assert_eq!(end % RECORD_BYTES as u64, 0, "replay leaves a whole number of records");
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            state: Mutex::new(Shared {
                filling: Vec::with_capacity(MAX_BATCH_BYTES),
                spare: Vec::with_capacity(MAX_BATCH_BYTES),
                next_seq: last_seq + 1,
                durable_seq: last_seq,
                poisoned: None,
                shutdown: false,
                batches: 0,
            }),
            cv: Condvar::new(),
        });
        let worker = Arc::clone(&inner);
        let syncer = std::thread::Builder::new()
            .name("storefn-wal-sync".into())
            .spawn(move || syncer_loop(&worker, &file, end))
            .map_err(|e| io_err("spawn syncer thread", e))?;
        Ok(Self { inner, syncer: Some(syncer) })
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves no half-updated invariant we rely on other than
        // `poisoned`, which is set before unlock; recover the guard.
        self.inner.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Encodes `(key, value)` with the next sequence number and queues it; does not wait.
    ///
    /// # Errors
    /// [`WalError::Poisoned`] after a failed write or sync.
    pub fn submit(&self, key: u64, value: &[u8; VALUE_BYTES]) -> Result<Ticket, WalError> {
        let mut st = self.lock();
        // Back-pressure: the filling buffer is bounded so one batch never exceeds the window.
        while st.filling.len() + RECORD_BYTES > MAX_BATCH_BYTES && st.poisoned.is_none() {
            st = self.inner.cv.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if let Some(reason) = &st.poisoned {
            return Err(WalError::Poisoned {
                path: self.inner.path.clone(),
                reason: reason.clone(),
            });
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        encode(&Record { seq, key, value: *value }, &mut st.filling);
        drop(st);
        self.inner.cv.notify_all();
        Ok(Ticket(seq))
    }

    /// Blocks until the record named by `ticket` (and every earlier one) is durable.
    ///
    /// # Errors
    /// [`WalError::Poisoned`] if the batch holding it failed.
    pub fn wait(&self, ticket: Ticket) -> Result<(), WalError> {
        let mut st = self.lock();
        while st.durable_seq < ticket.0 {
            if let Some(reason) = &st.poisoned {
                let reason = reason.clone();
                return Err(WalError::Poisoned { path: self.inner.path.clone(), reason });
            }
            st = self.inner.cv.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        Ok(())
    }

    /// Appends one record and returns once it is durable: [`Wal::submit`] + [`Wal::wait`].
    ///
    /// # Errors
    /// As those two.
    pub fn append(&self, key: u64, value: &[u8; VALUE_BYTES]) -> Result<u64, WalError> {
        let t = self.submit(key, value)?;
        self.wait(t)?;
        Ok(t.0)
    }

    /// Group commits done since open.
    #[must_use]
    pub fn batches(&self) -> u64 {
        self.lock().batches
    }

    /// Sequence number of the last durable record.
    #[must_use]
    pub fn durable_seq(&self) -> u64 {
        self.lock().durable_seq
    }

    /// The log's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.lock().shutdown = true;
        self.inner.cv.notify_all();
        if let Some(h) = self.syncer.take() {
            // The syncer drains queued records before exiting; a panic there is already visible
            // to waiters as a poisoned log.
            let _ = h.join();
        }
    }
}

/// The leader: takes the whole filling buffer, writes it at the end of the log and fdatasyncs it
/// with the lock released, then publishes `durable_seq`.
fn syncer_loop(inner: &Inner, file: &File, mut end: u64) {
    let mut st = inner.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        while st.filling.is_empty() && !st.shutdown {
            st = inner.cv.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if st.filling.is_empty() || st.poisoned.is_some() {
            return; // shutdown with nothing queued, or dead log
        }
        let mut batch = std::mem::take(&mut st.spare);
        std::mem::swap(&mut batch, &mut st.filling);
        let batch_last_seq = st.next_seq - 1;
        drop(st);
        // The filling buffer is empty again: appenders may encode the next batch right now.
        inner.cv.notify_all();
        let result = file.write_all_at(&batch, end).and_then(|()| file.sync_data());
        st = inner.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(()) => {
                end += batch.len() as u64;
                st.durable_seq = batch_last_seq;
                st.batches += 1;
            }
            Err(e) => {
                // fdatasync failure leaves the page state unknown: never retry, fail everyone.
                st.poisoned = Some(format!("write+fdatasync at offset {end}: {e}"));
            }
        }
        batch.clear();
        st.spare = batch;
        inner.cv.notify_all();
    }
}

/// Empties the log after its records were merged into the tree. No [`Wal`] may be open on it.
///
/// # Errors
/// I/O errors.
pub fn truncate(path: &Path) -> Result<(), WalError> {
    let io_err = |op, source| WalError::Io { path: path.to_owned(), op, source };
    let f = match OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("open", e)),
    };
    f.set_len(0).map_err(|e| io_err("truncate", e))?;
    f.sync_all().map_err(|e| io_err("fsync", e))
}
