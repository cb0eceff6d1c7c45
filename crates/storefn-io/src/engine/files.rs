//! Files: opening and registering them, raw-device mode (the metadata digest, its lease and
//! epoch, refresh and retry), sizes and closing.

use std::path::Path;

use io_uring::{opcode, types};

use super::{Engine, PROBE_USER_DATA};
use crate::digest::RawAccess;
use crate::error::{ChainAt, ChainError, EngineError, Errno, SubmitError};
use crate::file::{open_file, statx_size_align, FileEntry, FileId, IoMode, RawState, Target};
use crate::limits::{BUFFER_ALIGN, MAX_BLOCK_ALIGN, MAX_FILES};
use crate::region::Region;

impl Engine {
    /// Opens `path` read-only and registers it. With [`IoMode::Direct`], a file system that
    /// refuses O_DIRECT gives [`EngineError::DirectRefused`]. When the engine is idle and the
    /// file is not empty, one block is read through the ring to prove the mode works (this is
    /// where IOPOLL on a device without poll queues is reported).
    ///
    /// # Errors
    /// Open/statx failures, refusal of O_DIRECT or IOPOLL, a full file table.
    pub fn open(&mut self, path: &Path, mode: IoMode) -> Result<FileId, EngineError> {
        let idx = self
            .files
            .iter()
            .position(Option::is_none)
            .ok_or(EngineError::TooManyFiles { max: MAX_FILES })?;
        let idx32 = idx as u32;
        let mut entry = open_file(path, mode, idx32)?;
        if mode == IoMode::Raw {
            self.setup_raw(&mut entry)?;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&entry.file);
        self.ring
            .submitter()
            .register_files_update(idx32, &[fd])
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        if self.live == 0 && self.in_flight == 0 && entry.target.size_bytes() > 0 {
            if let Err(e) = self.probe(idx32, &entry) {
                let _ = self.ring.submitter().register_files_update(idx32, &[-1]);
                let _ = self.ring.submitter().register_files_update(device_index(idx32), &[-1]);
                return Err(e);
            }
        }
        self.files[idx] = Some(entry);
        Ok(FileId(idx32))
    }

    /// Raw mode: lease, digest and device ([`RawAccess::open`]); registers the device fd at the
    /// file's device slot and turns the target into [`Target::Raw`].
    pub(super) fn setup_raw(&mut self, entry: &mut FileEntry) -> Result<(), EngineError> {
        let path = || entry.path.clone();
        let access = RawAccess::open(&entry.file)
            .map_err(|source| EngineError::RawUnavailable { path: path(), source })?;
        let Target::File { fd_index, size_bytes } = entry.target else {
            unreachable!("open_file builds file targets")
        };
        let block = access.logical_block_size();
        // The widened device window must fit a slot buffer (one hop + MAX_BLOCK_ALIGN).
        if !block.is_power_of_two() || block > MAX_BLOCK_ALIGN as u64 {
            return Err(EngineError::RawBlockSize { path: path(), block, max: MAX_BLOCK_ALIGN });
        }
        let dev_index = device_index(fd_index);
        self.ring
            .submitter()
            .register_files_update(dev_index, &[access.device_fd()])
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        entry.target = Target::Raw { fd_index, dev_index, size_bytes };
        let inline = device_lacks_nowait(&access);
        entry.raw = Some(RawState { access, epoch: 0, broken: false, inline });
        Ok(())
    }

    /// True when `file` is in raw mode and its digest has not gone stale (hops read the device).
    #[must_use]
    pub fn is_raw(&self, file: FileId) -> bool {
        self.raw_state(file).is_some_and(|r| !r.broken)
    }

    /// True when raw-mode device reads of `file` are done inline (synchronous `pread` in the
    /// engine thread) because the device cannot take non-blocking reads; `None` outside raw
    /// mode.
    #[must_use]
    pub fn raw_reads_inline(&self, file: FileId) -> Option<bool> {
        self.raw_state(file).map(|r| r.inline)
    }

    /// The file's raw-mode digest and device, if raw mode is set up (stale or not).
    #[must_use]
    pub fn raw_access(&self, file: FileId) -> Option<&RawAccess> {
        self.raw_state(file).map(|r| &r.access)
    }

    pub(super) fn raw_state(&self, file: FileId) -> Option<&RawState> {
        self.files.get(file.0 as usize)?.as_ref()?.raw.as_ref()
    }

