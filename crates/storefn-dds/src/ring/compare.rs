//! The two rings DDS measures its progressive ring against (in-process, heap memory):
//! [`MutexRing`], a byte ring behind one lock, and [`FlagRing`], fixed-size slots each with a
//! ready flag (producers reserve a slot by CAS on `tail`; the consumer takes slots in order
//! while their flags are set).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::RingError;

/// A byte ring of length-prefixed messages behind one mutex (the baseline).
#[derive(Debug)]
pub struct MutexRing {
    inner: Mutex<MutexInner>,
    max_message: usize,
}

#[derive(Debug)]
struct MutexInner {
    buf: Box<[u8]>,
    head: usize,
    tail: usize,
}

/// Length prefix of a [`MutexRing`] message.
const LEN_BYTES: usize = 4;

impl MutexRing {
    /// A ring of `capacity` bytes for messages up to `max_message` bytes.
    ///
    /// # Errors
    /// `Layout` when a message could not fit twice.
    pub fn new(capacity: usize, max_message: usize) -> Result<Self, RingError> {
        if max_message == 0 || (LEN_BYTES + max_message) * 2 > capacity {
            return Err(RingError::Layout(format!(
                "mutex ring: capacity {capacity}, max message {max_message}"
            )));
        }
        let inner = MutexInner { buf: vec![0; capacity].into_boxed_slice(), head: 0, tail: 0 };
        Ok(Self { inner: Mutex::new(inner), max_message })
    }

    /// Pushes one message.
    ///
    /// # Errors
    /// `TooLarge` or `Full`.
    pub fn try_push(&self, msg: &[u8]) -> Result<(), RingError> {
        if msg.len() > self.max_message {
            return Err(RingError::TooLarge { len: msg.len(), max: self.max_message });
        }
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let cap = g.buf.len();
        if g.tail - g.head + LEN_BYTES + msg.len() > cap {
            return Err(RingError::Full);
        }
        let tail = g.tail;
        g.copy_in(tail, &(msg.len() as u32).to_le_bytes());
        g.copy_in(tail + LEN_BYTES, msg);
        g.tail += LEN_BYTES + msg.len();
        Ok(())
    }

    /// Takes up to `max_records` messages (copied out under the lock into `scratch`, then
    /// handed to `f` after it is released). Returns how many.
    pub fn pop_batch(
        &self,
        max_records: usize,
        scratch: &mut Vec<u8>,
        mut f: impl FnMut(&[u8]),
    ) -> usize {
        scratch.clear();
        let mut n = 0;
        {
            let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            while n < max_records && g.head < g.tail {
                let mut len = [0u8; LEN_BYTES];
                g.copy_out(g.head, &mut len);
                let len = u32::from_le_bytes(len) as usize;
                let at = scratch.len();
                scratch.resize(at + LEN_BYTES + len, 0);
                scratch[at..at + LEN_BYTES].copy_from_slice(&(len as u32).to_le_bytes());
                g.copy_out(g.head + LEN_BYTES, &mut scratch[at + LEN_BYTES..]);
                g.head += LEN_BYTES + len;
                n += 1;
            }
        }
        let mut at = 0;
        while at < scratch.len() {
            let len = u32::from_le_bytes(scratch[at..at + LEN_BYTES].try_into().expect("4 bytes"))
                as usize;
            f(&scratch[at + LEN_BYTES..at + LEN_BYTES + len]);
            at += LEN_BYTES + len;
        }
        n
    }
}

impl MutexInner {
    fn copy_in(&mut self, pos: usize, bytes: &[u8]) {
        let cap = self.buf.len();
        let start = pos % cap;
        let first = bytes.len().min(cap - start);
        self.buf[start..start + first].copy_from_slice(&bytes[..first]);
        self.buf[..bytes.len() - first].copy_from_slice(&bytes[first..]);
    }

    fn copy_out(&self, pos: usize, out: &mut [u8]) {
        let cap = self.buf.len();
        let start = pos % cap;
        let first = out.len().min(cap - start);
        out[..first].copy_from_slice(&self.buf[start..start + first]);
        let rest = out.len() - first;
        out[first..].copy_from_slice(&self.buf[..rest]);
    }
}

