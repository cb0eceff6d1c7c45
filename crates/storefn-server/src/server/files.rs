//! A server thread's open files: each opened once beneath its tenant's scope directory (or
//! the served directory) as a regular file, registered on the thread's engine, and checked on
//! every request with one `statx` of its path that follows symlinks exactly as the open did:
//! when the path names another inode now (a compaction renamed a new file over it), the new
//! file is opened and the old entry stays until its last request finishes. Every entry closed
//! here is closed in the engine exactly once (the engine defers a close while reads of the
//! file are live), so the engine's registered-file slots track this table.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;

use storefn_io::{Engine, EngineError, FileId, IoMode};

use super::scopes::Resolved;
use super::{ServerStats, MAX_OPEN_FILES_PER_THREAD};
use crate::confine::{identity, ConfineError};
use storefn_wire::{FileVersion, StatusCode};

#[derive(Debug)]
struct Slot {
    /// The directory the path is resolved beneath (see `scopes::Resolved::base`).
    base: u32,
    /// Empty once the path names another file (the slot only serves requests in flight).
    path: Vec<u8>,
    /// Keeps the confined open alive: the engine's fd is a reopen of this one.
    _fd: File,
    id: FileId,
    dev: u64,
    ino: u64,
    refs: u32,
    last_used: u64,
}

/// What a request needs of its file.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub slot: u32,
    pub id: FileId,
    pub version: FileVersion,
    pub size: u64,
}

/// Open files of one thread.
#[derive(Debug, Default)]
pub struct Files {
    slots: Vec<Option<Slot>>,
    clock: u64,
    /// What this thread last added to `ServerStats::{engine_files, cached_files}`.
    published: (u64, u64),
}

/// Why a request's file could not be used: the status and message to answer with.
pub type FileFail = (StatusCode, String);

fn confine_fail(e: &ConfineError) -> FileFail {
    (e.status(), e.to_string())
}

/// A failed chain or read as the remote client is told it: the status (a device error or a
/// short read is `IO`, anything else `CHAIN_FAILED`) and where it was (hop, file offset, the
/// chain's start) and why, without the engine's token: on the server that is an internal job
/// and chunk number, meaningless to the client.
pub fn chain_fail(e: &storefn_io::ChainError) -> FileFail {
    use storefn_io::ChainError;
    let st = match e {
        ChainError::Io { .. } | ChainError::ShortRead { .. } => StatusCode::Io,
        _ => StatusCode::ChainFailed,
    };
    let s = e.to_string();
    let m = match e.at() {
        Some(at) => {
            // Every variant that knows its place prints it first (`{at}: ...`).
            let cause = s.strip_prefix(&format!("{at}: ")).unwrap_or(&s);
            format!(
                "hop {}, file offset {:#x}, chain start {:#x}: {cause}",
                at.hop, at.addr, at.start
            )
        }
        None => s,
    };
    (st, m)
}

impl Files {
    /// The file `at` names now, opened and registered, with one more reference (release it
    /// with [`Files::release`] when the request finishes).
    ///
    /// # Errors
    /// The status to answer: outside the root, not found, not a regular file, a full table,
    /// engine errors.
    pub fn acquire(
        &mut self,
        engine: &mut Engine,
        at: Resolved<'_, '_>,
        stats: &ServerStats,
    ) -> Result<Opened, FileFail> {
        let r = self.acquire_inner(engine, at, stats);
        self.publish(engine, stats);
        r
    }

    fn acquire_inner(
        &mut self,
        engine: &mut Engine,
        at: Resolved<'_, '_>,
        stats: &ServerStats,
    ) -> Result<Opened, FileFail> {
        self.clock += 1;
        let path = at.rest;
        let Some((dev, ino, change, size)) = at.dir.stat_identity(path) else {
            // Let the confined open say why (outside, not found, ...).
            let e = at.dir.open_regular(path, false).err();
            return Err(
                e.map_or((StatusCode::NotFound, "no such file".into()), |e| confine_fail(&e))
            );
        };
        let found = self.slots.iter().position(|s| {
            s.as_ref().is_some_and(|s| {
                s.base == at.base && s.path == path && s.dev == dev && s.ino == ino
            })
        });
        let si = match found {
            Some(i) => i,
            None => {
                // Relaxed: a statistic.
                stats.files_opened.fetch_add(1, Ordering::Relaxed);
                self.open(engine, at)?
            }
        };
        let s = self.slots[si].as_mut().expect("slot just found or opened");
        s.refs += 1;
        s.last_used = self.clock;
        // The version of a freshly opened file comes from its fd (statx above may predate a
        // rename); a cached one matched (dev, ino), so the statx values describe it.
        let (change, size) = match found {
            Some(_) => (change, size),
            None => identity(&s._fd).map_or((change, size), |v| (v.2, v.3)),
        };
        // A cached file that grew or shrank in place (same inode: WiredTiger appends blocks at
        // every checkpoint) gets the engine's range checks moved to its size now.
        if found.is_some() && engine.file_size(s.id) != Some(size) {
            engine.refresh_size(s.id).map_err(|e| (StatusCode::Io, format!("engine: {e}")))?;
        }
        Ok(Opened {
            slot: u32::try_from(si).expect("small table"),
            id: s.id,
            version: FileVersion { dev: s.dev, ino: s.ino, change },
            size,
        })
    }

