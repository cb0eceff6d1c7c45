//! Admission filters for the block caches engines keep beside their chains (TinyLFU's parts):
//! under skewed keys with a long tail most missed blocks are never asked for again, and a cache
//! that admits each one copies it and evicts a block that is. Both filters are keyed by a `u64`
//! the caller derives from a block's identity (file and offset); they hash it themselves.
//!
//! - [`Doorkeeper`]: a block is admitted at its second miss within a window.
//! - [`FrequencySketch`]: how often each block was asked for lately (a count-min sketch of
//!   4-bit counters, halved as it ages); a candidate is admitted only when it was asked for more
//!   often than the block it would evict.

use crate::limits::{
    DOORKEEPER_MIN_BITS, SKETCH_COUNTER_MAX, SKETCH_SAMPLES_PER_ENTRY, SKETCH_WORDS_PER_ENTRY,
};

/// A 64-bit finalizer (splitmix64's): every input bit moves every output bit, so offsets that
/// differ only in their low (aligned-away) bits still spread over the whole table.
fn mix(k: u64) -> u64 {
    let k = (k ^ (k >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let k = (k ^ (k >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    k ^ (k >> 31)
}

/// Blocks missed once in the current window, as bits of a hashed set (a false positive admits a
/// block at its first miss, as a cache without the filter would).
#[derive(Debug)]
pub struct Doorkeeper {
    bits: Box<[u64]>,
    set: usize,
}

impl Doorkeeper {
    /// A doorkeeper of at least `bits` bits (a power of two, at least [`DOORKEEPER_MIN_BITS`]).
    #[must_use]
    pub fn new(bits: u64) -> Self {
        let bits = bits.max(DOORKEEPER_MIN_BITS).next_power_of_two();
        Doorkeeper { bits: vec![0; (bits / 64) as usize].into_boxed_slice(), set: 0 }
    }

    /// Whether `key` was missed before in this window (and marks it). The window ends, and every
    /// mark is forgotten, once a quarter of the bits are set.
    pub fn seen_before(&mut self, key: u64) -> bool {
        let n = self.bits.len() * 64;
        let bit = (mix(key) >> 32) as usize & (n - 1);
        let (w, m) = (bit / 64, 1u64 << (bit % 64));
        if self.bits[w] & m != 0 {
            return true;
        }
        self.bits[w] |= m;
        self.set += 1;
        if self.set >= n / 4 {
            self.bits.fill(0);
            self.set = 0;
        }
        false
    }
}

/// How often each key was recorded lately: a count-min sketch of 4-bit counters (four per key,
/// picked by double hashing over the whole table; the estimate is the least of them), every
/// counter halved once [`SKETCH_SAMPLES_PER_ENTRY`] records per cache entry have been made, so a
/// block hot long ago loses to one hot now. The table has [`SKETCH_WORDS_PER_ENTRY`] words of 16
/// counters per cache entry: the keys of a window are the file's many blocks, not just the
/// cache's, and fewer counters let the cold blocks' counts pile onto the hot ones'.
#[derive(Debug)]
pub struct FrequencySketch {
    words: Box<[u64]>,
    samples: u64,
    sample_cap: u64,
}

impl FrequencySketch {
    /// A sketch for a cache of `entries` blocks.
    #[must_use]
    pub fn new(entries: usize) -> Self {
        let entries = entries.max(1);
        let words = entries.saturating_mul(SKETCH_WORDS_PER_ENTRY).next_power_of_two();
        FrequencySketch {
            words: vec![0; words].into_boxed_slice(),
            samples: 0,
            sample_cap: (entries as u64).saturating_mul(SKETCH_SAMPLES_PER_ENTRY),
        }
    }

    /// The four counters of `key`, as (word, bit shift).
    fn counters(&self, key: u64) -> impl Iterator<Item = (usize, u32)> {
        let (h1, h2) = (mix(key), mix(key ^ 0x9e37_79b9_7f4a_7c15) | 1);
        let mask = self.words.len() * 16 - 1;
        (0..4u64).map(move |q| {
            let c = (h1.wrapping_add(q.wrapping_mul(h2)) as usize) & mask;
            (c / 16, (c % 16) as u32 * 4)
        })
    }

    /// Records one use of `key`.
    pub fn record(&mut self, key: u64) {
        for (w, s) in self.counters(key) {
            if (self.words[w] >> s) & 0xf < SKETCH_COUNTER_MAX {
                self.words[w] += 1 << s;
            }
        }
        self.samples += 1;
        if self.samples >= self.sample_cap {
            self.age();
        }
    }

    /// Halves every counter (the window's end): recent uses keep their weight over old ones.
    fn age(&mut self) {
        for w in &mut self.words {
            *w = (*w >> 1) & 0x7777_7777_7777_7777;
        }
        self.samples = 0;
    }

    /// `key`'s estimated recent uses (never below the true count since the last halving, bar
    /// [`SKETCH_COUNTER_MAX`]).
    #[must_use]
    pub fn frequency(&self, key: u64) -> u32 {
        self.counters(key).map(|(w, s)| ((self.words[w] >> s) & 0xf) as u32).min().unwrap_or(0)
    }

    /// Whether a cache should evict `victim` for `candidate`: only for a candidate used more
    /// often lately.
    #[must_use]
    pub fn admits(&self, candidate: u64, victim: u64) -> bool {
        self.frequency(candidate) > self.frequency(victim)
    }
}

#[cfg(test)]
mod tests {
    use super::{Doorkeeper, FrequencySketch};
    use crate::limits::SKETCH_COUNTER_MAX;

    #[test]
    fn a_block_is_admitted_at_its_second_miss_within_a_window() {
        let mut d = Doorkeeper::new(0);
        let n = d.bits.len() * 64;
        assert!(!d.seen_before(7 << 12), "first miss");
        assert!(d.seen_before(7 << 12), "second miss");
        assert!(d.seen_before(7 << 12));
        // The window ends once a quarter of the bits are set: every mark is forgotten.
        let mut k = 0u64;
        while d.set != 0 {
            k += 1;
            d.seen_before((1 << 40) + (k << 12));
            assert!(k < n as u64, "the window never ended");
        }
        assert!(d.bits.iter().all(|w| *w == 0));
        assert!(!d.seen_before(7 << 12), "forgotten with the window");
    }

    #[test]
    fn the_sketch_counts_keys_apart_and_saturates() {
        let mut s = FrequencySketch::new(1024);
        for _ in 0..5 {
            s.record(4096);
        }
        s.record(8192);
        assert_eq!(s.frequency(4096), 5);
        assert_eq!(s.frequency(8192), 1);
        assert!(s.admits(4096, 8192) && !s.admits(8192, 4096));
        // Equal counts do not displace: the resident block stays.
        assert!(!s.admits(8192, 8192));
        for _ in 0..100 {
            s.record(4096);
        }
        assert_eq!(s.frequency(4096), SKETCH_COUNTER_MAX as u32);
    }

    #[test]
    fn a_key_never_recorded_is_rarely_estimated_above_zero() {
        let mut s = FrequencySketch::new(1024);
        for k in 0..1024u64 {
            s.record(k << 12);
        }
        let over = (1 << 20..(1 << 20) + 1024u64).filter(|k| s.frequency(k << 12) > 0).count();
        // Four counters must all collide: a few percent at one key per entry.
        assert!(over < 100, "{over} of 1024 unseen keys estimated as seen");
    }

    #[test]
    fn old_uses_fade_as_the_sketch_ages() {
        let mut s = FrequencySketch::new(16);
        for _ in 0..8 {
            s.record(1);
        }
        // Enough other records to halve the counters at least twice.
        for k in 0..s.sample_cap * 3 {
            s.record(1_000 + k % 4);
        }
        assert!(s.frequency(1) <= 2, "an old key kept {} uses", s.frequency(1));
    }
}
