//! docs/FORMAT.md's wire-protocol tables against storefn_wire's constants.

use std::collections::HashMap;

use storefn_wire::layout::*;
use storefn_wire::limits::*;
use storefn_wire::*;

const DOC: &str = include_str!("../../../docs/FORMAT.md");

/// Rows of the table under `heading` (storefn-testkit's reader of FORMAT.md tables).
fn rows(heading: &str) -> Vec<Vec<String>> {
    storefn_testkit::doc_table_rows(DOC, heading)
}

/// `field -> (offset, size)` where both are numbers; symbolic sizes map to `None`.
fn fields(heading: &str) -> HashMap<String, (usize, Option<usize>)> {
    rows(heading)
        .into_iter()
        .filter_map(|r| {
            let off = r[0].parse().ok()?;
            Some((r[2].clone(), (off, r[1].parse().ok())))
        })
        .collect()
}

fn check(heading: &str, want: &[(&str, usize, Option<usize>)]) {
    let got = fields(heading);
    for (name, off, size) in want {
        assert_eq!(got.get(*name), Some(&(*off, *size)), "{heading}: field {name}");
    }
    assert_eq!(got.len(), want.len(), "{heading}: fields {got:?}");
}

#[test]
fn frame_and_message_headers_match_code() {
    check(
        "### Frame header",
        &[
            ("magic", FRAME_OFF_MAGIC, Some(4)),
            ("version", FRAME_OFF_VERSION, Some(1)),
            ("kind", FRAME_OFF_KIND, Some(1)),
            ("reserved", FRAME_OFF_RESERVED, Some(FRAME_OFF_BODY_BYTES - FRAME_OFF_RESERVED)),
            ("body_bytes", FRAME_OFF_BODY_BYTES, Some(4)),
            ("count", FRAME_OFF_COUNT, Some(FRAME_HEADER_BYTES - FRAME_OFF_COUNT)),
        ],
    );
    check(
        "### Message header",
        &[
            ("req_id", MSG_OFF_REQ_ID, Some(8)),
            ("op", MSG_OFF_OP, Some(1)),
            ("flags", MSG_OFF_FLAGS, Some(1)),
            ("status", MSG_OFF_STATUS, Some(2)),
            ("len", MSG_OFF_LEN, Some(MSG_HEADER_BYTES - MSG_OFF_LEN)),
        ],
    );
    let f = rows("### Frame header");
    assert!(f[0][3].contains(std::str::from_utf8(&MAGIC).unwrap()));
    assert!(f[1][3].starts_with(&VERSION.to_string()));
    assert!(f[4][3].contains(&format!("{} MiB", MAX_FRAME_BYTES >> 20)));
    assert!(f[5][3].contains(&format!("1..={MAX_MSGS_PER_FRAME}")));
}

#[test]
fn op_and_status_tables_match_code() {
    let ops: Vec<(u8, String)> =
        rows("### Operations").into_iter().map(|r| (r[0].parse().unwrap(), r[1].clone())).collect();
    let code: Vec<(u8, String)> = op::ALL.iter().map(|(c, n)| (*c, (*n).to_string())).collect();
    assert_eq!(ops, code);
    let st: Vec<(u16, String)> = rows("### Status codes")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].clone()))
        .collect();
    let code: Vec<(u16, String)> =
        StatusCode::ALL.iter().map(|(c, n)| (*c as u16, (*n).to_string())).collect();
    assert_eq!(st, code);
}

