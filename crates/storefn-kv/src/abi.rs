//! The scratch ABIs a lookup or range storage function can be written for (docs/FORMAT.md):
//!
//! - [`Abi::Storefn`]: ours ("Lookup scratch ABI", "Range scratch ABI"; constants in
//!   [`crate::format`]).
//! - [`Abi::BpfKv`]: BPF-KV's own structs, so programs written for BPF-KV (XRP's `get.c`,
//!   `range.c`) run unmodified: `struct ScatterGatherQuery` (point lookups, up to [`SG_KEYS`]
//!   keys per chain) and `struct RangeQuery` (resumable range scans). Both are 512 B-node
//!   layouts (`BLK_SIZE` 512 in BPF-KV).
//!
//! Offsets are LP64 (x86-64 and the BPF target agree), derived here from named constants and
//! checked against the document and `progs/include/bpfkv_abi.h` by `tests/abi_doc.rs`.

use std::str::FromStr;

use crate::format::VALUE_BYTES;
use crate::limits::SCRATCH_BYTES;
use crate::KvError;

/// Which scratch layout a program expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Abi {
    /// storefn's layouts (the built-in `kv_lookup`, `kv_lookup_4k`, `kv_range`).
    #[default]
    Storefn,
    /// BPF-KV's `ScatterGatherQuery` / `RangeQuery` (512 B nodes).
    BpfKv,
}

impl FromStr for Abi {
    type Err = KvError;
    fn from_str(s: &str) -> Result<Abi, KvError> {
        match s {
            "storefn" => Ok(Abi::Storefn),
            "bpfkv" => Ok(Abi::BpfKv),
            _ => Err(KvError::Invalid(format!("--abi {s}: expected storefn|bpfkv"))),
        }
    }
}

impl Abi {
    /// The `--abi` name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Abi::Storefn => "storefn",
            Abi::BpfKv => "bpfkv",
        }
    }

    /// Most keys one lookup chain carries in this ABI.
    #[must_use]
    pub fn max_keys_per_chain(self) -> usize {
        match self {
            Abi::Storefn => 1,
            Abi::BpfKv => SG_KEYS,
        }
    }
}

// ---- ScatterGatherQuery ----

/// Keys one `ScatterGatherQuery` carries (BPF-KV's `SG_KEYS`).
pub const SG_KEYS: usize = 32;
/// `ptr__t root_pointer`: where every key's descent starts.
pub const SG_OFF_ROOT_POINTER: usize = 0;
/// `ptr__t value_ptr`: program state.
pub const SG_OFF_VALUE_PTR: usize = 8;
/// `unsigned int state_flags`: program state.
pub const SG_OFF_STATE_FLAGS: usize = 16;
/// `int current_index`: program state (the key being looked up).
pub const SG_OFF_CURRENT_INDEX: usize = 20;
/// `int n_keys`: keys asked for.
pub const SG_OFF_N_KEYS: usize = 24;
/// `key__t keys[SG_KEYS]` (after 4 bytes of padding).
pub const SG_OFF_KEYS: usize = 32;
/// `struct MaybeValue values[SG_KEYS]`.
pub const SG_OFF_VALUES: usize = SG_OFF_KEYS + SG_KEYS * 8;
/// `struct MaybeValue { char found; val__t value; }`: 65 bytes, byte-aligned.
pub const SG_MAYBE_VALUE_BYTES: usize = 1 + VALUE_BYTES;
/// `sizeof(struct ScatterGatherQuery)`.
pub const SG_BYTES: usize = SG_OFF_VALUES + SG_KEYS * SG_MAYBE_VALUE_BYTES;
/// `state_flags` bit our built-in programs set on an inconsistent node (not BPF-KV's).
pub const SG_FLAG_FAILED: u32 = 0x8000_0000;

// ---- RangeQuery ----

