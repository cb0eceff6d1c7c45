//! Databases written by the real WiredTiger (the linked libwiredtiger) for the tests, and
//! WiredTiger's own answers to compare with.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use storefn_wiredtiger::native::Native;
use storefn_wiredtiger::Format;

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Relaxed: only uniqueness within this process matters.
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("storefn-wt-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Small pages so small tables have several levels.
pub const SMALL_PAGES: &str = "internal_page_max=4KB,leaf_page_max=4KB,allocation_size=4KB";

/// One table of the test database.
pub struct Spec {
    pub name: &'static str,
    pub config: String,
}

fn s(x: &str) -> Vec<u8> {
    let mut v = x.as_bytes().to_vec();
    v.push(0);
    v
}

fn text(i: u64, len: usize) -> String {
    (0..len).map(|j| (b'a' + ((i as usize * 7 + j) % 26) as u8) as char).collect()
}

/// Key `i` of the `words` table: `1 + i % 40` bytes counting up from 0x7c (across the sign bit
/// of a byte) with one byte changed at position `i / 40 % len` (its neighbours differ there).
fn word_key(i: u64) -> Vec<u8> {
    let len = 1 + (i % 40) as usize;
    let mut k: Vec<u8> = (0..len).map(|j| 0x7c_u8.wrapping_add(j as u8)).collect();
    k[(i / 40) as usize % len] = (i.wrapping_mul(151) % 256) as u8;
    k
}

/// Builds the test database in `dir`: tables across cell kinds, prefix compression, overflow
/// items, dictionary copies, deletes and several checkpoints. Returns the table names.
pub fn build(dir: &Path) -> Vec<&'static str> {
    let wt = Native::open(dir, "create,cache_size=64MB").unwrap();
    let sf = "key_format=S,value_format=S";
    let tables: Vec<(&str, String)> = vec![
        ("small", format!("{sf},{SMALL_PAGES}")),
        ("pfx", format!("{sf},{SMALL_PAGES},prefix_compression=true,prefix_compression_min=1")),
        ("raw", format!("key_format=u,value_format=u,{SMALL_PAGES}")),
        ("ovfl", format!("{sf},{SMALL_PAGES},leaf_key_max=200B,leaf_value_max=300B")),
        ("del", format!("{sf},{SMALL_PAGES}")),
        ("big", sf.to_string()),
        ("dict", format!("{sf},{SMALL_PAGES},dictionary=1000")),
        ("empty", format!("{sf},{SMALL_PAGES}")),
        ("deep", format!("{sf},{SMALL_PAGES}")),
        // WiredTiger's default page sizes (internal 4 KiB, leaf 32 KiB), prefix-compressed.
        ("pfx32", format!("{sf},prefix_compression=true,prefix_compression_min=1")),
        // Raw keys of 1 to 40 bytes that differ from their neighbours at every position, in
        // bytes above 0x7f too, on 32 KiB leaves: the function compares keys of up to 32 bytes
        // a word at a time and longer ones a byte at a time.
        ("words", "key_format=u,value_format=u".to_string()),
    ];
    for (name, cfg) in &tables {
        wt.create(&format!("table:{name}"), cfg).unwrap();
    }
    let put = |t: &str, rows: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>| {
        let mut c = wt.cursor(&format!("table:{t}")).unwrap();
        for (k, v) in rows {
            c.insert(&k, &v).unwrap();
        }
    };
    put(
        "small",
        &mut (0..3000u64).map(|i| (s(&format!("key{i:06}")), s(&text(i, (i as usize * 37) % 300)))),
    );
    put(
        "pfx",
        &mut (0..3000u64)
            .map(|i| (s(&format!("user/profile/region-eu/{i:08}")), s(&text(i, i as usize % 90)))),
    );
    put(
        "raw",
        &mut (0..2000u64).map(|i| {
            let mut k = (i * 2_654_435_761 % 100_000).to_be_bytes().to_vec();
            k.push((i % 3) as u8);
            (k, (0..(i * 13 % 200)).map(|j| (i + j) as u8).collect())
        }),
    );
    put(
        "ovfl",
        &mut (0..600u64).map(|i| {
            let klen = match i % 50 {
                7 => 400, // over leaf_key_max: an overflow key
                8 => 100, // a long key cell
                _ => 12,
            };
            let vlen = if i % 10 == 3 { 2000 } else { 40 };
            (s(&format!("k{i:05}{}", text(i, klen - 6))), s(&text(i, vlen)))
        }),
    );
    put("del", &mut (0..3000u64).map(|i| (s(&format!("d{i:05}")), s(&text(i, 20)))));
    put(
        "big",
        &mut (0..20000u64)
            .map(|i| (s(&format!("big{i:07}")), s(&text(i, (i as usize * 11) % 120)))),
    );
    put(
        "dict",
        &mut (0..3000u64)
            .map(|i| (s(&format!("c{i:05}")), s(&format!("repeated value {}", text(i % 5, 80))))),
    );
    put(
        "deep",
        &mut (0..25000u64).map(|i| {
            (s(&format!("{:08}-{}", i * 7919 % 1_000_003, text(i, 20))), s(&text(i, 100)))
        }),
    );
    put(
        "pfx32",
        &mut (0..30000u64).map(|i| {
            (s(&format!("tenant/{:03}/object/{i:09}", i % 7)), s(&text(i, (i as usize * 5) % 70)))
        }),
    );
    put("words", &mut (0..4000u64).map(|i| (word_key(i), text(i, 60 + i as usize % 40).into())));
    wt.checkpoint().unwrap();
    {
        let mut c = wt.cursor("table:del").unwrap();
        for i in (0..3000u64).step_by(3) {
            assert!(c.remove(&s(&format!("d{i:05}"))).unwrap());
        }
    }
    wt.checkpoint().unwrap();
    put("del", &mut (3000..3300u64).map(|i| (s(&format!("d{i:05}")), s(&text(i, 30)))));
    put(
        "small",
        &mut (0..3000u64)
            .step_by(7)
            .map(|i| (s(&format!("key{i:06}")), s(&format!("updated {i}")))),
    );
    drop(wt); // close: a final checkpoint
    tables.iter().map(|(n, _)| *n).collect()
}

