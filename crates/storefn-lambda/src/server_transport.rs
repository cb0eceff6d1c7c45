//! storefn-server's client as the dispatcher's transport: [`ServerTransport`] loads the λ
//! program with LOAD_PROG (type lambda) and runs it with the LAMBDA frame, so the server side
//! runs the same ELF bytes the local side does. [`RemoteReadSide`] is the other way to reach a
//! remote file: the client reads the range with READ frames and runs the function itself.
//!
//! The LAMBDA frame reads at most [`MAX_READ_BYTES`] per request (the server engine's
//! plain-read limit, docs/FORMAT.md), so a longer range is refused with
//! [`LambdaError::RangeTooLarge`] rather than split: splitting would change what the function
//! sees (one context per range).

use std::time::Instant;

use storefn_server::proto::{MAX_LAMBDA_OUT_BYTES, MAX_READ_BYTES};
use storefn_server::registry::ProgHash;
use storefn_server::{Client, ClientConfig, ClientError, Req};
use storefn_vm::Instance;

use crate::dispatch::{DispatchConfig, Dispatcher, Run, Side, SideKind, Where};
use crate::error::LambdaError;
use crate::prog::{run_lambda, LambdaProg};
use crate::remote::{LambdaTransport, RemoteSide};

/// LOAD_PROG's `prog_type` for a λ program (docs/FORMAT.md, LOAD_PROG request).
pub const PROG_TYPE_LAMBDA: u8 = 1;

/// Largest range one remote λ request (LAMBDA frame) may cover, bytes.
pub const MAX_REMOTE_RANGE_BYTES: u64 = MAX_READ_BYTES as u64;

/// Largest range [`RemoteReadSide`] reads for one request (READ frames of
/// [`MAX_READ_BYTES`]), bytes: bounds the client's input buffer.
pub const MAX_REMOTE_READ_BYTES: u64 = 64 << 20;

fn remote_err(server: &str, file: &str, e: ClientError) -> LambdaError {
    LambdaError::Remote { server: server.to_string(), file: file.to_string(), source: e.into() }
}

/// A connection to a storage server that runs λ programs there.
#[derive(Debug)]
pub struct ServerTransport {
    client: Client,
    addr: String,
}

impl ServerTransport {
    /// Connects (HELLO, AUTH when `cfg` carries a secret).
    ///
    /// # Errors
    /// [`LambdaError::Remote`] naming the server.
    pub fn connect(addr: &str, cfg: ClientConfig) -> Result<Self, LambdaError> {
        let client = Client::connect(addr, cfg).map_err(|e| remote_err(addr, "", e))?;
        Ok(Self { client, addr: addr.to_string() })
    }

    /// The server's address as given to [`ServerTransport::connect`].
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn client_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl LambdaTransport for ServerTransport {
    type Handle = ProgHash;

    fn load(&mut self, prog: &LambdaProg) -> Result<ProgHash, LambdaError> {
        let section = prog.select().unwrap_or("").as_bytes();
        self.client
            .load_prog(PROG_TYPE_LAMBDA, section, prog.elf())
            .map_err(|e| remote_err(&self.addr, prog.name(), e))
    }

    fn lambda(
        &mut self,
        file: &str,
        prog: &ProgHash,
        off: u64,
        len: u64,
        out: &mut [u8],
    ) -> Result<usize, LambdaError> {
        if len > MAX_REMOTE_RANGE_BYTES || len == 0 {
            return Err(LambdaError::RangeTooLarge {
                path: format!("{}:{file}", self.addr).into(),
                len,
                max: MAX_REMOTE_RANGE_BYTES,
            });
        }
        // A larger buffer than the frame allows only means the function cannot fill it.
        let out_cap = u32::try_from(out.len()).unwrap_or(u32::MAX).min(MAX_LAMBDA_OUT_BYTES);
        let req = Req::Lambda {
            path: file.to_string(),
            offset: off,
            len: u32::try_from(len).expect("<= MAX_READ_BYTES"),
            hash: *prog,
            out_cap,
        };
        let r = self.client.one(&req).map_err(|e| remote_err(&self.addr, file, e))?;
        // The server truncates the output to out_cap and reports r0: an r0 above the buffer is
        // the same overflow the local side reports.
        match usize::try_from(r.value) {
            Ok(n) if n <= out.len() && n == r.data.len() => {
                out[..n].copy_from_slice(&r.data);
                Ok(n)
            }
            Ok(n) if n <= out.len() => Err(remote_err(
                &self.addr,
                file,
                ClientError::Io(std::io::Error::other(format!(
                    "LAMBDA reply: r0 {n} but {} output bytes",
                    r.data.len()
                ))),
            )),
            _ => Err(LambdaError::OutputOverflow {
                name: format!("{}:{file}", self.addr),
                returned: r.value,
                cap: out.len(),
            }),
        }
    }
}

/// The client side of a remote file: reads the range with READ frames (pipelined, up to the
/// server's in-flight limit per frame) and runs the function here. Nothing is cached: every
/// request's bytes cross the network.
#[derive(Debug)]
pub struct RemoteReadSide {
    pub transport: ServerTransport,
    pub file: String,
    pub prog: Instance,
    buf: Vec<u8>,
    reqs: Vec<Req>,
}

impl RemoteReadSide {
    #[must_use]
    pub fn new(transport: ServerTransport, file: &str, prog: Instance) -> Self {
        Self { transport, file: file.to_string(), prog, buf: Vec::new(), reqs: Vec::new() }
    }