    /// After [`ChainError::Stale`]: drop the old lease and digest and set raw mode up again
    /// ([`RawAccess::refresh`]). Chains still running that read the device under the old digest
    /// complete as `Stale`. On error the file stays open and is served through the file.
    ///
    /// # Errors
    /// [`EngineError::NotRaw`] for a file not opened in raw mode; [`EngineError::RawUnavailable`]
    /// when raw mode cannot be set up again (e.g. a writer still has the file open).
    pub fn refresh_raw(&mut self, file: FileId) -> Result<(), EngineError> {
        let not_raw = EngineError::NotRaw { file: file.0 };
        let Some(Some(entry)) = self.files.get_mut(file.0 as usize) else { return Err(not_raw) };
        let Target::Raw { dev_index, .. } = entry.target else { return Err(not_raw) };
        let refreshed = match entry.raw.take() {
            Some(r) => r.access.refresh(&entry.file),
            None => RawAccess::open(&entry.file),
        };
        let access = refreshed
            .map_err(|source| EngineError::RawUnavailable { path: entry.path.clone(), source })?;
        let (size, _) = statx_size_align(&entry.file, &entry.path)?;
        entry.target.set_size_bytes(size);
        self.ring
            .submitter()
            .register_files_update(dev_index, &[access.device_fd()])
            .map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })?;
        let inline = device_lacks_nowait(&access);
        entry.last_epoch = entry.last_epoch.wrapping_add(1);
        entry.raw = Some(RawState { access, epoch: entry.last_epoch, broken: false, inline });
        Ok(())
    }

    /// Sets raw mode up again for a file opened in raw mode whose raw mode is off (a check
    /// failed, or an earlier refresh failed because a writer held the file), at most once per
    /// [`RAW_RETRY_INTERVAL`](crate::limits::RAW_RETRY_INTERVAL) and only while no chain is live. `None` when nothing was due;
    /// otherwise the refresh's result. Call it where a lookup starts: a path that lost raw mode
    /// to a passing writer gets it back once the writer is gone.
    pub fn retry_raw(&mut self, file: FileId) -> Option<Result<(), EngineError>> {
        let entry = self.files.get_mut(file.0 as usize)?.as_mut()?;
        let wanted = matches!(entry.target, Target::Raw { .. });
        if !wanted || entry.raw.as_ref().is_some_and(|r| !r.broken) || self.live != 0 {
            return None;
        }
        if !entry.raw_retry.try_now() {
            return None;
        }
        Some(self.refresh_raw(file))
    }

    /// Reads the first block through the ring, synchronously (the engine is idle).
    pub(super) fn probe(&mut self, idx: u32, entry: &FileEntry) -> Result<(), EngineError> {
        let b = *self.free_bufs.last().expect("idle engine has every buffer free");
        let len = entry.align.max(512).min(entry.target.size_bytes().next_multiple_of(entry.align));
        let sqe = opcode::ReadFixed::new(types::Fixed(idx), self.buf_ptr(b), len as u32, b)
            .offset(0)
            .build()
            .user_data(PROBE_USER_DATA);
        self.push(&sqe);
        let res = loop {
            self.enter(1)?;
            if let Some(c) = self.ring.completion().next() {
                debug_assert_eq!(c.user_data(), PROBE_USER_DATA);
                break c.result();
            }
        };
        if res >= 0 {
            return Ok(());
        }
        let errno = Errno::from_raw(-res);
        let path = entry.path.clone();
        Err(match errno {
            Errno::NotSupported if self.cfg.iopoll => {
                EngineError::IopollUnsupported { path, errno }
            }
            Errno::InvalidArgument if entry.mode != IoMode::Buffered => {
                EngineError::DirectRefused {
                    path,
                    reason: "the first O_DIRECT read returned EINVAL".into(),
                }
            }
            _ => EngineError::Probe { path, errno },
        })
    }

    /// Closes a file. With no chain or read of it live, its registered slot and descriptor are
    /// released now; otherwise the file takes no new chain ([`SubmitError::Closing`]) and is
    /// released when its last chain is delivered. Either way each slot is released exactly
    /// once, and chains of other files never hold a close back. Closing a file that is not open
    /// (or already closing) does nothing.
    ///
    /// # Errors
    /// [`EngineError::RegisterFiles`] when the kernel refused to clear the registered slot. The
    /// slot is free for the engine all the same (the next open there replaces the kernel's
    /// entry), so nothing leaks; the error is only reported.
    pub fn close(&mut self, file: FileId) -> Result<(), EngineError> {
        let Some(Some(entry)) = self.files.get_mut(file.0 as usize) else { return Ok(()) };
        if entry.live > 0 {
            entry.closing = true;
            return Ok(());
        }
        self.release_file(file.0)
    }

    /// Files registered with the engine, those waiting for their last chain included: the
    /// registered-file slots in use, out of [`MAX_FILES`].
    #[must_use]
    pub fn files_open(&self) -> usize {
        self.files.iter().flatten().count()
    }

    /// Files closed while chains of theirs were live, waiting for the last one.
    #[must_use]
    pub fn files_closing(&self) -> usize {
        self.files.iter().flatten().filter(|e| e.closing).count()
    }

    /// A chain may start on `file`: it is open and not closing.
    pub(super) fn file_usable(&self, file: FileId) -> Result<(), SubmitError> {
        match self.files.get(file.0 as usize) {
            Some(Some(e)) if e.closing => Err(SubmitError::Closing { file: file.0 }),
            Some(Some(_)) => Ok(()),
            _ => Err(SubmitError::UnknownFile { file: file.0 }),
        }
    }

    /// A chain on `file` was given a slot (after [`Engine::file_usable`]).
    pub(super) fn chain_started(&mut self, file: FileId) {
        let entry = self.files[file.0 as usize].as_mut().expect("checked by file_usable");
        entry.live += 1;
    }

    /// A chain on file index `file` was delivered: a deferred close completes with the last.
    pub(super) fn chain_delivered(&mut self, file: u32) {
        let Some(Some(entry)) = self.files.get_mut(file as usize) else {
            debug_assert!(false, "a live chain's file is open");
            return;
        };
        entry.live -= 1;
        if entry.live == 0 && entry.closing {
            // Nobody is there to hear a refused unregister; the slot is released anyway.
            let _ = self.release_file(file);
        }
    }

    /// Drops the entry and clears its registered slots (file and device): the entry goes
    /// whatever the kernel answers, so a slot can never be lost to a failed update.
    fn release_file(&mut self, file: u32) -> Result<(), EngineError> {
        let entry = self.files[file as usize].take();
        debug_assert!(entry.as_ref().is_none_or(|e| e.live == 0));
        let sub = self.ring.submitter();
        let a = sub.register_files_update(file, &[-1]);
        let b = sub.register_files_update(device_index(file), &[-1]);
        // The descriptor closes only after the kernel's table no longer names it.
        drop(entry);
        a.and(b).map(|_| ()).map_err(|e| EngineError::RegisterFiles { errno: Errno::from_io(&e) })
    }

    /// The file's size as the engine's range checks see it.
    #[must_use]
    pub fn file_size(&self, file: FileId) -> Option<u64> {
        self.files.get(file.0 as usize)?.as_ref().map(|e| e.target.size_bytes())
    }

    /// O_DIRECT offset alignment of the file (1 when buffered).
    #[must_use]
    pub fn file_align(&self, file: FileId) -> Option<u64> {
        Some(self.files.get(file.0 as usize)?.as_ref()?.align)
    }

    /// Re-reads the file's size (after it grew or shrank); returns the new size.
    ///
    /// # Errors
    /// statx failure; an unknown file is `Ok(None)`.
    pub fn refresh_size(&mut self, file: FileId) -> Result<Option<u64>, EngineError> {
        let Some(Some(entry)) = self.files.get_mut(file.0 as usize) else { return Ok(None) };
        let (size, _) = statx_size_align(&entry.file, &entry.path)?;
        entry.target.set_size_bytes(size);
        Ok(Some(size))
    }

    /// The raw-mode epoch of `file` now (0 outside raw mode), for [`Engine::check_raw`].
    #[must_use]
    pub fn raw_epoch(&self, file: FileId) -> u32 {
        self.raw_state(file).map_or(0, |r| r.epoch)
    }

    /// The staleness check of a chain, for reads done with [`Engine::read_deferred`] since
    /// [`Engine::raw_epoch`] returned `epoch`: lease intact, identity unchanged, no refresh in
    /// between. A failure turns raw mode off for `file` until [`Engine::refresh_raw`], exactly
    /// as a failed chain check does.
    ///
    /// # Errors
    /// [`ChainError::Stale`] (`at` names the file offset 0 and hop 0: the check covers a run
    /// of reads, not one).
    pub fn check_raw(&mut self, file: FileId, epoch: u32) -> Result<(), ChainError> {
        match self.raw_stale(file.0, epoch) {
            None => Ok(()),
            Some(why) => {
                Err(ChainError::Stale { at: ChainAt { token: 0, start: 0, hop: 0, addr: 0 }, why })
            }
        }
    }
}

