//! Range queries through resumable range storage functions (512 B nodes), in either scratch
//! ABI: ours ([`range_xrp`], `kv_range`: each call takes at most layers + 35 hops, descent, 32
//! value reads, up to 3 leaves) or BPF-KV's `RangeQuery` ([`range_bpfkv`], XRP's `range.c`).

use crate::abi::{
    get_u32, get_u64, put_u32, put_u64, rq_is_empty, Abi, RQ_AGG_NONE, RQ_AGG_SUM,
    RQ_END_INCLUSIVE, RQ_KEYS, RQ_KV_BYTES, RQ_OFF_AGG_OP, RQ_OFF_AGG_VALUE, RQ_OFF_BEGIN,
    RQ_OFF_END, RQ_OFF_FLAGS, RQ_OFF_KV, RQ_OFF_LEN, RQ_OFF_RESUME_FROM_LEAF, RQ_OFF_STATE,
    RQ_STATE_READ_NODE, RQ_STATE_RESUME, RQ_STATE_TRAVERSE,
};
use crate::format::{
    NodeSize, RANGE_FLAG_DONE, RANGE_FLAG_RESUME, RANGE_OFF_AGG, RANGE_OFF_AGG_N,
    RANGE_OFF_AGG_VALUE, RANGE_OFF_BEGIN, RANGE_OFF_COUNT, RANGE_OFF_END, RANGE_OFF_FLAGS,
    RANGE_OFF_INDEX, RANGE_OFF_LEAF, RANGE_OFF_PHASE, RANGE_OFF_RESULTS, RANGE_RESULT_BYTES,
    VALUE_BYTES,
};
use crate::limits::SCRATCH_BYTES;
use crate::range::{aggregate, Agg};
use crate::store::Store;
use crate::KvError;

/// What a range call sequence produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RangeOutcome {
    /// Entries (agg = None only).
    pub entries: Vec<(u64, [u8; VALUE_BYTES])>,
    /// The aggregate (agg = Some only); `None` for min/max of nothing.
    pub agg: Option<u64>,
    /// Calls made (each returns after at most 32 entries).
    pub calls: u64,
    /// Block reads.
    pub ios: u64,
}

use get_u32 as u32_at;
use get_u64 as u64_at;

fn broke_abi(store: &Store, reason: String) -> KvError {
    KvError::ProgramOutput { path: store.path().to_path_buf(), reason }
}

/// Most calls a range may take: every call but the last makes progress (32 entries or a
/// leaf), so more means the program is not advancing.
fn max_calls(store: &Store) -> u64 {
    store.meta().key_count / 32 + store.meta().total_nodes + 2
}

/// The engine hop limit a range call needs: storefn's `kv_range` and BPF-KV's collecting calls
/// return after 32 entries (descent + 32 value reads + the leaves between); BPF-KV's sums
/// run to the end of the range in one call, so their bound is the whole tree.
#[must_use]
pub fn range_hops(store: &Store, abi: Abi, agg: Option<Agg>) -> u32 {
    let layers = store.meta().layers;
    match (abi, agg) {
        (Abi::BpfKv, Some(Agg::Sum)) => {
            let all = store.meta().key_count + store.meta().total_nodes + u64::from(layers);
            u32::try_from(all).unwrap_or(u32::MAX)
        }
        _ => layers + 2 * 32 + 2,
    }
}

/// Runs one chain of the range program from a block offset over a scratch; returns its hops.
pub type ChainRunner<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> Result<u32, KvError>;

/// Runs `[begin, end]` through the `kv_range` program; `run_chain(start, scratch)` runs one
/// chain of it on the io engine from the 512 B block at `start` and returns its hops.
///
/// # Errors
/// `Invalid` for 4096 B nodes (the program's leaf copy is 512 B); `Program` when a chain fails
/// or the program flags an inconsistent structure.
pub fn range_xrp(
    store: &Store,
    run_chain: ChainRunner,
    begin: u64,
    end: u64,
    agg: Option<Agg>,
) -> Result<RangeOutcome, KvError> {
    if store.node_size() != NodeSize::B512 {
        return Err(KvError::Invalid(
            "the range function reads 512 B nodes; use --path read".into(),
        ));
    }
    let mut out = RangeOutcome::default();
    if begin > end {
        if matches!(agg, Some(Agg::Sum | Agg::Count)) {
            out.agg = Some(0);
        }
        return Ok(out);
    }
    let mut s = vec![0u8; SCRATCH_BYTES];
    s[RANGE_OFF_BEGIN..RANGE_OFF_BEGIN + 8].copy_from_slice(&begin.to_le_bytes());
    s[RANGE_OFF_END..RANGE_OFF_END + 8].copy_from_slice(&end.to_le_bytes());
    let code = agg.map_or(0u32, |a| u32::try_from(a.code()).expect("small"));
    s[RANGE_OFF_AGG..RANGE_OFF_AGG + 4].copy_from_slice(&code.to_le_bytes());
    let mut start = 0u64; // the root
                          // Calls bound: every call but the last makes progress (32 entries or a leaf).
    let max_calls = max_calls(store);
    loop {
        out.calls += 1;
        if out.calls > max_calls {
            return Err(broke_abi(store, format!("range: no progress after {max_calls} calls")));
        }
        out.ios += u64::from(run_chain(start, &mut s)?);
        if u32_at(&s, RANGE_OFF_PHASE + 4) != 0 {
            return Err(KvError::CorruptNode {
                path: store.path().to_path_buf(),
                offset: u64_at(&s, RANGE_OFF_LEAF),
                reason: "range function met an inconsistent node".into(),
            });
        }
        let count = u32_at(&s, RANGE_OFF_COUNT) as usize;
        if count > 32 {
            return Err(broke_abi(store, format!("range: count {count} > 32")));
        }
        if agg.is_none() {
            for r in 0..count {
                let o = RANGE_OFF_RESULTS + r * RANGE_RESULT_BYTES;
                let v: [u8; 64] = s[o + 8..o + 8 + 64].try_into().expect("64 bytes");
                out.entries.push((u64_at(&s, o), v));
            }
        }
        let flags = u32_at(&s, RANGE_OFF_FLAGS);
        if flags & RANGE_FLAG_DONE != 0 {
            break;
        }
        if flags & RANGE_FLAG_RESUME == 0 {
            return Err(broke_abi(store, "range: call returned without resume state".into()));
        }
        start = u64_at(&s, RANGE_OFF_LEAF);
        s[RANGE_OFF_COUNT..RANGE_OFF_COUNT + 4].fill(0);
        debug_assert!(u32_at(&s, RANGE_OFF_INDEX) <= 31, "resume index within a leaf");
    }
    if let Some(a) = agg {
        let n = u64_at(&s, RANGE_OFF_AGG_N);
        let v = u64_at(&s, RANGE_OFF_AGG_VALUE);
        out.agg = match a {
            Agg::Min | Agg::Max if n == 0 => None,
            _ => Some(v),
        };
    }
    Ok(out)
}

