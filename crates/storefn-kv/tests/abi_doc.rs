//! docs/FORMAT.md's BPF-KV scratch ABI tables and progs/include/bpfkv_abi.h against
//! storefn_kv::layout::abi's constants.

use std::collections::HashMap;

use storefn_kv::layout::abi::*;

const DOC: &str = include_str!("../../../docs/FORMAT.md");
const HEADER: &str = include_str!("../../../progs/include/bpfkv_abi.h");

/// `(offset, size)` by field name from the table under `heading`.
fn fields(heading: &str) -> HashMap<String, (usize, usize)> {
    let start = DOC.find(heading).unwrap_or_else(|| panic!("FORMAT.md lacks {heading:?}"));
    let body = &DOC[start + heading.len()..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end]
        .lines()
        .filter(|l| l.starts_with('|') && !l.contains("---"))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().replace('`', "")).collect())
        .filter_map(|r: Vec<String>| {
            Some((r.get(2)?.clone(), (r[0].parse().ok()?, r[1].parse().ok()?)))
        })
        .collect()
}

fn defines() -> HashMap<String, u64> {
    HEADER
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "#define").then_some(())?;
            let name = w.next()?.to_string();
            let v = w.next()?;
            let v = v
                .strip_prefix("0x")
                .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())?;
            Some((name, v))
        })
        .collect()
}

/// The fields must tile the struct: each starts where the previous ended.
fn check_tiling(t: &HashMap<String, (usize, usize)>, total: usize) {
    let mut spans: Vec<(usize, usize)> = t.values().copied().collect();
    spans.sort_unstable();
    let mut at = 0;
    for (off, size) in spans {
        assert_eq!(off, at, "a gap or overlap before offset {off}");
        at = off + size;
    }
    assert_eq!(at, total);
}

#[test]
fn scatter_gather_table_matches_code_and_header() {
    let t = fields("### BPF-KV scatter-gather scratch ABI");
    let want = [
        ("root_pointer", SG_OFF_ROOT_POINTER, 8),
        ("value_ptr", SG_OFF_VALUE_PTR, 8),
        ("state_flags", SG_OFF_STATE_FLAGS, 4),
        ("current_index", SG_OFF_CURRENT_INDEX, 4),
        ("n_keys", SG_OFF_N_KEYS, 4),
        ("pad", SG_OFF_N_KEYS + 4, 4),
        ("keys", SG_OFF_KEYS, SG_KEYS * 8),
        ("values", SG_OFF_VALUES, SG_KEYS * SG_MAYBE_VALUE_BYTES),
    ];
    assert_eq!(t.len(), want.len(), "{t:?}");
    for (name, off, size) in want {
        assert_eq!(t[name], (off, size), "{name}");
    }
    check_tiling(&t, SG_BYTES);
    let d = defines();
    assert_eq!(d["BPFKV_SG_KEYS"], SG_KEYS as u64);
    assert_eq!(d["BPFKV_SG_OFF_KEYS"], SG_OFF_KEYS as u64);
    assert_eq!(d["BPFKV_SG_OFF_VALUES"], SG_OFF_VALUES as u64);
    assert_eq!(d["BPFKV_SG_BYTES"], SG_BYTES as u64);
    assert_eq!(d["BPFKV_SG_FAILED"], u64::from(SG_FLAG_FAILED));
}

#[test]
fn range_query_table_matches_code_and_header() {
    let t = fields("### BPF-KV range scratch ABI");
    let pads: Vec<_> = [RQ_OFF_LEN + 4, RQ_OFF_STATE + 4, RQ_OFF_NODE_KEY_IX + 4].into();
    let want = [
        ("range_begin", RQ_OFF_BEGIN, 8),
        ("range_end", RQ_OFF_END, 8),
        ("flags", RQ_OFF_FLAGS, 4),
        ("agg_op", RQ_OFF_AGG_OP, 4),
        ("len", RQ_OFF_LEN, 4),
        ("kv", RQ_OFF_KV, RQ_KEYS * RQ_KV_BYTES),
        ("agg_value", RQ_OFF_AGG_VALUE, 8),
        ("state", RQ_OFF_STATE, 4),
        ("resume_from_leaf", RQ_OFF_RESUME_FROM_LEAF, 8),
        ("node_key_ix", RQ_OFF_NODE_KEY_IX, 4),
        ("current_node", RQ_OFF_CURRENT_NODE, 512),
    ];
    // Three `pad` rows share a name: the map keeps one; check the rest and tile with all.
    assert_eq!(t.len(), want.len() + 1, "{t:?}");
    let mut all: HashMap<String, (usize, usize)> = HashMap::new();
    for (name, off, size) in want {
        assert_eq!(t[name], (off, size), "{name}");
        all.insert(name.into(), (off, size));
    }
    assert!(pads.iter().any(|&p| t["pad"] == (p, 4)));
    for (i, p) in pads.into_iter().enumerate() {
        all.insert(format!("pad{i}"), (p, 4));
    }
    check_tiling(&all, RQ_BYTES);
    let d = defines();
    for (name, v) in [
        ("BPFKV_RQ_KEYS", RQ_KEYS as u64),
        ("BPFKV_RQ_BEGIN_EXCLUSIVE", u64::from(RQ_BEGIN_EXCLUSIVE)),
        ("BPFKV_RQ_END_INCLUSIVE", u64::from(RQ_END_INCLUSIVE)),
        ("BPFKV_RQ_RESUME", u64::from(RQ_STATE_RESUME)),
        ("BPFKV_RQ_TRAVERSE", u64::from(RQ_STATE_TRAVERSE)),
        ("BPFKV_RQ_READ_VALUE", u64::from(RQ_STATE_READ_VALUE)),
        ("BPFKV_RQ_READ_NODE", u64::from(RQ_STATE_READ_NODE)),
        ("BPFKV_RQ_FAILED", u64::from(RQ_STATE_FAILED)),
        ("BPFKV_RQ_AGG_NONE", u64::from(RQ_AGG_NONE)),
        ("BPFKV_RQ_AGG_SUM", u64::from(RQ_AGG_SUM)),
        ("BPFKV_RQ_OFF_KV", RQ_OFF_KV as u64),
        ("BPFKV_RQ_OFF_AGG_VALUE", RQ_OFF_AGG_VALUE as u64),
        ("BPFKV_RQ_OFF_STATE", RQ_OFF_STATE as u64),
        ("BPFKV_RQ_OFF_CURRENT_NODE", RQ_OFF_CURRENT_NODE as u64),
        ("BPFKV_RQ_BYTES", RQ_BYTES as u64),
    ] {
        assert_eq!(d.get(name), Some(&v), "bpfkv_abi.h {name}");
    }
}
