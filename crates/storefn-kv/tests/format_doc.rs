//! docs/FORMAT.md's BPF-KV tables and progs/include/bpfkv.h against the code's constants.

use std::collections::HashMap;

use storefn_kv::layout::tree::*;
use storefn_kv::limits::{MAX_BATCH_RECORDS, SCRATCH_BYTES};
use storefn_kv::NodeSize;

const DOC: &str = include_str!("../../../docs/FORMAT.md");
const HEADER: &str = include_str!("../../../progs/include/bpfkv.h");

/// Table rows (cells trimmed, backticks removed) of the section under `heading`.
fn rows(heading: &str) -> Vec<Vec<String>> {
    let start = DOC.find(heading).unwrap_or_else(|| panic!("FORMAT.md lacks {heading:?}"));
    let body = &DOC[start + heading.len()..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end]
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|--") && !l.starts_with("|:"))
        .filter(|l| !l.contains("---"))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().replace('`', "")).collect())
        .filter(|r: &Vec<String>| r[0] != "offset" && r[0] != "name" && r[0] != "offset 512")
        .collect()
}

fn num(s: &str) -> u64 {
    s.strip_prefix("0x").map_or_else(|| s.parse().unwrap(), |h| u64::from_str_radix(h, 16).unwrap())
}

/// `(offset, size)` by field name from a three-column-prefix table.
fn fields(heading: &str) -> HashMap<String, (u64, u64)> {
    rows(heading)
        .into_iter()
        .filter(|r| r.len() >= 3 && r[0].parse::<u64>().is_ok())
        .map(|r| (r[2].clone(), (num(&r[0]), num(&r[1]))))
        .collect()
}

#[test]
fn node_table_matches_code() {
    let r: HashMap<String, Vec<u64>> = rows("### Node")
        .into_iter()
        .filter(|r| r.len() == 6)
        .map(|r| (r[4].clone(), r[..4].iter().map(|c| num(c)).collect()))
        .collect();
    let (a, b) = (NodeSize::B512, NodeSize::B4096);
    let f = |n: NodeSize| (n.fanout() * 8) as u64;
    assert_eq!(r["next"], vec![NODE_OFF_NEXT as u64, NODE_OFF_NEXT as u64, 8, 8]);
    assert_eq!(r["type"], vec![NODE_OFF_TYPE as u64, NODE_OFF_TYPE as u64, 8, 8]);
    assert_eq!(r["key"], vec![NODE_OFF_KEYS as u64, NODE_OFF_KEYS as u64, f(a), f(b)]);
    assert_eq!(r["ptr"], vec![a.off_ptrs() as u64, b.off_ptrs() as u64, f(a), f(b)]);
    assert_eq!(r.len(), 4);
}

#[test]
fn constants_table_matches_code() {
    let c: HashMap<String, u64> = rows("Constants:")
        .into_iter()
        .filter(|r| r.len() == 3)
        .map(|r| (r[0].clone(), num(&r[1])))
        .collect();
    assert_eq!(c["FILE_MASK"], FILE_MASK);
    assert_eq!(c["NODE_TYPE_INTERNAL"], NODE_TYPE_INTERNAL);
    assert_eq!(c["NODE_TYPE_LEAF"], NODE_TYPE_LEAF);
    assert_eq!(c["VALUE_BYTES"], VALUE_BYTES as u64);
    assert_eq!(c["UNUSED_KEY"], UNUSED_KEY);
    assert_eq!(c["UNUSED_LEAF_PTR"], UNUSED_LEAF_PTR);
    assert_eq!(c["META_BYTES"], META_BYTES as u64);
    assert_eq!(c["META_VERSION"], u64::from(META_VERSION));
    assert_eq!(c.len(), 8);
}

#[test]
fn sidecar_table_matches_code() {
    let t = fields("### Sidecar");
    let want = [
        ("magic", META_OFF_MAGIC, 8),
        ("version", META_OFF_VERSION, 4),
        ("node_size", META_OFF_NODE_SIZE, 4),
        ("layers", META_OFF_LAYERS, 4),
        ("fanout", META_OFF_FANOUT, 4),
        ("key_count", META_OFF_KEY_COUNT, 8),
        ("total_nodes", META_OFF_TOTAL_NODES, 8),
        ("value_log_offset", META_OFF_VALUE_LOG, 8),
        ("file_bytes", META_OFF_FILE_BYTES, 8),
        ("checksum", META_OFF_CHECKSUM, 8),
    ];
    assert_eq!(t.len(), want.len());
    let mut end = 0;
    for (name, off, size) in want {
        assert_eq!(t[name], (off as u64, size), "{name}");
        end = end.max(off + size as usize);
    }
    assert_eq!(end, META_BYTES);
    assert!(DOC.contains(std::str::from_utf8(&META_MAGIC).unwrap()));
}