/// Runs `[begin, end]` through a program in BPF-KV's `RangeQuery` layout (docs/FORMAT.md,
/// "BPF-KV range scratch ABI"), driving it as BPF-KV's application does: the first call starts
/// at the root in state TRAVERSE, each later one at `_resume_from_leaf` in state RESUME with
/// `len` = 0, until the range is empty. Our bounds are inclusive (`END_INCLUSIVE`). The program
/// aggregates sums (`agg_op` SUM); min/max/count collect entries and fold them here.
///
/// # Errors
/// `Invalid` for 4096 B nodes; `Chain` when a call fails; `ProgramOutput` when the program
/// breaks the layout (len > 32, an unknown state, no progress); `CorruptNode` when our
/// `bpfkv_range` flags an inconsistent node.
pub fn range_bpfkv(
    store: &Store,
    run_chain: ChainRunner,
    begin: u64,
    end: u64,
    agg: Option<Agg>,
) -> Result<RangeOutcome, KvError> {
    if store.node_size() != NodeSize::B512 {
        return Err(KvError::Invalid("BPF-KV's RangeQuery reads 512 B nodes".into()));
    }
    let mut out = RangeOutcome::default();
    let mut s = vec![0u8; SCRATCH_BYTES];
    put_u64(&mut s, RQ_OFF_BEGIN, begin);
    put_u64(&mut s, RQ_OFF_END, end);
    put_u32(&mut s, RQ_OFF_FLAGS, RQ_END_INCLUSIVE);
    let sum = agg == Some(Agg::Sum);
    put_u32(&mut s, RQ_OFF_AGG_OP, if sum { RQ_AGG_SUM } else { RQ_AGG_NONE });
    put_u32(&mut s, RQ_OFF_STATE, RQ_STATE_TRAVERSE);
    let max_calls = max_calls(store);
    while !rq_is_empty(&s) {
        out.calls += 1;
        if out.calls > max_calls {
            return Err(broke_abi(store, format!("range: no progress after {max_calls} calls")));
        }
        let start = u64_at(&s, RQ_OFF_RESUME_FROM_LEAF);
        out.ios += u64::from(run_chain(start, &mut s)?);
        let state = u32_at(&s, RQ_OFF_STATE);
        if !(RQ_STATE_RESUME..=RQ_STATE_READ_NODE).contains(&state) {
            return Err(KvError::CorruptNode {
                path: store.path().to_path_buf(),
                offset: u64_at(&s, RQ_OFF_RESUME_FROM_LEAF),
                reason: format!("range function stopped in state {state:#x} (not 1..=4)"),
            });
        }
        let len = u32_at(&s, RQ_OFF_LEN) as usize;
        if len > RQ_KEYS {
            return Err(broke_abi(store, format!("range: len {len} > {RQ_KEYS}")));
        }
        for r in 0..len {
            let o = RQ_OFF_KV + r * RQ_KV_BYTES;
            let v: [u8; 64] = s[o + 8..o + 8 + 64].try_into().expect("64 bytes");
            out.entries.push((u64_at(&s, o), v));
        }
        // BPF-KV's prep_range_resume.
        put_u32(&mut s, RQ_OFF_LEN, 0);
        put_u32(&mut s, RQ_OFF_STATE, RQ_STATE_RESUME);
    }
    out.agg = match agg {
        Some(Agg::Sum) => Some(u64_at(&s, RQ_OFF_AGG_VALUE)),
        Some(a) => aggregate(a, out.entries.iter().map(|(_, v)| v)),
        None => None,
    };
    if agg.is_some() {
        out.entries.clear();
    }
    Ok(out)
}
