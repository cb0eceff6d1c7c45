//! The forwarding link between the server's threads and the host application.
//!
//! - **Routing.** Every server thread forwards over the same request ring; one router thread
//!   (`storefn-dds-answers`) is the only consumer of the answer ring and hands each answer to
//!   the queue of the thread that forwarded it (the thread is part of the token:
//!   [`token_thread`]), then writes that thread's eventfd. A thread only ever sees answers to
//!   its own requests, so one thread's answer is never relayed to another thread's request.
//! - **Liveness.** The host bumps a heartbeat word in each channel's header whenever it looks
//!   for work. Once it has beaten, a heartbeat that stays still for
//!   [`HOST_HEARTBEAT_TIMEOUT`] makes the host gone: every request waiting for it fails at once
//!   ([`HostAnswer::HostGone`]) and new ones are refused until it beats again or a new host
//!   attaches.
//! - **Re-attach.** A new host's channels ([`Link::attach`], refused while the current host is
//!   alive) are taken by the router (forwarding) and by the file-service thread (files: it
//!   closes the previous host's files and empties the cache table before serving them).

use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use storefn_server::{token_thread, HostAnswer};

use super::{Timing, TimingSamples};
use crate::host::{ForwardEnd, HostChannel, HostError, Side};
use crate::limits::MAX_ROUTE_BYTES;
use crate::limits::{HOST_HEARTBEAT_TIMEOUT, PARK_SLICE};

/// Why requests waiting for a host fail.
pub(super) const HOST_GONE: &str =
    "the host application is gone (its heartbeat stopped for 1 s); waiting for it to resume \
     or for a new host to attach";
const _: () =
    assert!(HOST_HEARTBEAT_TIMEOUT.as_secs() == 1 && HOST_HEARTBEAT_TIMEOUT.subsec_nanos() == 0);
const HOST_REPLACED: &str = "the host application was replaced by a new one";

/// Counters. Relaxed: statistics only.
#[derive(Debug)]
pub struct LinkStats {
    /// Host answers handed to each server thread's queue.
    pub routed: Box<[AtomicU64]>,
    /// Host answers dropped: for no server thread, or over [`MAX_ROUTE_BYTES`].
    pub dropped_answers: AtomicU64,
    /// Times the host was judged gone (its heartbeat stopped).
    pub hosts_gone: AtomicU64,
    /// Host applications attached after the first.
    pub reattached: AtomicU64,
}

/// One host application as the server threads see it.
#[derive(Debug)]
struct Attachment {
    /// Numbers attachments; what [`OffloadHook::forward`](storefn_server::OffloadHook::forward) returns.
    generation: u64,
    send: ForwardEnd,
    /// False while the heartbeat is stopped (after it began).
    alive: AtomicBool,
}

/// One server thread's answers, filled by the router.
#[derive(Debug, Default)]
struct Queue {
    answers: Vec<(u64, Range<usize>)>,
    bytes: Vec<u8>,
    gone: Vec<(u64, &'static str)>,
}

#[derive(Debug)]
struct Route {
    queue: Mutex<Queue>,
    /// Readable when the queue got something (the thread's `OffloadHook::wake_fd`).
    wake: OwnedFd,
}

impl Route {
    fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd; a full counter (EAGAIN)
        // already means "readable", which is all we need.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// A new host's channels, each taken by the thread that serves it.
#[derive(Debug, Default)]
struct Next {
    /// For the file-service thread.
    files: Option<HostChannel>,
    /// For the router: the new attachment's generation, a view of its forwarding channel (to
    /// consume answers) and of its file channel (its heartbeat).
    forward: Option<(u64, HostChannel, HostChannel)>,
}

/// What the front end, the router and the file-service thread share.
#[derive(Debug)]
pub(super) struct Link {
    routes: Box<[Route]>,
    current: Mutex<Arc<Attachment>>,
    next: Mutex<Next>,
    pub(super) timing_on: AtomicBool,
    pub(super) timing: Mutex<Timing>,
    pub(super) stats: LinkStats,
}

fn io(what: &str, source: std::io::Error) -> HostError {
    HostError::Dir { path: what.into(), source }
}

fn dup(ch: &HostChannel) -> Result<HostChannel, HostError> {
    HostChannel::attach(crate::pageserver::dup(ch)?)
}

fn sender(ch: HostChannel) -> ForwardEnd {
    // Never wait for room: a host that stopped taking requests must fail the requests
    // forwarded to it at once, not stall the server thread.
    let mut end = ForwardEnd::new(ch, Side::Server);
    end.set_timeout(std::time::Duration::ZERO);
    end
}

impl Link {
    /// A link for `threads` server threads over the first host's channels; returns it and the
    /// router's own ends (the forwarding channel to consume, the file channel to watch).
    pub(super) fn new(
        threads: usize,
        forward: &HostChannel,
        files: &HostChannel,
    ) -> Result<(Arc<Self>, ForwardEnd, HostChannel), HostError> {
        let mut routes = Vec::with_capacity(threads);
        for _ in 0..threads {
            // SAFETY: plain syscall; flags are valid.
            let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if raw < 0 {
                return Err(io("answer eventfd", std::io::Error::last_os_error()));
            }
            // SAFETY: a fresh fd we own.
            let wake = unsafe { OwnedFd::from_raw_fd(raw) };
            routes.push(Route { queue: Mutex::default(), wake });
        }
        let att =
            Attachment { generation: 0, send: sender(dup(forward)?), alive: AtomicBool::new(true) };
        let link = Arc::new(Self {
            routes: routes.into_boxed_slice(),
            current: Mutex::new(Arc::new(att)),
            next: Mutex::default(),
            timing_on: AtomicBool::new(false),
            timing: Mutex::default(),
            stats: LinkStats {
                routed: (0..threads).map(|_| AtomicU64::new(0)).collect(),
                dropped_answers: AtomicU64::new(0),
                hosts_gone: AtomicU64::new(0),
                reattached: AtomicU64::new(0),
            },
        });
        Ok((link, ForwardEnd::new(dup(forward)?, Side::Server), dup(files)?))
    }