/// One word, padded to 128 bytes (two cache lines, as in the progressive ring).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

/// Fixed-size slots with a ready flag each: slot word 0 is `READY | len` or 0, then the
/// payload words.
#[derive(Debug)]
pub struct FlagRing {
    head: Padded,
    tail: Padded,
    slots: Box<[AtomicU64]>,
    slot_words: usize,
    nslots: u64,
}

const READY: u64 = 1 << 63;

impl FlagRing {
    /// `nslots` slots of `slot_payload` bytes each.
    ///
    /// # Errors
    /// `Layout` for 0 slots or 0-byte slots.
    pub fn new(nslots: usize, slot_payload: usize) -> Result<Self, RingError> {
        if nslots == 0 || slot_payload == 0 || slot_payload > u32::MAX as usize {
            return Err(RingError::Layout(format!(
                "flag ring: {nslots} slots of {slot_payload} bytes"
            )));
        }
        let slot_words = 1 + slot_payload.div_ceil(8);
        let slots = (0..nslots * slot_words).map(|_| AtomicU64::new(0)).collect();
        Ok(Self {
            head: Padded::default(),
            tail: Padded::default(),
            slots,
            slot_words,
            nslots: nslots as u64,
        })
    }

    fn slot(&self, index: u64) -> &[AtomicU64] {
        let s = (index % self.nslots) as usize * self.slot_words;
        &self.slots[s..s + self.slot_words]
    }

    /// Pushes one message into the next slot.
    ///
    /// # Errors
    /// `TooLarge` or `Full`.
    pub fn try_push(&self, msg: &[u8]) -> Result<(), RingError> {
        let max = (self.slot_words - 1) * 8;
        if msg.len() > max {
            return Err(RingError::TooLarge { len: msg.len(), max });
        }
        // Relaxed guess; the CAS validates it.
        let mut tail = self.tail.0.load(Ordering::Relaxed);
        loop {
            // Acquire: pairs with the consumer's release of head, which follows its clearing
            // of the slot we are about to reuse.
            let head = self.head.0.load(Ordering::Acquire);
            if head > tail {
                // Moved past our guess; a fresh tail is >= head (see the progressive ring).
                tail = self.tail.0.load(Ordering::Relaxed);
                debug_assert!(tail >= head, "flag ring head beyond tail");
                continue;
            }
            if tail - head >= self.nslots {
                return Err(RingError::Full);
            }
            // Relaxed: ownership only; the slot's flag publishes the data.
            match self.tail.0.compare_exchange_weak(
                tail,
                tail + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => tail = now,
            }
        }
        let slot = self.slot(tail);
        for (w, chunk) in slot[1..].iter().zip(msg.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        // Release: the payload stores happen-before the consumer's acquire of the flag.
        slot[0].store(READY | msg.len() as u64, Ordering::Release);
        Ok(())
    }

    /// Takes up to `max_records` ready slots in order (stops at the first not yet ready).
    /// Single consumer. Returns how many.
    pub fn pop_batch(
        &self,
        max_records: usize,
        scratch: &mut Vec<u8>,
        mut f: impl FnMut(&[u8]),
    ) -> usize {
        // Relaxed: only this consumer stores head.
        let mut head = self.head.0.load(Ordering::Relaxed);
        let mut n = 0;
        while n < max_records {
            let slot = self.slot(head);
            // Acquire: pairs with the producer's release of the flag.
            let flag = slot[0].load(Ordering::Acquire);
            if flag & READY == 0 {
                break;
            }
            let len = (flag & !READY) as usize;
            scratch.clear();
            for w in &slot[1..=len.div_ceil(8)] {
                scratch.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            f(&scratch[..len]);
            // Relaxed: published to the next producer by the release store of head below.
            slot[0].store(0, Ordering::Relaxed);
            head += 1;
            n += 1;
        }
        if n > 0 {
            // Release: our reads and flag clears happen-before a producer reusing the slots.
            self.head.0.store(head, Ordering::Release);
        }
        n
    }
}
