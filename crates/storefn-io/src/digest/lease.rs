//! Read leases (`fcntl(F_SETLEASE, F_RDLCK)`) as the "the file may have changed" alarm.
//!
//! While a read lease is held, the kernel makes anyone who opens the file for writing, or
//! truncates it, wait until the holder releases the lease (or `/proc/sys/fs/lease-break-time`,
//! 45 s by default, passes), and signals the holder. A lease can only be taken when no one has
//! the file open for writing — so "lease taken and still unbroken" proves no write, truncate,
//! fallocate, punch or defragmentation could have touched the file in between.
//!
//! Break detection, the robust simple choice: both a signal and a poll.
//! - The lease's break signal is set (`F_SETSIG`) to a realtime signal whose handler, using only
//!   async-signal-safe operations (atomic stores and `fcntl`), marks the guard broken and
//!   releases the lease at once, so a writer never waits out the break timer while raw mode is
//!   idle. Without a handler the default SIGIO would terminate the process.
//! - [`LeaseGuard::is_intact`] checks the mark and then asks the kernel with `F_GETLEASE`, which
//!   reports `F_UNLCK` as soon as a break starts. The poll alone is authoritative, so a masked
//!   or lost signal (the kernel then drops the lease at the break timer) can delay a writer but
//!   can never make stale data look valid. Cost: one ~0.3 µs syscall.
//! - [`LeaseGuard::is_intact_recent`] (after every chain) checks the mark every time but polls
//!   at most once per [`LEASE_POLL_INTERVAL`]. Why that is as strong: with the mark clear, the
//!   handler has not released the lease, so a writer can only get through by the break timer,
//!   i.e. `lease-break-time` after the break started. A poll at most `LEASE_POLL_INTERVAL`
//!   before this check said "unbroken", so the break (if any) started after that poll, and no
//!   writer can have touched a block before `poll + lease-break-time` > now. This needs
//!   `lease-break-time` > `LEASE_POLL_INTERVAL`: it is read at acquire, and when it is 0 (the
//!   kernel then waits one jiffy) every check polls. (An admin lowering it to 0 while a lease is
//!   held, with the signal also lost, leaves the identity re-check as the guard.)
//!
//! Requirements: the process owns the file (fsuid == owner) or has CAP_LEASE; the file is a
//! regular file opened read-only (a read lease on a writable descriptor fails with EAGAIN);
//! `/proc/sys/fs/leases-enable` is 1. One guard per open file description.
//!
//! EAGAIN can be transient: a child between fork and exec holds copies of every fd of its
//! parent, including writable ones of the same file (O_CLOEXEC closes them only at exec). The
//! caller stays on the file path and may try again later.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use super::DigestError;
use crate::limits::{LEASE_POLL_INTERVAL, MAX_LEASES};

/// The lease-break signal is `SIGRTMIN() + LEASE_SIGNAL_OFFSET`: a realtime signal (queued, and
/// carrying the fd in `si_fd`), offset past the first few that threading libraries use.
pub const LEASE_SIGNAL_OFFSET: libc::c_int = 4;

/// `F_SETSIG` (linux/fcntl.h; not exported by the libc crate for glibc targets).
const F_SETSIG: libc::c_int = 10;

/// Where the kernel's lease break timer is configured (seconds).
const LEASE_BREAK_TIME_SYSCTL: &str = "/proc/sys/fs/lease-break-time";

const FREE_SLOT: i32 = -1;

/// fd registered per slot (`FREE_SLOT` when unused). The handler only acts on fds found here.
static SLOT_FD: [AtomicI32; MAX_LEASES] = [const { AtomicI32::new(FREE_SLOT) }; MAX_LEASES];
/// Set by the handler when the slot's lease break signal arrives.
static SLOT_BROKEN: [AtomicBool; MAX_LEASES] = [const { AtomicBool::new(false) }; MAX_LEASES];
/// Lease breaks seen by the handler since process start (diagnostics and tests).
static BREAKS_SEEN: AtomicU64 = AtomicU64::new(0);

static HANDLER: OnceLock<Result<libc::c_int, String>> = OnceLock::new();

/// The part of `siginfo_t` filled for SIGPOLL-style signals (`si_band`, `si_fd`): three ints,
/// then the union, aligned like `long`, exactly as `repr(C)` places it.
#[repr(C)]
struct SigPollInfo {
    si_signo: libc::c_int,
    si_errno: libc::c_int,
    si_code: libc::c_int,
    si_band: libc::c_long,
    si_fd: libc::c_int,
}

