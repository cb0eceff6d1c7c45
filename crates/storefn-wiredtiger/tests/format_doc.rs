//! docs/FORMAT.md's WiredTiger tables against the code's constants and against files the real
//! WiredTiger wrote (every documented cell kind the test database should hold is found in it).

mod common;

use common::{build, TempDir};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use storefn_wiredtiger::format::*;
use storefn_wiredtiger::Table;

const DOC: &str = include_str!("../../../docs/FORMAT.md");

fn rows(heading: &str) -> Vec<Vec<String>> {
    let start = DOC.find(heading).unwrap_or_else(|| panic!("FORMAT.md lacks {heading:?}"));
    let body = &DOC[start + heading.len()..];
    let end = body.find("\n#").unwrap_or(body.len());
    body[..end]
        .lines()
        .filter(|l| l.starts_with('|') && !l.contains("---"))
        .map(|l| l.trim_matches('|').split(" | ").map(|c| c.trim().replace('`', "")).collect())
        .filter(|r: &Vec<String>| r[0] != "offset" && r[0] != "name" && r[0] != "descriptor")
        .collect()
}

fn num(s: &str) -> u64 {
    s.strip_prefix("0x").map_or_else(|| s.parse().unwrap(), |h| u64::from_str_radix(h, 16).unwrap())
}

#[test]
fn constants_match_code() {
    let c: HashMap<String, u64> = rows("### WiredTiger block")
        .into_iter()
        .filter(|r| r.len() == 3)
        .map(|r| (r[0].clone(), num(&r[1])))
        .collect();
    let code: [(&str, u64); 11] = [
        ("BLOCK_MAGIC", u64::from(BLOCK_MAGIC)),
        ("BLOCK_DESC_BYTES", BLOCK_DESC_BYTES as u64),
        ("PAGE_HEADER_BYTES", PAGE_HEADER_BYTES as u64),
        ("BLOCK_HEADER_BYTES", BLOCK_HEADER_BYTES as u64),
        ("PAGE_PREFIX_BYTES", PAGE_PREFIX_BYTES as u64),
        ("CHECKSUM_SKIP_BYTES", CHECKSUM_SKIP_BYTES as u64),
        ("BLOCK_DATA_CKSUM", u64::from(BLOCK_DATA_CKSUM)),
        ("PAGE_COMPRESSED", u64::from(PAGE_COMPRESSED)),
        ("PAGE_ENCRYPTED", u64::from(PAGE_ENCRYPTED)),
        ("CELL_SIZE_ADJUST", CELL_SIZE_ADJUST),
        ("CHECKPOINT_VERSION", u64::from(CHECKPOINT_VERSION)),
    ];
    for (name, v) in code {
        assert_eq!(c.get(name), Some(&v), "{name}");
    }
    let block: HashMap<String, (u64, u64)> = rows("### WiredTiger block")
        .into_iter()
        .filter(|r| r.len() == 4 && r[0].parse::<u64>().is_ok())
        .map(|r| (r[2].clone(), (num(&r[0]), num(&r[1]))))
        .collect();
    assert_eq!(block["type"], (PAGE_TYPE_OFFSET as u64, 1));
    assert_eq!(block["disk_size"], (PAGE_HEADER_BYTES as u64, 4));
    assert_eq!(block["checksum"], (BlockHeader::CHECKSUM_AT as u64, 4));
    assert_eq!(block["block_flags"].0 + 4, PAGE_PREFIX_BYTES as u64);
}

/// Reads the block at `addr` of `file` and checks the documented header fields byte by byte.
fn block(file: &[u8], addr: BlockAddr, fields: &HashMap<String, (u64, u64)>) -> Vec<u8> {
    let b = file[addr.offset as usize..(addr.offset + addr.size) as usize].to_vec();
    let at = |name: &str| {
        let (o, n) = fields[name];
        b[o as usize..(o + n) as usize].iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x))
    };
    assert_eq!(at("disk_size"), addr.size);
    assert_eq!(at("checksum"), u64::from(addr.checksum));
    assert!(at("mem_size") <= addr.size);
    assert!([6, 7].contains(&at("type")), "type {}", at("type"));
    assert_eq!(at("block_flags") & u64::from(BLOCK_DATA_CKSUM), u64::from(BLOCK_DATA_CKSUM));
    BlockHeader::verify(&b, addr).unwrap();
    b
}

