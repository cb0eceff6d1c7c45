//! DDS's front end inside the storage server: implements storefn-server's [`OffloadHook`].
//!
//! - `decide`: a frame's OFFLOAD messages become one batch message (`count u32 | pad u32 |`
//!   an index of each message's offset and length | the messages, docs/FORMAT.md "DDS offload
//!   batch": [`encode_batch`]), split into batches of at
//!   most `batch` requests; `pred` judges each batch, `func` gives the read of each offloaded
//!   request. A fault or bad output of a function forwards the batch (always correct).
//!   Each read decision carries the file service's change epoch taken before `pred`.
//! - `file` / `unchanged_since`: the server reads offloaded pages itself (io_uring, straight
//!   into the response frame) from the file service's own open file (the host application
//!   opened it through the host library; `SharedFiles`, no service lock), and serves the read
//!   only if no host write, create, open or close ran between the decision and the read's
//!   completion (the epoch did not move); otherwise it forwards the request, so a page torn
//!   by a concurrent host write is never served.
//! - `forward` / `poll_answers`: the forwarding channel to the host application, answers
//!   routed back to the server thread that forwarded the request, the host's liveness and
//!   re-attach (module `link`).
//!
//! The file service runs on its own thread ([`FrontEnd::start`]), serving the host library.

mod link;

pub use link::LinkStats;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use storefn_server::{HostAnswer, OffloadDecision, OffloadHook, ReadCheck};

use crate::host::{FileService, HostChannel, HostError};
use crate::limits::MAX_BATCH_REQUESTS;
use crate::limits::MAX_TIMING_SAMPLES;
use crate::offload::OffloadFunctions;

/// Bytes before the index of a batch: `count u32 | pad u32`.
pub const BATCH_HEADER_BYTES: usize = 8;
/// Bytes of each index entry: `offset u32 | len u32` of one message (offset from the batch's
/// first byte; each message starts 8-byte aligned).
pub const BATCH_ENTRY_BYTES: usize = 8;

/// Encodes `msgs` as one batch (docs/FORMAT.md, "DDS offload batch") into `buf` (cleared
/// first): the header, an index of each message's offset and length, then the messages, each
/// padded to 8 bytes. A program finds request `i` through the index, so a message of any
/// length cannot move another.
///
/// # Panics
/// More than `u32::MAX` messages or bytes (a frame's batch is far smaller).
pub fn encode_batch<'a>(msgs: impl ExactSizeIterator<Item = &'a [u8]> + Clone, buf: &mut Vec<u8>) {
    buf.clear();
    let count = msgs.len();
    buf.extend_from_slice(&u32::try_from(count).expect("batch count").to_le_bytes());
    buf.extend_from_slice(&[0; BATCH_HEADER_BYTES - 4]);
    let mut at = BATCH_HEADER_BYTES + count * BATCH_ENTRY_BYTES;
    for m in msgs.clone() {
        buf.extend_from_slice(&u32::try_from(at).expect("batch bytes").to_le_bytes());
        buf.extend_from_slice(&u32::try_from(m.len()).expect("message bytes").to_le_bytes());
        at += m.len().next_multiple_of(8);
    }
    for m in msgs {
        buf.extend_from_slice(m);
        buf.resize(buf.len().next_multiple_of(8), 0);
    }
}

/// Where requests' time went (recorded only while [`FrontEnd::set_timing`] is on), ns.
#[derive(Debug, Clone, Default)]
pub struct TimingSamples {
    /// Offloaded: the worker's io_uring read next to the data, submission to reaped completion
    /// (the device; no ring, no host).
    pub offloaded_device_ns: Vec<u64>,
    /// Forwarded: on the forwarding rings and waiting for the host to take the request (the
    /// server's round trip from push to answer, minus the host's own wall time).
    pub forwarded_ring_ns: Vec<u64>,
    /// Forwarded: the host application's wall time minus its device time (its logic, replay,
    /// host-library calls through the file-service ring).
    pub forwarded_host_ns: Vec<u64>,
    /// Forwarded: the file service's system calls made for the request (the device).
    pub forwarded_device_ns: Vec<u64>,
    /// Samples dropped at [`MAX_TIMING_SAMPLES`].
    pub dropped: u64,
}

impl TimingSamples {
    pub(crate) fn push(v: &mut Vec<u64>, dropped: &mut u64, ns: u64) {
        if v.len() < MAX_TIMING_SAMPLES {
            v.push(ns);
        } else {
            *dropped += 1;
        }
    }
}

/// The recorder: the samples and the send time of each forwarded token.
#[derive(Debug, Default)]
pub(crate) struct Timing {
    pub(crate) samples: TimingSamples,
    pub(crate) sent: std::collections::HashMap<u64, std::time::Instant>,
}

/// Counters. Relaxed: statistics only.
#[derive(Debug, Default)]
pub struct FrontEndStats {
    /// Requests served next to the data.
    pub offloaded: AtomicU64,
    /// Requests forwarded to the host application.
    pub forwarded: AtomicU64,
    /// Batches whose functions faulted (forwarded whole).
    pub faults: AtomicU64,
}

