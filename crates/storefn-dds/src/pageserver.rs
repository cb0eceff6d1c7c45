//! The page server of DDS's paper (Azure SQL Hyperscale's GetPage) as a host application.
//!
//! Pages are [`PAGE_BYTES`] at `page * PAGE_BYTES` of one file; a page's first 8 bytes are its
//! LSN (little-endian), the same layout `progs/dds/pageserver.bpf.c` reads. The host stores pages
//! through the host file library (so the file service's `cache` hook records page -> {LSN, file,
//! offset} on each write), replays page updates (read the page, which runs `invalidate`, then
//! write it back with a newer LSN), and answers the GetPage requests the offload functions
//! forwarded to it. A GetPage request is `page u64 | lsn u64` ([`GET_PAGE_BYTES`]); its answer is
//! the page.

use crate::host::{ForwardEnd, HostError, HostFiles};

/// Page size (progs/include/pageserver.h `PS_PAGE_BYTES`).
pub const PAGE_BYTES: usize = 8192;
/// A GetPage request: `page u64 | lsn u64`.
pub const GET_PAGE_BYTES: usize = 16;
/// Most requests one `pred` call of the page server's functions judges (`PS_MAX_BATCH`).
pub const PAGE_SERVER_BATCH: usize = 64;

/// Encodes a GetPage request.
#[must_use]
pub fn get_page(page: u64, lsn: u64) -> [u8; GET_PAGE_BYTES] {
    let mut m = [0; GET_PAGE_BYTES];
    m[..8].copy_from_slice(&page.to_le_bytes());
    m[8..].copy_from_slice(&lsn.to_le_bytes());
    m
}

/// The LSN of a page image (`None`: shorter than 8 bytes).
#[must_use]
pub fn page_lsn(page: &[u8]) -> Option<u64> {
    page.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// A page image: the LSN, then the page id, then bytes derived from both (so a reader can tell
/// a page from another page or another version).
pub fn fill_page(buf: &mut [u8], page: u64, lsn: u64) {
    buf[..8].copy_from_slice(&lsn.to_le_bytes());
    buf[8..16].copy_from_slice(&page.to_le_bytes());
    let seed = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ lsn;
    for (i, b) in buf[16..].iter_mut().enumerate() {
        *b = (seed >> ((i % 8) * 8)) as u8 ^ i as u8;
    }
}

/// Host-side counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Forwarded GetPage requests answered.
    pub answered: u64,
    /// Page updates applied.
    pub updates: u64,
    /// Forwarded messages that were not a GetPage of a stored page (answered empty).
    pub bad_requests: u64,
}

/// The page server's host application.
#[derive(Debug)]
pub struct PageHost {
    files: HostFiles,
    forward: ForwardEnd,
    file: u32,
    pages: u64,
    /// LSN of each page as the host last wrote it.
    lsns: Vec<u64>,
    next_lsn: u64,
    buf: Vec<u8>,
    /// (forward id, page) of the batch being answered; reused.
    pending: Vec<(u64, u64)>,
    stats: HostStats,
}

impl PageHost {
    /// Creates `path` through the host library with `pages` pages, page `p` at LSN `p + 1`.
    ///
    /// # Errors
    /// Host-library errors.
    pub fn create(
        mut files: HostFiles,
        forward: ForwardEnd,
        path: &str,
        pages: u64,
    ) -> Result<Self, HostError> {
        let file = files.create(path)?;
        let mut buf = vec![0; PAGE_BYTES];
        for p in 0..pages {
            fill_page(&mut buf, p, p + 1);
            files.write(file, p * PAGE_BYTES as u64, &buf)?;
        }
        files.flush(file)?;
        Ok(Self {
            files,
            forward,
            file,
            pages,
            lsns: (1..=pages).collect(),
            next_lsn: pages + 1,
            buf,
            pending: Vec::new(),
            stats: HostStats::default(),
        })
    }

    /// Pages stored.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// The LSN the host last wrote for `page`.
    pub fn lsn(&self, page: u64) -> Option<u64> {
        self.lsns.get(usize::try_from(page).ok()?).copied()
    }

    /// Counters.
    pub fn stats(&self) -> HostStats {
        self.stats
    }

    /// Replays one log record for `page`: reads the page (the file service runs `invalidate`,
    /// so the page is no longer offloaded), applies the update (a new LSN), writes it back (the
    /// service runs `cache`, recording the new LSN). Returns the new LSN.
    ///
    /// # Errors
    /// Host-library errors; `Malformed` for a page beyond the file.
    pub fn apply_update(&mut self, page: u64) -> Result<u64, HostError> {
        if page >= self.pages {
            return Err(HostError::Malformed(format!("page {page} of {}", self.pages)));
        }
        let at = page * PAGE_BYTES as u64;
        self.files.read(self.file, at, &mut self.buf)?;
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        fill_page(&mut self.buf, page, lsn);
        self.files.write(self.file, at, &self.buf)?;
        self.lsns[page as usize] = lsn;
        self.stats.updates += 1;
        Ok(lsn)
    }

