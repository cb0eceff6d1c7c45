//! The page server of DDS's paper (Azure SQL Hyperscale's GetPage) as a host application.
//!
//! Pages are [`PAGE_BYTES`] at `page * PAGE_BYTES` of one file; a page's first 8 bytes are its
//! LSN (little-endian), the same layout `progs/dds/pageserver.bpf.c` reads. The host stores pages
//! through the host file library (so the file service's `cache` hook records page -> {LSN, file,
//! offset} on each write), replays page updates (read the page, which runs `invalidate`, then
//! write it back with a newer LSN), and answers the GetPage requests the offload functions
//! forwarded to it. A GetPage request is `page u64 | lsn u64` ([`GET_PAGE_BYTES`]); its answer is
//! the page.

use crate::host::forward::AnswerTiming;
use crate::host::{ForwardEnd, HostError, HostFiles};
use crate::limits::DEFAULT_CHANNEL_RING_BYTES;
use crate::limits::{MAX_LSN, PAGE_SERVER_BATCH};

mod auth;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "bench")]
pub mod spawn;

pub use auth::{client_config_from_token_file, PageServerAuth};

/// The page id of a stats request: GetPage(STATS_PAGE, 0) is never cached, so it reaches the
/// host, which answers [`HostStats::encode`] (how a remote bench reads the host's CPU).
pub const STATS_PAGE: u64 = u64::MAX;
/// Bytes of an encoded [`HostStats`].
pub const HOST_STATS_BYTES: usize = 40;

/// Page size (progs/include/pageserver.h `PS_PAGE_BYTES`).
pub const PAGE_BYTES: usize = 8192;
/// A GetPage request: `page u64 | lsn u64`.
pub const GET_PAGE_BYTES: usize = 16;

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
    // Byte i of the body is `seed.to_le_bytes()[i % 8] ^ (i as u8)`, built a word at a time:
    // for i a multiple of 8, bytes i..i+8 of `i as u8` are `(i as u8) | k` for k in 0..8.
    let body = &mut buf[16..];
    let done = body.len() / 8 * 8;
    for (w, chunk) in body[..done].chunks_exact_mut(8).enumerate() {
        let base = u64::from((w * 8) as u8) * 0x0101_0101_0101_0101;
        let v = seed ^ (base | 0x0706_0504_0302_0100);
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    for (i, b) in body.iter_mut().enumerate().skip(done) {
        *b = (seed >> ((i % 8) * 8)) as u8 ^ i as u8;
    }
}

/// Host-side counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Pages stored.
    pub pages: u64,
    /// CPU time of the host thread spent answering forwarded requests (including the updates a
    /// GetPage for a newer LSN forces), nanoseconds; idle polling is not counted.
    pub busy_cpu_ns: u64,
    /// Forwarded GetPage requests answered.
    pub answered: u64,
    /// Page updates applied.
    pub updates: u64,
    /// Forwarded messages that were not a GetPage of a stored page at an LSN up to
    /// [`MAX_LSN`] (answered empty).
    pub bad_requests: u64,
}

impl HostStats {
    /// `pages | busy_cpu_ns | answered | updates | bad_requests`, each u64 little-endian.
    #[must_use]
    pub fn encode(&self) -> [u8; HOST_STATS_BYTES] {
        let mut o = [0; HOST_STATS_BYTES];
        let v = [self.pages, self.busy_cpu_ns, self.answered, self.updates, self.bad_requests];
        for (i, x) in v.iter().enumerate() {
            o[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        }
        o
    }

    /// The inverse of [`encode`](Self::encode); `None` for a wrong length.
    #[must_use]
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != HOST_STATS_BYTES {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(Self {
            pages: w(0),
            busy_cpu_ns: w(1),
            answered: w(2),
            updates: w(3),
            bad_requests: w(4),
        })
    }
}

/// CPU time of the calling thread, nanoseconds.
#[must_use]
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    debug_assert_eq!(r, 0);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
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
    /// (forward id, page, LSN asked) of the batch being answered; reused.
    pending: Vec<(u64, u64, u64)>,
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
            stats: HostStats { pages, ..HostStats::default() },
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

