//! The log's writer: group commit with overlap (AIOS §4, "commit record prepared while the
//! previous flush is in flight").
//!
//! Appenders encode their records into a *filling* buffer (after room left for the batch header)
//! and fold them into the batch's running CRC under a short lock; one syncer thread swaps that
//! buffer for an empty one, seals it (header, commit marker), writes it at the end of the log and
//! syncs it with the lock released. While that flush is in flight the next batch is being
//! prepared in the other buffer, so encoding never sits on the flush's critical path and one sync
//! covers every record that arrived during the previous one. A put is acknowledged only once its
//! batch's sync returned.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::{
    encode_record, seal_batch, Replay, WalError, COMMIT_BYTES, HEADER_BYTES, MAX_BATCH_RECORDS,
    RECORD_BYTES, VALUE_BYTES,
};
use crate::storage::{parent_dir, Storage, StorageFile};

/// Bytes of the filling buffer before any record: room for the header.
const EMPTY: usize = HEADER_BYTES;
/// Most bytes the filling buffer holds (header space + records), before the commit.
const FULL: usize = HEADER_BYTES + MAX_BATCH_RECORDS * RECORD_BYTES;

/// State shared between appenders and the syncer thread, under one mutex.
#[derive(Debug)]
struct Shared {
    /// Header space + encoded records not yet handed to the syncer.
    filling: Vec<u8>,
    /// Running CRC of `filling`'s records.
    crc: crc32fast::Hasher,
    /// The syncer's empty buffer, swapped with `filling` at the start of each batch.
    spare: Vec<u8>,
    /// Sequence number the next record gets.
    next_seq: u64,
    /// Every record with `seq <= durable_seq` is on stable storage.
    durable_seq: u64,
    /// Set by the first failed write or sync; the log is dead after it.
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

/// An open log: append records, wait until they are durable. Only the holder of the database
/// lock opens one.
#[derive(Debug)]
pub struct Wal {
    inner: Arc<Inner>,
    syncer: Option<JoinHandle<()>>,
}

/// Names a submitted record; [`Wal::wait`] blocks until it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(pub u64);

fn empty_buffer() -> Vec<u8> {
    let mut v = Vec::with_capacity(FULL + COMMIT_BYTES);
    v.resize(EMPTY, 0);
    v
}

impl Wal {
    /// Opens the log at `path` to append after what `replay` (its [`super::replay`]) found:
    /// cuts the torn tail first (syncing the cut), or creates the log and syncs its directory.
    ///
    /// # Errors
    /// I/O errors.
    pub fn open(storage: &dyn Storage, path: &Path, replay: &Replay) -> Result<Self, WalError> {
        let io_err = |op, source| WalError::Io { path: path.to_owned(), op, source };
        let file = if replay.exists {
            let f = storage.open_write(path).map_err(|e| io_err("open", e))?;
            if replay.torn_bytes > 0 {
                f.set_len(replay.end).map_err(|e| io_err("truncate torn tail", e))?;
                f.sync().map_err(|e| io_err("fdatasync", e))?;
            }
            f
        } else {
            let f = storage.create(path, false).map_err(|e| io_err("create", e))?;
            // The log's name must survive a crash before any record in it is acknowledged.
            let dir = parent_dir(path);
            storage.sync_dir(&dir).map_err(|e| io_err("fsync directory", e))?;
            f
        };
        let last_seq = replay.last_seq();
        let inner = Arc::new(Inner {
            path: path.to_owned(),
            state: Mutex::new(Shared {
                filling: empty_buffer(),
                crc: crc32fast::Hasher::new(),
                spare: empty_buffer(),
                next_seq: last_seq + 1,
                durable_seq: last_seq,
                poisoned: None,
                shutdown: false,
                batches: 0,
            }),
            cv: Condvar::new(),
        });
        let worker = Arc::clone(&inner);
        let end = replay.end;
        let syncer = std::thread::Builder::new()
            .name("storefn-wal-sync".into())
            .spawn(move || syncer_loop(&worker, file.as_ref(), end))
            .map_err(|e| io_err("spawn syncer thread", e))?;
        Ok(Self { inner, syncer: Some(syncer) })
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves no half-updated invariant we rely on other than
        // `poisoned`, which is set before unlock; recover the guard.
        self.inner.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn poisoned(&self, reason: &str) -> WalError {
        WalError::Poisoned { path: self.inner.path.clone(), reason: reason.to_owned() }
    }

    /// Encodes `(key, value)` with the next sequence number and queues it; does not wait.
    ///
    /// # Errors
    /// [`WalError::Poisoned`] after a failed write or sync.
    pub fn submit(&self, key: u64, value: &[u8; VALUE_BYTES]) -> Result<Ticket, WalError> {
        let mut st = self.lock();
        // Back-pressure: the filling buffer is bounded so one batch never exceeds the limit.
        while st.filling.len() + RECORD_BYTES > FULL && st.poisoned.is_none() {
            st = self.inner.cv.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if let Some(reason) = &st.poisoned {
            return Err(self.poisoned(reason));
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let Shared { filling, crc, .. } = &mut *st;
        encode_record(key, value, filling, crc);
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
                return Err(self.poisoned(reason));
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

/// The leader: takes the whole filling buffer, seals it, writes it at the end of the log and
/// syncs it with the lock released, then publishes `durable_seq`.
fn syncer_loop(inner: &Inner, file: &dyn StorageFile, mut end: u64) {
    let mut st = inner.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        while st.filling.len() == EMPTY && !st.shutdown {
            st = inner.cv.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if st.filling.len() == EMPTY || st.poisoned.is_some() {
            return; // shutdown with nothing queued, or dead log
        }
        let mut batch = std::mem::take(&mut st.spare);
        std::mem::swap(&mut batch, &mut st.filling);
        let crc = std::mem::take(&mut st.crc);
        let last_seq = st.next_seq - 1;
        let count = (batch.len() - EMPTY) / RECORD_BYTES;
        let first_seq = last_seq + 1 - count as u64;
        drop(st);
        // The filling buffer is empty again: appenders may encode the next batch right now.
        inner.cv.notify_all();
        batch.resize(batch.len() + COMMIT_BYTES, 0);
        seal_batch(&mut batch, first_seq, crc);
        let result: io::Result<()> = file.write_at(&batch, end).and_then(|()| file.sync());
        st = inner.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(()) => {
                end += batch.len() as u64;
                st.durable_seq = last_seq;
                st.batches += 1;
            }
            Err(e) => {
                // A failed sync leaves the page state unknown: never retry, fail everyone.
                st.poisoned = Some(format!("write+fdatasync at offset {end}: {e}"));
            }
        }
        batch.truncate(EMPTY);
        st.spare = batch;
        inner.cv.notify_all();
    }
}
