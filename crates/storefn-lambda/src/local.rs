//! The local side: `pread_lambda` / `pwrite_lambda` on a file of this machine.
//!
//! Reads go through a storefn-io [`Engine`]: the range is cut into reads of at most
//! [`READ_CHUNK_BYTES`] (one registered buffer each), all submitted before the first reap (up to
//! the engine's chain slots, then refilled as they complete), and each completion is copied from
//! its registered buffer into the λ input at its place. The function runs once over the whole
//! input after the last read lands. The input buffer grows to the largest range read and is then
//! reused: no allocation per request in steady state.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use storefn_io::limits::MAX_REQUEST_BYTES;
use storefn_io::{ChainError, Engine, EngineConfig, FileId, IoMode, NoFunction};
use storefn_vm::Instance;

use crate::cache::{self, Probe};
use crate::dispatch::{Run, Side, SideKind};
use crate::error::LambdaError;
use crate::prog::run_lambda;

/// Bytes per engine read: one registered buffer's data view.
pub const READ_CHUNK_BYTES: u64 = MAX_REQUEST_BYTES as u64;
/// Largest range one λ request reads (the input buffer is at most this big).
pub const MAX_RANGE_BYTES: u64 = 64 << 20;

/// Time split of one local request, for the dispatcher's model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalTimes {
    /// Submitting the reads until the last one landed in the input.
    pub io_ns: u64,
    /// The function's run over the input.
    pub compute_ns: u64,
}

/// A local file opened for λ reads, with its engine and input buffer.
#[derive(Debug)]
pub struct LocalFile {
    engine: Engine,
    id: FileId,
    /// A second descriptor for the cache probe and the size.
    file: File,
    path: PathBuf,
    size_bytes: u64,
    input: Vec<u8>,
}

impl LocalFile {
    /// Opens `path` for λ reads. [`IoMode::Buffered`] reads through the page cache, which is
    /// then the client's cache the dispatcher's model measures; [`IoMode::Direct`] bypasses it.
    ///
    /// # Errors
    /// [`LambdaError::Engine`] (ring setup, open, O_DIRECT refused), [`LambdaError::Io`].
    pub fn open(path: &Path, mode: IoMode) -> Result<Self, LambdaError> {
        let eng_err = |source| LambdaError::Engine { path: path.to_path_buf(), source };
        let mut engine = Engine::new(EngineConfig::default()).map_err(eng_err)?;
        let id = engine.open(path, mode).map_err(eng_err)?;
        let file = File::open(path).map_err(|source| LambdaError::Io {
            path: path.to_path_buf(),
            what: "open",
            source,
        })?;
        let size_bytes = engine.file_size(id).unwrap_or(0);
        Ok(Self { engine, id, file, path: path.to_path_buf(), size_bytes, input: Vec::new() })
    }

    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size when opened.
    #[must_use]
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The std handle (cache probes and advice).
    #[must_use]
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Fraction of `[off, off + len)` not in the page cache (see [`cache::uncached_fraction`]).
    ///
    /// # Errors
    /// [`LambdaError::Io`] when neither cachestat nor mincore works.
    pub fn uncached_fraction(&self, off: u64, len: u64) -> Result<(f64, Probe), LambdaError> {
        cache::uncached_fraction(&self.file, off, len).map_err(|source| LambdaError::Io {
            path: self.path.clone(),
            what: "cache probe",
            source,
        })
    }

    fn check_range(&self, off: u64, len: u64) -> Result<usize, LambdaError> {
        if len > MAX_RANGE_BYTES {
            return Err(LambdaError::RangeTooLarge {
                path: self.path.clone(),
                len,
                max: MAX_RANGE_BYTES,
            });
        }
        if off.checked_add(len).is_none_or(|end| end > self.size_bytes) {
            return Err(LambdaError::OutsideFile {
                path: self.path.clone(),
                off,
                len,
                size: self.size_bytes,
            });
        }
        Ok(usize::try_from(len).expect("len <= MAX_RANGE_BYTES fits usize"))
    }

    /// Reads `[off, off + len)` through the engine into the input buffer and returns it.
    ///
    /// # Errors
    /// Range errors, [`LambdaError::Submit`], [`LambdaError::Read`] naming the failed offset.
    pub fn read_range(&mut self, off: u64, len: u64) -> Result<&[u8], LambdaError> {
        let n = self.check_range(off, len)?;
        if self.input.len() < n {
            self.input.resize(n, 0);
        }
        let chunks = len.div_ceil(READ_CHUNK_BYTES);
        let (mut next, mut done) = (0u64, 0u64);
        let mut failed: Option<(u64, ChainError)> = None;
        // After a failure nothing new is submitted; what is in flight is reaped (the engine's
        // slots must be free for the next request) and the first failure is reported.
        while done < next || (done < chunks && failed.is_none()) {
            while next < chunks && failed.is_none() && self.engine.free_slots() > 0 {
                let at = next * READ_CHUNK_BYTES;
                let l = READ_CHUNK_BYTES.min(len - at);
                self.engine.submit_read(self.id, off + at, l, next).map_err(|source| {
                    LambdaError::Submit { path: self.path.clone(), off: off + at, source }
                })?;
                next += 1;
            }
            let input = &mut self.input;
            let got = self
                .engine
                .wait(1, &mut NoFunction, |c| match c.result {
                    Ok(_) => {
                        let at = usize::try_from(c.token * READ_CHUNK_BYTES).unwrap();
                        input[at..at + c.data.len()].copy_from_slice(c.data);
                    }
                    Err(e) => {
                        if failed.is_none() {
                            failed = Some((c.token * READ_CHUNK_BYTES, e));
                        }
                    }
                })
                .map_err(|source| LambdaError::Engine { path: self.path.clone(), source })?;
            done += got as u64;
        }
        if let Some((at, source)) = failed {
            return Err(LambdaError::Read { path: self.path.clone(), off: off + at, source });
        }
        Ok(&self.input[..n])
    }