/// The front end: offload functions, the file service, the forwarding channel.
pub struct FrontEnd {
    /// The functions, the batch buffer and the verdicts (both reused).
    funcs: Mutex<(OffloadFunctions, Vec<u8>, Vec<bool>)>,
    /// The file service's files and change epoch (offloaded reads are the server's own).
    files: Arc<crate::host::SharedFiles>,
    link: Arc<link::Link>,
    batch: usize,
    /// `false`: every request is forwarded (the baseline without offload).
    offload: AtomicBool,
    stats: FrontEndStats,
    last_fault: Mutex<Option<String>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<Result<(), HostError>>>>,
    /// The thread routing host answers to server threads and watching the host's heartbeat.
    router: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for FrontEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontEnd")
            .field("batch", &self.batch)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl FrontEnd {
    /// Starts the file service of `files` on its own thread and returns the front end.
    /// `service` must have its `cache`/`invalidate` hooks installed by the caller; `funcs` is
    /// the front end's own instance of the functions (on the same table). `batch`: most
    /// requests per `pred` call (the program's own bound, e.g. 64 for the page server).
    /// `offload == false` forwards every request (the baseline). `threads`: the server
    /// threads whose forwarded requests' answers are routed back to them.
    ///
    /// # Errors
    /// `Malformed` for `batch` outside `1..=MAX_BATCH_REQUESTS` or no thread.
    pub fn start(
        funcs: OffloadFunctions,
        service: FileService,
        channels: (HostChannel, HostChannel),
        batch: usize,
        offload: bool,
        threads: usize,
    ) -> Result<Arc<Self>, HostError> {
        if batch == 0 || batch > MAX_BATCH_REQUESTS || threads == 0 {
            return Err(HostError::Malformed(format!(
                "offload batch {batch}, {threads} threads: expected 1..={MAX_BATCH_REQUESTS}, >= 1"
            )));
        }
        let (mut files, forward) = channels;
        let files_shared = service.shared_files();
        let table = Arc::clone(funcs.table());
        let (link, recv, files_view) = link::Link::new(threads, &forward, &files)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (st, lk) = (Arc::clone(&stop), Arc::clone(&link));
        let mut service = service;
        let thread = std::thread::Builder::new()
            .name("storefn-dds-files".into())
            .spawn(move || -> Result<(), HostError> {
                let mut idle = 0;
                // Relaxed: a stop flag; nothing is published through it.
                while !st.load(Ordering::Relaxed) {
                    if let Some(next) = lk.take_next_files() {
                        // A new host: the previous host's files and cached pages are not its.
                        service.rebind(&next);
                        table.clear();
                        files = next;
                    }
                    if service.serve_batch(&files)? == 0 {
                        crate::host::service_idle_wait(&files, &mut idle);
                    } else {
                        idle = 0;
                    }
                }
                Ok(())
            })
            .map_err(|e| HostError::Dir { path: "file service thread".into(), source: e })?;
        let router =
            match link::start_router(Arc::clone(&link), recv, files_view, Arc::clone(&stop)) {
                Ok(r) => r,
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    let _ = thread.join();
                    return Err(e);
                }
            };
        Ok(Arc::new(Self {
            funcs: Mutex::new((funcs, Vec::new(), Vec::new())),
            files: files_shared,
            link,
            batch,
            offload: AtomicBool::new(offload),
            stats: FrontEndStats::default(),
            last_fault: Mutex::new(None),
            stop,
            thread: Mutex::new(Some(thread)),
            router: Mutex::new(Some(router)),
        }))
    }

    /// Attaches a new host application's channels (file, forwarding) in place of one that is
    /// gone, without restarting the server: requests still waiting for the previous host fail,
    /// its files are closed and the cache table starts empty.
    ///
    /// # Errors
    /// `HostAlive` while the attached host's heartbeat moves.
    pub fn attach(&self, files: HostChannel, forward: HostChannel) -> Result<(), HostError> {
        self.link.attach(files, forward)
    }

    /// Whether the attached host application is alive: its heartbeat moved within
    /// [`HOST_HEARTBEAT_TIMEOUT`](crate::host::HOST_HEARTBEAT_TIMEOUT), or it has not begun.
    pub fn host_alive(&self) -> bool {
        self.link.host_alive()
    }

    /// The link's counters (answers dropped, hosts gone, re-attaches).
    pub fn link_stats(&self) -> &LinkStats {
        &self.link.stats
    }

    /// Turns offload on or off (off: every request goes to the host application).
    pub fn set_offload(&self, on: bool) {
        self.offload.store(on, Ordering::Relaxed);
    }

    /// Counters.
    pub fn stats(&self) -> &FrontEndStats {
        &self.stats
    }

    /// The last function fault (or bad output), for the operator: what faulted and where.
    pub fn last_fault(&self) -> Option<String> {
        self.last_fault.lock().ok().and_then(|f| f.clone())
    }