/// Every page of a table's checkpoint, collecting the kinds of cells seen.
fn walk(
    file: &[u8],
    addr: BlockAddr,
    fields: &HashMap<String, (u64, u64)>,
    seen: &mut BTreeSet<String>,
) {
    let b = block(file, addr, fields);
    let h = PageHeader::parse(&b).unwrap();
    let mut at = PAGE_PREFIX_BYTES;
    for _ in 0..h.entries {
        let c = Cell::parse(&b[..h.mem_size as usize], at).unwrap();
        let short = b[at] & 3 != 0;
        let kind = match &c.kind {
            CellKind::Key { prefix, .. } => format!(
                "{}key{}",
                if short { "short " } else { "" },
                if *prefix > 0 { " pfx" } else { "" }
            ),
            CellKind::Value { .. } => format!("{}value", if short { "short " } else { "" }),
            other => format!("{other:?}").split([' ', '{']).next().unwrap().to_string(),
        };
        seen.insert(kind);
        let child = match &c.kind {
            CellKind::AddrInternal { cookie } | CellKind::AddrLeaf { cookie, .. } => {
                Some(cookie.clone())
            }
            _ => None,
        };
        if let Some(cookie) = child {
            let mut pos = cookie.start;
            let a = BlockAddr::unpack(&b[..cookie.end], &mut pos, 4096).unwrap().unwrap();
            walk(file, a, fields, seen);
        }
        at = c.end;
    }
    assert_eq!(at, h.mem_size as usize, "cells end at mem_size");
}

#[test]
fn documented_layouts_are_what_wiredtiger_wrote() {
    let dir = TempDir::new("doc");
    build(&dir.0);
    let fields: HashMap<String, (u64, u64)> = rows("### WiredTiger block")
        .into_iter()
        .filter(|r| r.len() == 4 && r[0].parse::<u64>().is_ok())
        .map(|r| (r[2].clone(), (num(&r[0]), num(&r[1]))))
        .collect();
    let desc: HashMap<String, (u64, u64)> = rows("### WiredTiger file descriptor")
        .into_iter()
        .filter(|r| r.len() == 4)
        .map(|r| (r[2].clone(), (num(&r[0]), num(&r[1]))))
        .collect();
    let mut seen = BTreeSet::new();
    for t in ["small", "pfx", "ovfl", "dict", "deep"] {
        let table = Table::open(&dir.0, t).unwrap();
        let path: &Path = table.tree().path();
        let file = std::fs::read(path).unwrap();
        let (o, _) = desc["magic"];
        assert_eq!(
            u32::from_le_bytes(file[o as usize..o as usize + 4].try_into().unwrap()),
            BLOCK_MAGIC
        );
        FileDesc::parse(&file[..4096]).unwrap();
        walk(&file, table.tree().checkpoint().root.unwrap(), &fields, &mut seen);
    }
    let doc_cells: String =
        rows("### WiredTiger cells").iter().map(|r| r[1].clone()).collect::<Vec<_>>().join(";");
    // AddrInternal: "deep" has three levels or more.
    for kind in [
        "short key",
        "short key pfx",
        "short value",
        "key",
        "value",
        "ValueCopy",
        "AddrInternal",
        "AddrLeaf",
        "KeyOverflow",
        "ValueOverflow",
    ] {
        assert!(seen.contains(kind), "no {kind} cell in the test database: {seen:?}");
    }
    for doc in [
        "short key",
        "prefix-compressed",
        "short value",
        "address of an internal page",
        "value copy",
        "overflow key",
        "overflow value",
    ] {
        assert!(doc_cells.contains(doc), "{doc}");
    }
}

#[test]
fn scratch_abi_matches_code_and_program() {
    use storefn_wiredtiger::xrp_abi as a;
    let f: HashMap<String, (u64, u64)> = rows("### WiredTiger lookup scratch ABI")
        .into_iter()
        .filter(|r| r.len() == 4)
        .map(|r| (r[2].clone(), (num(&r[0]), num(&r[1]))))
        .collect();
    let code = [
        ("key_len", a::KEY_LEN, 4),
        ("hop_bytes", a::HOP_BYTES, 4),
        ("alloc", a::ALLOC, 8),
        ("file_size", a::FILE_SIZE, 8),
        ("status", a::STATUS, 4),
        ("hops", a::HOPS, 4),
        ("cur_offset", a::CUR_OFFSET, 8),
        ("cur_size", a::CUR_SIZE, 4),
        ("cur_checksum", a::CUR_CHECKSUM, 4),
        ("value_len", a::VALUE_LEN, 4),
        ("reason", a::REASON, 4),
        ("key", a::KEY, a::KEY_MAX),
        ("flags", a::FLAGS, 4),
        ("reserved", a::KEY + a::KEY_MAX, a::KEY_MAX),
        ("value", a::VALUE, a::VALUE_MAX),
    ];
    for (name, off, size) in code {
        assert_eq!(f.get(name), Some(&(off as u64, size as u64)), "{name}");
    }
    assert_eq!(a::VALUE + a::VALUE_MAX, 4096, "the scratch is 4 KiB");
    // The C struct's comments carry the same offsets.
    let c = include_str!("../../../progs/engines/wiredtiger/lookup.bpf.c");
    for (name, off, _) in code {
        let line = c
            .lines()
            .find(|l| l.contains(&format!(" {name}[")) || l.contains(&format!(" {name};")))
            .unwrap_or_else(|| panic!("{name}"));
        assert!(
            line.contains(&format!("/* {off:>3}")) || line.contains(&format!("/* {off} ")),
            "{name}: {line}"
        );
    }
}
