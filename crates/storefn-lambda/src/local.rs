//! The local side: `pread_lambda` / `pwrite_lambda` on a file of this machine.
//!
//! Reads go through a storefn-io [`Engine`]'s range reads ([`Engine::read_range`]): the range
//! lands in one caller-owned, registered [`RangeBuf`] (cut by the engine into concurrent reads
//! of at most [`storefn_io::limits::MAX_RANGE_BYTES`], at aligned offsets, so a 1 MiB request is
//! one read), and the function runs over it where the device put it: no staging copy. The
//! buffer grows to the largest range read and is then reused: no allocation per request in
//! steady state.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use storefn_io::limits::range_buf_bytes;
use storefn_io::{ChainError, Engine, EngineConfig, FileId, IoMode, RangeBuf};
use storefn_vm::Instance;

use crate::cache::{self, Probe};
use crate::dispatch::{Run, Side, SideKind};
use crate::error::LambdaError;
use crate::limits::MAX_RANGE_BYTES;
use crate::prog::run_lambda;

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
    /// The λ input: where range reads land (registered with `engine`); `None` until the first
    /// read.
    input: Option<RangeBuf>,
    /// Where the last range read's bytes are in `input`.
    last: std::ops::Range<usize>,
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
        Ok(Self { engine, id, file, path: path.to_path_buf(), size_bytes, input: None, last: 0..0 })
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
    /// Range errors, [`LambdaError::Engine`] (growing the input buffer),
    /// [`LambdaError::Submit`] (a read the engine refused), [`LambdaError::Read`] naming the
    /// failed offset.
    pub fn read_range(&mut self, off: u64, len: u64) -> Result<&[u8], LambdaError> {
        self.check_range(off, len)?;
        if len == 0 {
            // Nothing to read (the engine refuses empty reads); the function sees no input.
            self.last = 0..0;
            return Ok(&[]);
        }
        self.grow_input(len)?;
        let input = self.input.as_mut().expect("grown above");
        let path = &self.path;
        let r = self.engine.read_range(self.id, off, len, input).map_err(|e| match e {
            ChainError::Submit(source) => LambdaError::Submit { path: path.clone(), off, source },
            source => {
                let at = source.at().map_or(off, |a| a.addr);
                LambdaError::Read { path: path.clone(), off: at, source }
            }
        })?;
        self.last = r.clone();
        Ok(&input.as_slice()[r])
    }

    /// The input buffer, grown (and registered with the engine) to hold a range of `len`
    /// bytes at any offset.
    fn grow_input(&mut self, len: u64) -> Result<(), LambdaError> {
        let need = range_buf_bytes(usize::try_from(len).expect("len <= MAX_RANGE_BYTES fits"));
        let eng_err = |source| LambdaError::Engine { path: self.path.clone(), source };
        if self.input.as_ref().is_none_or(|b| b.capacity() < need) {
            if let Some(old) = self.input.take() {
                self.engine.unregister_range_buf(&old).map_err(eng_err)?;
            }
            let buf = RangeBuf::new(need).map_err(eng_err)?;
            // Unregistered (no slot) still works; registration only saves pinning per read.
            self.engine.register_range_buf(&buf).map_err(eng_err)?;
            self.input = Some(buf);
        }
        Ok(())
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
        let input = self.input.as_ref().map_or(&[][..], |b| &b.as_slice()[self.last.clone()]);
        let bytes = run_lambda(prog, off, input, out)?;
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
