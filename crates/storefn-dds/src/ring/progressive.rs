//! DDS's progressive ring: many producers, one consumer, variable-size messages, over any
//! `[AtomicU64]` (a [`SharedMemory`](super::SharedMemory) region between processes, or the heap).
//!
//! Layout (docs/FORMAT.md, "DDS progressive ring"): a 512-byte header, then `capacity` data
//! bytes used circularly. `head`, `tail` and `progress` are byte positions that only grow (a
//! u64 of bytes does not wrap in the life of a machine), each on its own 128-byte pair of cache
//! lines so producers hammering `tail`/`progress` do not slow the consumer's `head` (128, not
//! 64: the adjacent-line prefetcher pulls pairs).
//!
//! **Memory-ordering argument** (also docs/design/dds.md, "Progressive ring"):
//! - *Reserve*: a producer loads `tail` (relaxed) and `head` (acquire: the consumer's release
//!   store of `head` follows its last read of the bytes below it, so overwriting them now cannot
//!   race with that read), checks space, and CASes `tail` forward (relaxed: the CAS only decides
//!   which producer owns which bytes; nothing is published through `tail`).
//! - *Write, publish*: it stores its record (relaxed word stores into bytes only it owns) and
//!   adds the record's size to `progress` with release, which orders the CAS and the record
//!   before the add.
//! - *Take*: the consumer loads `progress` (acquire) and then `tail`. Every add it counted is
//!   an RMW in `progress`'s release sequence, so it synchronises with each of those producers:
//!   their records and their `tail` CASes happen-before the `tail` load, which therefore sees
//!   every counted record's reservation. Counted records are disjoint intervals inside
//!   `[0, tail)` whose sizes sum to `progress`; if `progress == tail` they cover `[0, tail)`
//!   exactly, so every byte up to `tail` is published and visible. Only then does the consumer
//!   take records, at most [`MAX_BATCH_RECORDS`] per batch, and it remembers `tail` as
//!   published (later batches up to it need no new check). Loading `tail` first would be wrong:
//!   a later reservation published before an earlier one could make the sum match.
//! - *Release*: after copying records out, the consumer stores the new `head` with release.
//!
//! A producer that stalls between reserve and publish holds back the consumer (not other
//! producers); that is the ring's known trade-off, measured in `storefn ring bench`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::RingError;
use crate::limits::{MAX_BATCH_RECORDS, MAX_RING_BYTES, MIN_RING_BYTES};

/// Ring magic, "SFDDSRG1" little-endian.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"SFDDSRG1");
/// Layout version.
pub const RING_LAYOUT_VERSION: u64 = 1;
/// Header bytes before the data area.
pub const HEADER_BYTES: usize = 512;
/// Byte offsets of the header words (docs/FORMAT.md).
pub const MAGIC_OFFSET: usize = 0;
/// Layout version word.
pub const VERSION_OFFSET: usize = 8;
/// Data-area size in bytes.
pub const CAPACITY_OFFSET: usize = 16;
/// Largest message payload.
pub const MAX_MESSAGE_OFFSET: usize = 24;
/// Consumer position.
pub const HEAD_OFFSET: usize = 128;
/// Reserved-up-to position (producers CAS).
pub const TAIL_OFFSET: usize = 256;
/// Published bytes (producers add).
pub const PROGRESS_OFFSET: usize = 384;
/// Start of the data area.
pub const DATA_OFFSET: usize = HEADER_BYTES;
/// Record header: `payload_len: u32` then [`RECORD_TAG`]: u32; payload padded to 8 bytes.
pub const RECORD_HEADER_BYTES: usize = 8;
/// High half of every record header ("DDSM"): a record that lacks it is corrupt.
pub const RECORD_TAG: u32 = u32::from_le_bytes(*b"DDSM");

/// Bytes a record with `payload` bytes occupies.
pub const fn record_bytes(payload: usize) -> usize {
    RECORD_HEADER_BYTES + payload.div_ceil(8) * 8
}

/// Words a ring with a `capacity`-byte data area needs.
pub const fn ring_words(capacity: usize) -> usize {
    (HEADER_BYTES + capacity) / 8
}

/// A progressive ring over borrowed words. Producers: any number of threads or processes,
/// `&self`. Consumer: one, through [`Consumer`].
#[derive(Debug, Clone, Copy)]
pub struct ProgressiveRing<'a> {
    words: &'a [AtomicU64],
    data: &'a [AtomicU64],
    capacity: u64,
    max_message: usize,
}