    /// Tells the server this host is alive without looking for requests (a host busy
    /// elsewhere; every poll for forwarded requests does it too).
    pub fn beat(&self) {
        self.forward.beat();
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
        let lsn = self.next_lsn;
        if lsn > MAX_LSN {
            return Err(HostError::Malformed(format!("LSN {lsn} past the bound {MAX_LSN}")));
        }
        let at = page * PAGE_BYTES as u64;
        self.files.read(self.file, at, &mut self.buf)?;
        self.next_lsn += 1;
        fill_page(&mut self.buf, page, lsn);
        self.files.write(self.file, at, &self.buf)?;
        self.lsns[page as usize] = lsn;
        self.stats.updates += 1;
        Ok(lsn)
    }

    /// Answers every forwarded GetPage ready now (one ring batch): replays the page up to the
    /// LSN asked when it is behind, reads it through the host library and sends it back; a
    /// GetPage of [`STATS_PAGE`] is answered with the host's counters. Returns how many it
    /// took.
    ///
    /// # Errors
    /// Ring and host-library errors.
    pub fn serve_forwarded(&mut self) -> Result<usize, HostError> {
        let mut reqs = std::mem::take(&mut self.pending);
        reqs.clear();
        self.forward.poll(|id, msg| {
            let (page, lsn) = if msg.len() == GET_PAGE_BYTES {
                let w = |a: usize| u64::from_le_bytes(msg[a..a + 8].try_into().expect("8 bytes"));
                (w(0), w(8))
            } else {
                (u64::MAX - 1, 0)
            };
            reqs.push((id, page, lsn));
        })?;
        let n = reqs.len();
        if n == 0 {
            self.pending = reqs;
            return Ok(0);
        }
        // From here: the CPU spent answering (an idle poll is not counted, nor is the clock
        // read a system call on every empty poll).
        let mut cpu_mark = thread_cpu_ns();
        let arrived = std::time::Instant::now();
        self.files.take_device_ns();
        for &(id, page, lsn) in &reqs {
            // Host time: from the batch's arrival (queueing behind earlier requests of the
            // batch included) to this answer; device time: this request's system calls.
            let timing = |files: &mut HostFiles| AnswerTiming {
                host_ns: u32::try_from(arrived.elapsed().as_nanos()).unwrap_or(u32::MAX),
                device_ns: u32::try_from(files.take_device_ns()).unwrap_or(u32::MAX),
            };
            if page == STATS_PAGE {
                let now = thread_cpu_ns();
                self.stats.busy_cpu_ns += now - cpu_mark;
                cpu_mark = now;
                let t = timing(&mut self.files);
                self.forward.answer(id, t, &self.stats.encode())?;
                continue;
            }
            if page >= self.pages || lsn > MAX_LSN || self.next_lsn > MAX_LSN {
                self.stats.bad_requests += 1;
                let t = timing(&mut self.files);
                self.forward.answer(id, t, &[])?;
                continue;
            }
            if self.lsns[page as usize] < lsn {
                // GetPage@LSN for a version not replayed yet: replay the page's pending log up
                // to that LSN (here one update, numbered at least the LSN asked).
                // The page just written is in `buf`: answer from it (reading it back would
                // run `invalidate` and drop the entry `cache` just made).
                self.next_lsn = self.next_lsn.max(lsn);
                self.apply_update(page)?;
                let t = timing(&mut self.files);
                self.forward.answer(id, t, &self.buf)?;
                self.stats.answered += 1;
                continue;
            }
            let got = self.files.read(self.file, page * PAGE_BYTES as u64, &mut self.buf)?;
            let t = timing(&mut self.files);
            self.forward.answer(id, t, &self.buf[..got])?;
            self.stats.answered += 1;
        }
        self.stats.busy_cpu_ns += thread_cpu_ns() - cpu_mark;
        self.pending = reqs;
        Ok(n)
    }
}

