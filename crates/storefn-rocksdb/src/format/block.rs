//! Blocks with restart points (data, index and metaindex blocks; docs/FORMAT.md "RocksDB").
//!
//! ```text
//! entry*  restart: fixed32 [num_restarts]  [hash index]  footer: fixed32
//! entry = varint32 shared | varint32 non_shared | varint32 value_len | key[non_shared] | value
//! ```
//! The footer's top bit says a data block carries a hash index (then `num_buckets` is a fixed16
//! just before the footer, and the buckets one byte each before it); its other bits are
//! `num_restarts`. In index blocks written with value delta encoding the entry has no
//! `value_len`: an entry with `shared == 0` holds a whole block handle, any other only the
//! signed difference of its size from the previous handle's, its offset following the previous
//! block and its trailer.

use std::cmp::Ordering;

use super::{BlockHandle, Cursor, Malformed, Parsed, INTERNAL_KEY_TRAILER_BYTES};
use crate::format::table::BLOCK_TRAILER_BYTES;

/// Bytes of the block footer (`num_restarts` and the index-type bit).
pub const BLOCK_FOOTER_BYTES: usize = 4;
/// Bytes of one restart offset.
pub const RESTART_BYTES: usize = 4;
/// The footer bit of a data block with a hash index (`kDataBlockBinaryAndHash`).
pub const HASH_INDEX_BIT: u32 = 1 << 31;
/// Bytes of the hash index's bucket count.
pub const HASH_BUCKETS_COUNT_BYTES: usize = 2;

/// How an entry's value is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Values {
    /// `value_len` then the bytes (data and metaindex blocks, index blocks before format 4).
    Plain,
    /// Index values delta-encoded (format 4 and later, `rocksdb.index.value.is.delta.encoded`).
    DeltaHandles,
}

/// One block's bytes, its restart array located.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Block<'a> {
    data: &'a [u8],
    restarts_at: usize,
    num_restarts: usize,
    values: Values,
}

/// Whether a block's keys are user keys or internal keys (a user key and its 8-byte trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    User,
    Internal,
}

/// The first [`PREFIX_BYTES`] bytes of each restart point's (user) key, big-endian and
/// zero-padded, in one dense array: what [`Block::seek_by_prefix`] searches. 8 bytes a restart
/// point (an index block of 4 KiB data blocks spends ~40 bytes on each).
#[derive(Debug, Clone)]
pub(crate) struct RestartPrefixes {
    keys: Keys,
    prefixes: Box<[u64]>,
    /// Every [`PREFIX_STRIDE`]th prefix: a search reads these (a few cache lines) and then one
    /// stride of `prefixes`, not a line at every step of a binary search over all of them.
    top: Box<[u64]>,
}

/// Prefixes a [`RestartPrefixes::top`] entry stands for: a stride is 8 cache lines.
const PREFIX_STRIDE: usize = 64;

impl RestartPrefixes {
    pub(crate) fn empty() -> Self {
        Self::new(Keys::User, Vec::new())
    }

    fn new(keys: Keys, prefixes: Vec<u64>) -> Self {
        let top = prefixes.iter().step_by(PREFIX_STRIDE).copied().collect();
        RestartPrefixes { keys, prefixes: prefixes.into_boxed_slice(), top }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        (self.prefixes.len() + self.top.len()) * PREFIX_BYTES
    }

    /// The first index whose prefix is `>= tp` (the length when none is).
    fn lower_bound(&self, tp: u64) -> usize {
        let b = self.top.partition_point(|x| *x < tp);
        if b == 0 {
            return 0;
        }
        // prefixes[(b - 1) * STRIDE] < tp <= prefixes[b * STRIDE] (when there is one).
        let start = (b - 1) * PREFIX_STRIDE + 1;
        let end = (b * PREFIX_STRIDE).min(self.prefixes.len());
        start + self.prefixes[start..end].partition_point(|x| *x < tp)
    }
}

/// Bytes of a key a [`RestartPrefixes`] entry holds.
pub const PREFIX_BYTES: usize = 8;

