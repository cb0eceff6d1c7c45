//! Measurements (not pass/fail timings): digest build time for a large file, `map()` lookup
//! cost, post-chain check cost, and 4 KiB QD1 O_DIRECT reads through the file vs the device.
//!
//! cargo test --release -p storefn-io --test digest_bench -- --ignored --nocapture
//!
//! Uses `STOREFN_DIGEST_BENCH_FILE` if set (its file system must allow raw mode), else builds
//! ext4 on /dev/zram0 (BRIEF §5 testbed) with a 2.3 GB file and tears it down afterwards.

mod digest_support;

use std::fs::File;
use std::hint::black_box;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Instant;

use digest_support::{write_interleaved, write_pattern_file, AlignedBuf, ZramFs};
use rand::{Rng, SeedableRng};
use storefn_io::{Digest, RawAccess};

/// The 5-level BPF-KV file is about 2.3 GB.
const BENCH_FILE_BYTES: u64 = 2_300_000_000 / 4096 * 4096;
const BUILD_REPEATS: usize = 10;
const MAP_LOOKUPS: usize = 10_000_000;
const OFFSETS: usize = 1 << 16;
const CHECKS: usize = 200_000;
const READS: usize = 20_000;
const READ_BYTES: usize = 4096;

fn median_us(mut v: Vec<f64>) -> f64 {
    storefn_stats::median(&mut v).expect("at least one run")
}

fn map_ns(d: &Digest, seed: u64) -> f64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let offs: Vec<u64> =
        (0..OFFSETS).map(|_| 512 * rng.gen_range(0..(d.file_size() - 512) / 512)).collect();
    let t = Instant::now();
    let mut acc = 0u64;
    for i in 0..MAP_LOOKUPS {
        acc ^= d.map(black_box(offs[i % OFFSETS]), 512).unwrap();
    }
    black_box(acc);
    t.elapsed().as_nanos() as f64 / MAP_LOOKUPS as f64
}

fn build_us(f: &File) -> (f64, Digest) {
    let mut times = Vec::new();
    let mut d = None;
    for _ in 0..BUILD_REPEATS {
        let t = Instant::now();
        d = Some(Digest::build(f).unwrap());
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (median_us(times), d.unwrap())
}

/// Mean µs of QD1 O_DIRECT 4 KiB preads at random 4 KiB-aligned offsets; `translate` maps a
/// file offset to the fd's offset.
fn qd1_read_us(fd: i32, size: u64, translate: &dyn Fn(u64) -> u64) -> f64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut buf = AlignedBuf::new(READ_BYTES, 4096);
    let mut total = 0f64;
    for i in 0..READS + 1000 {
        let off = translate(4096 * rng.gen_range(0..size / 4096 - 1));
        let t = Instant::now();
        // SAFETY: valid buffer of READ_BYTES; fd open.
        let n = unsafe {
            libc::pread(fd, buf.as_mut().as_mut_ptr().cast(), READ_BYTES, off as libc::off_t)
        };
        assert_eq!(n, READ_BYTES as isize);
        if i >= 1000 {
            total += t.elapsed().as_secs_f64() * 1e6; // the first 1000 are warm-up
        }
    }
    total / READS as f64
}

#[test]
#[ignore = "measurement: run with --release -- --ignored --nocapture"]
fn digest_figures() {
    let zram;
    let path: PathBuf = if let Some(p) = std::env::var_os("STOREFN_DIGEST_BENCH_FILE") {
        p.into()
    } else {
        let Some(z) = ZramFs::new("4G") else { return };
        zram = z;
        let p = zram.path("big");
        let t = Instant::now();
        write_pattern_file(&p, 1, BENCH_FILE_BYTES);
        println!("wrote {BENCH_FILE_BYTES} B in {:.1} s", t.elapsed().as_secs_f64());
        digest_support::ext4_interleave_allocations(std::path::Path::new("/dev/zram0"));
        write_interleaved(&zram.path("frag-a"), &zram.path("frag-b"), 4096, 16384);
        let f = File::open(zram.path("frag-a")).unwrap();
        let (us, d) = build_us(&f);
        println!(
            "{{\"file\":\"fragmented 64 MiB\",\"fiemap_extents\":{},\"runs\":{},\
             \"build_us_median\":{us:.0},\"map_ns\":{:.1}}}",
            d.fiemap_extent_count(),
            d.extents().len(),
            map_ns(&d, 2)
        );
        p
    };
    let f = File::open(&path).unwrap();
    let (us, d) = build_us(&f);
    println!(
        "{{\"file\":\"{}\",\"bytes\":{},\"fiemap_extents\":{},\"runs\":{},\"build_us_median\":{us:.0},\
         \"map_ns\":{:.1}}}",
        path.display(),
        d.file_size(),
        d.fiemap_extent_count(),
        d.extents().len(),
        map_ns(&d, 1)
    );
    let raw = RawAccess::open(&f).unwrap();
    let t = Instant::now();
    for _ in 0..CHECKS {
        raw.check_after_chain().unwrap();
    }
    let check_ns = t.elapsed().as_nanos() as f64 / CHECKS as f64;
    let t = Instant::now();
    for _ in 0..CHECKS {
        assert!(d.still_valid(&f).unwrap());
    }
    let fstat_ns = t.elapsed().as_nanos() as f64 / CHECKS as f64;
    let direct = File::options().read(true).custom_flags(libc::O_DIRECT).open(&path).unwrap();
    let size = d.file_size();
    let file_us = qd1_read_us(direct.as_raw_fd(), size, &|o| o);
    let dev_us =
        qd1_read_us(raw.device_fd(), size, &|o| raw.translate(o, 4096).unwrap().dev_offset);
    println!(
        "{{\"check_after_chain_ns\":{check_ns:.0},\"of_which_fstat_ns\":{fstat_ns:.0},\"qd1_4k_odirect_file_us\":{file_us:.2},\
         \"qd1_4k_odirect_device_us\":{dev_us:.2},\"device\":\"{}\"}}",
        raw.device().path().display()
    );
}
