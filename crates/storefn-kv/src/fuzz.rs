//! The store's file-parsing fuzz property, shared by the cargo-fuzz target `kv_files` (fuzz/)
//! and the proptest in `tests/fuzz_files.rs`, so what the fuzzer checks also runs in CI.
//!
//! A database's three files (the tree, its `.meta` sidecar and the WAL) are untrusted input: a
//! read-only open, point lookups and range scans over any bytes must answer or fail with a
//! typed error naming the file and offset — never panic, hang or read outside the file. The
//! input mutates a small valid database (built once per process) so the fuzzer reaches deep
//! into the tree walk instead of stopping at the sidecar's checks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::db::open_read;
use crate::format::{bpfkv_value, meta_path, NodeSize};
use crate::path::{LookupPath, ReadPath};
use crate::range::RangeScan;
use crate::{create_bpfkv, Db};

/// Layers of the base database: 961 keys in 512-byte nodes, small enough to rewrite per input.
const BASE_LAYERS: u32 = 2;
/// Keys the base database's WAL puts (not compacted), so replay is exercised too.
const BASE_WAL_KEYS: [u64; 3] = [7, 480, 5000];
/// Keys of the base tree (`0..BASE_KEYS`): 31 x 31 slots of 512-byte nodes in 2 layers.
const BASE_KEYS: u64 = 961;
/// Bytes of one patch in the input: file selector, offset (u32 LE), value.
const PATCH_BYTES: usize = 6;

/// One patch of the input: byte `offset` (modulo the file's length) of file `file % 3` (tree,
/// sidecar, WAL) becomes `value`.
struct Patch {
    file: usize,
    offset: u32,
    value: u8,
}

impl Patch {
    fn parse(p: &[u8]) -> Self {
        let offset = u32::from_le_bytes(p[1..5].try_into().expect("a patch holds 4 offset bytes"));
        Self { file: usize::from(p[0] % 3), offset, value: p[5] }
    }
}

/// The base database's files, in memory: tree, sidecar, WAL.
struct Base {
    files: [Vec<u8>; 3],
}

/// A directory of this process's own, `tag` telling the base and each thread's case apart (no
/// shared parent: a parallel case's cleanup could remove it under another's create).
fn work_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("storefn-kv-fuzz-{}-{tag}", std::process::id()))
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = work_dir("base");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fuzz work dir");
        let db = dir.join("db");
        create_bpfkv(&db, NodeSize::B512, BASE_LAYERS, &mut |_, _| {}).expect("base database");
        {
            let d = Db::open(&db).expect("open base");
            for k in BASE_WAL_KEYS {
                d.put(k, &value_put(k)).expect("base put");
            }
        }
        let read = |p: &Path| std::fs::read(p).expect("base file");
        let files = [read(&db), read(&meta_path(&db)), read(&crate::wal::wal_path(&db))];
        let _ = std::fs::remove_dir_all(&dir);
        Base { files }
    })
}

/// The value the base WAL puts for `key`.
fn value_put(key: u64) -> [u8; 64] {
    let mut v = [0u8; 64];
    v[..8].copy_from_slice(&key.to_le_bytes());
    v[8..12].copy_from_slice(b"put!");
    v
}

/// Any bytes: byte 0 picks the cached levels (bits 0-1) and whether the last patch truncates
/// its file at its offset (bit 2); then 6-byte patches `file u8 | offset u32 | value u8` set
/// one byte of the tree (file % 3 == 0), the sidecar (1) or the WAL (2). The patched database
/// is opened read-only and read through point lookups and range scans.
///
/// # Panics
/// When the property does not hold (that is the fuzzer's finding), or the work directory
/// cannot be written.
pub fn check_files(data: &[u8]) {
    let base = base();
    let mut files = base.files.clone();
    let (flags, patches) = data.split_first().map_or((0, &[][..]), |(f, p)| (*f, p));
    let patches: Vec<Patch> = patches.chunks_exact(PATCH_BYTES).map(Patch::parse).collect();
    for (i, p) in patches.iter().enumerate() {
        let f = &mut files[p.file];
        if f.is_empty() {
            continue;
        }
        let at = p.offset as usize % f.len();
        if i + 1 == patches.len() && flags & 4 != 0 {
            f.truncate(at);
        } else {
            f[at] = p.value;
        }
    }
    // One directory per thread: the proptests run in parallel in one process.
    thread_local! {
        static CASE_DIR: PathBuf = {
            // Relaxed: only the uniqueness of the number matters.
            static N: AtomicU64 = AtomicU64::new(0);
            work_dir(&N.fetch_add(1, Ordering::Relaxed).to_string())
        };
    }
    let dir = CASE_DIR.with(Clone::clone);
    std::fs::create_dir_all(&dir).expect("fuzz work dir");
    let db = dir.join("db");
    std::fs::write(&db, &files[0]).expect("write tree");
    std::fs::write(meta_path(&db), &files[1]).expect("write sidecar");
    std::fs::write(crate::wal::wal_path(&db), &files[2]).expect("write wal");
    read_back(&db, flags, &patches);
    // Nothing is left behind.
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where the open-ended range scan starts: near the end, so it stays a few leaves long.
const OPEN_RANGE_FROM: u64 = 900;

/// Opens the written database read-only and reads it; checks the unmutated base exactly.
fn read_back(db: &Path, flags: u8, patches: &[Patch]) {
    let cache_levels = u32::from(flags & 3);
    let Ok(view) = open_read(db, cache_levels, None) else { return };
    let mut keys = vec![0, 1, 7, 480, BASE_KEYS - 1, BASE_KEYS, 5000, u64::MAX];
    keys.extend(patches.iter().map(|p| u64::from(p.offset)));
    let store = Arc::new(view.store);
    let mut path = ReadPath::new(Arc::clone(&store), 0);
    let got: Vec<_> = keys.iter().map(|&k| path.get(k)).collect();
    // Ranges bounded in keys (a whole-tree scan is a pread per value: too slow per input) but
    // open-ended ones too, which a corrupt chain must still end.
    let mut scan = RangeScan::new(&store);
    let all = scan.collect(OPEN_RANGE_FROM, u64::MAX);
    let some = scan.collect(100, 200);
    if patches.is_empty() {
        // The unmutated base must read back exactly: the harness itself is checked.
        for (&k, g) in keys.iter().zip(&got) {
            let want = (k < BASE_KEYS).then(|| bpfkv_value(k));
            assert_eq!(g.as_ref().ok().copied(), Some(want), "base key {k}");
        }
        let open_len = usize::try_from(BASE_KEYS - OPEN_RANGE_FROM).expect("small");
        assert_eq!(all.map(|v| v.len()).ok(), Some(open_len), "base open-ended range");
        assert_eq!(some.map(|v| v.len()).ok(), Some(101), "base sub-range");
        for k in BASE_WAL_KEYS {
            assert_eq!(view.mem.get(k), Some(&value_put(k)), "base WAL key {k}");
        }
    }
}
