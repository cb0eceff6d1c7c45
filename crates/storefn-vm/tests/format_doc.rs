//! docs/FORMAT.md is the contract for context layouts; these tests read its tables and check
//! them against the constants the verifier, JIT and engine use.

use storefn_vm::xrp::{
    LAMBDA_CTX_BYTES, XRP_CTX_BYTES, XRP_MAX_FANOUT, XRP_OFF_DATA, XRP_OFF_DATA_LEN, XRP_OFF_DONE,
    XRP_OFF_NEXT_ADDR, XRP_OFF_SCRATCH, XRP_OFF_SIZE, XRP_OFF_SLOT,
};

/// Rows `| offset | size | field ... |` of the table under `heading` in docs/FORMAT.md.
fn table_rows(heading: &str) -> Vec<(usize, usize, String)> {
    let doc = include_str!("../../../docs/FORMAT.md");
    let start = doc.find(heading).unwrap_or_else(|| panic!("FORMAT.md lacks {heading}"));
    let body = &doc[start + heading.len()..];
    let end = body.find("\n## ").unwrap_or(body.len());
    body[..end]
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let off = cells.get(1)?.parse().ok()?;
            let size = cells.get(2)?.parse().ok()?;
            Some((off, size, (*cells.get(3)?).to_string()))
        })
        .collect()
}

fn row<'a>(rows: &'a [(usize, usize, String)], field: &str) -> &'a (usize, usize, String) {
    rows.iter().find(|r| r.2.contains(field)).unwrap_or_else(|| panic!("no row for {field}"))
}

fn check(rows: &[(usize, usize, String)], field: &str, offset: usize, size: usize) {
    let r = row(rows, field);
    assert_eq!((r.0, r.1), (offset, size), "FORMAT.md row for {field}");
}

#[test]
fn xrp_context_table_matches_code() {
    let rows = table_rows("## XRP context");
    check(&rows, "*data", XRP_OFF_DATA, 8);
    check(&rows, "done", XRP_OFF_DONE, 4);
    check(&rows, "slot", XRP_OFF_SLOT, 4);
    check(&rows, "next_addr", XRP_OFF_NEXT_ADDR, 8 * XRP_MAX_FANOUT);
    check(&rows, "size[", XRP_OFF_SIZE, 8 * XRP_MAX_FANOUT);
    check(&rows, "*scratch", XRP_OFF_SCRATCH, 8);
    check(&rows, "u64 data_len", XRP_OFF_DATA_LEN, 8);
    let last = rows.iter().map(|r| r.0 + r.1).max().unwrap();
    assert_eq!(last, XRP_CTX_BYTES);
    // The rows tile the struct with no gap or overlap.
    let mut sorted = rows.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        assert_eq!(w[0].0 + w[0].1, w[1].0, "gap or overlap after {}", w[0].2);
    }
}

#[test]
fn lambda_context_table_matches_code() {
    let rows = table_rows("## λ context");
    check(&rows, "buf_o", 0, 8);
    check(&rows, "buf_i", 8, 8);
    check(&rows, "size_i", 16, 8);
    assert_eq!(rows.iter().map(|r| r.0 + r.1).max().unwrap(), LAMBDA_CTX_BYTES);
}