    /// λ-IO's `pread_λ`: reads `[off, off + len)` and runs `prog` over it into `out`; returns
    /// the output bytes and how the time split between I/O and the function.
    ///
    /// # Errors
    /// As [`LocalFile::read_range`]; [`LambdaError::Fault`], [`LambdaError::OutputOverflow`].
    pub fn pread_lambda(
        &mut self,
        off: u64,
        len: u64,
        prog: &mut Instance,
        out: &mut [u8],
    ) -> Result<(usize, LocalTimes), LambdaError> {
        let t0 = Instant::now();
        self.read_range(off, len)?;
        let t1 = Instant::now();
        let n = usize::try_from(len).expect("checked by read_range");
        let bytes = run_lambda(prog, off, &self.input[..n], out)?;
        let t2 = Instant::now();
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok((bytes, LocalTimes { io_ns: ns(t1 - t0), compute_ns: ns(t2 - t1) }))
    }
}

/// `pread_λ` as a free function: see [`LocalFile::pread_lambda`]. Returns the output bytes.
///
/// # Errors
/// As [`LocalFile::pread_lambda`].
pub fn pread_lambda(
    file: &mut LocalFile,
    off: u64,
    len: u64,
    prog: &mut Instance,
    out: &mut [u8],
) -> Result<usize, LambdaError> {
    file.pread_lambda(off, len, prog, out).map(|(n, _)| n)
}

/// λ-IO's `pwrite_λ`: runs `prog` over `input` into `staging` (the function transforms the
/// data before it is written), writes the output at `off` of `file` and makes it durable
/// (`fdatasync`) before returning the bytes written. `path` names the file in errors.
///
/// # Errors
/// [`LambdaError::Fault`], [`LambdaError::OutputOverflow`], [`LambdaError::Io`] (write, sync).
pub fn pwrite_lambda(
    file: &File,
    path: &Path,
    off: u64,
    input: &[u8],
    prog: &mut Instance,
    staging: &mut [u8],
) -> Result<usize, LambdaError> {
    let n = run_lambda(prog, off, input, staging)?;
    let io = |what, source| LambdaError::Io { path: path.to_path_buf(), what, source };
    file.write_all_at(&staging[..n], off).map_err(|e| io("write", e))?;
    file.sync_data().map_err(|e| io("fdatasync", e))?;
    Ok(n)
}

/// The local [`Side`]: a [`LocalFile`] and the function's instance.
#[derive(Debug)]
pub struct LocalSide {
    pub file: LocalFile,
    pub prog: Instance,
}

impl Side for LocalSide {
    fn kind(&self) -> SideKind {
        SideKind::Local
    }

    fn run(&mut self, off: u64, len: u64, out: &mut [u8]) -> Result<Run, LambdaError> {
        let (out_bytes, t) = self.file.pread_lambda(off, len, &mut self.prog, out)?;
        Ok(Run {
            out_bytes,
            wall_ns: t.io_ns + t.compute_ns,
            io_ns: t.io_ns,
            compute_ns: t.compute_ns,
        })
    }

    fn uncached_fraction(&mut self, off: u64, len: u64) -> Option<f64> {
        self.file.uncached_fraction(off, len).ok().map(|(f, _)| f)
    }
}

/// What one `lambda run` on a local file did.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    pub off: u64,
    pub len: u64,
    pub out_bytes: usize,
    pub times: LocalTimes,
    /// Uncached fraction of the range before the request.
    pub uncached: f64,
    pub probe: Probe,
}

/// One request on a local file: `range` (default: the whole file) through `prog` into an
/// output buffer of `out_cap` bytes; returns the output (truncated to its length) and a report.
///
/// # Errors
/// As [`LocalFile::open`] and [`LocalFile::pread_lambda`].
pub fn run_local_once(
    path: &Path,
    prog: &mut Instance,
    range: Option<(u64, u64)>,
    out_cap: usize,
) -> Result<(Vec<u8>, RunReport), LambdaError> {
    let mut file = LocalFile::open(path, IoMode::Buffered)?;
    let (off, len) = range.unwrap_or((0, file.size_bytes()));
    file.check_range(off, len)?;
    let (uncached, probe) = file.uncached_fraction(off, len)?;
    let mut out = vec![0u8; out_cap];
    let (out_bytes, times) = file.pread_lambda(off, len, prog, &mut out)?;
    out.truncate(out_bytes);
    Ok((out, RunReport { off, len, out_bytes, times, uncached, probe }))
}