/// Every (stored key, stored value) of `table` as WiredTiger's own cursor reads it.
pub fn native_rows(dir: &Path, table: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let wt = Native::open(dir, "readonly=true").unwrap();
    let mut c = wt.cursor(&format!("table:{table}")).unwrap();
    let (mut k, mut v) = (Vec::new(), Vec::new());
    let mut out = BTreeMap::new();
    while c.next(&mut k, &mut v).unwrap() {
        out.insert(k.clone(), v.clone());
    }
    out
}

/// The user's form of a stored key.
pub fn user(format: Format, stored: &[u8]) -> Vec<u8> {
    format.decode(stored).unwrap().to_vec()
}

/// Keys that are not in `rows`: neighbours of present keys and the extremes.
pub fn absent_keys(format: Format, rows: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new(), b"~~~~".to_vec(), b"\x01".to_vec()];
    for k in rows.keys().step_by(5) {
        let mut u = user(format, k);
        u.push(b'x');
        out.push(u.clone());
        u.pop();
        if let Some(last) = u.last_mut() {
            *last = last.wrapping_sub(1);
        }
        out.push(u);
    }
    out.retain(|u| {
        let mut stored = Vec::new();
        format.encode(u, &mut stored).is_ok() && !rows.contains_key(&stored)
    });
    out
}

/// Where a table's file can be cut, as WiredTiger's own truncation can leave it, so that a
/// live leaf lies within the function's 32 KiB view of the new end: the leaf (its address)
/// each of `rows`' keys lies in, and the cut, past the leaf's end (and past every internal page
/// unless `internal_cached`: a reader that keeps them never reads them again), that the
/// checkpoint's recorded size still exceeds by the view. `None` if the table's layout has no
/// such leaf.
pub fn cut_near_a_leaf(
    dir: &Path,
    table: &str,
    rows: &BTreeMap<Vec<u8>, Vec<u8>>,
    internal_cached: bool,
) -> Option<(Vec<storefn_wiredtiger::format::BlockAddr>, u64)> {
    let t = storefn_wiredtiger::Table::open(dir, table).unwrap();
    let (ckpt, alloc) = (*t.tree().checkpoint(), t.tree().allocation_size());
    let f = std::fs::File::open(t.tree().path()).unwrap();
    let mut cache = storefn_wiredtiger::TreeCache::internal_only(1 << 24, alloc);
    let mut internal_end = 0;
    let leaves: Vec<_> =
        rows.keys().map(|k| leaf_of(&f, &mut cache, &ckpt, k, &mut internal_end)).collect();
    let view = u64::from(storefn_wiredtiger::HOP_BYTES);
    let cut = leaves
        .iter()
        .filter(|a| a.size < view && a.offset + view <= ckpt.file_size)
        .map(|a| (a, (a.offset + a.size).max(if internal_cached { 0 } else { internal_end })))
        .filter(|&(a, cut)| cut < a.offset + view)
        .map(|(_, cut)| cut)
        .max()?;
    Some((leaves, cut))
}

fn leaf_of(
    f: &std::fs::File,
    cache: &mut storefn_wiredtiger::TreeCache,
    ckpt: &storefn_wiredtiger::format::CheckpointCookie,
    key: &[u8],
    internal_end: &mut u64,
) -> storefn_wiredtiger::format::BlockAddr {
    use std::os::unix::fs::FileExt;
    use storefn_wiredtiger::Route;
    let mut block = Vec::new();
    loop {
        match cache.route(ckpt.root.unwrap(), key, ckpt.file_size).unwrap() {
            Route::Leaf(a) => return a,
            Route::Chain(a) => {
                block.resize(a.size as usize, 0);
                f.read_exact_at(&mut block, a.offset).unwrap();
                cache.put_internal(a.offset, &block).unwrap();
                *internal_end = (*internal_end).max(a.offset + a.size);
            }
            other => panic!("{key:?}: {other:?}"),
        }
    }
}