/// The host application's main loop until `stop`: answers forwarded requests and replays
/// `updates_per_sec` random page updates (0: none), paced by the wall clock.
///
/// # Errors
/// The first host-library or ring error.
pub fn host_loop(
    h: &mut PageHost,
    stop: &std::sync::atomic::AtomicBool,
    updates_per_sec: u64,
    seed: u64,
) -> Result<(), HostError> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let start = std::time::Instant::now();
    let mut done = 0u64;
    let mut idle = 0u32;
    // Relaxed: a stop flag; nothing is published through it.
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let mut worked = h.serve_forwarded()? > 0;
        let elapsed_us = start.elapsed().as_micros();
        let due =
            u64::try_from(elapsed_us * u128::from(updates_per_sec) / 1_000_000).unwrap_or(u64::MAX);
        if done < due && h.pages > 0 {
            h.apply_update(rng.gen_range(0..h.pages))?;
            done += 1;
            worked = true;
        }
        if worked {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < crate::limits::SPIN_POLLS {
            std::hint::spin_loop();
            continue;
        }
        // Idle: sleep until a forwarded request arrives or the next update is due.
        let next_due_us = if updates_per_sec == 0 || h.pages == 0 {
            u128::MAX
        } else {
            u128::from(done + 1) * 1_000_000 / u128::from(updates_per_sec)
        };
        let wait_us = next_due_us.saturating_sub(elapsed_us);
        let wait = std::time::Duration::from_micros(u64::try_from(wait_us).unwrap_or(u64::MAX));
        h.forward.wait_incoming(wait);
    }
    Ok(())
}

/// A page server on this machine: storefn-server with the DDS front end on `listen`, its file
/// service serving `dir`, and the two channels a host application attaches to.
#[derive(Debug)]
pub struct Deployment {
    /// The storage server.
    pub server: storefn_server::Server,
    /// The front end the server runs.
    pub front: std::sync::Arc<crate::frontend::FrontEnd>,
    /// The host application's ends (file channel, forwarding channel) when it runs in this
    /// process; `None` when the channels were handed to another process.
    pub host_files: Option<crate::host::HostChannel>,
    pub host_forward: Option<crate::host::HostChannel>,
    auth: PageServerAuth,
}

/// How to run a [`Deployment`].
#[derive(Debug, Clone)]
pub struct DeployOptions {
    /// Cache-table items.
    pub table_items: usize,
    /// `false`: every GetPage is forwarded (the baseline).
    pub offload: bool,
    /// How long a forwarded request waits for the host application
    /// ([`storefn_server::limits::FORWARD_TIMEOUT`] by default).
    pub forward_timeout: std::time::Duration,
    /// Server threads (1 by default); each gets the answers to the requests it forwarded.
    pub threads: usize,
    /// Who may connect (by default one tenant with a fresh random secret:
    /// [`Deployment::client_config`]).
    pub auth: PageServerAuth,
    /// Serve Prometheus metrics on this address (`None`: no endpoint).
    pub metrics: Option<String>,
    /// How the server's connection and refused-request lines are written (when `log`).
    pub log_format: storefn_server::LogFormat,
    /// One line per connection event and refused request on stderr.
    pub log: bool,
}

