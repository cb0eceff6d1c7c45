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

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
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

enum Msg {
    Data(Instant, Vec<u8>),
    /// The sender closed its write side: pass the half-close on after the queued bytes.
    Eof(Instant),
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

/// One forwarded connection: a reader and a writer per direction; returns when all four end.
fn serve(client: &TcpStream, route: &Route) {
    let Route { to, ref rtt_us, mbit, ref stop, ref stats } = *route;
    let Ok(target) = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) else {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    stats.connections.fetch_add(1, Ordering::Relaxed);
    let dead = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::with_capacity(4);
    for (from, into, up) in [(client, &target, true), (&target, client, false)] {
        let (Ok(r), Ok(w)) = (from.try_clone(), into.try_clone()) else {
            dead.store(true, Ordering::Release);
            break;
        };
        let _ = r.set_nodelay(true);
        let _ = w.set_nodelay(true);
        let (tx, rx) = mpsc::sync_channel::<Msg>(QUEUE_CHUNKS);
        let link = Link::new(rtt_us.clone(), mbit);
        let ctl = Ctl { stop: stop.clone(), dead: dead.clone(), stats: stats.clone(), up };
        let ctl2 = ctl.clone();
        let (a, b) = (
            thread::Builder::new()
                .name("netdelay-rd".into())
                .spawn(move || reader(r, &tx, link, &ctl)),
            thread::Builder::new().name("netdelay-wr".into()).spawn(move || writer(w, &rx, &ctl2)),
        );
        threads.extend([a, b].into_iter().flatten());
    }
    for h in threads {
        let _ = h.join();
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = target.shutdown(Shutdown::Both);
}

#[derive(Clone)]
struct Ctl {
    stop: Arc<AtomicBool>,
    /// Set when either direction fails: the whole connection goes down.
    dead: Arc<AtomicBool>,
    stats: Arc<ProxyStats>,
    up: bool,
}

impl Ctl {
    fn halted(&self) -> bool {
        // Acquire pairs with the Release stores of `stop` and `dead`.
        self.stop.load(Ordering::Acquire) || self.dead.load(Ordering::Acquire)
    }

    fn kill(&self) {
        self.dead.store(true, Ordering::Release);
    }
}

fn reader(mut from: TcpStream, tx: &SyncSender<Msg>, mut link: Link, ctl: &Ctl) {
    if from.set_read_timeout(Some(POLL_INTERVAL)).is_err() {
        ctl.kill();
        return;
    }
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        if ctl.halted() {
            return;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = tx.send(Msg::Eof(link.stamp(Instant::now(), 0)));
                return;
            }
            Ok(n) => {
                let at = link.stamp(Instant::now(), n);
                if !send_polling(tx, Msg::Data(at, buf[..n].to_vec()), ctl) {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                ctl.kill();
                return;
            }
        }
    }
}

/// Queues `msg`, waiting while the link buffer is full but giving up when the proxy stops.
fn send_polling(tx: &SyncSender<Msg>, mut msg: Msg, ctl: &Ctl) -> bool {
    loop {
        match tx.try_send(msg) {
            Ok(()) => return true,
            Err(mpsc::TrySendError::Full(m)) => {
                if ctl.halted() {
                    return false;
                }
                msg = m;
                thread::sleep(Duration::from_micros(200));
            }
            Err(mpsc::TrySendError::Disconnected(_)) => return false,
        }
    }
}

fn writer(mut into: TcpStream, rx: &Receiver<Msg>, ctl: &Ctl) {
    fine_timer_slack();
    if into.set_write_timeout(Some(POLL_INTERVAL)).is_err() {
        ctl.kill();
        return;
    }
    loop {
        match rx.recv_timeout(POLL_INTERVAL) {
            Ok(Msg::Data(at, bytes)) => {
                if !sleep_until(at, ctl) || !write_polling(&mut into, &bytes, ctl) {
                    ctl.kill();
                    return;
                }
                let c = if ctl.up { &ctl.stats.bytes_up } else { &ctl.stats.bytes_down };
                c.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            Ok(Msg::Eof(at)) => {
                if sleep_until(at, ctl) {
                    let _ = into.shutdown(Shutdown::Write);
                }
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                if ctl.halted() {
                    return;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// `write_all` that retries on the poll timeout (a slow peer) but gives up when halted.
fn write_polling(into: &mut TcpStream, mut bytes: &[u8], ctl: &Ctl) -> bool {
    while !bytes.is_empty() {
        match into.write(bytes) {
            Ok(0) => return false,
            Ok(n) => bytes = &bytes[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if ctl.halted() {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// Waits until `at`: sleeps in [`POLL_INTERVAL`] steps (so a stop is seen), then yields for the
/// last [`SPIN_BELOW`]. Returns false when halted first.
fn sleep_until(at: Instant, ctl: &Ctl) -> bool {
    loop {
        if ctl.halted() {
            return false;
        }
        let now = Instant::now();
        if now >= at {
            return true;
        }
        let left = at - now;
        if left > SPIN_BELOW {
            thread::sleep((left - SPIN_BELOW).min(POLL_INTERVAL));
        } else {
            thread::yield_now();
        }
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
