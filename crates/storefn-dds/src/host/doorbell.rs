//! Doorbells: how a waiter on a host-channel ring sleeps instead of spinning, and how the
//! other side wakes it. One per ring, in the channel header (docs/FORMAT.md, "DDS host
//! channel"): a `seq` word a producer bumps after publishing and a `waiters` word a consumer
//! raises while it may sleep. The ring's own lock-free progress protocol is unchanged; the
//! doorbell only decides when a consumer that found nothing may block in `futex(2)` on `seq`
//! (a shared, non-private futex: the two ends are different processes).
//!
//! **No lost wake-up** (all four accesses `SeqCst`, so they are in one total order S):
//! - producer: publish the record (`progress`, release), then `seq += 1`, then load `waiters`,
//!   and `FUTEX_WAKE` when it is non-zero;
//! - consumer: `waiters += 1`, then load `seq` (= s), then check the ring, then
//!   `FUTEX_WAIT(seq, s)`, then `waiters -= 1`.
//!
//! If the producer's `waiters` load comes after the consumer's increment in S, it wakes; the
//! kernel's futex either finds the consumer asleep or makes its wait fail with `seq != s`. If it
//! comes before, the producer's `seq += 1` is before the consumer's `seq` load in S, so the
//! consumer reads the new `seq`, which synchronises with the increment: the record published
//! before it is visible to the consumer's ring check. Either way the consumer does not sleep
//! through a published record. A peer that scribbles on the words can only cause spurious
//! wake-ups or a sleep of at most one [`PARK_SLICE`]; every sleep is bounded by it.

use crate::limits::{PARK_SLICE, SPIN_POLLS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[cfg(not(target_endian = "little"))]
compile_error!("the doorbell futex is the low half of a little-endian u64");

/// One ring's doorbell over two words of the channel header.
#[derive(Debug, Clone, Copy)]
pub struct Doorbell<'a> {
    seq: &'a AtomicU64,
    waiters: &'a AtomicU64,
}

impl<'a> Doorbell<'a> {
    pub(crate) fn new(seq: &'a AtomicU64, waiters: &'a AtomicU64) -> Self {
        Self { seq, waiters }
    }

    /// Called after publishing one or more records: wakes the consumer if it sleeps.
    pub fn ring(&self) {
        // SeqCst: see the module comment (the increment and the waiters load are in S).
        self.seq.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) != 0 {
            futex(self.seq, libc::FUTEX_WAKE, i32::MAX as u32, None);
        }
    }

    /// Registers as a waiter, runs `ready` (which may consume what it finds), and sleeps up to
    /// `timeout` (at most [`PARK_SLICE`]) unless it returned true or the bell rang in between.
    /// Returns `ready`'s answer.
    ///
    /// # Errors
    /// `ready`'s error (the waiter is deregistered first).
    pub fn park_unless<E>(
        &self,
        timeout: Duration,
        ready: impl FnOnce() -> Result<bool, E>,
    ) -> Result<bool, E> {
        // SeqCst: see the module comment.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let seen = self.seq.load(Ordering::SeqCst);
        let r = ready();
        if matches!(r, Ok(false)) {
            // The futex compares the low 32 bits (the futex word) with what we saw.
            futex(self.seq, libc::FUTEX_WAIT, seen as u32, Some(timeout.min(PARK_SLICE)));
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Polls `poll` [`SPIN_POLLS`] times, then sleeps on the bell between polls, until it
    /// returns true (`Ok(true)`) or `deadline` passes (`Ok(false)`).
    ///
    /// # Errors
    /// `poll`'s error.
    pub fn wait_until<E>(
        &self,
        deadline: Instant,
        mut poll: impl FnMut() -> Result<bool, E>,
    ) -> Result<bool, E> {
        for _ in 0..SPIN_POLLS {
            if poll()? {
                return Ok(true);
            }
            std::hint::spin_loop();
        }
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            if self.park_unless(deadline - now, &mut poll)? {
                return Ok(true);
            }
        }
    }
}

/// `futex(word, op, val, timeout)` on the low 32 bits of `word`; the result is ignored (a wait
/// returns early on EAGAIN/EINTR/ETIMEDOUT alike; callers re-check their condition).
fn futex(word: &AtomicU64, op: libc::c_int, val: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: `word` is a live, 8-aligned atomic, so its first 4 bytes are a valid, aligned
    // u32 futex word for the call's duration (the kernel only reads it atomically); `ts_ptr`
    // is null or points at a timespec that outlives the call. Not FUTEX_PRIVATE_FLAG: the
    // word lives in a MAP_SHARED memfd mapped by two processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr().cast::<u32>(),
            op,
            val,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