impl<'a> ProgressiveRing<'a> {
    /// Writes a fresh header into `words` (all of it: the ring uses `ring_words(capacity)`).
    /// Call before any peer attaches.
    ///
    /// # Errors
    /// `Layout` for a capacity that is not a power of two in range, a message bound above half
    /// the capacity, or too few words.
    pub fn init(
        words: &'a [AtomicU64],
        capacity: usize,
        max_message: usize,
    ) -> Result<Self, RingError> {
        check_sizes(words.len(), capacity, max_message)?;
        for w in &words[..HEADER_BYTES / 8] {
            w.store(0, Ordering::Relaxed);
        }
        words[CAPACITY_OFFSET / 8].store(capacity as u64, Ordering::Relaxed);
        words[MAX_MESSAGE_OFFSET / 8].store(max_message as u64, Ordering::Relaxed);
        words[VERSION_OFFSET / 8].store(RING_LAYOUT_VERSION, Ordering::Relaxed);
        // Release: a peer that sees the magic (acquire in `attach`) sees the fields above.
        words[MAGIC_OFFSET / 8].store(RING_MAGIC, Ordering::Release);
        Self::attach(words)
    }

    /// Attaches to a ring another party initialised, validating its header.
    ///
    /// # Errors
    /// `Layout` naming the bad header field.
    pub fn attach(words: &'a [AtomicU64]) -> Result<Self, RingError> {
        let word = |off: usize| words.get(off / 8).map(|w| w.load(Ordering::Acquire));
        if word(MAGIC_OFFSET) != Some(RING_MAGIC) {
            return Err(RingError::Layout(format!("offset {MAGIC_OFFSET}: no ring magic")));
        }
        if word(VERSION_OFFSET) != Some(RING_LAYOUT_VERSION) {
            return Err(RingError::Layout(format!(
                "offset {VERSION_OFFSET}: layout version {:?}, expected {RING_LAYOUT_VERSION}",
                word(VERSION_OFFSET)
            )));
        }
        let capacity = word(CAPACITY_OFFSET).unwrap_or(0);
        let max_message = word(MAX_MESSAGE_OFFSET).unwrap_or(0);
        let cap = usize::try_from(capacity).unwrap_or(0);
        let max = usize::try_from(max_message).unwrap_or(usize::MAX);
        check_sizes(words.len(), cap, max)?;
        Ok(Self {
            words,
            data: &words[DATA_OFFSET / 8..ring_words(cap)],
            capacity,
            max_message: max,
        })
    }

    /// A view with sizes the caller validated before (through [`init`](Self::init) or
    /// [`attach`](Self::attach) on the same words), without re-reading the header: a peer that
    /// rewrites the header later cannot change the sizes this process uses.
    pub(crate) fn view(words: &'a [AtomicU64], capacity: usize, max_message: usize) -> Self {
        assert!(capacity.is_power_of_two() && words.len() >= ring_words(capacity));
        assert!(record_bytes(max_message) <= capacity / 2);
        Self {
            words,
            data: &words[DATA_OFFSET / 8..ring_words(capacity)],
            capacity: capacity as u64,
            max_message,
        }
    }