/// True when the device refuses non-blocking reads (`preadv2(RWF_NOWAIT)` gives EOPNOTSUPP, as
/// zram and other bio-based drivers without NOWAIT support do). io_uring would hand every such
/// read to an io-wq worker thread (a wake-up and a thread switch per hop, several µs here); a
/// synchronous read in the engine thread is faster for these devices, which complete reads in
/// the submitter's context anyway. The probe reads the first block of the file's first run.
fn device_lacks_nowait(access: &RawAccess) -> bool {
    let block = access.logical_block_size();
    let Some(first) = access.digest().extents().first() else { return false };
    let Ok(buf) = Region::new(block as usize, BUFFER_ALIGN) else { return false };
    let iov = libc::iovec { iov_base: buf.base().cast(), iov_len: block as usize };
    let Ok(off) = libc::off_t::try_from(first.physical & !(block - 1)) else { return false };
    // SAFETY: one iovec over `buf` (block bytes, aligned for O_DIRECT); the fd is open.
    let n = unsafe { libc::preadv2(access.device_fd(), &raw const iov, 1, off, libc::RWF_NOWAIT) };
    n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Fixed-file index of file `fd_index`'s block device ([`REGISTERED_FILE_SLOTS`]).
fn device_index(fd_index: u32) -> u32 {
    debug_assert!((fd_index as usize) < MAX_FILES);
    fd_index + MAX_FILES as u32
}