    fn current(&self) -> Option<Arc<Attachment>> {
        self.current.lock().ok().map(|a| Arc::clone(&a))
    }

    /// Whether the attached host's heartbeat is moving (or it has not begun).
    pub(super) fn host_alive(&self) -> bool {
        // Relaxed: a liveness hint; requests are failed through the queues, not through it.
        self.current().is_some_and(|a| a.alive.load(Ordering::Relaxed))
    }

    /// Makes a new host the one requests are forwarded to (from now on), and hands its
    /// channels' other ends to the router and the file-service thread. Requests still waiting
    /// for the previous host fail.
    pub(super) fn attach(&self, files: HostChannel, forward: HostChannel) -> Result<(), HostError> {
        if self.host_alive() {
            return Err(HostError::HostAlive(HOST_HEARTBEAT_TIMEOUT));
        }
        let (files_view, recv_view) = (dup(&files)?, dup(&forward)?);
        let mut next = self.next.lock().map_err(|_| super::poisoned())?;
        let mut cur = self.current.lock().map_err(|_| super::poisoned())?;
        let old = cur.generation;
        *cur = Arc::new(Attachment {
            generation: old + 1,
            send: sender(forward),
            alive: AtomicBool::new(true),
        });
        drop(cur);
        next.files = Some(files);
        next.forward = Some((old + 1, recv_view, files_view));
        drop(next);
        self.stats.reattached.fetch_add(1, Ordering::Relaxed);
        self.fail_host(old, HOST_REPLACED);
        Ok(())
    }

    /// The file-service thread's share of a re-attach, if one is waiting.
    pub(super) fn take_next_files(&self) -> Option<HostChannel> {
        self.next.lock().ok()?.files.take()
    }

    /// Sends `msg` under `token` to the attached host; returns its generation.
    pub(super) fn forward(&self, token: u64, msg: &[u8]) -> Result<u64, String> {
        let att = self.current().ok_or("forward channel poisoned")?;
        // Relaxed: see host_alive.
        if !att.alive.load(Ordering::Relaxed) {
            return Err(HOST_GONE.into());
        }
        if self.timing_on.load(Ordering::Relaxed) {
            if let Ok(mut t) = self.timing.lock() {
                t.sent.insert(token, Instant::now());
            }
        }
        att.send.send(token, msg).map_err(|e| match e {
            HostError::Ring(crate::ring::RingError::Timeout(_)) => {
                "the host application's request ring is full (it is not taking requests)".into()
            }
            e => e.to_string(),
        })?;
        Ok(att.generation)
    }

