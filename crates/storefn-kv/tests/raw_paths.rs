//! `--io raw` on the read and engine paths: on an ext4 loop file system the test builds, read, uring, xrp and
//! xrp-batch read the block device through the metadata digest and return exactly the values
//! of the file path; on the temp dir's disk (virtio, EPERM) raw mode falls back to the file.
//! Needs root for the loop device (skips with a message otherwise); always tears down.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::TempDir;
use storefn_kv::bpfkv_value;
use storefn_kv::harness::bench::{open_path, PathOptions};
use storefn_kv::Lookup;
use storefn_kv::{create_bpfkv, NodeSize, Store};

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// ext4 on a loop device over a sparse image; Drop unmounts and detaches.
struct LoopExt4 {
    dir: TempDir,
    dev: Option<String>,
    mounted: bool,
}

impl LoopExt4 {
    fn new() -> Option<Self> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            common::skip("loop-device file systems need root");
            return None;
        }
        let mut fs = Self { dir: TempDir::new("raw-loop"), dev: None, mounted: false };
        let img = fs.dir.join("img");
        std::fs::File::create(&img).unwrap().set_len(256 << 20).unwrap();
        fs.dev = Some(run("losetup", &["--find", "--show", img.to_str().unwrap()]).ok()?);
        let dev = fs.dev.clone().unwrap();
        run("mkfs.ext4", &["-q", &dev]).expect("mkfs.ext4");
        std::fs::create_dir(fs.mnt()).unwrap();
        run("mount", &[&dev, fs.mnt().to_str().unwrap()]).expect("mount");
        fs.mounted = true;
        Some(fs)
    }

    fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }
}

impl Drop for LoopExt4 {
    fn drop(&mut self) {
        let m = self.mnt();
        if self.mounted && run("umount", &[m.to_str().unwrap()]).is_err() {
            let _ = run("umount", &["-l", m.to_str().unwrap()]);
        }
        if let Some(d) = &self.dev {
            let _ = run("losetup", &["-d", d]);
        }
    }
}

fn lookups(db: &Path, raw: bool) -> Vec<(String, u64, u64)> {
    let keys: Vec<u64> = (0..29791u64).step_by(13).chain([29790, 29791]).collect();
    let mut out = Vec::new();
    for cache in [0, 1] {
        let store = Arc::new(Store::open(db, cache).unwrap());
        for name in ["read", "uring", "xrp", "xrp-batch"] {
            let opts = PathOptions { cache_bytes: 0, batch: 16, raw, ..Default::default() };
            let mut path = open_path(name, &store, &opts).unwrap();
            let mut got: Vec<Lookup> = Vec::new();
            path.get_many(&keys, &mut got).unwrap();
            for (k, l) in keys.iter().zip(&got) {
                let want = (*k < 29791).then(|| bpfkv_value(*k));
                assert_eq!(l.value, want, "{name} raw {raw} cache {cache} key {k}");
            }
            let s = path.stats();
            assert_eq!(s.fallbacks, 0, "{name}");
            out.push((name.to_string(), s.ios, s.device_ios));
        }
    }
    out
}

#[test]
fn raw_engine_paths_read_the_device_and_match_the_file_path() {
    let Some(fs) = LoopExt4::new() else { return };
    let db = fs.mnt().join("db");
    create_bpfkv(&db, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let file = lookups(&db, false);
    let raw = lookups(&db, true);
    for ((name, ios_f, dev_f), (_, ios_r, dev_r)) in file.iter().zip(&raw) {
        assert_eq!(*dev_f, 0, "{name}: the file path never reads the device");
        assert_eq!(ios_f, ios_r, "{name}: same reads");
        assert_eq!(dev_r, ios_r, "{name}: every raw read went to the device");
    }
}

#[test]
fn raw_on_a_disk_that_refuses_device_access_falls_back_to_the_file() {
    let dir = TempDir::new("raw-vda");
    let db = dir.join("db");
    create_bpfkv(&db, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&db, 0).unwrap());
    let opts = PathOptions { cache_bytes: 0, batch: 4, raw: true, ..Default::default() };
    let mut path = open_path("xrp", &store, &opts).unwrap();
    for k in [0u64, 500, 960] {
        assert_eq!(path.get(k).unwrap(), Some(bpfkv_value(k)));
    }
    let s = path.stats();
    if s.device_ios > 0 {
        println!("note: the temp dir's device opens here; raw mode was used");
    } else {
        assert_eq!(s.fallbacks, 0, "setup fallback is not a per-lookup fallback");
    }
}

fn compare_cfg(path: &str, requests: u64) -> storefn_kv::harness::bench::BenchConfig {
    storefn_kv::harness::bench::BenchConfig {
        path: path.into(),
        load: storefn_kv::harness::bench::Load {
            threads: 2,
            requests,
            batch: if path == "xrp-batch" { 8 } else { 1 },
            warmup: 10,
            dist: storefn_kv::harness::bench::Dist::Uniform,
            seed: 3,
        },
        cache_bytes: 0,
        prog: storefn_kv::ProgSource::BuiltIn,
        abi: storefn_kv::Abi::Storefn,
        raw: false,
    }
}

