//! Databases built by RocksDB itself (tests/support/rocks_tool.c through the system C compiler
//! and librocksdb), and RocksDB's own answers to compare against.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The tool, compiled once per test binary.
pub fn tool() -> &'static Path {
    static TOOL: OnceLock<PathBuf> = OnceLock::new();
    TOOL.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("rocks_tool-{}", std::process::id()));
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/rocks_tool.c");
        let st = Command::new("cc")
            .args(["-O1", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&out)
            .arg(&src)
            .arg("-lrocksdb")
            .status()
            .expect("cc runs (apt-get install librocksdb-dev: ./run.sh installs it)");
        assert!(st.success(), "building {} failed", src.display());
        out
    })
}

/// A fresh directory removed on drop.
pub struct TempDir(pub PathBuf);
impl TempDir {
    pub fn new(name: &str) -> Self {
        let d =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds a database of `keys` keys over several levels, L0 and the WAL (rocks_tool.c, build).
pub fn build(dir: &Path, seed: u64, keys: u64, block_size: u32, compression: &str) {
    build_with(dir, seed, keys, block_size, compression, "xxh3");
}

/// [`build`] with the block checksum type (`xxh3`, 7.8's default, or `crc32c`).
pub fn build_with(
    dir: &Path,
    seed: u64,
    keys: u64,
    block_size: u32,
    compression: &str,
    checksum: &str,
) {
    let st = Command::new(tool())
        .arg("build")
        .arg(dir)
        .args([
            seed.to_string(),
            keys.to_string(),
            block_size.to_string(),
            compression.into(),
            "10".into(),
            checksum.into(),
        ])
        .status()
        .unwrap();
    assert!(st.success(), "rocks_tool build failed");
}

/// RocksDB's own Get for each key: `None` for absent.
pub fn rocksdb_gets(dir: &Path, keys: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
    let mut child = Command::new(tool())
        .arg("get")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = Vec::new();
    for k in keys {
        input.extend_from_slice(k);
        input.push(b'\n');
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "rocks_tool get failed");
    let lines: Vec<&[u8]> = out.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), keys.len());
    lines
        .iter()
        .zip(keys)
        .map(|(l, k)| {
            let tab = l.iter().position(|b| *b == b'\t').unwrap();
            assert_eq!(&l[..tab], &k[..]);
            let v = &l[tab + 1..];
            (v != b"<absent>").then(|| v.to_vec())
        })
        .collect()
}

pub fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// Every file's name and bytes, to check a reader changed nothing.
pub fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
                m.modified().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Runs a single rocks_tool command (put, delete, flush, compact) on `dir`.
pub fn tool_cmd(dir: &Path, args: &[&str]) {
    let st = Command::new(tool()).arg(args[0]).arg(dir).args(&args[1..]).status().unwrap();
    assert!(st.success(), "rocks_tool {args:?} failed");
}
