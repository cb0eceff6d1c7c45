//! Property: on any input bytes, every workload's λ function (JIT and interpreter) writes what
//! its native baseline writes. Inputs are arbitrary, not only generated data: short, unaligned
//! tails, extreme values, needles at row edges.

use proptest::prelude::*;
use storefn_lambda::{run_lambda, LambdaProg, Workload};
use storefn_vm::{Engine, Instance};

fn instances(w: Workload) -> [Instance; 2] {
    let p = LambdaProg::from_elf(w.prog_name(), storefn_progs::must(w.prog_name()), None);
    [p.instance(Engine::Jit).unwrap(), p.instance(Engine::Interp).unwrap()]
}

fn check(w: Workload, insts: &mut [Instance; 2], input: &[u8]) -> Result<(), TestCaseError> {
    let cap = w.out_cap(input.len()).max(1);
    let mut want = vec![0u8; cap];
    let n = w.native(input, &mut want);
    for inst in insts.iter_mut() {
        // Stale bytes in the buffer must not leak into the output.
        let mut got = vec![0xA5u8; cap];
        let m = run_lambda(inst, 0, input, &mut got).unwrap();
        prop_assert_eq!(m, n, "{} {:?}", w, inst.engine());
        prop_assert_eq!(&got[..m], &want[..n], "{} {:?}", w, inst.engine());
    }
    Ok(())
}

/// Bytes for `w`: up to `units` records plus a partial one, with `storefn!` planted for grep.
fn input(w: Workload, units: usize) -> impl Strategy<Value = Vec<u8>> {
    let unit = w.unit_bytes() as usize;
    (0..=units * unit + unit - 1, any::<u64>(), prop::collection::vec(any::<u16>(), 0..4)).prop_map(
        move |(len, seed, plants)| {
            let mut x = seed | 1;
            let mut v: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            if w == Workload::Grep && v.len() >= 8 {
                for p in plants {
                    let at = usize::from(p) % (v.len() - 7);
                    v[at..at + 8].copy_from_slice(b"storefn!");
                }
            }
            v
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn stats64_matches_native(v in input(Workload::Stats64, 600)) {
        check(Workload::Stats64, &mut instances(Workload::Stats64), &v)?;
    }

    #[test]
    fn stats32_matches_native(v in input(Workload::Stats32, 600)) {
        check(Workload::Stats32, &mut instances(Workload::Stats32), &v)?;
    }

    #[test]
    fn knn_matches_native(v in input(Workload::Knn, 20)) {
        check(Workload::Knn, &mut instances(Workload::Knn), &v)?;
    }

    #[test]
    fn grep_matches_native(v in input(Workload::Grep, 6)) {
        check(Workload::Grep, &mut instances(Workload::Grep), &v)?;
    }

    #[test]
    fn bitmap_matches_native(v in input(Workload::Bitmap, 200)) {
        check(Workload::Bitmap, &mut instances(Workload::Bitmap), &v)?;
    }

    #[test]
    fn tpch_q6_matches_native(v in input(Workload::TpchQ6, 2)) {
        check(Workload::TpchQ6, &mut instances(Workload::TpchQ6), &v)?;
    }
}

/// Generated data (values in the ranges the filters test, so rows do qualify), cut anywhere.
fn generated(w: Workload, max_bytes: u64) -> impl Strategy<Value = Vec<u8>> {
    (any::<u64>(), 0..=max_bytes).prop_map(move |(seed, cut)| {
        let mut v = Vec::new();
        w.generate(&mut v, max_bytes, seed).unwrap();
        v.truncate(cut as usize);
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn generated_inputs_match_native(
        q6 in generated(Workload::TpchQ6, 3 * 40960),
        knn in generated(Workload::Knn, 40 * 2048),
        grep in generated(Workload::Grep, 100 * 4096),
        bitmap in generated(Workload::Bitmap, 4096),
    ) {
        for (w, v) in [
            (Workload::TpchQ6, q6),
            (Workload::Knn, knn),
            (Workload::Grep, grep),
            (Workload::Bitmap, bitmap),
        ] {
            check(w, &mut instances(w), &v)?;
        }
    }
}