extern "C" fn on_lease_break(
    _sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    if info.is_null() {
        return;
    }
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t, which is larger than and
    // starts with the SIGPOLL layout above.
    let fd = unsafe { (*info.cast::<SigPollInfo>()).si_fd };
    for (slot_fd, broken) in SLOT_FD.iter().zip(&SLOT_BROKEN) {
        // SeqCst everywhere here: the "broken" mark must be globally visible before the
        // F_UNLCK below lets a writer proceed, and is_intact's load must not be reordered
        // before the read completions it vouches for. Costs nothing measurable.
        if fd >= 0 && slot_fd.load(Ordering::SeqCst) == fd {
            broken.store(true, Ordering::SeqCst);
            BREAKS_SEEN.fetch_add(1, Ordering::SeqCst);
            // SAFETY: fcntl is async-signal-safe; the fd is registered, so it is still open
            // (guards deregister before closing). A failure leaves the kernel's break timer.
            unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        }
    }
}

/// Install the handler once; returns the signal number.
fn lease_signal() -> Result<libc::c_int, DigestError> {
    let r = HANDLER.get_or_init(|| {
        let sig = libc::SIGRTMIN() + LEASE_SIGNAL_OFFSET;
        if sig > libc::SIGRTMAX() {
            return Err(format!("signal {sig} is past SIGRTMAX"));
        }
        // SAFETY: zeroed sigaction is valid; we pass valid pointers to sigaction.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &raw mut old) != 0 {
                return Err(format!("sigaction({sig}): {}", std::io::Error::last_os_error()));
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                return Err(format!("signal {sig} already has another handler"));
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_lease_break;
            act.sa_sigaction = handler as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&raw mut act.sa_mask);
            if libc::sigaction(sig, &raw const act, std::ptr::null_mut()) != 0 {
                return Err(format!("sigaction({sig}): {}", std::io::Error::last_os_error()));
            }
        }
        Ok(sig)
    });
    r.clone().map_err(|why| DigestError::Lease {
        err: std::io::Error::from_raw_os_error(libc::EBUSY),
        hint: if why.contains("another handler") {
            "the lease-break signal is taken by another handler"
        } else {
            "cannot install the lease-break signal handler"
        },
    })
}

/// Lease breaks the handler has seen in this process.
#[must_use]
pub fn lease_breaks_seen() -> u64 {
    BREAKS_SEEN.load(Ordering::SeqCst)
}

/// A read lease on a file; released on drop. See the module docs for the protocol.
#[derive(Debug)]
pub struct LeaseGuard {
    /// A dup of the caller's fd (same open file description, so the same lease); the lease's
    /// signals name this fd.
    file: File,
    slot: usize,
    /// Process-clock nanoseconds (since `clock_base`) of the last `F_GETLEASE` that found the
    /// lease intact. Relaxed: only the guard's owner reads and writes it, and a stale value can
    /// only make the next check poll sooner.
    last_poll_ns: AtomicU64,
    clock_base: Instant,
    /// `lease-break-time` was above [`LEASE_POLL_INTERVAL`] at acquire: polls may be spaced.
    may_space_polls: bool,
}