    /// Largest payload a message may have.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    fn head(&self) -> &AtomicU64 {
        &self.words[HEAD_OFFSET / 8]
    }
    fn tail(&self) -> &AtomicU64 {
        &self.words[TAIL_OFFSET / 8]
    }
    fn progress(&self) -> &AtomicU64 {
        &self.words[PROGRESS_OFFSET / 8]
    }

    /// Data word at byte position `pos` (8-aligned), wrapping.
    fn data_word(&self, pos: u64) -> &AtomicU64 {
        &self.data[((pos % self.capacity) / 8) as usize]
    }

    /// Pushes one message made of `parts` (concatenated) without blocking.
    ///
    /// # Errors
    /// `TooLarge` over [`max_message`](Self::max_message); `Full` when the free space is short
    /// (retry after the consumer catches up).
    pub fn try_push(&self, parts: &[&[u8]]) -> Result<(), RingError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_message {
            return Err(RingError::TooLarge { len, max: self.max_message });
        }
        let rec = record_bytes(len) as u64;
        // Relaxed: a guess the CAS below validates.
        let mut tail = self.tail().load(Ordering::Relaxed);
        loop {
            // Acquire: pairs with the consumer's release store of head; bytes below head are
            // no longer read, so we may overwrite them.
            let head = self.head().load(Ordering::Acquire);
            if head > tail {
                // Our tail is older than head: the consumer moved past it. A fresh tail is at
                // least head (the consumer stored head from a tail it had read, and our acquire
                // of head makes that read happen-before this load); if not, the peer is lying.
                tail = self.tail().load(Ordering::Relaxed);
                if head > tail {
                    return Err(RingError::Corrupt { position: head, what: "head beyond tail" });
                }
                continue;
            }
            // Saturating: a hostile peer's counters must not overflow our arithmetic.
            if (tail - head).saturating_add(rec) > self.capacity {
                return Err(RingError::Full);
            }
            let Some(new_tail) = tail.checked_add(rec) else {
                return Err(RingError::Corrupt {
                    position: tail,
                    what: "tail at the end of the u64 range",
                });
            };
            // Relaxed on both paths: the CAS only arbitrates ownership of [tail, tail+rec);
            // publication goes through `progress` (release) below.
            match self.tail().compare_exchange_weak(
                tail,
                new_tail,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => tail = now,
            }
        }
        // Relaxed stores into bytes this producer alone owns until it publishes them.
        self.data_word(tail)
            .store(u64::from(len as u32) | (u64::from(RECORD_TAG) << 32), Ordering::Relaxed);
        let mut pos = tail + RECORD_HEADER_BYTES as u64;
        let mut word = [0u8; 8];
        let mut fill = 0;
        for part in parts {
            let mut rest: &[u8] = part;
            if fill == 0 {
                // Word-aligned in the record: whole words straight from the part.
                let words = rest.chunks_exact(8);
                let tail_bytes = words.remainder();
                for w in words {
                    let w = u64::from_le_bytes(w.try_into().expect("8-byte chunk"));
                    self.data_word(pos).store(w, Ordering::Relaxed);
                    pos += 8;
                }
                rest = tail_bytes;
            }
            for &b in rest {
                word[fill] = b;
                fill += 1;
                if fill == 8 {
                    self.data_word(pos).store(u64::from_le_bytes(word), Ordering::Relaxed);
                    pos += 8;
                    fill = 0;
                }
            }
        }
        if fill > 0 {
            word[fill..].fill(0);
            self.data_word(pos).store(u64::from_le_bytes(word), Ordering::Relaxed);
        }
        // Release: the record and the tail CAS above happen-before any consumer that acquires a
        // progress value including this add (see the module comment).
        self.progress().fetch_add(rec, Ordering::Release);
        Ok(())
    }

    /// [`try_push`](Self::try_push), retrying while `Full` (spinning briefly, then yielding)
    /// until `timeout`.
    ///
    /// # Errors
    /// `TooLarge`, or `Timeout` when the ring stayed full.
    pub fn push(&self, parts: &[&[u8]], timeout: Duration) -> Result<(), RingError> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            match self.try_push(parts) {
                Err(RingError::Full) => {}
                other => return other,
            }
            if start.elapsed() >= timeout {
                return Err(RingError::Timeout(timeout));
            }
            backoff(&mut spins);
        }
    }

    /// Bytes published so far (`progress`): grows with every record a producer publishes.
    pub fn published_bytes(&self) -> u64 {
        // Acquire: pairs with producers' release adds.
        self.progress().load(Ordering::Acquire)
    }

    /// Whether records were published past the consumer's `head` (a hint for a consumer
    /// deciding whether to sleep: nothing is taken; a record may still be mid-publish).
    pub fn has_unread(&self) -> bool {
        // Acquire: pairs with producers' release adds, like the consumer's own progress load.
        self.progress().load(Ordering::Acquire) != self.head().load(Ordering::Relaxed)
    }

    /// The consumer side. One consumer per ring: two would take the same records (they could
    /// not corrupt memory, every access being atomic, only duplicate messages).
    /// `scratch_bytes` sizes the buffer messages are copied into (at least one message).
    pub fn consumer(&self, scratch_bytes: usize) -> Consumer {
        // Relaxed: head is only stored by the consumer; this reads the last such store.
        let head = self.head().load(Ordering::Relaxed);
        Consumer {
            head,
            published: head,
            scratch: Vec::with_capacity(scratch_bytes.max(self.max_message + 8)),
        }
    }
}

