//! storefn-netdelay: network emulation in user space, for a kernel without netem.
//!
//! A [`DelayProxy`] listens on one address and forwards every accepted TCP connection to another,
//! adding half the configured round-trip time in each direction and, optionally, a bandwidth cap
//! (docs/design/server.md, "Network emulation"). The delay is in the path, not a sleep before a
//! request: each chunk read from one side is stamped with its delivery time
//! (`link free + serialization + one-way delay`) and a per-direction writer sends it at that
//! moment, so chunks in flight overlap exactly as on a long link (no head-of-line sleeping
//! that would stall the pipe, and no throughput beyond the cap).
//!
//! ```no_run
//! # use storefn_netdelay::DelayProxy;
//! let server: std::net::SocketAddr = "127.0.0.1:7000".parse().unwrap();
//! let proxy = DelayProxy::spawn("127.0.0.1:0".parse().unwrap(), server, 200, None).unwrap();
//! // Clients connect to proxy.local_addr() and see 200 µs more round-trip time.
//! proxy.shutdown();
//! ```

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
pub mod limits;
use limits::{
    CHUNK_BYTES, CONNECT_TIMEOUT, MAX_CONNECTIONS, MAX_RTT_US, POLL_INTERVAL, QUEUE_CHUNKS,
    SPIN_BELOW,
};

/// Counters of one proxy (relaxed atomics: statistics only, never used to synchronize).
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted and forwarded.
    pub connections: AtomicU64,
    /// Connections closed at accept because [`MAX_CONNECTIONS`] were open, or the target
    /// refused.
    pub refused: AtomicU64,
    /// Bytes delivered client -> target.
    pub bytes_up: AtomicU64,
    /// Bytes delivered target -> client.
    pub bytes_down: AtomicU64,
}

/// A running delay proxy. Dropping it shuts it down (as [`DelayProxy::shutdown`]).
#[derive(Debug)]
pub struct DelayProxy {
    local: SocketAddr,
    rtt_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    stats: Arc<ProxyStats>,
    accept: Option<JoinHandle<()>>,
}

/// One direction of the emulated link: when the wire is next free, and the delivery stamp.
#[derive(Debug, Clone)]
struct Link {
    /// The proxy's current RTT in µs (changed by [`DelayProxy::set_rtt_us`]); half each way.
    rtt_us: Arc<AtomicU64>,
    /// Serialization time per byte; `None` = unlimited bandwidth.
    ns_per_byte: Option<f64>,
    free_at: Instant,
    last_deliver: Instant,
}

impl Link {
    fn new(rtt_us: Arc<AtomicU64>, mbit: Option<f64>) -> Self {
        let now = Instant::now();
        Self { rtt_us, ns_per_byte: mbit.map(|m| 8_000.0 / m), free_at: now, last_deliver: now }
    }

    /// Delivery time of `len` bytes that arrived at `now`: after the wire has carried every
    /// earlier byte and this chunk, plus the one-way delay. Never earlier than the previous
    /// chunk's (TCP is a byte stream: order is kept).
    fn stamp(&mut self, now: Instant, len: usize) -> Instant {
        let sent = match self.ns_per_byte {
            Some(ns) => {
                let start = self.free_at.max(now);
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let tx = Duration::from_nanos((ns * len as f64).ceil() as u64);
                self.free_at = start + tx;
                self.free_at
            }
            None => now,
        };
        // Relaxed: a setting read afresh per chunk; no other memory depends on it.
        let one_way = Duration::from_micros(self.rtt_us.load(Ordering::Relaxed) / 2);
        self.last_deliver = (sent + one_way).max(self.last_deliver);
        self.last_deliver
    }
}