/// Entries one `RangeQuery` call returns at most (BPF-KV's `RNG_KEYS`).
pub const RQ_KEYS: usize = 32;
/// `key__t range_begin`.
pub const RQ_OFF_BEGIN: usize = 0;
/// `key__t range_end`.
pub const RQ_OFF_END: usize = 8;
/// `unsigned int flags`: [`RQ_BEGIN_EXCLUSIVE`], [`RQ_END_INCLUSIVE`].
pub const RQ_OFF_FLAGS: usize = 16;
/// `unsigned int agg_op`: [`RQ_AGG_NONE`] or [`RQ_AGG_SUM`].
pub const RQ_OFF_AGG_OP: usize = 20;
/// `int len`: entries in `kv[]` from this call.
pub const RQ_OFF_LEN: usize = 24;
/// `struct KeyValue kv[RNG_KEYS]` (after 4 bytes of padding).
pub const RQ_OFF_KV: usize = 32;
/// `struct KeyValue { key__t key; val__t value; }`.
pub const RQ_KV_BYTES: usize = 8 + VALUE_BYTES;
/// `long agg_value`.
pub const RQ_OFF_AGG_VALUE: usize = RQ_OFF_KV + RQ_KEYS * RQ_KV_BYTES;
/// `unsigned int _state`.
pub const RQ_OFF_STATE: usize = RQ_OFF_AGG_VALUE + 8;
/// `ptr__t _resume_from_leaf` (after 4 bytes of padding): where the next call starts.
pub const RQ_OFF_RESUME_FROM_LEAF: usize = RQ_OFF_STATE + 8;
/// `unsigned int _node_key_ix`.
pub const RQ_OFF_NODE_KEY_IX: usize = RQ_OFF_RESUME_FROM_LEAF + 8;
/// `Node _current_node` (after 4 bytes of padding).
pub const RQ_OFF_CURRENT_NODE: usize = RQ_OFF_NODE_KEY_IX + 8;
/// `sizeof(struct RangeQuery)`.
pub const RQ_BYTES: usize = RQ_OFF_CURRENT_NODE + 512;
/// `flags`: skip a key equal to `range_begin`.
pub const RQ_BEGIN_EXCLUSIVE: u32 = 1;
/// `flags`: include a key equal to `range_end`.
pub const RQ_END_INCLUSIVE: u32 = 2;
/// `_state` values.
pub const RQ_STATE_RESUME: u32 = 1;
pub const RQ_STATE_TRAVERSE: u32 = 2;
pub const RQ_STATE_READ_VALUE: u32 = 3;
pub const RQ_STATE_READ_NODE: u32 = 4;
/// `_state` our built-in `bpfkv_range` leaves on an inconsistent node (not BPF-KV's).
pub const RQ_STATE_FAILED: u32 = 0x8000_0000;
/// `agg_op` values (BPF-KV aggregates only sums in the program).
pub const RQ_AGG_NONE: u32 = 0;
pub const RQ_AGG_SUM: u32 = 1;

const _: () = {
    assert!(SG_OFF_VALUES == 288);
    assert!(SG_BYTES == 2368 && SG_BYTES <= SCRATCH_BYTES);
    assert!(RQ_OFF_AGG_VALUE == 2336);
    assert!(RQ_OFF_CURRENT_NODE == 2368);
    assert!(RQ_BYTES == 2880 && RQ_BYTES <= SCRATCH_BYTES);
};