/// `k`'s first [`PREFIX_BYTES`] as a big-endian number, zero-padded: for keys `a < b`
/// (bytewise), `key_prefix(a) <= key_prefix(b)`; a smaller prefix means a smaller key.
fn key_prefix(k: &[u8]) -> u64 {
    let mut a = [0u8; PREFIX_BYTES];
    let n = k.len().min(PREFIX_BYTES);
    a[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(a)
}

/// The end of the run of `tp` that starts at `lo` in sorted `p` (every `p[lo..]` is `>= tp`):
/// galloping from `lo`, so a run of one or two (distinct keys) costs a step or two next to `lo`
/// in memory, and a long run (keys sharing their first bytes) a logarithm.
fn equal_run_end(p: &[u64], lo: usize, tp: u64) -> usize {
    // p[lo..ok] are all `tp`; p[probe] is the next to look at.
    let (mut ok, mut probe, mut step) = (lo, lo, 1);
    while probe < p.len() && p[probe] == tp {
        ok = probe + 1;
        probe = lo + step;
        step *= 2;
    }
    let end = probe.min(p.len()).max(ok);
    ok + p[ok..end].partition_point(|x| *x == tp)
}

/// An entry's value as found by a seek.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Bytes(&'a [u8]),
    Handle(BlockHandle),
}

impl<'a> Block<'a> {
    pub(crate) fn parse(data: &'a [u8], values: Values) -> Parsed<Self> {
        let footer_at = data
            .len()
            .checked_sub(BLOCK_FOOTER_BYTES)
            .ok_or(Malformed { at: 0, what: "block shorter than its footer" })?;
        let footer = Cursor::at(data, footer_at).fixed32("block footer")?;
        let mut end = footer_at;
        if footer & HASH_INDEX_BIT != 0 {
            let n_at = end
                .checked_sub(HASH_BUCKETS_COUNT_BYTES)
                .ok_or(Malformed { at: footer_at, what: "hash index count" })?;
            let n = u16::from_le_bytes([data[n_at], data[n_at + 1]]) as usize;
            end = n_at.checked_sub(n).ok_or(Malformed { at: n_at, what: "hash index buckets" })?;
        }
        let num_restarts = (footer & !HASH_INDEX_BIT) as usize;
        let restarts_at = num_restarts
            .checked_mul(RESTART_BYTES)
            .and_then(|b| end.checked_sub(b))
            .ok_or(Malformed { at: footer_at, what: "restart count past the block" })?;
        if num_restarts == 0 {
            return Err(Malformed { at: footer_at, what: "block without restart points" });
        }
        Ok(Block { data, restarts_at, num_restarts, values })
    }

    fn restart(&self, i: usize) -> Parsed<usize> {
        let at = self.restarts_at + i * RESTART_BYTES;
        let off = Cursor::at(self.data, at).fixed32("restart offset")? as usize;
        if off >= self.restarts_at {
            return Err(Malformed { at, what: "restart offset past the entries" });
        }
        Ok(off)
    }

