//! storefn-server's client as the dispatcher's transport: [`ServerTransport`] loads the λ
//! program with LOAD_PROG (type lambda) and runs it with the LAMBDA frame, so the server side
//! runs the same ELF bytes the local side does. [`RemoteReadSide`] is the other way to reach a
//! remote file: the client reads the range with READ frames and runs the function itself.
//!
//! The LAMBDA frame covers at most [`MAX_LAMBDA_IN_BYTES`] per request (the server stages the
//! range in several engine reads and runs the function once over it, docs/FORMAT.md), so a
//! longer range is refused with [`LambdaError::RangeTooLarge`] rather than split: splitting
//! would change what the function sees (one context per range).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use storefn_vm::Instance;
use storefn_wire::limits::{MAX_LAMBDA_OUT_BYTES, MAX_READ_BYTES};
use storefn_wire::{Client, ClientConfig, ClientError, ProgHash, Request};

use crate::dispatch::{DispatchConfig, Dispatcher, Run, Side, SideKind, Where};
use crate::error::LambdaError;
use crate::limits::{DEFAULT_CLIENT_CACHE_BYTES, MAX_REMOTE_RANGE_BYTES, MAX_REMOTE_READ_BYTES};
use crate::prog::{run_lambda, LambdaProg};
use crate::remote::{LambdaTransport, RemoteSide};

/// LOAD_PROG's `prog_type` for a λ program, as the wire module names it.
pub use storefn_wire::PROG_TYPE_LAMBDA;

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
        let req = Request::Lambda {
            path: file.as_bytes(),
            offset: off,
            len: u32::try_from(len).expect("<= MAX_LAMBDA_IN_BYTES"),
            hash: prog,
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

/// Hashes a block number for the client cache: one multiply (Fibonacci hashing). The keys are
/// block numbers the client picks, not input an attacker chooses, and every request looks up
/// each of its blocks twice (and the model's cache-state sample once more): SipHash's 16
/// lookups were a visible share of a warm 64 KiB request (10 µs).
#[derive(Debug, Default, Clone, Copy)]
struct BlockHasher(u64);

impl std::hash::Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // The high bits feed hashbrown's control bytes, the low ones its buckets: mix both.
        let h = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
}

type BlockMap = HashMap<u64, Box<[u8]>, std::hash::BuildHasherDefault<BlockHasher>>;

/// Bytes of one block of [`RemoteReadSide`]'s cache (aligned in the file): a page, the unit a
/// partly cached range is completed in.
pub const CACHE_BLOCK_BYTES: u64 = 4096;
const _: () = assert!((MAX_READ_BYTES as u64).is_multiple_of(CACHE_BLOCK_BYTES));

/// The client's own cache of a remote file's blocks ([`CACHE_BLOCK_BYTES`] each, aligned),
/// bounded in blocks; evicts the oldest inserted block (FIFO) when full.
#[derive(Debug)]
struct BlockCache {
    blocks: BlockMap,
    order: VecDeque<u64>,
    cap_blocks: usize,
}

impl BlockCache {
    fn new(cap_bytes: u64) -> Self {
        let cap_blocks = usize::try_from(cap_bytes / CACHE_BLOCK_BYTES).unwrap_or(usize::MAX);
        Self { blocks: BlockMap::default(), order: VecDeque::new(), cap_blocks }
    }

    fn insert(&mut self, block: u64, data: Box<[u8]>) {
        if self.cap_blocks == 0 {
            return;
        }
        while self.blocks.len() >= self.cap_blocks {
            let Some(old) = self.order.pop_front() else { break };
            self.blocks.remove(&old);
        }
        if self.blocks.insert(block, data).is_none() {
            self.order.push_back(block);
        }
    }
}

/// The client side of a remote file: reads the range with READ frames (one frame per
/// server in-flight limit of blocks) through the client's own block cache, and runs the
/// function here. Cached blocks cost no network; [`Side::uncached_fraction`] is the share of
/// the range's blocks not cached.
#[derive(Debug)]
pub struct RemoteReadSide {
    pub transport: ServerTransport,
    pub file: String,
    pub prog: Instance,
    size: Option<u64>,
    cache: BlockCache,
    buf: Vec<u8>,
    missing: Vec<(u64, u64)>,
}

impl RemoteReadSide {
    /// A side with a client cache of [`DEFAULT_CLIENT_CACHE_BYTES`].
    #[must_use]
    pub fn new(transport: ServerTransport, file: &str, prog: Instance) -> Self {
        Self::with_cache(transport, file, prog, DEFAULT_CLIENT_CACHE_BYTES)
    }

    /// A side whose client cache holds up to `cache_bytes` (0: no cache).
    #[must_use]
    pub fn with_cache(
        transport: ServerTransport,
        file: &str,
        prog: Instance,
        cache_bytes: u64,
    ) -> Self {
        Self {
            transport,
            file: file.to_string(),
            prog,
            size: None,
            cache: BlockCache::new(cache_bytes),
            buf: Vec::new(),
            missing: Vec::new(),
        }
    }

    fn name(&self) -> std::path::PathBuf {
        format!("{}:{}", self.transport.addr, self.file).into()
    }