#[test]
fn compare_interleaves_the_file_path_and_raw_mode_over_the_same_keys() {
    let Some(fs) = LoopExt4::new() else { return };
    let db = fs.mnt().join("db");
    create_bpfkv(&db, NodeSize::B512, 3, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&db, 0).unwrap());
    for path in ["xrp", "xrp-batch", "uring"] {
        let c = storefn_kv::harness::compare::run(&store, &compare_cfg(path, 403), 7).unwrap();
        assert!(c.raw_in_use(), "{path}");
        assert_eq!(c.rounds.len(), 7);
        for r in [&c.file, &c.raw] {
            assert_eq!((r.requests, r.misses, r.fallbacks), (403, 0, 0), "{path}");
            // Three layers: three nodes and the value block per lookup.
            assert!((r.ios_per_op - 4.0).abs() < 1e-9, "{path}: {}", r.ios_per_op);
        }
        assert!(c.file.device_ios_per_op == 0.0 && (c.raw.device_ios_per_op - 4.0).abs() < 1e-9);
        assert!(c.rounds.iter().all(|r| r.file_mean_us > 0.0 && r.raw_mean_us > 0.0));
    }
}

#[test]
fn compare_says_when_raw_mode_was_not_in_use() {
    let dir = TempDir::new("compare-vda");
    let db = dir.join("db");
    create_bpfkv(&db, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let store = Arc::new(Store::open(&db, 0).unwrap());
    let c = storefn_kv::harness::compare::run(&store, &compare_cfg("xrp", 50), 5).unwrap();
    assert_eq!((c.file.requests, c.raw.requests), (50, 50));
    // On /dev/vda the device refuses even root, so raw mode declines and says so.
    if c.raw.device_ios_per_op == 0.0 {
        assert!(!c.raw_in_use());
    }
    for (rounds, requests, want) in [
        (0, 50, "--rounds 0"),
        (26, 50, "fewer than one lookup per round"),
        (storefn_kv::limits::MAX_ROUNDS + 1, 1 << 20, "--rounds"),
    ] {
        let e = storefn_kv::harness::compare::run(&store, &compare_cfg("xrp", requests), rounds)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    let e = storefn_kv::harness::compare::run(&store, &compare_cfg("nope", 50), 5).unwrap_err();
    assert!(e.to_string().contains("--path nope"), "{e}");
}

/// The paths that check raw-mode staleness once per lookup themselves (read: its own
/// RawAccess; uring: deferred engine checks) redo a lookup on the file when a writer appears.
#[test]
fn raw_read_and_uring_paths_survive_a_writer_and_redo_the_lookup_on_the_file() {
    let Some(fs) = LoopExt4::new() else { return };
    let db = fs.mnt().join("db");
    create_bpfkv(&db, NodeSize::B512, 3, &mut common::noop()).unwrap();
    for name in ["read", "uring"] {
        survive_a_writer(&db, name);
    }
}

fn survive_a_writer(db: &Path, name: &str) {
    let store = Arc::new(Store::open(db, 0).unwrap());
    // A small LRU: exercised (cleared on Stale) but too small to hide the device reads.
    let opts = PathOptions { cache_bytes: 64 << 10, batch: 1, raw: true, ..Default::default() };
    let mut path = open_path(name, &store, &opts).unwrap();
    let check = |path: &mut Box<dyn storefn_kv::LookupPath>, k: u64| {
        assert_eq!(path.get(k).unwrap(), Some(bpfkv_value(k)), "key {k}");
    };
    for k in 0..50 {
        check(&mut path, k * 577);
    }
    assert_eq!(path.stats().device_ios, path.stats().ios, "raw mode reads the device");
    let before = path.stats();
    // Another thread opens the file for writing (the lease breaks; the open waits for our
    // release) and rewrites a node block with its own bytes: mtime changes, data does not.
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            use std::os::unix::fs::FileExt;
            let f = std::fs::File::options().read(true).write(true).open(db).unwrap();
            let mut b = vec![0u8; 4096];
            f.read_exact_at(&mut b, 0).unwrap();
            f.write_all_at(&b, 0).unwrap();
            f.sync_all().unwrap();
        });
        let t = std::time::Instant::now();
        let mut k = 1;
        while !w.is_finished() {
            check(&mut path, k % 29791);
            k += 7919;
            assert!(t.elapsed() < std::time::Duration::from_secs(60), "writer never finished");
        }
        w.join().unwrap();
    });
    for k in 0..200 {
        check(&mut path, (k * 131) % 29791);
    }
    let s = path.stats().since(&before);
    assert!(s.fallbacks >= 1, "{name}: the lease break or identity change was never seen: {s:?}");
    // The writer is gone: within a retry interval (or two, if the lease was still being
    // released at the first try) raw mode is back and lookups read the device again.
    let back = path.stats();
    let t = std::time::Instant::now();
    // Fresh keys each time: the LRU would serve a repeated key without any read.
    let mut k = 3;
    while path.stats().since(&back).device_ios == 0 {
        assert!(
            t.elapsed() < 5 * storefn_io::limits::RAW_RETRY_INTERVAL,
            "{name}: raw mode never came back: {:?}",
            path.stats().since(&back)
        );
        std::thread::sleep(storefn_io::limits::RAW_RETRY_INTERVAL / 10);
        k = (k + 4099) % 29791;
        check(&mut path, k);
    }
}