impl LeaseGuard {
    /// Take a read lease on `file` (which must be open read-only).
    ///
    /// # Errors
    /// [`DigestError::Lease`]: EAGAIN (the file is open for writing somewhere), EACCES (the
    /// process neither owns the file nor has CAP_LEASE), EINVAL (not a regular file, or the file
    /// system has no leases), EMFILE (more than [`MAX_LEASES`] guards) — stay on the file path.
    pub fn acquire(file: &File) -> Result<Self, DigestError> {
        let sig = lease_signal()?;
        let dup = file.try_clone().map_err(|err| DigestError::Io { op: "dup", err })?;
        let fd = dup.as_raw_fd();
        // SeqCst: the slot must be visibly ours before the lease exists and can be broken,
        // so the handler (on any thread) finds it.
        let slot = SLOT_FD
            .iter()
            .position(|s| {
                s.compare_exchange(FREE_SLOT, fd, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            })
            .ok_or(DigestError::Lease {
                err: std::io::Error::from_raw_os_error(libc::EMFILE),
                hint: "too many leases held at once (MAX_LEASES)",
            })?;
        SLOT_BROKEN[slot].store(false, Ordering::SeqCst);
        let guard = Self {
            file: dup,
            slot,
            last_poll_ns: AtomicU64::new(0),
            clock_base: Instant::now(),
            may_space_polls: break_time_allows_spacing(),
        };
        // SAFETY: plain fcntl calls on an open fd.
        if unsafe { libc::fcntl(fd, F_SETSIG, sig) } != 0 {
            return Err(DigestError::last_os("fcntl(F_SETSIG)")); // drop deregisters
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } != 0 {
            let err = std::io::Error::last_os_error();
            let hint = match err.raw_os_error() {
                Some(libc::EAGAIN) => "the file is open for writing (here or elsewhere)",
                Some(libc::EACCES) => "the process neither owns the file nor has CAP_LEASE",
                Some(libc::EINVAL) => "not a regular file, or the file system has no leases",
                _ => "unexpected error",
            };
            return Err(DigestError::Lease { err, hint });
        }
        Ok(guard)
    }

    /// True while the lease has not been broken (no one opened the file for writing or
    /// truncated it since [`LeaseGuard::acquire`]). Call after a chain's reads completed.
    #[must_use]
    pub fn is_intact(&self) -> bool {
        if SLOT_BROKEN[self.slot].load(Ordering::SeqCst) {
            return false;
        }
        let now_ns = self.now_ns();
        // SAFETY: plain fcntl on an open fd.
        let state = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_GETLEASE) };
        if state != libc::F_RDLCK {
            return false;
        }
        // Stamped with the time before the poll: the "unbroken" answer holds from then on.
        self.last_poll_ns.store(now_ns, Ordering::Relaxed);
        true
    }

    /// As [`LeaseGuard::is_intact`], but the `F_GETLEASE` poll runs only when the last one is
    /// more than [`LEASE_POLL_INTERVAL`] old (or `lease-break-time` is 0); the handler's mark
    /// is checked every time. Equally safe, see the module docs. Call after a chain's reads
    /// completed.
    #[must_use]
    pub fn is_intact_recent(&self) -> bool {
        if SLOT_BROKEN[self.slot].load(Ordering::SeqCst) {
            return false;
        }
        let last_ns = self.last_poll_ns.load(Ordering::Relaxed);
        if poll_is_fresh(self.may_space_polls, last_ns, self.now_ns()) {
            return true;
        }
        self.is_intact()
    }

    /// Nanoseconds since `clock_base`, never 0 (0 marks "never polled").
    fn now_ns(&self) -> u64 {
        u64::try_from(self.clock_base.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
    }

    /// [`LeaseGuard::is_intact`] as a `Result`.
    ///
    /// # Errors
    /// [`DigestError::Stale`] when the lease broke.
    pub fn check(&self) -> Result<(), DigestError> {
        if self.is_intact_recent() {
            Ok(())
        } else {
            Err(DigestError::Stale {
                why: "read lease broken: the file was opened for writing or truncated",
            })
        }
    }

    /// The guard's own fd (a dup of the caller's).
    #[must_use]
    pub fn file(&self) -> &File {
        &self.file
    }

    fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// True when a poll at `last_ns` (0: never) still vouches for the lease at `now_ns`.
fn poll_is_fresh(may_space_polls: bool, last_ns: u64, now_ns: u64) -> bool {
    let interval_ns = LEASE_POLL_INTERVAL.as_nanos() as u64;
    may_space_polls && last_ns != 0 && now_ns >= last_ns && now_ns - last_ns <= interval_ns
}

/// True when `lease-break-time` is at least a second (the sysctl counts whole seconds, so
/// anything but 0), i.e. far above [`LEASE_POLL_INTERVAL`]. Unreadable: assume the worst.
fn break_time_allows_spacing() -> bool {
    const _: () = assert!(LEASE_POLL_INTERVAL.as_millis() < 1000);
    std::fs::read_to_string(LEASE_BREAK_TIME_SYSCTL)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .is_some_and(|secs| secs >= 1)
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        // SAFETY: plain fcntl on an open fd; failing (no lease held) is harmless.
        unsafe { libc::fcntl(self.raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
        // Deregister before the fd closes so the handler never touches a reused fd number.
        SLOT_FD[self.slot].store(FREE_SLOT, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_poll_vouches_only_within_the_interval_and_only_when_spacing_is_allowed() {
        assert!(poll_is_fresh(true, 5 * MS, 5 * MS));
        assert!(poll_is_fresh(true, 5 * MS, 6 * MS));
        assert!(!poll_is_fresh(true, 5 * MS, 6 * MS + 1));
        // Never polled, or the clock went backwards: poll.
        assert!(!poll_is_fresh(true, 0, 1));
        assert!(!poll_is_fresh(true, 5 * MS, 4 * MS));
        // lease-break-time 0: every check polls.
        assert!(!poll_is_fresh(false, 5 * MS, 5 * MS));
    }
}
