//! Who may write a database: one process at a time, holding an advisory lock.
//!
//! - `DB.lock` (docs/FORMAT.md "Who writes what"): the writer's lock. A writer (put, put-stream,
//!   compact, create, recover) takes `flock(LOCK_EX)` on it for as long as it runs and writes its
//!   pid into it, so a second writer can name the holder. Only writers create this file.
//! - `DB.wal` doubles as the swap lock: readers hold `flock(LOCK_SH)` on it while they read the
//!   log and open the tree, and compaction holds `LOCK_EX` while it renames the new tree into
//!   place and empties the log, so a reader sees either the old tree with the whole log or the
//!   new tree, never a tree with the wrong sidecar or a log emptied under its feet.
//!
//! flock locks belong to an open file description, so two `Db`s in one process exclude each
//! other exactly as two processes do, and the kernel drops them when the holder dies.

use crate::limits::LOCK_RETRY_INTERVAL;
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why the writer's lock was not taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    #[error(
        "{db}: another writer holds the database lock {lock} (pid {}){}",
        pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
        waited.map_or_else(String::new, |w| format!(" after waiting {:.1} s", w.as_secs_f64()))
    )]
    Held { db: PathBuf, lock: PathBuf, pid: Option<u32>, waited: Option<Duration> },
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: io::Error },
}

/// `DB.lock`.
#[must_use]
pub fn lock_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: plain syscall on a descriptor `file` owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The writer's lock on a database; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DbLock {
    _file: File,
}

impl DbLock {
    /// Takes the writer's lock of `db`: at once, or retrying for up to `wait`.
    ///
    /// # Errors
    /// [`LockError::Held`] naming the database and the holder's pid; I/O errors.
    pub fn acquire(db: &Path, wait: Option<Duration>) -> Result<DbLock, LockError> {
        let path = lock_path(db);
        let io_err = |op, source| LockError::Io { path: path.clone(), op, source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err("open", e))?;
        let start = Instant::now();
        loop {
            match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if wait.is_some_and(|w| start.elapsed() < w) {
                        std::thread::sleep(LOCK_RETRY_INTERVAL);
                        continue;
                    }
                    let mut s = String::new();
                    let pid =
                        (&file).read_to_string(&mut s).ok().and_then(|_| s.trim().parse().ok());
                    let waited = wait.map(|_| start.elapsed());
                    return Err(LockError::Held { db: db.to_owned(), lock: path, pid, waited });
                }
                Err(e) => return Err(io_err("flock", e)),
            }
        }
        // The pid is advice for the error message above; the lock itself is the flock.
        let pid = format!("{}\n", std::process::id());
        file.set_len(0).map_err(|e| io_err("truncate", e))?;
        file.write_all_at(pid.as_bytes(), 0).map_err(|e| io_err("write pid", e))?;
        Ok(DbLock { _file: file })
    }
}

/// A shared or exclusive hold on the log's swap lock (module comment); released on drop.
#[derive(Debug)]
pub struct SwapLock {
    _file: Option<File>,
}

impl SwapLock {
    /// Holds `wal` shared (a reader) or exclusive (compaction's swap). Opens it read-only and
    /// never creates it: without a log there is no writer's swap to wait for.
    ///
    /// # Errors
    /// I/O errors other than a missing log.
    pub fn take(wal: &Path, exclusive: bool) -> Result<SwapLock, LockError> {
        let file = match File::open(wal) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SwapLock { _file: None }),
            Err(e) => return Err(LockError::Io { path: wal.to_owned(), op: "open", source: e }),
        };
        let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
        // Blocking: the other side holds it only for a rename or two, or for one read of the
        // log; a holder that dies releases it.
        flock(&file, op).map_err(|e| LockError::Io {
            path: wal.to_owned(),
            op: "flock",
            source: e,
        })?;
        Ok(SwapLock { _file: Some(file) })
    }
}
