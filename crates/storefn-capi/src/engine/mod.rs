//! The engine handle: one storefn-io engine (one io_uring ring) for one thread, the files it
//! reads named by the caller's descriptors, and the programs it has prepared.
//!
//! A descriptor is registered on its first use: the engine opens the same file again through
//! `/proc/self/fd/N` (O_DIRECT if the caller's descriptor is, else buffered) and keeps that
//! registration. `storefn_read_xrp` re-checks the descriptor (fstat) on every call, as the
//! kernel does on every syscall, so a closed descriptor fails and a reused number is
//! re-registered; `storefn_read_xrp_file` skips the check for callers that registered the file
//! once with `storefn_engine_register`.

use std::sync::Arc;

use storefn_io::{ChainError, EngineError, FileId, IoMode, StorageFn, XrpCtx};
use storefn_lambda::LocalFile;
use storefn_vm::{Instance, VerifiedProgram, VmError};

use crate::limits::{MAX_FILES, MAX_PROGS_PER_ENGINE};
use crate::prog::Prog;
use crate::status::{Fail, Res, Status};

mod batch;
mod ffi;

pub use batch::Completion;
pub use ffi::*;

/// One file the engine reads, named by the caller's descriptor.
#[derive(Debug)]
struct FdFile {
    fd: i32,
    dev: u64,
    ino: u64,
    id: FileId,
    /// The λ side's reader of the same file, opened on the first `storefn_pread_lambda`.
    lambda: Option<LocalFile>,
}

/// An engine (opaque), used only by the thread that created it (create one per thread).
pub struct Engine {
    io: storefn_io::Engine,
    files: Vec<FdFile>,
    progs: Vec<(Arc<VerifiedProgram>, Instance)>,
    batch: batch::Batch,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("io", &self.io)
            .field("files", &self.files.len())
            .field("progs", &self.progs.len())
            .finish_non_exhaustive()
    }
}

pub(crate) fn engine_err(e: &EngineError) -> Fail {
    match e {
        EngineError::BadConfig { .. } => Fail::arg(e.to_string()),
        EngineError::TooManyFiles { .. } => Fail::new(Status::Full, e.to_string()),
        _ => Fail::new(Status::Io, e.to_string()),
    }
}

pub(crate) fn chain_err(e: &ChainError) -> Fail {
    match e {
        ChainError::Submit(storefn_io::SubmitError::Full { .. }) | ChainError::NotIdle { .. } => {
            Fail::new(Status::Full, e.to_string())
        }
        ChainError::Ring { .. } => Fail::new(Status::Io, e.to_string()),
        _ => Fail::new(Status::Chain, e.to_string()),
    }
}

/// The identity (device, inode) of the file behind `fd`, or [`Status::BadFd`]: one fstat,
/// the whole per-call cost of naming a file by descriptor.
pub(crate) fn fd_identity(fd: i32) -> Res<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable stat; an invalid fd is reported as EBADF, nothing else.
    if unsafe { libc::fstat(fd, &raw mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Fail::new(Status::BadFd, format!("fd {fd}: {e}")));
    }
    Ok((st.st_dev, st.st_ino))
}

/// How the engine reads the file behind `fd`: O_DIRECT when the caller's descriptor is.
fn fd_mode(fd: i32) -> Res<IoMode> {
    // SAFETY: F_GETFL reads the descriptor's flags; an invalid fd gives -1 (EBADF).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Fail::new(Status::BadFd, format!("fd {fd}: {e}")));
    }
    Ok(if flags & libc::O_DIRECT != 0 { IoMode::Direct } else { IoMode::Buffered })
}

impl Engine {
    pub(crate) fn new(cfg: storefn_io::EngineConfig) -> Res<Self> {
        let io = storefn_io::Engine::new(cfg).map_err(|e| engine_err(&e))?;
        Ok(Self {
            io,
            files: Vec::with_capacity(MAX_FILES),
            progs: Vec::with_capacity(MAX_PROGS_PER_ENGINE),
            batch: batch::Batch::new(cfg.chains),
        })
    }

    /// The registered file behind `fd`, checked against what the descriptor names now.
    pub(crate) fn file_for_fd(&mut self, fd: i32) -> Res<usize> {
        let (dev, ino) = fd_identity(fd)?;
        if let Some(i) = self.files.iter().position(|f| f.fd == fd) {
            if self.files[i].dev == dev && self.files[i].ino == ino {
                return Ok(i);
            }
            // The number now names another file: forget the old registration.
            self.forget(i)?;
        }
        self.register(fd, dev, ino)
    }

    fn register(&mut self, fd: i32, dev: u64, ino: u64) -> Res<usize> {
        let mode = fd_mode(fd)?;
        let path = format!("/proc/self/fd/{fd}");
        let id = self.io.open(std::path::Path::new(&path), mode).map_err(|e| {
            let f = engine_err(&e);
            Fail::new(f.status, format!("fd {fd}: {}", f.message))
        })?;
        self.files.push(FdFile { fd, dev, ino, id, lambda: None });
        Ok(self.files.len() - 1)
    }

    pub(crate) fn forget(&mut self, i: usize) -> Res {
        if self.io.live() != 0 {
            return Err(Fail::new(
                Status::Full,
                format!(
                    "fd {}: {} chains in flight read through the engine; reap them first",
                    self.files[i].fd,
                    self.io.live()
                ),
            ));
        }
        let f = self.files.swap_remove(i);
        self.io.close(f.id).map_err(|e| engine_err(&e))
    }