    fn open(&mut self, engine: &mut Engine, at: Resolved<'_, '_>) -> Result<usize, FileFail> {
        let path = at.rest;
        let fd = at.dir.open_regular(path, false).map_err(|e| confine_fail(&e))?;
        let (dev, ino, _, _) = identity(&fd).map_err(|e| (StatusCode::Io, e.to_string()))?;
        // An older file at the same path stops being found by path.
        for s in self.slots.iter_mut().flatten() {
            if s.base == at.base && s.path == path {
                s.path.clear();
            }
        }
        self.collect(engine);
        let si = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.slots.len() < MAX_OPEN_FILES_PER_THREAD => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => self.evict(engine)?,
        };
        // The engine opens by path: the magic link reopens exactly the inode resolved beneath
        // the directory (O_DIRECT where the file system allows it).
        let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let id = match engine.open(Path::new(&proc), IoMode::Direct) {
            Ok(id) => id,
            Err(EngineError::DirectRefused { .. }) => engine
                .open(Path::new(&proc), IoMode::Buffered)
                .map_err(|e| (StatusCode::Io, format!("engine open: {e}")))?,
            Err(e) => return Err((StatusCode::Io, format!("engine open: {e}"))),
        };
        self.slots[si] = Some(Slot {
            base: at.base,
            path: path.to_vec(),
            _fd: fd,
            id,
            dev,
            ino,
            refs: 0,
            last_used: self.clock,
        });
        Ok(si)
    }

    /// Closes entries whose path moved on and that no request uses.
    fn collect(&mut self, engine: &mut Engine) {
        for s in &mut self.slots {
            if s.as_ref().is_some_and(|s| s.path.is_empty() && s.refs == 0) {
                let old = s.take().expect("checked");
                close(engine, old.id);
            }
        }
    }

    fn evict(&mut self, engine: &mut Engine) -> Result<usize, FileFail> {
        let victim = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().filter(|s| s.refs == 0).map(|s| (i, s.last_used)))
            .min_by_key(|&(_, t)| t)
            .map(|(i, _)| i)
            .ok_or((StatusCode::Limit, "every open-file slot of this thread is busy".into()))?;
        let old = self.slots[victim].take().expect("victim exists");
        close(engine, old.id);
        Ok(victim)
    }

    /// A request on `slot` finished.
    pub fn release(&mut self, slot: u32) {
        let s = self.slots[slot as usize].as_mut().expect("released slot is open");
        debug_assert!(s.refs > 0);
        s.refs -= 1;
    }

    /// Publishes this thread's engine file slots in use and entries in this table.
    fn publish(&mut self, engine: &Engine, stats: &ServerStats) {
        let now = (engine.files_open() as u64, self.slots.iter().flatten().count() as u64);
        let (e0, c0) = std::mem::replace(&mut self.published, now);
        // Relaxed: gauges read as statistics; each thread adds its own difference.
        stats.engine_files.fetch_add(now.0.wrapping_sub(e0), Ordering::Relaxed);
        stats.cached_files.fetch_add(now.1.wrapping_sub(c0), Ordering::Relaxed);
    }
}

/// Closes an entry's engine file. The engine releases the slot whatever is in flight (at once,
/// or when the file's last read is delivered); a refused kernel update still frees the slot,
/// so there is nothing to undo here.
fn close(engine: &mut Engine, id: FileId) {
    let _ = engine.close(id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use storefn_io::{ChainAt, ChainError, Errno};

    #[test]
    fn a_chain_failure_names_the_offset_not_the_engines_token() {
        let at = ChainAt { token: 549_755_813_888, start: 0x2000, hop: 3, addr: 0x41000 };
        let (st, m) = chain_fail(&ChainError::Io { at, errno: Errno::Io });
        assert_eq!(st, StatusCode::Io);
        assert_eq!(
            m,
            "hop 3, file offset 0x41000, chain start 0x2000: read failed: EIO (device I/O error)"
        );
        let (st, m) = chain_fail(&ChainError::ChainTooLong { at, max: 64 });
        assert_eq!(st, StatusCode::ChainFailed);
        assert!(
            !m.contains("token") && m.ends_with("chain exceeds its hop limit of 64 reads"),
            "{m}"
        );
    }
}