    /// Hands thread `thread`'s queued answers and host-gone notices to `f`.
    pub(super) fn poll(&self, thread: usize, f: &mut dyn FnMut(HostAnswer<'_>)) -> usize {
        let Some(Ok(mut q)) = self.routes.get(thread).map(|r| r.queue.lock()) else { return 0 };
        let n = q.gone.len() + q.answers.len();
        // Answers first: one that arrived before its host was judged gone is still relayed.
        for (token, range) in &q.answers {
            f(HostAnswer::Data { token: *token, data: &q.bytes[range.clone()] });
        }
        for &(host, reason) in &q.gone {
            f(HostAnswer::HostGone { host, reason });
        }
        q.gone.clear();
        q.answers.clear();
        q.bytes.clear();
        n
    }

    /// Thread `thread`'s eventfd.
    pub(super) fn wake_fd(&self, thread: usize) -> Option<std::os::fd::RawFd> {
        self.routes.get(thread).map(|r| r.wake.as_raw_fd())
    }

    /// Every thread's requests to host `generation` fail with `why`.
    fn fail_host(&self, generation: u64, why: &'static str) {
        for r in &self.routes {
            if let Ok(mut q) = r.queue.lock() {
                q.gone.push((generation, why));
            }
            r.signal();
        }
    }

    /// Queues one answer for the thread named in its token; returns that thread.
    fn route(&self, token: u64, data: &[u8]) -> Option<usize> {
        let t = token_thread(token);
        let queued = self.routes.get(t).and_then(|r| r.queue.lock().ok()).is_some_and(|mut q| {
            if q.bytes.len() + data.len() > MAX_ROUTE_BYTES {
                return false;
            }
            let at = q.bytes.len();
            q.bytes.extend_from_slice(data);
            let end = q.bytes.len();
            q.answers.push((token, at..end));
            true
        });
        if queued {
            self.stats.routed[t].fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.dropped_answers.fetch_add(1, Ordering::Relaxed);
        }
        queued.then_some(t)
    }

    fn record_timing(&self, token: u64, host: crate::host::forward::AnswerTiming) {
        if !self.timing_on.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut t) = self.timing.lock() else { return };
        let Some(sent) = t.sent.remove(&token) else { return };
        let rtt = u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let (h, d) = (u64::from(host.host_ns), u64::from(host.device_ns));
        let TimingSamples {
            forwarded_ring_ns,
            forwarded_host_ns,
            forwarded_device_ns,
            dropped,
            ..
        } = &mut t.samples;
        TimingSamples::push(forwarded_ring_ns, dropped, rtt.saturating_sub(h));
        TimingSamples::push(forwarded_host_ns, dropped, h.saturating_sub(d));
        TimingSamples::push(forwarded_device_ns, dropped, d);
    }
}

/// The host's heartbeat as the router last saw it.
struct Heartbeat {
    last: (u64, u64),
    moved_at: Instant,
}

impl Heartbeat {
    fn new() -> Self {
        Self { last: (0, 0), moved_at: Instant::now() }
    }

    /// Whether the host is alive now: it never beat yet (still starting), or it beat within
    /// [`HOST_HEARTBEAT_TIMEOUT`].
    fn check(&mut self, forward: &HostChannel, files: &HostChannel) -> bool {
        let now = (forward.heartbeat(), files.heartbeat());
        if now != self.last {
            self.last = now;
            self.moved_at = Instant::now();
        }
        self.last == (0, 0) || self.moved_at.elapsed() < HOST_HEARTBEAT_TIMEOUT
    }
}

/// The router thread: see the module comment.
pub(super) fn start_router(
    link: Arc<Link>,
    mut recv: ForwardEnd,
    mut files: HostChannel,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, HostError> {
    std::thread::Builder::new()
        .name("storefn-dds-answers".into())
        .spawn(move || {
            let mut beat = Heartbeat::new();
            // The attachment whose channels `recv` and `files` are.
            let mut generation = 0;
            let mut touched = vec![false; link.routes.len()];
            // Relaxed: a stop flag; nothing is published through it.
            while !stop.load(Ordering::Relaxed) {
                if let Some((g, fwd, f)) = link.next.lock().ok().and_then(|mut n| n.forward.take())
                {
                    (generation, files) = (g, f);
                    recv = ForwardEnd::new(fwd, Side::Server);
                    beat = Heartbeat::new();
                }
                let n = recv
                    .poll_timed(|token, host, data| {
                        link.record_timing(token, host);
                        if let Some(t) = link.route(token, data) {
                            touched[t] = true;
                        }
                    })
                    .unwrap_or_else(|e| {
                        eprintln!("storefn-dds: host answer ring: {e}");
                        0
                    });
                for (t, hit) in touched.iter_mut().enumerate() {
                    if std::mem::take(hit) {
                        link.routes[t].signal();
                    }
                }
                watch_heartbeat(&link, generation, &mut beat, recv.channel(), &files);
                if n == 0 {
                    recv.wait_incoming(PARK_SLICE);
                }
            }
        })
        .map_err(|e| io("answer router thread", e))
}

/// Judges the host's liveness; on a change, fails its waiting requests or lets new ones through.
fn watch_heartbeat(
    link: &Link,
    generation: u64,
    beat: &mut Heartbeat,
    forward: &HostChannel,
    files: &HostChannel,
) {
    let alive = beat.check(forward, files);
    // A host attached since: its channels are not taken yet, and these are not its.
    let Some(att) = link.current().filter(|a| a.generation == generation) else { return };
    // Relaxed: see Link::host_alive.
    if att.alive.swap(alive, Ordering::Relaxed) && !alive {
        link.stats.hosts_gone.fetch_add(1, Ordering::Relaxed);
        link.fail_host(att.generation, HOST_GONE);
    }
}