pub(crate) fn get_u32(s: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(s[o..o + 4].try_into().expect("4 bytes"))
}
pub(crate) fn get_u64(s: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(s[o..o + 8].try_into().expect("8 bytes"))
}
pub(crate) fn put_u32(s: &mut [u8], o: usize, v: u32) {
    s[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(s: &mut [u8], o: usize, v: u64) {
    s[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// Fills a zeroed scratch with a `ScatterGatherQuery` for `keys`, each descending from the
/// node at `root`.
///
/// # Panics
/// More than [`SG_KEYS`] keys (callers chunk them).
pub fn fill_sg_query(scratch: &mut [u8], root: u64, keys: &[u64]) {
    assert!(!keys.is_empty() && keys.len() <= SG_KEYS, "1..=32 keys per ScatterGatherQuery");
    put_u64(scratch, SG_OFF_ROOT_POINTER, root);
    put_u32(scratch, SG_OFF_N_KEYS, u32::try_from(keys.len()).expect("<= 32"));
    for (i, k) in keys.iter().enumerate() {
        put_u64(scratch, SG_OFF_KEYS + 8 * i, *k);
    }
}

/// `values[i]` of a finished `ScatterGatherQuery`: the value when `found` is 1.
#[must_use]
pub fn sg_value(scratch: &[u8], i: usize) -> Option<[u8; VALUE_BYTES]> {
    let o = SG_OFF_VALUES + i * SG_MAYBE_VALUE_BYTES;
    (scratch[o] == 1).then(|| scratch[o + 1..o + 1 + VALUE_BYTES].try_into().expect("64 bytes"))
}

/// True when the `RangeQuery` in `scratch` has nothing left (BPF-KV's `empty_range`): begin
/// after end, or the bounds' exclusivity leaves no key between them.
#[must_use]
pub fn rq_is_empty(scratch: &[u8]) -> bool {
    let (b, e) = (get_u64(scratch, RQ_OFF_BEGIN), get_u64(scratch, RQ_OFF_END));
    let flags = get_u32(scratch, RQ_OFF_FLAGS);
    let first = if flags & RQ_BEGIN_EXCLUSIVE != 0 { b.checked_add(1) } else { Some(b) };
    let last = if flags & RQ_END_INCLUSIVE != 0 { Some(e) } else { e.checked_sub(1) };
    match (first, last) {
        (Some(f), Some(l)) => f > l,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_range_follows_the_bounds_flags() {
        let mut s = vec![0u8; SCRATCH_BYTES];
        let set = |s: &mut [u8], b: u64, e: u64, f: u32| {
            put_u64(s, RQ_OFF_BEGIN, b);
            put_u64(s, RQ_OFF_END, e);
            put_u32(s, RQ_OFF_FLAGS, f);
        };
        set(&mut s, 5, 5, RQ_END_INCLUSIVE);
        assert!(!rq_is_empty(&s));
        set(&mut s, 5, 5, 0);
        assert!(rq_is_empty(&s), "[5, 5) is empty");
        set(&mut s, 5, 6, RQ_BEGIN_EXCLUSIVE);
        assert!(rq_is_empty(&s), "(5, 6) is empty");
        set(&mut s, 5, 6, RQ_BEGIN_EXCLUSIVE | RQ_END_INCLUSIVE);
        assert!(!rq_is_empty(&s));
        set(&mut s, u64::MAX, u64::MAX, RQ_BEGIN_EXCLUSIVE | RQ_END_INCLUSIVE);
        assert!(rq_is_empty(&s));
        set(&mut s, 0, 0, 0);
        assert!(rq_is_empty(&s));
        set(&mut s, 7, 3, RQ_END_INCLUSIVE);
        assert!(rq_is_empty(&s));
    }

    #[test]
    fn sg_query_round_trips_keys_and_values() {
        let mut s = vec![0u8; SCRATCH_BYTES];
        fill_sg_query(&mut s, 512, &[3, 9]);
        assert_eq!(get_u64(&s, SG_OFF_ROOT_POINTER), 512);
        assert_eq!(get_u32(&s, SG_OFF_N_KEYS), 2);
        assert_eq!(get_u64(&s, SG_OFF_KEYS + 8), 9);
        assert_eq!(sg_value(&s, 1), None);
        let o = SG_OFF_VALUES + SG_MAYBE_VALUE_BYTES;
        s[o] = 1;
        s[o + 1] = b'x';
        assert_eq!(sg_value(&s, 1).unwrap()[0], b'x');
    }
}