    fn err(&self, e: ClientError) -> LambdaError {
        remote_err(&self.transport.addr, &self.file, e)
    }

    /// The remote file's size (STAT, once).
    ///
    /// # Errors
    /// The server's status or a connection failure.
    pub fn size_bytes(&mut self) -> Result<u64, LambdaError> {
        if let Some(s) = self.size {
            return Ok(s);
        }
        let r = self.transport.client.one(&Request::Stat { path: self.file.as_bytes() });
        let s = r.map_err(|e| self.err(e))?.value;
        self.size = Some(s);
        Ok(s)
    }

    /// Forgets every cached block of `[off, off + len)`.
    pub fn drop_cached(&mut self, off: u64, len: u64) {
        let b = CACHE_BLOCK_BYTES;
        for block in off / b..(off + len).div_ceil(b) {
            self.cache.blocks.remove(&block);
        }
        let blocks = &self.cache.blocks;
        self.cache.order.retain(|k| blocks.contains_key(k));
    }

    /// Fetches every block of `[off, off + len)` not cached: each run of consecutive missing
    /// blocks is one READ (up to [`MAX_READ_BYTES`]), as many per frame as may be in flight.
    pub(crate) fn fetch(&mut self, off: u64, len: u64) -> Result<(), LambdaError> {
        let b = CACHE_BLOCK_BYTES;
        let size = self.size_bytes()?;
        let run_blocks = u64::from(MAX_READ_BYTES) / b;
        self.missing.clear();
        for block in off / b..(off + len).div_ceil(b) {
            if self.cache.blocks.contains_key(&block) {
                continue;
            }
            match self.missing.last_mut() {
                Some((first, n)) if *first + *n == block && *n < run_blocks => *n += 1,
                _ => self.missing.push((block, 1)),
            }
        }
        let per_frame = self.transport.client.max_in_flight().max(1);
        let missing = std::mem::take(&mut self.missing);
        for chunk in missing.chunks(per_frame) {
            let path = self.file.as_bytes();
            let reqs: Vec<Request<'_>> = chunk
                .iter()
                .map(|&(first, n)| {
                    let len = (size - first * b).min(n * b);
                    let len = u32::try_from(len).expect("<= MAX_READ_BYTES");
                    Request::Read { path, offset: first * b, len }
                })
                .collect();
            let replies = self.transport.client.call(&reqs).map_err(|e| self.err(e))?;
            for (&(first, n), r) in chunk.iter().zip(replies) {
                let r = r.ok("READ").map_err(|e| self.err(e))?;
                let want = (size - first * b).min(n * b);
                if r.data.len() as u64 != want {
                    let m = format!("READ at {}: {} bytes for {want}", first * b, r.data.len());
                    return Err(self.err(ClientError::Io(std::io::Error::other(m))));
                }
                for (k, data) in r.data.chunks(b as usize).enumerate() {
                    self.cache.insert(first + k as u64, data.into());
                }
            }
        }
        self.missing = missing;
        Ok(())
    }

    /// Reads `[off, off + len)` of the remote file (through the client cache) into the side's
    /// buffer.
    ///
    /// # Errors
    /// [`LambdaError::RangeTooLarge`] above [`MAX_REMOTE_READ_BYTES`],
    /// [`LambdaError::OutsideFile`], the server's status or a connection failure as
    /// [`LambdaError::Remote`].
    pub fn read_range(&mut self, off: u64, len: u64) -> Result<&[u8], LambdaError> {
        // Named only on error: a request allocates nothing once the buffers have grown.
        if len > MAX_REMOTE_READ_BYTES {
            return Err(LambdaError::RangeTooLarge {
                path: self.name(),
                len,
                max: MAX_REMOTE_READ_BYTES,
            });
        }
        let size = self.size_bytes()?;
        if off.checked_add(len).is_none_or(|e| e > size) {
            return Err(LambdaError::OutsideFile { path: self.name(), off, len, size });
        }
        let cached = self.cache.cap_blocks > 0;
        self.fetch(off, len)?;
        let b = CACHE_BLOCK_BYTES;
        self.buf.clear();
        for block in off / b..(off + len).div_ceil(b) {
            let data = &self.cache.blocks[&block];
            let start = usize::try_from(off.max(block * b) - block * b).expect("< block");
            let end =
                usize::try_from((off + len).min(block * b + b) - block * b).expect("<= block");
            self.buf.extend_from_slice(&data[start..end]);
        }
        if !cached {
            self.cache.blocks.clear();
            self.cache.order.clear();
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

    fn uncached_fraction(&mut self, off: u64, len: u64) -> Option<f64> {
        let b = CACHE_BLOCK_BYTES;
        let blocks = off / b..(off + len).div_ceil(b);
        let total = blocks.end - blocks.start;
        let missing = blocks.filter(|k| !self.cache.blocks.contains_key(k)).count();
        #[allow(clippy::cast_precision_loss)]
        Some(if total == 0 { 0.0 } else { missing as f64 / total as f64 })
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
        None => (0, reads.size_bytes()?),
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