    /// Answers every forwarded GetPage ready now (one ring batch): reads the page through the
    /// host library and sends it back. Returns how many it answered.
    ///
    /// # Errors
    /// Ring and host-library errors.
    pub fn serve_forwarded(&mut self) -> Result<usize, HostError> {
        let mut reqs = std::mem::take(&mut self.pending);
        reqs.clear();
        self.forward.poll(|id, msg| {
            let page = if msg.len() == GET_PAGE_BYTES {
                u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"))
            } else {
                u64::MAX
            };
            reqs.push((id, page));
        })?;
        let n = reqs.len();
        for &(id, page) in &reqs {
            if page >= self.pages {
                self.stats.bad_requests += 1;
                self.forward.send(id, &[])?;
                continue;
            }
            let got = self.files.read(self.file, page * PAGE_BYTES as u64, &mut self.buf)?;
            self.forward.send(id, &self.buf[..got])?;
            self.stats.answered += 1;
        }
        self.pending = reqs;
        Ok(n)
    }
}

/// A page server on this machine: storefn-server with the DDS front end on `listen`, its file
/// service serving `dir`, and the two channels a host application attaches to.
#[derive(Debug)]
pub struct Deployment {
    /// The storage server.
    pub server: storefn_server::Server,
    /// The front end the server runs.
    pub front: std::sync::Arc<crate::frontend::FrontEnd>,
    /// The host application's ends: the file channel and the forwarding channel.
    pub host_files: crate::host::HostChannel,
    pub host_forward: crate::host::HostChannel,
}

/// Why a deployment failed to start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Offload(#[from] crate::offload::OffloadError),
    #[error(transparent)]
    Server(#[from] storefn_server::ServerError),
    #[error("table: {0}")]
    Table(String),
}

impl Deployment {
    /// Starts the server on `listen` (loopback) with the page server's offload functions
    /// (`elf`: progs/dds/pageserver.bpf.c) over a table of `table_items`, files beneath `dir`.
    ///
    /// # Errors
    /// Any part failing to start.
    pub fn start(
        listen: &str,
        dir: &std::path::Path,
        elf: &[u8],
        table_items: usize,
        offload: bool,
    ) -> Result<Self, DeployError> {
        use crate::host::{HostChannel, DEFAULT_CHANNEL_RING_BYTES};
        use crate::offload::{OffloadFunctions, OffloadHooks};
        use std::sync::Arc;
        let table = Arc::new(
            crate::CacheTable::with_capacity(table_items)
                .map_err(|e| DeployError::Table(e.to_string()))?,
        );
        let files = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES)?;
        let forward = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES)?;
        let host_files = HostChannel::attach(dup(&files)?)?;
        let host_forward = HostChannel::attach(dup(&forward)?)?;
        let mut service = crate::host::FileService::new(dir, &files)?;
        let engine = storefn_vm::Engine::Jit;
        let hooks = OffloadFunctions::load(elf, engine, Arc::clone(&table))?;
        service.set_hooks(Box::new(OffloadHooks { functions: hooks, errors: 0 }));
        let funcs = OffloadFunctions::load(elf, engine, table)?;
        let front = crate::frontend::FrontEnd::start(
            funcs,
            service,
            files,
            forward,
            PAGE_SERVER_BATCH,
            offload,
        )?;
        let mut cfg = storefn_server::ServerConfig::new(dir);
        let hook: Arc<dyn storefn_server::server::offload::OffloadHook> = front.clone();
        cfg.offload = Some(hook);
        let server = match storefn_server::Server::start(listen, cfg) {
            Ok(s) => s,
            Err(e) => {
                let _ = front.stop();
                return Err(e.into());
            }
        };
        Ok(Self { server, front, host_files, host_forward })
    }

    /// Stops the server, then the file service.
    ///
    /// # Errors
    /// The first error of either.
    pub fn stop(self) -> Result<(), DeployError> {
        self.server.stop();
        let r = self.server.join();
        self.front.stop()?;
        Ok(r?)
    }
}

fn dup(ch: &crate::host::HostChannel) -> Result<std::os::fd::OwnedFd, HostError> {
    ch.fd()
        .try_clone_to_owned()
        .map_err(|e| HostError::Dir { path: "channel memfd".into(), source: e })
}