impl DeployOptions {
    /// Defaults for everything else.
    #[must_use]
    pub fn new(table_items: usize, offload: bool) -> Self {
        Self {
            table_items,
            offload,
            forward_timeout: storefn_server::limits::FORWARD_TIMEOUT,
            threads: 1,
            auth: PageServerAuth::generated(),
            metrics: None,
            log_format: storefn_server::LogFormat::Text,
            log: false,
        }
    }
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
        Self::start_opts(listen, dir, elf, &DeployOptions::new(table_items, offload))
    }

    /// As [`start`](Self::start) with every option.
    ///
    /// # Errors
    /// Any part failing to start.
    pub fn start_opts(
        listen: &str,
        dir: &std::path::Path,
        elf: &[u8],
        opts: &DeployOptions,
    ) -> Result<Self, DeployError> {
        use crate::host::HostChannel;
        let files = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES)?;
        let forward = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES)?;
        let host_files = HostChannel::attach(dup(&files)?)?;
        let host_forward = HostChannel::attach(dup(&forward)?)?;
        let mut d = Self::start_with_opts(listen, dir, elf, opts, files, forward)?;
        d.host_files = Some(host_files);
        d.host_forward = Some(host_forward);
        Ok(d)
    }

    /// As [`start`](Self::start) over channels already shared with a host application
    /// (e.g. accepted by a [`crate::host::ChannelListener`]).
    ///
    /// # Errors
    /// Any part failing to start.
    pub fn start_with(
        listen: &str,
        dir: &std::path::Path,
        elf: &[u8],
        table_items: usize,
        offload: bool,
        files: crate::host::HostChannel,
        forward: crate::host::HostChannel,
    ) -> Result<Self, DeployError> {
        let opts = DeployOptions::new(table_items, offload);
        Self::start_with_opts(listen, dir, elf, &opts, files, forward)
    }

    /// As [`start_with`](Self::start_with) with every option.
    ///
    /// # Errors
    /// Any part failing to start.
    pub fn start_with_opts(
        listen: &str,
        dir: &std::path::Path,
        elf: &[u8],
        opts: &DeployOptions,
        files: crate::host::HostChannel,
        forward: crate::host::HostChannel,
    ) -> Result<Self, DeployError> {
        use crate::offload::{OffloadFunctions, OffloadHooks};
        use std::sync::Arc;
        let table = Arc::new(
            crate::CacheTable::with_capacity(opts.table_items)
                .map_err(|e| DeployError::Table(e.to_string()))?,
        );
        let mut service = crate::host::FileService::new(dir, &files)?;
        let engine = storefn_vm::Engine::Jit;
        let hooks = OffloadFunctions::load(elf, engine, Arc::clone(&table))?;
        service.set_hooks(Box::new(OffloadHooks { functions: hooks, errors: 0 }));
        let funcs = OffloadFunctions::load(elf, engine, table)?;
        let front = crate::frontend::FrontEnd::start(
            funcs,
            service,
            (files, forward),
            PAGE_SERVER_BATCH,
            opts.offload,
            opts.threads,
        )?;
        let mut cfg = storefn_server::ServerConfig::new(dir);
        cfg.threads = opts.threads;
        opts.auth.apply(&mut cfg);
        let hook: Arc<dyn storefn_server::OffloadHook> = front.clone();
        cfg.offload = Some(hook);
        cfg.forward_timeout = opts.forward_timeout;
        cfg.metrics.clone_from(&opts.metrics);
        cfg.log_format = opts.log_format;
        cfg.log = opts.log;
        let server = match storefn_server::Server::start(listen, cfg) {
            Ok(s) => s,
            Err(e) => {
                let _ = front.stop();
                return Err(e.into());
            }
        };
        Ok(Self { server, front, host_files: None, host_forward: None, auth: opts.auth.clone() })
    }

    /// How a client authenticates to this server (its first tenant).
    #[must_use]
    pub fn client_config(&self) -> storefn_wire::ClientConfig {
        self.auth.client_config()
    }

    /// Attaches a new host application (its file and forwarding channels) in place of one
    /// whose heartbeat stopped, without restarting the server ([`FrontEnd::attach`](crate::frontend::FrontEnd::attach)).
    ///
    /// # Errors
    /// `HostAlive` while the attached host is alive.
    pub fn attach_host(
        &self,
        files: crate::host::HostChannel,
        forward: crate::host::HostChannel,
    ) -> Result<(), HostError> {
        self.front.attach(files, forward)
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

pub(crate) fn dup(ch: &crate::host::HostChannel) -> Result<std::os::fd::OwnedFd, HostError> {
    ch.fd()
        .try_clone_to_owned()
        .map_err(|e| HostError::Dir { path: "channel memfd".into(), source: e })
}

#[cfg(test)]
mod tests {
    /// `fill_page` builds words; the page bytes stay those of the per-byte definition
    /// (`progs/` and remote clients check them), for any length.
    #[test]
    fn fill_page_matches_the_bytewise_definition() {
        for len in [16, 17, 23, 24, 100, super::PAGE_BYTES] {
            let (page, lsn) = (len as u64 * 31, 77 + len as u64);
            let mut got = vec![0; len];
            super::fill_page(&mut got, page, lsn);
            let seed = page.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ lsn;
            let mut want = vec![0; len];
            want[..8].copy_from_slice(&lsn.to_le_bytes());
            want[8..16].copy_from_slice(&page.to_le_bytes());
            for (i, b) in want[16..].iter_mut().enumerate() {
                *b = (seed >> ((i % 8) * 8)) as u8 ^ i as u8;
            }
            assert_eq!(got, want, "length {len}");
        }
    }
}
