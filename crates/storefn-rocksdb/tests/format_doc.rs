//! docs/FORMAT.md's RocksDB tables against the code's constants and a file RocksDB wrote.

mod support;

use storefn_rocksdb::layout::*;
use storefn_rocksdb::{Db, FORMAT_VERSIONS};
use support::{build, TempDir};

const DOC: &str = include_str!("../../../docs/FORMAT.md");

fn section(heading: &str) -> &'static str {
    let start = DOC.find(heading).unwrap_or_else(|| panic!("FORMAT.md lacks {heading:?}"));
    let body = &DOC[start + heading.len()..];
    &body[..body.find("\n#").unwrap_or(body.len())]
}

/// `(offset, size)` of a named row in a section's `| offset | size | name |` table.
fn row(heading: &str, name: &str) -> (String, String) {
    let l = section(heading)
        .lines()
        .find(|l| l.split('|').nth(3).is_some_and(|c| c.trim() == name))
        .unwrap_or_else(|| panic!("{heading}: no row {name}"));
    let c: Vec<&str> = l.split('|').map(str::trim).collect();
    (c[1].to_string(), c[2].to_string())
}

#[test]
fn footer_and_trailer_tables_match_the_code() {
    let f = section("### SST footer");
    assert!(
        f.contains(&format!("{TABLE_MAGIC:#x}")) && f.contains(&format!("{LEGACY_TABLE_MAGIC:#x}"))
    );
    assert!(f.contains(&format!("last {FOOTER_BYTES} bytes")));
    assert_eq!(
        row("### SST footer", "format_version"),
        ((FOOTER_BYTES - 12).to_string(), "4".into())
    );
    assert_eq!(row("### SST footer", "magic"), ((FOOTER_BYTES - 8).to_string(), "8".into()));
    assert!(f.contains(&format!("{}..={} read", FORMAT_VERSIONS.start(), FORMAT_VERSIONS.end())));
    let t = section("### Blocks and trailers");
    assert!(t.contains(&format!("{BLOCK_TRAILER_BYTES}-byte trailer")));
    for (n, c) in [
        ("snappy", SNAPPY),
        ("zlib", ZLIB),
        ("lz4", LZ4),
        ("lz4hc", LZ4HC),
        ("zstd", ZSTD),
        ("bzip2", BZIP2),
        ("xpress", XPRESS),
    ] {
        assert!(t.contains(&format!("{c} {n}")), "{n}");
    }
    assert!(t.contains(&format!("`{HASH_INDEX_BIT:#010x}`")));
    assert!(t.contains(&format!("| {BLOCK_FOOTER_BYTES} bytes |")) && RESTART_BYTES == 4);
    assert_eq!(mask_crc(0), 0xa282_ead8, "the documented mask");
}

#[test]
fn filter_table_matches_the_code() {
    let f = section("### Filters");
    assert_eq!(
        row("### Filters", "reserved"),
        ("len+3".into(), (FILTER_METADATA_BYTES - 3).to_string())
    );
    assert!(
        f.contains(&format!("`{NEWER_BLOOM_MARKER:#x}`"))
            && f.contains(&format!("| {FAST_LOCAL_BLOOM}: cache-local"))
    );
    assert!(
        f.contains(&format!("{FILTER_LINE_BYTES}-byte lines"))
            && f.contains(&format!("`{PROBE_MULTIPLIER:#x}`"))
    );
    assert!(f.contains(&format!("keys up to {MAX_HASHED_KEY_BYTES} bytes")));
}

#[test]
fn log_and_edit_tables_match_the_code() {
    assert_eq!(
        row("### Logs", "log number"),
        (HEADER_BYTES.to_string(), (RECYCLABLE_HEADER_BYTES - HEADER_BYTES).to_string())
    );
    assert!(section("### Logs").contains(&format!("{} KiB blocks", LOG_BLOCK_BYTES / 1024)));
    let e = section("### MANIFEST version edits");
    for t in [
        tag::COMPARATOR,
        tag::LOG_NUMBER,
        tag::COMPACT_CURSOR,
        tag::DELETED_FILE,
        tag::NEW_FILE4,
        tag::COLUMN_FAMILY,
        tag::IN_ATOMIC_GROUP,
        tag::BLOB_FILE_ADDITION,
        tag::CUSTOM_PATH_ID,
    ] {
        assert!(e.contains(&format!("{t} ")), "tag {t}");
    }
    assert_eq!(tag::SAFE_IGNORE_MASK, 1 << 13);
    assert_eq!(tag::CUSTOM_NON_SAFE_IGNORE_MASK, 1 << 6);
    assert_eq!(INTERNAL_KEY_TRAILER_BYTES, 8);
}

#[test]
fn a_file_rocksdb_wrote_has_the_documented_footer() {
    let d = TempDir::new("rocks-format-doc");
    build(&d.0, 9, 300, 4096, "no");
    let db = Db::open(&d.0).unwrap();
    let f = &db.levels().iter().flatten().next().unwrap().table;
    let bytes = std::fs::read(f.path()).unwrap();
    let n = bytes.len();
    assert_eq!(u64::from_le_bytes(bytes[n - 8..].try_into().unwrap()), TABLE_MAGIC);
    let version = u32::from_le_bytes(bytes[n - 12..n - 8].try_into().unwrap());
    assert_eq!(version, 5, "RocksDB 7.8's default format_version");
    assert_eq!(bytes[n - FOOTER_BYTES], 4, "XXH3, 7.8's default checksum");
    let current = std::fs::read_to_string(d.0.join("CURRENT")).unwrap();
    assert!(current.starts_with("MANIFEST-") && current.ends_with('\n'));
}

#[test]
fn get_scratch_abi_table_matches_the_code() {
    use storefn_rocksdb::chain::abi;
    const H: &str = "### RocksDB Get scratch ABI";
    for (name, at, size) in [
        ("key_len", abi::KEY_LEN, 4),
        ("flags", abi::FLAGS, 4),
        ("file_size", abi::FILE_SIZE, 8),
        ("cur_off", abi::CUR_OFF, 8),
        ("cur_size", abi::CUR_SIZE, 4),
        ("phase", abi::PHASE, 4),
        ("status", abi::STATUS, 4),
        ("hops", abi::HOPS, 4),
        ("value_len", abi::VALUE_LEN, 4),
        ("reason", abi::REASON, 4),
        ("trailer", abi::TRAILER, 8),
        ("hop_max", abi::HOP_MAX, 4),
        ("cur_len", abi::CUR_LEN, 4),
        ("key", abi::KEY, abi::KEY_MAX),
        ("cur", abi::CUR, abi::VALUE - abi::CUR),
        ("value", abi::VALUE, abi::VALUE_MAX),
    ] {
        assert_eq!(row(H, name), (at.to_string(), size.to_string()), "{name}");
    }
    let s = section(H);
    for (n, v) in [
        ("1 ENTRY", abi::ENTRY),
        ("2 ABSENT", abi::ABSENT),
        ("3 FALLBACK", abi::FALLBACK),
        ("4 CORRUPT", abi::CORRUPT),
        ("1 verify", abi::FLAG_VERIFY),
        ("2 index keys", abi::FLAG_INDEX_USER_KEYS),
        ("4 index values", abi::FLAG_INDEX_DELTA),
    ] {
        assert!(s.contains(n) && n.starts_with(&v.to_string()), "{n}");
    }
    assert_eq!(abi::VALUE + abi::VALUE_MAX, 4096);
}
