//! Every workload: the λ function's output (JIT and interpreter, through `pread_lambda` /
//! `pwrite_lambda` on a real file) equals the native baseline's, byte for byte.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use storefn_io::IoMode;
use storefn_lambda::bench::ensure_data;
use storefn_lambda::{pread_lambda, pwrite_lambda, LambdaError, LambdaProg, LocalFile, Workload};
use storefn_vm::{Engine, VmError};

fn tmpdir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("storefn-lambda-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn prog(w: Workload) -> LambdaProg {
    LambdaProg::from_elf(w.prog_name(), storefn_progs::must(w.prog_name()), None)
}

/// Ranges (in records) that cover: one record, an unaligned middle piece, a long run crossing
/// many 4 KiB reads, and the file's tail.
fn ranges(w: Workload, size: u64) -> Vec<(u64, u64)> {
    let u = w.unit_bytes();
    let records = size / u;
    let long = (200_000 / u).max(2).min(records);
    vec![(0, u), (3 * u, 7 * u), (u, long.min(records - 1) * u), ((records - 2) * u, 2 * u)]
}

#[test]
fn read_workloads_match_native_on_both_engines() {
    let dir = tmpdir("read");
    for w in Workload::ALL.into_iter().filter(|w| !w.is_write()) {
        let size = if w == Workload::TpchQ6 { 12 * 40960 } else { 1 << 20 };
        let path = ensure_data(&dir, w, size, 42).unwrap();
        let raw = File::open(&path).unwrap();
        let mut file = LocalFile::open(&path, IoMode::Buffered).unwrap();
        for engine in [Engine::Jit, Engine::Interp] {
            let mut inst = prog(w).instance(engine).unwrap();
            for (off, len) in ranges(w, file.size_bytes()) {
                let mut input = vec![0u8; len as usize];
                raw.read_exact_at(&mut input, off).unwrap();
                let cap = w.out_cap(len as usize);
                let mut want = vec![0u8; cap];
                let n_want = w.native(&input, &mut want);
                let mut got = vec![0x55u8; cap];
                let n = pread_lambda(&mut file, off, len, &mut inst, &mut got).unwrap();
                assert_eq!(n, n_want, "{w} {engine:?} [{off}, +{len})");
                assert_eq!(got[..n], want[..n], "{w} {engine:?} [{off}, +{len})");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn workload_outputs_are_not_trivial() {
    // The comparisons above would pass for a function and a baseline that both did nothing.
    let dir = tmpdir("nontrivial");
    let mut out = vec![0u8; 2048];
    let path = ensure_data(&dir, Workload::Grep, 1 << 20, 42).unwrap();
    let input = std::fs::read(&path).unwrap();
    let _ = Workload::Grep.native(&input, &mut out);
    let hits = u64::from_le_bytes(out[8..16].try_into().unwrap());
    assert!(hits > 0 && hits < 256, "grep hits {hits} of 256 rows");
    let path = ensure_data(&dir, Workload::TpchQ6, 12 * 40960, 42).unwrap();
    let input = std::fs::read(&path).unwrap();
    let _ = Workload::TpchQ6.native(&input, &mut out);
    let matches = u64::from_le_bytes(out[8..16].try_into().unwrap());
    // ~ 365/2557 x 3/11 x 23/50 of 24576 rows = 440.
    assert!((200..800).contains(&matches), "q6 matches {matches}");
    let path = ensure_data(&dir, Workload::Knn, 1 << 20, 42).unwrap();
    let input = std::fs::read(&path).unwrap();
    let _ = Workload::Knn.native(&input, &mut out);
    assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), 8);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bitmap_write_path_writes_the_decoded_bitmap_on_both_engines() {
    let dir = tmpdir("bitmap");
    let path = ensure_data(&dir, Workload::Bitmap, 8192, 42).unwrap();
    let runs = std::fs::read(&path).unwrap();
    let mut want = vec![0u8; Workload::Bitmap.out_cap(runs.len())];
    let n_want = Workload::Bitmap.native(&runs, &mut want);
    // ~32x expansion: 4096 runs of ~512 bits.
    assert!(n_want > 25 * runs.len() && n_want < 40 * runs.len(), "{n_want}");
    for engine in [Engine::Jit, Engine::Interp] {
        let out_path = dir.join(format!("bitmap-{engine:?}.out"));
        let f = File::create(&out_path).unwrap();
        let mut inst = prog(Workload::Bitmap).instance(engine).unwrap();
        let mut staging = vec![0xEEu8; n_want + 4096];
        let n = pwrite_lambda(&f, &out_path, 4096, &runs, &mut inst, &mut staging).unwrap();
        assert_eq!(n, n_want, "{engine:?}");
        let file = std::fs::read(&out_path).unwrap();
        assert_eq!(file.len(), 4096 + n);
        assert!(file[..4096].iter().all(|&b| b == 0));
        assert!(file[4096..] == want[..n], "{engine:?}: written bitmap differs");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_requests_are_named_errors() {
    let dir = tmpdir("errors");
    let path = ensure_data(&dir, Workload::Stats64, 65536, 1).unwrap();
    let mut file = LocalFile::open(&path, IoMode::Buffered).unwrap();
    let mut inst = prog(Workload::Stats64).instance(Engine::Jit).unwrap();
    let mut out = [0u8; 32];
    let e = pread_lambda(&mut file, 65536 - 8, 16, &mut inst, &mut out).unwrap_err();
    assert!(matches!(e, LambdaError::OutsideFile { off: 65528, len: 16, size: 65536, .. }), "{e}");
    assert!(e.to_string().contains("range [65528, +16) is outside the file (65536 bytes)"), "{e}");
    // An output buffer smaller than the function writes: the store faults, nothing escapes.
    let mut small = [0u8; 16];
    let e = pread_lambda(&mut file, 0, 4096, &mut inst, &mut small).unwrap_err();
    assert!(matches!(e, LambdaError::Fault { source: VmError::BadWrite { .. }, .. }), "{e:?}");
    // A function that claims more output bytes than the buffer holds.
    let name = "test/lambda_overclaim";
    let over = LambdaProg::from_elf(name, storefn_progs::must(name), None);
    let mut inst = over.instance(Engine::Interp).unwrap();
    let e = pread_lambda(&mut file, 0, 64, &mut inst, &mut out).unwrap_err();
    assert!(matches!(e, LambdaError::OutputOverflow { returned: 1_048_576, cap: 32, .. }), "{e:?}");
    // An object that is not a program is refused when it is prepared, naming it.
    let x = LambdaProg::from_elf("junk.o", b"not an ELF object", None);
    let e = x.instance(Engine::Jit).unwrap_err();
    assert!(matches!(e, LambdaError::Prog { .. }), "{e:?}");
    assert!(e.to_string().starts_with("program junk.o: "), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn long_ranges_refill_the_engine_and_land_in_place() {
    // 8 MiB = 2048 reads of 4 KiB, twice the engine's chain slots; an odd offset and length.
    let dir = tmpdir("long");
    let path = ensure_data(&dir, Workload::Stats32, 9 << 20, 3).unwrap();
    let raw = std::fs::read(&path).unwrap();
    let mut file = LocalFile::open(&path, IoMode::Buffered).unwrap();
    let (off, len) = (4100u64, (8 << 20) + 12);
    let got = file.read_range(off, len).unwrap();
    assert!(got == &raw[off as usize..(off + len) as usize]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_work_budget_grows_with_the_range_and_still_stops_a_runaway_function() {
    // Regression: with the VM's fixed per-invocation budget, grep over 2 MiB (and knn over
    // 200 KiB through `lambda run`) failed with BudgetExhausted; a λ invocation's budget now
    // grows with its buffers (storefn_vm::limits::LAMBDA_INSNS_PER_INPUT_BYTE and
    // LAMBDA_INSNS_PER_OUTPUT_BYTE), so it completes.
    let dir = tmpdir("budget");
    let path = ensure_data(&dir, Workload::Grep, 2 << 20, 9).unwrap();
    let mut file = LocalFile::open(&path, IoMode::Buffered).unwrap();
    let mut inst = prog(Workload::Grep).instance(Engine::Jit).unwrap();
    let mut out = vec![0u8; Workload::Grep.out_cap(0)];
    pread_lambda(&mut file, 0, 2 << 20, &mut inst, &mut out).unwrap();
    // A function that never ends still ends, on a short range and a long one.
    let spin = LambdaProg::from_elf("spin", storefn_progs::must("test/lambda_spin"), None);
    for engine in [Engine::Jit, Engine::Interp] {
        let mut inst = spin.instance(engine).unwrap();
        for len in [8u64, 64 << 10] {
            let mut out = vec![0u8; 8];
            let e = pread_lambda(&mut file, 0, len, &mut inst, &mut out).unwrap_err();
            assert!(
                matches!(e, LambdaError::Fault { source: VmError::BudgetExhausted { .. }, .. }),
                "{engine:?} {len}: {e:?}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_read_is_reported_and_the_engine_stays_usable() {
    // The file shrinks under an open LocalFile: reads past the new end fail (short reads).
    let dir = tmpdir("shrink");
    let path = ensure_data(&dir, Workload::Stats64, 8 << 20, 4).unwrap();
    let mut file = LocalFile::open(&path, IoMode::Buffered).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1 << 20).unwrap();
    let e = file.read_range(0, 8 << 20).unwrap_err();
    assert!(matches!(e, LambdaError::Read { off, .. } if off >= 1 << 20), "{e:?}");
    // Every slot came back: a read inside the remaining bytes works.
    let raw = std::fs::read(&path).unwrap();
    assert!(file.read_range(4096, 65536).unwrap() == &raw[4096..4096 + 65536]);
    std::fs::remove_dir_all(&dir).unwrap();
}