    /// The first entry whose key is `>= target` in `cmp`'s order: its key is left in `key`.
    /// `None` when every key is smaller.
    pub(crate) fn seek(
        &self,
        target: &[u8],
        cmp: fn(&[u8], &[u8]) -> Ordering,
        key: &mut Vec<u8>,
    ) -> Parsed<Option<Value<'a>>> {
        self.seek_from(self.last_restart_below(target, cmp)?, target, cmp, key)
    }

    /// [`Block::seek`] with the block's [`RestartPrefixes`] (built from this very block by
    /// [`Block::restart_prefixes`] with the same `keys`): the binary search runs over the dense
    /// prefixes, and compares whole keys only among the restart points whose prefix equals the
    /// target's (usually none or one). A large index block's binary search otherwise touches
    /// a restart offset and an entry in another cache line at every step.
    pub(crate) fn seek_by_prefix(
        &self,
        target: &[u8],
        cmp: fn(&[u8], &[u8]) -> Ordering,
        key: &mut Vec<u8>,
        prefixes: &RestartPrefixes,
    ) -> Parsed<Option<Value<'a>>> {
        let p = &prefixes.prefixes;
        let user = match prefixes.keys {
            Keys::User => Some(target),
            Keys::Internal => {
                target.len().checked_sub(INTERNAL_KEY_TRAILER_BYTES).map(|n| &target[..n])
            }
        };
        let Some(user) = user.filter(|_| p.len() == self.num_restarts) else {
            return self.seek(target, cmp, key);
        };
        let tp = key_prefix(user);
        // A prefix below the target's means a key below it, one above means a key above it
        // (the prefix order is the key order, coarsened): only `lo..hi` need whole keys.
        let mut lo = prefixes.lower_bound(tp);
        let mut hi = equal_run_end(p, lo, tp);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if cmp(self.restart_key(mid)?, target) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.seek_from(lo.saturating_sub(1), target, cmp, key)
    }

    /// The prefix of every restart point's key (of its user key with `keys` internal), for
    /// [`Block::seek_by_prefix`]; empty (that search then falls back to [`Block::seek`]) when
    /// an internal key is shorter than its trailer.
    pub(crate) fn restart_prefixes(&self, keys: Keys) -> Parsed<RestartPrefixes> {
        let mut prefixes = Vec::with_capacity(self.num_restarts);
        for i in 0..self.num_restarts {
            let k = self.restart_key(i)?;
            let user = match keys {
                Keys::User => k,
                Keys::Internal => match k.len().checked_sub(INTERNAL_KEY_TRAILER_BYTES) {
                    Some(n) => &k[..n],
                    None => return Ok(RestartPrefixes::new(keys, Vec::new())),
                },
            };
            prefixes.push(key_prefix(user));
        }
        Ok(RestartPrefixes::new(keys, prefixes))
    }

    /// The first entry at or after restart point `r` whose key is `>= target`.
    fn seek_from(
        &self,
        r: usize,
        target: &[u8],
        cmp: fn(&[u8], &[u8]) -> Ordering,
        key: &mut Vec<u8>,
    ) -> Parsed<Option<Value<'a>>> {
        let start = self.restart(r)?;
        let mut pos = start;
        let mut prev: Option<BlockHandle> = None;
        key.clear();
        while pos < self.restarts_at {
            let (value, next) = self.entry(pos, key, prev)?;
            if let Value::Handle(h) = value {
                prev = Some(h);
            }
            if cmp(key, target) != Ordering::Less {
                return Ok(Some(value));
            }
            pos = next;
        }
        Ok(None)
    }

    /// Every entry's value read as a block handle, in order (an index block's data blocks).
    pub(crate) fn for_each_handle(&self, mut f: impl FnMut(BlockHandle)) -> Parsed<()> {
        let (mut pos, mut prev, mut key) = (0, None, Vec::new());
        while pos < self.restarts_at {
            let (value, next) = self.entry(pos, &mut key, prev)?;
            let h = match value {
                Value::Handle(h) => h,
                Value::Bytes(v) => BlockHandle::decode(&mut Cursor::new(v))?,
            };
            prev = Some(h);
            f(h);
            pos = next;
        }
        Ok(())
    }

    /// Binary search over restart points: the last one whose key is below `target` (or 0).
    fn last_restart_below(
        &self,
        target: &[u8],
        cmp: fn(&[u8], &[u8]) -> Ordering,
    ) -> Parsed<usize> {
        let (mut lo, mut hi) = (0usize, self.num_restarts - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if cmp(self.restart_key(mid)?, target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(lo)
    }

    /// The key of the entry at restart point `i`, in place: a restart entry shares nothing with
    /// the one before it, so its key is whole in the block and the binary search compares it
    /// there, with no copy and no value decoded.
    fn restart_key(&self, i: usize) -> Parsed<&'a [u8]> {
        let pos = self.restart(i)?;
        let mut c = Cursor::at(&self.data[..self.restarts_at], pos);
        if c.varint32("entry shared bytes")? != 0 {
            return Err(Malformed { at: pos, what: "restart entry shares a previous key" });
        }
        let non_shared = c.varint32("entry key bytes")? as usize;
        if self.values == Values::Plain {
            c.varint32("entry value length")?;
        }
        c.bytes(non_shared, "entry key")
    }

    /// Decodes the entry at `pos` (its key rebuilt in `key` from the previous entry's), and
    /// returns its value and where the next entry starts.
    fn entry(
        &self,
        pos: usize,
        key: &mut Vec<u8>,
        prev: Option<BlockHandle>,
    ) -> Parsed<(Value<'a>, usize)> {
        let entries = &self.data[..self.restarts_at];
        let mut c = Cursor::at(entries, pos);
        let shared = c.varint32("entry shared bytes")? as usize;
        let non_shared = c.varint32("entry key bytes")? as usize;
        let value_len = match self.values {
            Values::Plain => Some(c.varint32("entry value length")? as usize),
            Values::DeltaHandles => None,
        };
        if shared > key.len() {
            return Err(Malformed { at: pos, what: "entry shares more than the previous key" });
        }
        key.truncate(shared);
        key.extend_from_slice(c.bytes(non_shared, "entry key")?);
        let value = match value_len {
            Some(n) => Value::Bytes(c.bytes(n, "entry value")?),
            None => Value::Handle(delta_handle(&mut c, shared, prev, pos)?),
        };
        Ok((value, c.pos()))
    }
}