#[test]
fn payload_tables_match_code() {
    let h = Some(HASH_BYTES);
    check(
        "### File version",
        &[
            ("dev", VERSION_OFF_DEV, Some(8)),
            ("ino", VERSION_OFF_INO, Some(8)),
            ("change", VERSION_OFF_CHANGE, Some(VERSION_BYTES - VERSION_OFF_CHANGE)),
        ],
    );
    check(
        "### HELLO request",
        &[
            ("tenant_len", HELLO_OFF_TENANT_LEN, Some(2)),
            ("reserved", 2, Some(HELLO_OFF_TENANT - 2)),
            ("tenant", HELLO_OFF_TENANT, None),
        ],
    );
    check(
        "### HELLO response",
        &[
            ("challenge", HELLO_R_OFF_CHALLENGE, h),
            ("flags", HELLO_R_OFF_FLAGS, Some(4)),
            ("max_frame_bytes", HELLO_R_OFF_MAX_FRAME, Some(4)),
            ("max_in_flight", HELLO_R_OFF_MAX_IN_FLIGHT, Some(4)),
            (
                "reserved",
                HELLO_R_OFF_MAX_IN_FLIGHT + 4,
                Some(HELLO_R_BYTES - HELLO_R_OFF_MAX_IN_FLIGHT - 4),
            ),
        ],
    );
    check("### AUTH request", &[("mac", 0, Some(AUTH_BYTES))]);
    let load = fields("### LOAD_PROG request");
    assert_eq!(load["prog_type"], (LOAD_OFF_TYPE, Some(1)));
    assert_eq!(load["section_len"], (LOAD_OFF_SECTION_LEN, Some(4)));
    assert_eq!(load["section"], (LOAD_OFF_SECTION, None));
    check(
        "### LOAD_PROG response",
        &[
            ("hash", 0, h),
            ("insns", HASH_BYTES, Some(4)),
            ("reserved", HASH_BYTES + 4, Some(LOAD_R_BYTES - HASH_BYTES - 4)),
        ],
    );
    check(
        "### READ request",
        &[
            ("offset", READ_OFF_OFFSET, Some(8)),
            ("len", READ_OFF_LEN, Some(4)),
            ("path_len", READ_OFF_PATH_LEN, Some(2)),
            ("reserved", READ_OFF_PATH_LEN + 2, Some(READ_OFF_PATH - READ_OFF_PATH_LEN - 2)),
            ("path", READ_OFF_PATH, None),
        ],
    );
    check(
        "### READ response",
        &[("version", 0, Some(VERSION_BYTES)), ("data", READ_R_OFF_DATA, None)],
    );
    let xrp = fields("### XRP request");
    for (name, off, size) in [
        ("offset", XRP_OFF_OFFSET, Some(8)),
        ("len", XRP_OFF_LEN, Some(4)),
        ("scratch_len", XRP_OFF_SCRATCH_LEN, Some(4)),
        ("out_len", XRP_OFF_OUT_LEN, Some(4)),
        ("path_len", XRP_OFF_PATH_LEN, Some(2)),
        ("reserved", XRP_OFF_PATH_LEN + 2, Some(XRP_OFF_HASH - XRP_OFF_PATH_LEN - 2)),
        ("hash", XRP_OFF_HASH, h),
        ("path", XRP_OFF_PATH, None),
    ] {
        assert_eq!(xrp[name], (off, size), "XRP request {name}");
    }
    assert_eq!(XRP_OFF_HASH + HASH_BYTES, XRP_OFF_PATH);
    check(
        "### XRP response",
        &[
            ("version", 0, Some(VERSION_BYTES)),
            ("hops", XRP_R_OFF_HOPS, Some(4)),
            ("reserved", XRP_R_OFF_HOPS + 4, Some(XRP_R_OFF_SCRATCH - XRP_R_OFF_HOPS - 4)),
            ("scratch", XRP_R_OFF_SCRATCH, None),
        ],
    );
    check(
        "### LAMBDA request",
        &[
            ("offset", LAMBDA_OFF_OFFSET, Some(8)),
            ("len", LAMBDA_OFF_LEN, Some(4)),
            ("out_cap", LAMBDA_OFF_OUT_CAP, Some(4)),
            ("path_len", LAMBDA_OFF_PATH_LEN, Some(2)),
            ("reserved", LAMBDA_OFF_PATH_LEN + 2, Some(LAMBDA_OFF_HASH - LAMBDA_OFF_PATH_LEN - 2)),
            ("hash", LAMBDA_OFF_HASH, h),
            ("path", LAMBDA_OFF_PATH, None),
        ],
    );
    check(
        "### LAMBDA response",
        &[
            ("version", 0, Some(VERSION_BYTES)),
            ("ret", LAMBDA_R_OFF_RET, Some(8)),
            ("out", LAMBDA_R_OFF_OUT, None),
        ],
    );
    let w = fields("### WRITE request");
    assert_eq!(w["offset"], (WRITE_OFF_OFFSET, Some(8)));
    assert_eq!(w["data_len"], (WRITE_OFF_DATA_LEN, Some(4)));
    assert_eq!(w["path_len"], (WRITE_OFF_PATH_LEN, Some(2)));
    assert_eq!(
        w["reserved"],
        (WRITE_OFF_PATH_LEN + 2, Some(WRITE_OFF_PATH - WRITE_OFF_PATH_LEN - 2))
    );
    assert_eq!(w["path"], (WRITE_OFF_PATH, None));
    check(
        "### WRITE response",
        &[
            ("version", 0, Some(VERSION_BYTES)),
            ("written", VERSION_BYTES, Some(4)),
            ("reserved", VERSION_BYTES + 4, Some(WRITE_R_BYTES - VERSION_BYTES - 4)),
        ],
    );
    check(
        "### STAT request",
        &[
            ("path_len", STAT_OFF_PATH_LEN, Some(2)),
            ("reserved", STAT_OFF_PATH_LEN + 2, Some(STAT_OFF_PATH - STAT_OFF_PATH_LEN - 2)),
            ("path", STAT_OFF_PATH, None),
        ],
    );
    check(
        "### STAT response",
        &[
            ("version", 0, Some(VERSION_BYTES)),
            ("size", VERSION_BYTES, Some(STAT_R_BYTES - VERSION_BYTES)),
        ],
    );
    check(
        "### OFFLOAD request",
        &[
            ("msg_len", OFFLOAD_OFF_MSG_LEN, Some(4)),
            ("reserved", OFFLOAD_OFF_MSG_LEN + 4, Some(OFFLOAD_OFF_MSG - OFFLOAD_OFF_MSG_LEN - 4)),
            ("msg", OFFLOAD_OFF_MSG, None),
        ],
    );
    check(
        "### OFFLOAD response",
        &[
            ("served_by", OFFLOAD_R_OFF_SERVED_BY, Some(1)),
            ("reserved", OFFLOAD_R_OFF_SERVED_BY + 1, Some(OFFLOAD_R_OFF_DATA - 1)),
            ("data", OFFLOAD_R_OFF_DATA, None),
        ],
    );
    let lw = fields("### LAMBDA_WRITE request");
    for (name, off, size) in [
        ("offset", LWRITE_OFF_OFFSET, Some(8)),
        ("in_len", LWRITE_OFF_IN_LEN, Some(4)),
        ("out_cap", LWRITE_OFF_OUT_CAP, Some(4)),
        ("path_len", LWRITE_OFF_PATH_LEN, Some(2)),
        ("reserved", LWRITE_OFF_PATH_LEN + 2, Some(LWRITE_OFF_HASH - LWRITE_OFF_PATH_LEN - 2)),
        ("hash", LWRITE_OFF_HASH, h),
        ("path", LWRITE_OFF_PATH, None),
    ] {
        assert_eq!(lw[name], (off, size), "LAMBDA_WRITE request: {name}");
    }
    assert_eq!(lw.len(), 7, "LAMBDA_WRITE request: the input row follows the path");
    check(
        "### LAMBDA_WRITE response",
        &[
            ("version", 0, Some(VERSION_BYTES)),
            ("written", LWRITE_R_OFF_WRITTEN, Some(LWRITE_R_BYTES - LWRITE_R_OFF_WRITTEN)),
        ],
    );
    let doc_msg = &rows("### OFFLOAD request")[0][3];
    assert!(doc_msg.contains(&MAX_OFFLOAD_MSG_BYTES.to_string()), "msg_len bound: {doc_msg}");
    let doc_data = &rows("### OFFLOAD response")[2][3];
    assert!(doc_data.contains(&MAX_OFFLOAD_DATA_BYTES.to_string()), "data bound: {doc_data}");
}

/// The `meaning` cell of `field` in the table under `heading`.
fn meaning(heading: &str, field: &str) -> String {
    let r = rows(heading).into_iter().find(|r| r[2] == field);
    r.unwrap_or_else(|| panic!("{heading}: no field {field}"))[3].clone()
}

#[test]
fn lambda_bounds_match_code() {
    assert_eq!(meaning("### LAMBDA request", "len"), format!("1..={MAX_LAMBDA_IN_BYTES}"));
    assert_eq!(
        meaning("### LAMBDA request", "out_cap"),
        format!("0..={MAX_LAMBDA_OUT_BYTES} output bytes")
    );
    assert_eq!(meaning("### READ request", "len"), format!("1..={MAX_READ_BYTES}"));
    assert_eq!(
        meaning("### LAMBDA_WRITE request", "in_len"),
        format!("1..={MAX_LAMBDA_WRITE_IN_BYTES}")
    );
    assert_eq!(
        meaning("### LAMBDA_WRITE request", "out_cap"),
        format!("1..={MAX_LAMBDA_WRITE_OUT_BYTES} output bytes")
    );
}
