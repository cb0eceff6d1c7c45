//! Full filter blocks (docs/FORMAT.md, "RocksDB: filters"): RocksDB's cache-local Bloom filter
//! of format_version 5, over whole user keys.
//!
//! ```text
//! bits[len]  | 0xff (a newer Bloom) | 0x00 (cache-local) | num_probes (block size 64: top bits 0) | 0 | 0
//! ```
//! A key's 64-bit hash (XXH3 as of xxHash 0.7.2: `xxph3`) picks a 64-byte line by its low 32 bits (`(lo * lines) >> 32`) and
//! `num_probes` bits in that line from its high 32 bits (the top 9 bits of `h`, then
//! `h *= 0x9e3779b9`). Other filter kinds (legacy Bloom, Ribbon) are not read: every key may
//! match.

/// Bytes of the filter's metadata trailer.
pub const FILTER_METADATA_BYTES: usize = 5;
/// Bytes of one cache line of the filter.
pub const FILTER_LINE_BYTES: usize = 64;
/// The metadata's first byte for the newer Bloom implementations.
pub const NEWER_BLOOM_MARKER: u8 = 0xff;
/// The metadata's second byte for the cache-local Bloom filter.
pub const FAST_LOCAL_BLOOM: u8 = 0;
/// Multiplier between probes.
pub const PROBE_MULTIPLIER: u32 = 0x9e37_79b9;

/// A filter block that can answer "definitely absent".
#[derive(Debug, Clone)]
pub(crate) struct Bloom {
    bits: Vec<u8>,
    probes: u32,
}

impl Bloom {
    /// `None` for a filter kind this reader does not read (or one too short to be any).
    pub(crate) fn parse(mut block: Vec<u8>) -> Option<Self> {
        let len = block.len().checked_sub(FILTER_METADATA_BYTES)?;
        let m = &block[len..];
        let probes = m[2];
        if m[0] != NEWER_BLOOM_MARKER || m[1] != FAST_LOCAL_BLOOM || probes >> 5 != 0 {
            return None;
        }
        if probes == 0 || len == 0 || len % FILTER_LINE_BYTES != 0 {
            return None;
        }
        block.truncate(len);
        Some(Bloom { bits: block, probes: u32::from(probes) })
    }

    /// Bytes of the filter's bit array.
    pub(crate) fn len(&self) -> usize {
        self.bits.len()
    }

    pub(crate) fn may_contain(&self, user_key: &[u8]) -> bool {
        let Some(h) = super::xxph3::xxph3_64(user_key) else { return true };
        // The hash's halves: the line from the low one, the probes from the high one.
        let (lo, mut hi) = (h as u32, (h >> 32) as u32);
        let lines = (self.bits.len() / FILTER_LINE_BYTES) as u64;
        let line = ((u64::from(lo) * lines) >> 32) as usize * FILTER_LINE_BYTES;
        let bits = &self.bits[line..line + FILTER_LINE_BYTES];
        for _ in 0..self.probes {
            let bit = (hi >> (32 - 9)) as usize;
            if bits[bit >> 3] & (1 << (bit & 7)) == 0 {
                return false;
            }
            hi = hi.wrapping_mul(PROBE_MULTIPLIER);
        }
        true
    }
}