fn delta_handle(
    c: &mut Cursor<'_>,
    shared: usize,
    prev: Option<BlockHandle>,
    pos: usize,
) -> Parsed<BlockHandle> {
    if shared == 0 {
        return BlockHandle::decode(c);
    }
    let prev = prev.ok_or(Malformed { at: pos, what: "delta-encoded handle without a base" })?;
    let zz = c.varint64("handle size delta")?;
    // Zigzag: the low bit is the sign.
    let delta = (zz >> 1) as i64 ^ -((zz & 1) as i64);
    let size = prev.size.checked_add_signed(delta);
    let offset =
        prev.offset.checked_add(prev.size).and_then(|o| o.checked_add(BLOCK_TRAILER_BYTES as u64));
    match (offset, size) {
        (Some(offset), Some(size)) => Ok(BlockHandle { offset, size }),
        _ => Err(Malformed { at: pos, what: "delta-encoded handle out of range" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block as RocksDB's builder lays it out: restart every `interval` entries.
    fn build(entries: &[(&[u8], &[u8])], interval: usize) -> Vec<u8> {
        let (mut out, mut restarts, mut last) = (Vec::new(), Vec::new(), Vec::<u8>::new());
        for (i, (k, v)) in entries.iter().enumerate() {
            let shared = if i % interval == 0 {
                restarts.push(out.len() as u32);
                0
            } else {
                k.iter().zip(&last).take_while(|(a, b)| a == b).count()
            };
            for n in [shared, k.len() - shared, v.len()] {
                out.push(u8::try_from(n).unwrap());
            }
            out.extend_from_slice(&k[shared..]);
            out.extend_from_slice(v);
            last = k.to_vec();
        }
        for r in &restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
        out
    }

    #[test]
    fn seek_finds_the_first_key_not_below_the_target_across_restarts() {
        let keys: Vec<Vec<u8>> =
            (0..50u32).map(|i| format!("key{:03}", i * 2).into_bytes()).collect();
        let entries: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
        for interval in [1, 3, 16] {
            let bytes = build(&entries, interval);
            let b = Block::parse(&bytes, Values::Plain).unwrap();
            let mut key = Vec::new();
            for t in 0..101u32 {
                let target = format!("key{t:03}");
                let found = b.seek(target.as_bytes(), <[u8]>::cmp, &mut key).unwrap();
                let want = t.div_ceil(2) * 2;
                if want >= 100 {
                    assert_eq!(found, None, "{target}");
                } else {
                    assert_eq!(
                        key,
                        format!("key{want:03}").as_bytes(),
                        "{target} interval {interval}"
                    );
                }
            }
        }
    }

    /// Keys that stress the prefixes: shorter than a prefix, equal in their first 8 bytes
    /// (long shared prefixes), one a prefix of another, and bytes 0 and 255.
    fn awkward_keys() -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = vec![b"".to_vec(), b"a".to_vec(), b"a\0".to_vec()];
        for i in 0..40u32 {
            keys.push(format!("user{:08}", i * 37 % 1000).into_bytes());
            keys.push(format!("commonprefix{i:03}").into_bytes());
            keys.push(vec![0xff; (i % 12) as usize]);
            keys.push(format!("k{i}").into_bytes());
        }
        keys.sort();
        keys.dedup();
        keys
    }

    #[test]
    fn the_prefix_search_finds_what_the_plain_search_finds() {
        let keys = awkward_keys();
        let entries: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
        let mut targets = keys.clone();
        for k in &keys {
            let mut longer = k.clone();
            longer.push(0);
            targets.push(longer);
            if let Some((last, init)) = k.split_last() {
                targets.push(init.to_vec());
                targets.push([init, &[last.wrapping_add(1)]].concat());
            }
        }
        for interval in [1, 2, 16] {
            let bytes = build(&entries, interval);
            let b = Block::parse(&bytes, Values::Plain).unwrap();
            let p = b.restart_prefixes(Keys::User).unwrap();
            assert_eq!(p.prefixes.len(), b.num_restarts);
            let (mut k1, mut k2) = (Vec::new(), Vec::new());
            for t in &targets {
                let plain = b.seek(t, <[u8]>::cmp, &mut k1).unwrap();
                let fast = b.seek_by_prefix(t, <[u8]>::cmp, &mut k2, &p).unwrap();
                assert_eq!((plain, &k1), (fast, &k2), "target {t:?} interval {interval}");
            }
        }
    }

    #[test]
    fn the_prefix_search_of_internal_keys_orders_by_the_user_key_first() {
        use crate::format::{cmp_internal, seek_key};
        // Each user key twice (newer sequence first), as a data block holds versions.
        let mut ikeys = Vec::new();
        for k in awkward_keys() {
            for seq in [9u64, 3] {
                let mut ik = k.clone();
                ik.extend_from_slice(&((seq << 8) | 1).to_le_bytes());
                ikeys.push(ik);
            }
        }
        let entries: Vec<(&[u8], &[u8])> = ikeys.iter().map(|k| (&k[..], &b"v"[..])).collect();
        for interval in [1, 3] {
            let bytes = build(&entries, interval);
            let b = Block::parse(&bytes, Values::Plain).unwrap();
            let p = b.restart_prefixes(Keys::Internal).unwrap();
            let (mut k1, mut k2, mut t) = (Vec::new(), Vec::new(), Vec::new());
            for user in
                awkward_keys().iter().chain([b"zz".to_vec(), b"commonprefix".to_vec()].iter())
            {
                seek_key(user, &mut t);
                let plain = b.seek(&t, cmp_internal, &mut k1).unwrap();
                let fast = b.seek_by_prefix(&t, cmp_internal, &mut k2, &p).unwrap();
                assert_eq!((plain, &k1), (fast, &k2), "user key {user:?} interval {interval}");
            }
        }
        // A key shorter than its trailer: no prefixes, and the search falls back to the plain one.
        let bytes = build(&[(b"short", b"v")], 1);
        let b = Block::parse(&bytes, Values::Plain).unwrap();
        let p = b.restart_prefixes(Keys::Internal).unwrap();
        assert_eq!(p.bytes(), 0);
        let mut k = Vec::new();
        assert!(b.seek_by_prefix(b"short\0\0\0\0\0\0\0\0", cmp_internal, &mut k, &p).is_ok());
    }

    #[test]
    fn the_strided_lower_bound_is_the_plain_one() {
        for len in [0, 1, 2, 63, 64, 65, 127, 128, 129, 1000] {
            // Runs of equal values across stride boundaries, gaps between them.
            let p: Vec<u64> = (0..len as u64).map(|i| i / 3 * 2 + 1).collect();
            let r = RestartPrefixes::new(Keys::User, p.clone());
            for tp in 0..=(len as u64 + 2) {
                let want = p.partition_point(|x| *x < tp);
                assert_eq!(r.lower_bound(tp), want, "len {len} target {tp}");
            }
        }
    }

    #[test]
    fn the_run_of_equal_prefixes_ends_where_a_larger_one_starts() {
        for len in 0..40usize {
            for start in 0..=len {
                for run in 0..=(len - start) {
                    let mut p = vec![1u64; start];
                    p.extend(std::iter::repeat_n(5, run));
                    p.resize(len, 9);
                    assert_eq!(equal_run_end(&p, start, 5), start + run, "{p:?} from {start}");
                }
            }
        }
    }

    #[test]
    fn damaged_blocks_are_errors_not_panics() {
        let good = build(&[(b"a", b"1"), (b"b", b"2")], 1);
        for cut in 0..good.len() {
            let mut key = Vec::new();
            if let Ok(b) = Block::parse(&good[..cut], Values::Plain) {
                let _ = b.seek(b"b", <[u8]>::cmp, &mut key);
            }
        }
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 4] = 200; // more restarts than the block holds
        assert!(Block::parse(&bad, Values::Plain).is_err());
    }
}