impl DelayProxy {
    /// Listens on `listen` (port 0 picks one; see [`DelayProxy::local_addr`]) and forwards
    /// every connection to `to`, adding `rtt_us` µs of round-trip time and, with
    /// `mbit = Some(m)`, capping each direction of each connection at `m` Mbit/s.
    ///
    /// # Errors
    /// Binding the listener; `rtt_us` above [`MAX_RTT_US`] or a non-positive `mbit`
    /// (`InvalidInput`).
    pub fn spawn(
        listen: SocketAddr,
        to: SocketAddr,
        rtt_us: u64,
        mbit: Option<f64>,
    ) -> io::Result<Self> {
        check_rtt(rtt_us)?;
        if let Some(m) = mbit {
            if !(m.is_finite() && m > 0.0) {
                return Err(io::Error::new(
                    ErrorKind::InvalidInput,
                    format!("bandwidth {m} Mbit/s must be a positive number"),
                ));
            }
        }
        let listener = TcpListener::bind(listen)?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ProxyStats::default());
        let rtt = Arc::new(AtomicU64::new(rtt_us));
        let route =
            Route { to, rtt_us: rtt.clone(), mbit, stop: stop.clone(), stats: stats.clone() };
        let accept = thread::Builder::new()
            .name("netdelay-accept".into())
            .spawn(move || accept_loop(&listener, &route))?;
        Ok(Self { local, rtt_us: rtt, stop, stats, accept: Some(accept) })
    }

    /// The address clients connect to.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Changes the added round-trip time from now on, for every connection (benchmarks whose
    /// conditions change midway). Chunks already stamped keep their delivery time, and no
    /// chunk is delivered before one read earlier (order is kept when the RTT drops).
    ///
    /// # Errors
    /// `rtt_us` above [`MAX_RTT_US`].
    pub fn set_rtt_us(&self, rtt_us: u64) -> io::Result<()> {
        check_rtt(rtt_us)?;
        // Relaxed: see `Link::stamp`.
        self.rtt_us.store(rtt_us, Ordering::Relaxed);
        Ok(())
    }

    /// The round-trip time added now, µs.
    #[must_use]
    pub fn rtt_us(&self) -> u64 {
        self.rtt_us.load(Ordering::Relaxed)
    }

    #[must_use]
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }

    /// Stops accepting, closes every forwarded connection (both sides see EOF or a reset) and
    /// joins every thread; returns within a few [`POLL_INTERVAL`]s.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let Some(accept) = self.accept.take() else { return };
        // Release: the threads that see `stop` also see nothing else from us; it is a flag.
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own (it sees `stop` and exits).
        let mut wake = self.local;
        if wake.ip().is_unspecified() {
            wake.set_ip(if wake.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        let _ = TcpStream::connect_timeout(&wake, CONNECT_TIMEOUT);
        let _ = accept.join();
    }
}

fn check_rtt(rtt_us: u64) -> io::Result<()> {
    if rtt_us > MAX_RTT_US {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!("rtt {rtt_us} µs is above the limit of {MAX_RTT_US} µs"),
        ));
    }
    Ok(())
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// What every connection of one proxy shares: where to, the link, the stop flag, the counters.
#[derive(Debug, Clone)]
struct Route {
    to: SocketAddr,
    rtt_us: Arc<AtomicU64>,
    mbit: Option<f64>,
    stop: Arc<AtomicBool>,
    stats: Arc<ProxyStats>,
}