/// Validates a ring's sizes against the words it has; errors name the header field's offset.
fn check_sizes(words: usize, capacity: usize, max_message: usize) -> Result<(), RingError> {
    if !capacity.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&capacity) {
        return Err(RingError::Layout(format!(
            "offset {CAPACITY_OFFSET}: capacity {capacity}: must be a power of two in \
             {MIN_RING_BYTES}..={MAX_RING_BYTES}"
        )));
    }
    // `max_message > capacity` first: record_bytes of an absurd value would overflow.
    if max_message == 0 || max_message > capacity || record_bytes(max_message) > capacity / 2 {
        return Err(RingError::Layout(format!(
            "offset {MAX_MESSAGE_OFFSET}: max message {max_message}: must be \
             1..=(capacity/2 - {RECORD_HEADER_BYTES}) for capacity {capacity}"
        )));
    }
    if words < ring_words(capacity) {
        return Err(RingError::Layout(format!(
            "capacity {capacity} needs {} bytes, region has {}",
            ring_words(capacity) * 8,
            words * 8
        )));
    }
    Ok(())
}

/// Spin a little, then yield: on a 2-core machine a producer preempted mid-publish needs the
/// CPU back before anyone can progress.
pub(crate) fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// The single consumer of a [`ProgressiveRing`]: remembers how far records are known to be
/// published and owns the buffer messages are copied into. It does not borrow the ring (so an
/// owner of the shared memory can keep both); pass the same ring to every call.
#[derive(Debug)]
pub struct Consumer {
    /// Next record to take.
    head: u64,
    /// Every byte below this is published (seen `progress == tail` at this value).
    published: u64,
    scratch: Vec<u8>,
}

impl Consumer {
    /// Takes up to `max_records` (<= [`MAX_BATCH_RECORDS`]) published messages and calls `f`
    /// on each (a copy; the ring space is released after the batch). Returns how many were
    /// taken: 0 when the ring is empty or a producer has reserved but not yet published.
    ///
    /// # Errors
    /// `Corrupt` naming the byte position when a record header is invalid (a peer wrote
    /// garbage); the consumer then stays where it is.
    pub fn pop_batch(
        &mut self,
        ring: &ProgressiveRing<'_>,
        max_records: usize,
        mut f: impl FnMut(&[u8]),
    ) -> Result<usize, RingError> {
        if self.head == self.published {
            // Acquire, then load tail: see the module comment for why this order.
            let progress = ring.progress().load(Ordering::Acquire);
            let tail = ring.tail().load(Ordering::Acquire);
            if tail == self.head || progress != tail {
                return Ok(0);
            }
            if tail < self.head || tail - self.head > ring.capacity {
                return Err(RingError::Corrupt { position: tail, what: "tail outside the ring" });
            }
            self.published = tail;
        }
        let mut pos = self.head;
        let mut taken = 0;
        while pos < self.published && taken < max_records.min(MAX_BATCH_RECORDS) {
            let header = ring.data_word(pos).load(Ordering::Relaxed);
            let len = (header & 0xFFFF_FFFF) as usize;
            if (header >> 32) as u32 != RECORD_TAG {
                return Err(RingError::Corrupt { position: pos, what: "record tag missing" });
            }
            // Checked: positions near the end of the u64 range come only from a hostile peer.
            let end = pos.checked_add(record_bytes(len) as u64).filter(|&e| e <= self.published);
            let Some(end) = end.filter(|_| len <= ring.max_message) else {
                return Err(RingError::Corrupt {
                    position: pos,
                    what: "record length out of range",
                });
            };
            self.scratch.clear();
            let mut p = pos + RECORD_HEADER_BYTES as u64;
            while p < end {
                self.scratch
                    .extend_from_slice(&ring.data_word(p).load(Ordering::Relaxed).to_le_bytes());
                p += 8;
            }
            f(&self.scratch[..len]);
            pos = end;
            taken += 1;
        }
        self.head = pos;
        // Release: our reads of [old head, pos) happen-before producers that acquire this head
        // and overwrite those bytes.
        ring.head().store(pos, Ordering::Release);
        Ok(taken)
    }
}
