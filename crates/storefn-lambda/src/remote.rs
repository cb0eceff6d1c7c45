//! The server side of the dispatcher, over any transport that can load a λ program on the
//! storage server and run it over a range of a served file. storefn-server's client (its
//! LOAD_PROG and LAMBDA frames) implements [`LambdaTransport`] when the server is merged; the
//! side itself, its timing and its errors are here so the dispatcher sees one shape for both.

use std::time::Instant;

use crate::dispatch::{Run, Side, SideKind};
use crate::error::LambdaError;
use crate::prog::LambdaProg;

/// What the server side needs from a connection to a storage server.
pub trait LambdaTransport {
    /// The server's name for a loaded program (storefn-server: its content hash).
    type Handle;

    /// Sends the program's ELF bytes to be verified on the server (once per program).
    ///
    /// # Errors
    /// The server refused the program, or the connection failed ([`LambdaError::Remote`]).
    fn load(&mut self, prog: &LambdaProg) -> Result<Self::Handle, LambdaError>;

    /// Runs the loaded program over `[off, off + len)` of `file` (relative to the served
    /// directory) on the server; copies its output into `out` and returns the output bytes.
    ///
    /// # Errors
    /// The server's status or a connection failure ([`LambdaError::Remote`]).
    fn lambda(
        &mut self,
        file: &str,
        prog: &Self::Handle,
        off: u64,
        len: u64,
        out: &mut [u8],
    ) -> Result<usize, LambdaError>;
}

/// The server [`Side`]: a transport, a served file and the program loaded on the server.
#[derive(Debug)]
pub struct RemoteSide<T: LambdaTransport> {
    transport: T,
    file: String,
    prog: T::Handle,
}

impl<T: LambdaTransport> RemoteSide<T> {
    /// Loads `prog` on the server through `transport`; requests then read `file` there.
    ///
    /// # Errors
    /// As [`LambdaTransport::load`].
    pub fn new(mut transport: T, file: &str, prog: &LambdaProg) -> Result<Self, LambdaError> {
        let prog = transport.load(prog)?;
        Ok(Self { transport, file: file.to_string(), prog })
    }

    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }
}

impl<T: LambdaTransport> Side for RemoteSide<T> {
    fn kind(&self) -> SideKind {
        SideKind::Server
    }

    /// The wall time is the client's: network, server queueing, its I/O and compute.
    fn run(&mut self, off: u64, len: u64, out: &mut [u8]) -> Result<Run, LambdaError> {
        let t = Instant::now();
        let out_bytes = self.transport.lambda(&self.file, &self.prog, off, len, out)?;
        let wall_ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Ok(Run { out_bytes, wall_ns, io_ns: 0, compute_ns: 0 })
    }
}