    pub(crate) fn forget_fd(&mut self, fd: i32) -> Res {
        match self.files.iter().position(|f| f.fd == fd) {
            Some(i) => self.forget(i),
            None => Err(Fail::arg(format!("fd {fd} is not registered with this engine"))),
        }
    }

    /// The file with registration index `i` (a `storefn_file`).
    pub(crate) fn file_id(&self, file: u32) -> Res<FileId> {
        self.files
            .iter()
            .find(|f| f.id.index() == file)
            .map(|f| f.id)
            .ok_or_else(|| Fail::arg(format!("file {file} is not registered with this engine")))
    }

    /// The engine's prepared instance of `prog` (compiled on first use).
    pub(crate) fn instance(&mut self, prog: &Prog) -> Res<usize> {
        let key = Arc::as_ptr(&prog.verified);
        if let Some(i) = self.progs.iter().position(|(p, _)| Arc::as_ptr(p) == key) {
            return Ok(i);
        }
        if self.progs.len() == MAX_PROGS_PER_ENGINE {
            if self.io.live() != 0 {
                return Err(Fail::new(
                    Status::Full,
                    format!("the engine holds {MAX_PROGS_PER_ENGINE} programs and chains are in flight; reap them first"),
                ));
            }
            self.progs.remove(0);
        }
        let inst = prog.instance()?;
        self.progs.push((Arc::clone(&prog.verified), inst));
        Ok(self.progs.len() - 1)
    }

    /// XRP's `read_xrp` on registered file `id`.
    pub(crate) fn read_xrp(
        &mut self,
        id: FileId,
        buf: &mut [u8],
        count: u64,
        offset: u64,
        prog: &Prog,
        scratch: &mut [u8],
    ) -> Res<storefn_io::ChainStats> {
        prog.expect(crate::prog::ProgType::Xrp)?;
        check_scratch(scratch.len())?;
        let pi = self.instance(prog)?;
        let mut run = LastBlock { inst: &mut self.progs[pi].1, buf };
        self.io.read_xrp(id, offset, count, &mut run, scratch).map_err(|e| chain_err(&e))
    }

    /// λ-IO's `pread_λ` on the file behind registration `i`.
    pub(crate) fn pread_lambda(
        &mut self,
        i: usize,
        off: u64,
        len: u64,
        prog: &Prog,
        out: &mut [u8],
    ) -> Res<usize> {
        prog.expect(crate::prog::ProgType::Lambda)?;
        let pi = self.instance(prog)?;
        let f = &mut self.files[i];
        if f.lambda.is_none() {
            let path = format!("/proc/self/fd/{}", f.fd);
            let mode = fd_mode(f.fd)?;
            let lf =
                LocalFile::open(std::path::Path::new(&path), mode).map_err(|e| lambda_err(&e))?;
            f.lambda = Some(lf);
        }
        let lf = f.lambda.as_mut().expect("set above");
        lf.pread_lambda(off, len, &mut self.progs[pi].1, out)
            .map(|(n, _)| n)
            .map_err(|e| lambda_err(&e))
    }

    /// λ-IO's `pwrite_λ` to `fd` (written through the descriptor itself and synced).
    pub(crate) fn pwrite_lambda(
        &mut self,
        fd: i32,
        off: u64,
        input: &[u8],
        prog: &Prog,
        staging: &mut [u8],
    ) -> Res<usize> {
        prog.expect(crate::prog::ProgType::Lambda)?;
        fd_identity(fd)?;
        let pi = self.instance(prog)?;
        // SAFETY: `fd` is open (checked just above) and stays the caller's: ManuallyDrop
        // never closes it.
        let file = std::mem::ManuallyDrop::new(unsafe {
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd)
        });
        let name = format!("fd {fd}");
        storefn_lambda::pwrite_lambda(
            &file,
            std::path::Path::new(&name),
            off,
            input,
            &mut self.progs[pi].1,
            staging,
        )
        .map_err(|e| lambda_err(&e))
    }
}

pub(crate) fn check_scratch(len: usize) -> Res {
    if len > crate::limits::SCRATCH_BYTES {
        return Err(Fail::new(
            Status::ScratchTooLarge,
            format!(
                "scratch of {len} bytes exceeds the {} a chain carries",
                crate::limits::SCRATCH_BYTES
            ),
        ));
    }
    Ok(())
}

pub(crate) fn lambda_err(e: &storefn_lambda::LambdaError) -> Fail {
    use storefn_lambda::LambdaError as L;
    let status = match e {
        L::Fault { .. } | L::OutputOverflow { .. } => Status::Chain,
        L::OutsideFile { .. } | L::RangeTooLarge { .. } => Status::Arg,
        L::Prog { .. } => Status::Verify,
        _ => Status::Io,
    };
    Fail::new(status, e.to_string())
}

/// The storage function of a synchronous chain: the program, plus XRP's `buf`, which holds
/// the last block the chain read when it returns.
struct LastBlock<'a> {
    inst: &'a mut Instance,
    buf: &'a mut [u8],
}

impl StorageFn for LastBlock<'_> {
    fn invoke(
        &mut self,
        _token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        self.inst.run_xrp(ctx, data, scratch)
    }

    fn on_block(&mut self, _token: u64, _addr: u64, data: &[u8]) {
        let n = data.len().min(self.buf.len());
        self.buf[..n].copy_from_slice(&data[..n]);
    }
}