#[test]
fn scratch_tables_match_code_and_header() {
    let t = fields("### Lookup scratch ABI");
    assert_eq!(t["key"], (LOOKUP_OFF_KEY as u64, 8));
    assert_eq!(t["found"], (LOOKUP_OFF_FOUND as u64, 1));
    assert_eq!(t["value"], (LOOKUP_OFF_VALUE as u64, VALUE_BYTES as u64));
    assert_eq!(t["state"], (LOOKUP_OFF_STATE as u64, (SCRATCH_BYTES - LOOKUP_OFF_STATE) as u64));
    let r = fields("### Range scratch ABI");
    let want = [
        ("begin", RANGE_OFF_BEGIN, 8),
        ("end", RANGE_OFF_END, 8),
        ("agg", RANGE_OFF_AGG, 4),
        ("flags", RANGE_OFF_FLAGS, 4),
        ("leaf", RANGE_OFF_LEAF, 8),
        ("index", RANGE_OFF_INDEX, 4),
        ("count", RANGE_OFF_COUNT, 4),
        ("agg_value", RANGE_OFF_AGG_VALUE, 8),
        ("agg_n", RANGE_OFF_AGG_N, 8),
        ("results", RANGE_OFF_RESULTS, 32 * RANGE_RESULT_BYTES),
        ("leaf_copy", RANGE_OFF_LEAF_COPY, 512),
        ("phase", RANGE_OFF_PHASE, 4),
        ("err", RANGE_OFF_PHASE + 4, 4),
        ("pending", RANGE_OFF_PHASE + 8, 16),
    ];
    assert_eq!(r.len(), want.len());
    for (name, off, size) in want {
        assert_eq!(r[name], (off as u64, size as u64), "{name}");
    }
    // The C header's #defines carry the same numbers.
    let defines: HashMap<&str, u64> = HEADER
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "#define").then_some(())?;
            let name = w.next()?;
            let v = w.next()?.trim_end_matches(['U', 'L']);
            let v = v.strip_prefix('(').unwrap_or(v);
            let v = v.strip_suffix(')').unwrap_or(v).trim_end_matches(['U', 'L']);
            Some((
                name,
                v.strip_prefix("0x")
                    .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())?,
            ))
        })
        .collect();
    let check = [
        ("BPFKV_FILE_MASK", FILE_MASK),
        ("BPFKV_VALUE_BYTES", VALUE_BYTES as u64),
        ("BPFKV_LOOKUP_OFF_STATE", LOOKUP_OFF_STATE as u64),
        ("BPFKV_RANGE_BATCH", 32),
        ("BPFKV_RANGE_FLAG_DONE", u64::from(RANGE_FLAG_DONE)),
        ("BPFKV_RANGE_FLAG_RESUME", u64::from(RANGE_FLAG_RESUME)),
        ("BPFKV_RANGE_OFF_LEAF_COPY", RANGE_OFF_LEAF_COPY as u64),
        ("BPFKV_RANGE_OFF_PHASE", RANGE_OFF_PHASE as u64),
    ];
    for (name, v) in check {
        assert_eq!(defines.get(name), Some(&v), "bpfkv.h {name}");
    }
}

/// `(offset, size)` by field name of the first table after the line `marker` (inside the WAL
/// section, which holds three tables).
fn table_after(marker: &str) -> HashMap<String, (u64, u64)> {
    let start = DOC.find(marker).unwrap_or_else(|| panic!("FORMAT.md lacks {marker:?}"));
    DOC[start + marker.len()..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').map(|c| c.trim().replace('`', "")).collect())
        .filter(|r: &Vec<String>| r.len() >= 3 && r[0].parse::<u64>().is_ok())
        .map(|r| (r[2].clone(), (num(&r[0]), num(&r[1]))))
        .collect()
}

#[test]
fn wal_tables_match_code() {
    use storefn_kv::layout::wal::*;
    let h = table_after("Batch header:");
    let want = [
        ("magic", 0, BATCH_MAGIC.len()),
        ("count", HDR_OFF_COUNT, 4),
        ("first_seq", HDR_OFF_FIRST_SEQ, 8),
        ("payload_bytes", HDR_OFF_PAYLOAD_BYTES, 4),
        ("header_crc", HDR_OFF_CRC, 4),
        ("zero", HDR_OFF_ZERO, HEADER_BYTES - HDR_OFF_ZERO),
    ];
    assert_eq!(h.len(), want.len());
    for (name, off, size) in want {
        assert_eq!(h[name], (off as u64, size as u64), "header {name}");
    }
    let r = table_after("WAL record:");
    assert_eq!(r.len(), 2);
    assert_eq!(r["key"], (0, 8));
    assert_eq!(r["value"], (8, storefn_kv::layout::wal::VALUE_BYTES as u64));
    assert_eq!(8 + storefn_kv::layout::wal::VALUE_BYTES, RECORD_BYTES);
    let c = table_after("Commit marker:");
    let want = [
        ("magic", 0, COMMIT_MAGIC.len()),
        ("batch_crc", COMMIT_OFF_CRC, 4),
        ("last_seq", COMMIT_OFF_LAST_SEQ, COMMIT_BYTES - COMMIT_OFF_LAST_SEQ),
    ];
    assert_eq!(c.len(), want.len());
    for (name, off, size) in want {
        assert_eq!(c[name], (off as u64, size as u64), "commit {name}");
    }
    for magic in [BATCH_MAGIC, COMMIT_MAGIC] {
        assert!(DOC.contains(&format!("ASCII `{}`", std::str::from_utf8(&magic).unwrap())));
    }
    assert!(DOC.contains(&format!("1..={MAX_BATCH_RECORDS} (`MAX_BATCH_RECORDS`)")));
    // The diagram's batch length formula.
    assert!(DOC.contains(&format!("{} + {}*count", HEADER_BYTES + COMMIT_BYTES, RECORD_BYTES)));
}