    /// Reads `[off, off + len)` of the remote file into the side's buffer.
    ///
    /// # Errors
    /// [`LambdaError::RangeTooLarge`] above [`MAX_REMOTE_READ_BYTES`]; the server's status
    /// (e.g. out of range) or a connection failure as [`LambdaError::Remote`].
    pub fn read_range(&mut self, off: u64, len: u64) -> Result<&[u8], LambdaError> {
        let addr = self.transport.addr.clone();
        if len > MAX_REMOTE_READ_BYTES {
            return Err(LambdaError::RangeTooLarge {
                path: format!("{addr}:{}", self.file).into(),
                len,
                max: MAX_REMOTE_READ_BYTES,
            });
        }
        off.checked_add(len).ok_or_else(|| LambdaError::OutsideFile {
            path: format!("{addr}:{}", self.file).into(),
            off,
            len,
            size: u64::MAX,
        })?;
        self.buf.clear();
        let chunk = u64::from(MAX_READ_BYTES);
        let per_frame = self.transport.client.max_in_flight().max(1) as u64 * chunk;
        let mut at = off;
        while at < off + len {
            let end = (at + per_frame).min(off + len);
            self.reqs.clear();
            let mut o = at;
            while o < end {
                let n = (end - o).min(chunk);
                let n32 = u32::try_from(n).expect("<= MAX_READ_BYTES");
                self.reqs.push(Req::Read { path: self.file.clone(), offset: o, len: n32 });
                o += n;
            }
            let replies = self
                .transport
                .client
                .call(&self.reqs)
                .map_err(|e| remote_err(&addr, &self.file, e))?;
            for (req, r) in self.reqs.iter().zip(replies) {
                let r = r.ok("READ").map_err(|e| remote_err(&addr, &self.file, e))?;
                let Req::Read { offset, len, .. } = req else { unreachable!("reads only") };
                if r.data.len() != *len as usize {
                    return Err(remote_err(
                        &addr,
                        &self.file,
                        ClientError::Io(std::io::Error::other(format!(
                            "READ at {offset}: {} bytes for {len}",
                            r.data.len()
                        ))),
                    ));
                }
                self.buf.extend_from_slice(&r.data);
            }
            at = end;
        }
        Ok(&self.buf)
    }
}

impl Side for RemoteReadSide {
    fn kind(&self) -> SideKind {
        SideKind::Local
    }

    fn run(&mut self, off: u64, len: u64, out: &mut [u8]) -> Result<Run, LambdaError> {
        let t = Instant::now();
        self.read_range(off, len)?;
        let io_ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let t = Instant::now();
        let out_bytes = run_lambda(&mut self.prog, off, &self.buf, out)?;
        let compute_ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Ok(Run { out_bytes, wall_ns: io_ns + compute_ns, io_ns, compute_ns })
    }

    /// No client cache: all of every range is read over the network.
    fn uncached_fraction(&mut self, _off: u64, _len: u64) -> Option<f64> {
        Some(1.0)
    }
}

/// What one `lambda run ADDR:FILE` did.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteRunReport {
    pub off: u64,
    pub len: u64,
    pub out_bytes: usize,
    /// The side that ran the function.
    pub ran: SideKind,
    /// The request's wall time as the client saw it.
    pub wall_ns: u64,
    /// Client side only: reading the range over READ frames, and running the function.
    pub io_ns: u64,
    pub compute_ns: u64,
}

/// One request on a served file: `range` (default: the whole file, by STAT) through `prog`,
/// where `wh` says: `Local` reads the range with READ frames and runs the function here,
/// `Server` sends the LAMBDA frame, `Auto` asks a fresh [`Dispatcher`] (with no history its
/// model measures the local side first, so one request runs locally; ranges above
/// [`MAX_REMOTE_RANGE_BYTES`] can only run locally).
///
/// # Errors
/// Connecting, loading the program, the range, the request.
#[allow(clippy::too_many_arguments)]
pub fn run_remote_once(
    addr: &str,
    file: &str,
    cfg: &ClientConfig,
    prog: &LambdaProg,
    engine: storefn_vm::Engine,
    wh: Where,
    range: Option<(u64, u64)>,
    out_cap: usize,
) -> Result<(Vec<u8>, RemoteRunReport), LambdaError> {
    let mut reads = RemoteReadSide::new(
        ServerTransport::connect(addr, cfg.clone())?,
        file,
        prog.instance(engine)?,
    );
    let (off, len) = match range {
        Some(r) => r,
        None => {
            let r = reads
                .transport
                .client
                .one(&Req::Stat { path: file.to_string() })
                .map_err(|e| remote_err(addr, file, e))?;
            (0, r.value)
        }
    };
    let mut out = vec![0u8; out_cap];
    let wh = if wh == Where::Auto && len > MAX_REMOTE_RANGE_BYTES { Where::Local } else { wh };
    let (ran, run) = match wh {
        Where::Local => (SideKind::Local, reads.run(off, len, &mut out)?),
        Where::Server => {
            let mut s = RemoteSide::new(ServerTransport::connect(addr, cfg.clone())?, file, prog)?;
            (SideKind::Server, s.run(off, len, &mut out)?)
        }
        Where::Auto => {
            let mut s = RemoteSide::new(ServerTransport::connect(addr, cfg.clone())?, file, prog)?;
            Dispatcher::new(DispatchConfig::default())
                .run(&mut reads, &mut s, off, len, &mut out)?
        }
    };
    out.truncate(run.out_bytes);
    let report = RemoteRunReport {
        off,
        len,
        out_bytes: run.out_bytes,
        ran,
        wall_ns: run.wall_ns,
        io_ns: run.io_ns,
        compute_ns: run.compute_ns,
    };
    Ok((out, report))
}