    fn fault(&self, e: &crate::offload::OffloadError) {
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.last_fault.lock() {
            *f = Some(e.to_string());
        }
    }

    /// Starts or stops timing requests (the bench's time split).
    pub fn set_timing(&self, on: bool) {
        // Relaxed: a mode switch; a request timed under either mode is recorded correctly.
        self.link.timing_on.store(on, Ordering::Relaxed);
    }

    /// The samples recorded so far (and starts over).
    pub fn take_timing(&self) -> TimingSamples {
        self.link.timing.lock().map(|mut t| std::mem::take(&mut *t).samples).unwrap_or_default()
    }

    fn timing(&self) -> Option<std::sync::MutexGuard<'_, Timing>> {
        // Relaxed: see set_timing.
        if self.link.timing_on.load(Ordering::Relaxed) {
            self.link.timing.lock().ok()
        } else {
            None
        }
    }

    /// Stops the file service thread and returns its result (idempotent).
    ///
    /// # Errors
    /// The service's error, if it stopped on one.
    pub fn stop(&self) -> Result<(), HostError> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.router.lock().map_err(|_| poisoned())?.take() {
            let _ = w.join();
        }
        let t = self.thread.lock().map_err(|_| poisoned())?.take();
        match t {
            Some(t) => t.join().unwrap_or_else(|_| Err(poisoned())),
            None => Ok(()),
        }
    }
}

pub(crate) fn poisoned() -> HostError {
    HostError::Malformed("file service thread panicked".into())
}

impl OffloadHook for FrontEnd {
    fn decide(&self, bytes: &[u8], bounds: &[(usize, usize)], out: &mut Vec<OffloadDecision>) {
        // Relaxed: a mode switch; a batch judged under either mode is answered correctly.
        if !self.offload.load(Ordering::Relaxed) {
            self.stats.forwarded.fetch_add(bounds.len() as u64, Ordering::Relaxed);
            out.extend(bounds.iter().map(|_| OffloadDecision::Forward));
            return;
        }
        let Ok(mut g) = self.funcs.lock() else {
            out.extend(bounds.iter().map(|_| OffloadDecision::Forward));
            return;
        };
        let (funcs, buf, verdicts) = &mut *g;
        // Before any table lookup: a change after this point makes the read's check fail.
        let epoch = self.files.epoch();
        for chunk in bounds.chunks(self.batch) {
            encode_batch(chunk.iter().map(|&(a, b)| &bytes[a..b]), buf);
            let first = out.len();
            match funcs.pred_into(buf, verdicts) {
                Ok(()) => {
                    for i in 0..chunk.len() {
                        let d = if verdicts.get(i).copied().unwrap_or(false) {
                            // The entry may have gone since pred: func looks it up again.
                            match funcs.func(buf, u32::try_from(i).expect("<= batch")) {
                                Ok(Some(op)) => OffloadDecision::Read {
                                    file: op.file,
                                    offset: op.offset,
                                    size: op.size,
                                    epoch,
                                },
                                Ok(None) => OffloadDecision::Forward,
                                Err(e) => {
                                    self.fault(&e);
                                    OffloadDecision::Forward
                                }
                            }
                        } else {
                            OffloadDecision::Forward
                        };
                        out.push(d);
                    }
                }
                Err(e) => {
                    self.fault(&e);
                    out.extend(chunk.iter().map(|_| OffloadDecision::Forward));
                }
            }
            let off = out[first..].iter().filter(|d| **d != OffloadDecision::Forward).count();
            self.stats.offloaded.fetch_add(off as u64, Ordering::Relaxed);
            self.stats.forwarded.fetch_add((chunk.len() - off) as u64, Ordering::Relaxed);
        }
    }

    fn file(&self, file: u32, offset: u64, size: u32) -> Option<(Arc<std::fs::File>, u64)> {
        let stamp = self.files.stamp(file, offset, u64::from(size))?;
        Some((self.files.file(file)?, stamp))
    }

    fn host_alive(&self) -> Option<bool> {
        Some(self.link.host_alive())
    }

    fn wake_fd(&self, thread: usize) -> Option<std::os::fd::RawFd> {
        self.link.wake_fd(thread)
    }

    fn offloaded_read_time(&self, ns: u64) {
        if let Some(mut t) = self.timing() {
            let TimingSamples { offloaded_device_ns, dropped, .. } = &mut t.samples;
            TimingSamples::push(offloaded_device_ns, dropped, ns);
        }
    }

    fn unchanged_since(&self, r: &ReadCheck) -> bool {
        r.epoch.is_multiple_of(2)
            && self.files.epoch() == r.epoch
            && self.files.stamp(r.file, r.offset, u64::from(r.size)) == Some(r.stamp)
    }

    fn forward(&self, token: u64, msg: &[u8]) -> Result<u64, String> {
        self.link.forward(token, msg)
    }

    fn poll_answers(&self, thread: usize, f: &mut dyn FnMut(HostAnswer<'_>)) -> usize {
        self.link.poll(thread, f)
    }
}