fn accept_loop(listener: &TcpListener, route: &Route) {
    let (stop, stats) = (&route.stop, &route.stats);
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let accepted = listener.accept();
        // Acquire pairs with the Release in `stop_and_join`.
        if stop.load(Ordering::Acquire) {
            break;
        }
        let Ok((client, _)) = accepted else {
            // EMFILE and friends: back off instead of spinning on the error.
            thread::sleep(POLL_INTERVAL);
            continue;
        };
        conns.retain(|h| !h.is_finished());
        if conns.len() >= MAX_CONNECTIONS {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let r = route.clone();
        let spawned =
            thread::Builder::new().name("netdelay-conn".into()).spawn(move || serve(&client, &r));
        match spawned {
            Ok(h) => conns.push(h),
            Err(_) => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    for h in conns {
        let _ = h.join();
    }
}

/// One forwarded connection, served by this one thread: it reads whatever either side sends,
/// stamps it, and writes it to the other side at its stamp. One thread (not a reader and a
/// writer per direction) means a chunk costs one wake-up when it arrives and at most one when
/// it is due, never a hand-off between threads, whose wake-up latency would add to every
/// emulated round trip and make it vary.
fn serve(client: &TcpStream, route: &Route) {
    let Route { to, ref rtt_us, mbit, ref stop, ref stats } = *route;
    let Ok(target) = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) else {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    stats.connections.fetch_add(1, Ordering::Relaxed);
    fine_timer_slack();
    let ends = [client, &target];
    for s in ends {
        let _ = s.set_nodelay(true);
    }
    if ends.iter().all(|s| s.set_nonblocking(true).is_ok()) {
        let mut pipes = [
            Pipe::new(Link::new(rtt_us.clone(), mbit), true),
            Pipe::new(Link::new(rtt_us.clone(), mbit), false),
        ];
        let mut buf = vec![0u8; CHUNK_BYTES];
        while !stop.load(Ordering::Acquire) && !pipes.iter().all(Pipe::finished) {
            // Acquire above pairs with the Release in `stop_and_join`.
            if !step(ends, &mut pipes, &mut buf, stats) {
                break;
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = target.shutdown(Shutdown::Both);
}

/// One direction of a forwarded connection: what was read from one side and waits for its
/// delivery time to the other.
struct Pipe {
    link: Link,
    /// Chunks in order of their stamps; the front one may be partly written (`sent` bytes).
    queue: VecDeque<(Instant, Vec<u8>)>,
    sent: usize,
    /// The read side saw EOF at this stamp: a half-close follows the queued bytes.
    eof: Option<Instant>,
    /// The half-close was passed on.
    closed: bool,
    /// The last write would have blocked: wait for the socket to take more.
    blocked: bool,
    /// Client to target.
    up: bool,
}

impl Pipe {
    fn new(link: Link, up: bool) -> Self {
        let queue = VecDeque::new();
        Self { link, queue, sent: 0, eof: None, closed: false, blocked: false, up }
    }

    fn finished(&self) -> bool {
        self.closed
    }

    /// Whether the source side may be read: not at EOF and the link's buffer not full.
    fn reads(&self) -> bool {
        self.eof.is_none() && self.queue.len() < QUEUE_CHUNKS
    }

    /// When the next delivery is due, unless it waits for the socket.
    fn due(&self) -> Option<Instant> {
        if self.blocked || self.closed {
            return None;
        }
        self.queue.front().map(|c| c.0).or(self.eof)
    }

    /// Reads what `from` has (one chunk) and stamps it. False on an error or EOF handled.
    fn fill(&mut self, mut from: &TcpStream, buf: &mut [u8]) -> Result<(), ()> {
        match from.read(buf) {
            Ok(0) => {
                self.eof = Some(self.link.stamp(Instant::now(), 0));
                Ok(())
            }
            Ok(n) => {
                let at = self.link.stamp(Instant::now(), n);
                self.queue.push_back((at, buf[..n].to_vec()));
                Ok(())
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(()),
            Err(_) => Err(()),
        }
    }

    /// Writes every chunk due by `now` to `into` (and the half-close after them).
    fn deliver(
        &mut self,
        mut into: &TcpStream,
        now: Instant,
        stats: &ProxyStats,
    ) -> Result<(), ()> {
        self.blocked = false;
        while let Some((at, bytes)) = self.queue.front() {
            if *at > now {
                return Ok(());
            }
            match into.write(&bytes[self.sent..]) {
                Ok(0) => return Err(()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
            if self.sent == bytes.len() {
                let c = if self.up { &stats.bytes_up } else { &stats.bytes_down };
                c.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                self.queue.pop_front();
                self.sent = 0;
            }
        }
        if self.eof.is_some_and(|at| at <= now) && !self.closed {
            let _ = into.shutdown(Shutdown::Write);
            self.closed = true;
        }
        Ok(())
    }
}

/// One turn of a connection's loop: deliver what is due, then wait (poll the sockets until the
/// next stamp, yielding through its last [`SPIN_BELOW`]) and read what arrived. False when
/// either side failed: the whole connection goes down.
fn step(ends: [&TcpStream; 2], pipes: &mut [Pipe; 2], buf: &mut [u8], stats: &ProxyStats) -> bool {
    let now = Instant::now();
    for (i, p) in pipes.iter_mut().enumerate() {
        if p.deliver(ends[1 - i], now, stats).is_err() {
            return false;
        }
    }
    let due = pipes.iter().filter_map(Pipe::due).min();
    let wait = match due {
        Some(at) => at.saturating_duration_since(Instant::now()),
        None => POLL_INTERVAL,
    };
    // Within the last stretch, only look (a zero timeout) and yield, so an arrival is still
    // stamped when it comes and the delivery is not late by a timer's overshoot.
    let timeout =
        if wait <= SPIN_BELOW { Duration::ZERO } else { (wait - SPIN_BELOW).min(POLL_INTERVAL) };
    let mut fds = [0usize, 1].map(|i| {
        let events = (if pipes[i].reads() { libc::POLLIN } else { 0 })
            | (if pipes[1 - i].blocked { libc::POLLOUT } else { 0 });
        // A socket with nothing to wait for is left out (a negative fd), or a hang-up it
        // keeps reporting would turn the wait into a spin.
        let fd = if events == 0 { -1 } else { ends[i].as_raw_fd() };
        libc::pollfd { fd, events, revents: 0 }
    });
    let Some(ready) = poll(&mut fds, timeout) else { return false };
    if ready == 0 && timeout.is_zero() && due.is_some() {
        thread::yield_now();
    }
    for i in 0..2 {
        let r = fds[i].revents;
        if r & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            && pipes[i].reads()
            && pipes[i].fill(ends[i], buf).is_err()
        {
            return false;
        }
        if r & libc::POLLERR != 0 && !pipes[i].reads() {
            return false;
        }
    }
    true
}

/// `ppoll` on `fds` for at most `timeout`: the number of ready descriptors, 0 on a timeout or a
/// signal, `None` on an error.
fn poll(fds: &mut [libc::pollfd; 2], timeout: Duration) -> Option<usize> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    // SAFETY: `fds` is a valid array of 2 pollfd that the kernel may write (`revents`) for
    // the call's duration; `ts` outlives the call; a null sigmask leaves the mask unchanged.
    let n = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    match usize::try_from(n) {
        Ok(n) => Some(n),
        Err(_) if io::Error::last_os_error().kind() == ErrorKind::Interrupted => Some(0),
        Err(_) => None,
    }
}

/// Asks for 1 ns timer slack on this thread (the default 50 µs would be added to every
/// delivery). Best effort: without it the delays are only less precise, never shorter.
fn fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and touches only this thread's
    // timer slack; the remaining arguments are ignored.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_add_half_the_rtt_and_keep_order() {
        let mut l = Link::new(Arc::new(AtomicU64::new(1000)), None);
        let t0 = Instant::now();
        assert_eq!(l.stamp(t0, 10), t0 + Duration::from_micros(500));
        // A chunk read "earlier" (clock skew between threads cannot happen, but order must
        // hold whatever the stamps): never delivered before the previous one.
        assert_eq!(l.stamp(t0, 10), t0 + Duration::from_micros(500));
    }

    #[test]
    fn stamps_serialize_at_the_cap() {
        // 8 Mbit/s = 1 byte per µs.
        let mut l = Link::new(Arc::new(AtomicU64::new(0)), Some(8.0));
        let t0 = Instant::now();
        assert_eq!(l.stamp(t0, 1000), t0 + Duration::from_micros(1000));
        // Arrives while the wire is busy: waits for it.
        assert_eq!(l.stamp(t0 + Duration::from_micros(10), 1000), t0 + Duration::from_micros(2000));
    }
}
