//! Range queries through the resumable `kv_range` storage function (512 B nodes). Each call
//! takes at most layers + 35 hops (descent, 32 value reads, up to 3 leaves), inside the chain
//! hop limit.

use crate::format::{
    NodeSize, RANGE_FLAG_DONE, RANGE_FLAG_RESUME, RANGE_OFF_AGG, RANGE_OFF_AGG_N,
    RANGE_OFF_AGG_VALUE, RANGE_OFF_BEGIN, RANGE_OFF_COUNT, RANGE_OFF_END, RANGE_OFF_FLAGS,
    RANGE_OFF_INDEX, RANGE_OFF_LEAF, RANGE_OFF_PHASE, RANGE_OFF_RESULTS, RANGE_RESULT_BYTES,
    SCRATCH_BYTES, VALUE_BYTES,
};
use crate::range::Agg;
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

fn u32_at(s: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(s[o..o + 4].try_into().expect("4 bytes"))
}
fn u64_at(s: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(s[o..o + 8].try_into().expect("8 bytes"))
}

/// Runs one chain of the range program from a block offset over a scratch; returns its hops.
pub type ChainRunner<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> Result<u32, KvError>;

/// Runs `[begin, end]` through the `kv_range` program; `run_chain(start, scratch)` runs one
/// chain of it from the 512 B block at `start` (pread driver or io engine) and returns its hops.
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
    let max_calls = store.meta().key_count / 32 + store.meta().total_nodes + 2;
    loop {
        out.calls += 1;
        if out.calls > max_calls {
            return Err(KvError::Program(format!("range: no progress after {max_calls} calls")));
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
            return Err(KvError::Program(format!("range: count {count} > 32")));
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
            return Err(KvError::Program("range: call returned without resume state".into()));
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
