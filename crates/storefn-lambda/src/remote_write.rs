//! λ-IO's `pwrite_λ` on a served file: the input crosses the network, the function runs on the
//! storage server and its output is written there (storefn-server's LAMBDA_WRITE frame,
//! docs/FORMAT.md), durably before the server answers. The same function object as the local
//! [`crate::pwrite_lambda`]: the server verifies the same ELF bytes (LOAD_PROG, type lambda).

use storefn_wire::{ClientError, ProgHash, Request};

use crate::error::LambdaError;
use crate::limits::{MAX_REMOTE_WRITE_IN_BYTES, MAX_REMOTE_WRITE_OUT_BYTES};
use crate::prog::LambdaProg;
use crate::server_transport::{ServerTransport, PROG_TYPE_LAMBDA};

/// A served file that λ writes go to, with the program loaded on the server.
#[derive(Debug)]
pub struct RemoteWriter {
    transport: ServerTransport,
    file: String,
    prog: ProgHash,
}

impl RemoteWriter {
    /// Loads `prog` on the server; writes then go to `file` (relative to the served
    /// directory; it must exist there).
    ///
    /// # Errors
    /// The server refused the program, or the connection failed ([`LambdaError::Remote`]).
    pub fn new(
        mut transport: ServerTransport,
        file: &str,
        prog: &LambdaProg,
    ) -> Result<Self, LambdaError> {
        let section = prog.select().unwrap_or("").as_bytes();
        let hash = transport
            .client_mut()
            .load_prog(PROG_TYPE_LAMBDA, section, prog.elf())
            .map_err(|e| remote_err(&transport, prog.name(), e))?;
        Ok(Self { transport, file: file.to_string(), prog: hash })
    }

    /// `pwrite_λ`: the server runs the function over `input` (into an output buffer of
    /// `out_cap` bytes, at most [`MAX_REMOTE_WRITE_OUT_BYTES`]) and writes its output at `off`;
    /// returns the bytes written once they are durable on the server.
    ///
    /// # Errors
    /// [`LambdaError::RangeTooLarge`] for an empty input or one above
    /// [`MAX_REMOTE_WRITE_IN_BYTES`], or an `out_cap` of 0 or above the limit; the server's
    /// status (`CHAIN_FAILED` for a fault or an output above `out_cap`, `OUTSIDE_ROOT`,
    /// `NOT_FOUND`, `IO`) or a connection failure as [`LambdaError::Remote`].
    pub fn pwrite_lambda(
        &mut self,
        off: u64,
        input: &[u8],
        out_cap: usize,
    ) -> Result<usize, LambdaError> {
        let too_large = |len: usize, max: usize| LambdaError::RangeTooLarge {
            path: format!("{}:{}", self.transport.addr(), self.file).into(),
            len: len as u64,
            max: max as u64,
        };
        if input.is_empty() || input.len() > MAX_REMOTE_WRITE_IN_BYTES {
            return Err(too_large(input.len(), MAX_REMOTE_WRITE_IN_BYTES));
        }
        if out_cap == 0 || out_cap > MAX_REMOTE_WRITE_OUT_BYTES {
            return Err(too_large(out_cap, MAX_REMOTE_WRITE_OUT_BYTES));
        }
        let req = Request::LambdaWrite {
            path: self.file.as_bytes(),
            offset: off,
            hash: &self.prog,
            input,
            out_cap: u32::try_from(out_cap).expect("<= MAX_REMOTE_WRITE_OUT_BYTES"),
        };
        let r = self
            .transport
            .client_mut()
            .one(&req)
            .map_err(|e| remote_err(&self.transport, &self.file, e))?;
        usize::try_from(r.value).ok().filter(|&n| n <= out_cap).ok_or_else(|| {
            let m = format!("LAMBDA_WRITE reply: {} bytes written, out_cap {out_cap}", r.value);
            remote_err(&self.transport, &self.file, ClientError::Io(std::io::Error::other(m)))
        })
    }
}

fn remote_err(t: &ServerTransport, file: &str, e: ClientError) -> LambdaError {
    LambdaError::Remote { server: t.addr().to_string(), file: file.to_string(), source: e.into() }
}

/// What one `lambda write` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteReport {
    /// Output bytes written (durable when this returns).
    pub written: usize,
    /// The request's wall time (the function, the write and the sync; and the network for a
    /// served file), ns.
    pub wall_ns: u64,
}

/// One `pwrite_λ` on a local file: `prog` over `input`, the output written at `off` of `path`
/// (created when missing) and synced.
///
/// # Errors
/// Opening the file, and as [`crate::pwrite_lambda`].
pub fn write_local_once(
    path: &std::path::Path,
    prog: &mut storefn_vm::Instance,
    off: u64,
    input: &[u8],
    out_cap: usize,
) -> Result<WriteReport, LambdaError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|source| LambdaError::Io { path: path.to_path_buf(), what: "open", source })?;
    let mut staging = vec![0u8; out_cap];
    let t = std::time::Instant::now();
    let written = crate::local::pwrite_lambda(&f, path, off, input, prog, &mut staging)?;
    Ok(WriteReport { written, wall_ns: u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX) })
}

/// One `pwrite_λ` on a served file (`addr`, `file` beneath its served directory, which must
/// exist): connects, loads `prog`, sends LAMBDA_WRITE.
///
/// # Errors
/// As [`ServerTransport::connect`], [`RemoteWriter::new`], [`RemoteWriter::pwrite_lambda`].
pub fn write_remote_once(
    addr: &str,
    file: &str,
    cfg: storefn_wire::ClientConfig,
    prog: &LambdaProg,
    off: u64,
    input: &[u8],
    out_cap: usize,
) -> Result<WriteReport, LambdaError> {
    let mut w = RemoteWriter::new(ServerTransport::connect(addr, cfg)?, file, prog)?;
    let t = std::time::Instant::now();
    let written = w.pwrite_lambda(off, input, out_cap)?;
    Ok(WriteReport { written, wall_ns: u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX) })
}
