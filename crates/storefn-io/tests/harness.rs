//! `storefn_io::harness`: the io bench's six cases measure what they say on a small file, and
//! bad settings are refused naming the flag.

use storefn_io::harness::{self, ChainFunction, IoBenchConfig, IoBenchError};

fn cfg(file: std::path::PathBuf, function: ChainFunction<'static>) -> IoBenchConfig<'static> {
    IoBenchConfig {
        depth: 3,
        chains: 4,
        requests: 20,
        warmup: 2,
        file,
        size_bytes: 1 << 20,
        node_bytes: 512,
        seed: 7,
        threads: 1,
        function,
        // Buffered: the test's temp dir may be a tmpfs without O_DIRECT.
        buffered: true,
        raw: false,
    }
}

#[test]
fn every_case_measures_its_hops_on_every_function() {
    let dir = std::env::temp_dir().join(format!("storefn-io-harness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let elf = storefn_progs::must("io_hop_chain");
    for (i, function) in [
        ChainFunction::Rust,
        ChainFunction::Vm { engine: storefn_vm::Engine::Interp, elf },
        ChainFunction::Vm { engine: storefn_vm::Engine::Jit, elf },
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = cfg(dir.join(format!("f{i}")), function);
        c.threads = 1 + i % 2;
        let r = harness::run(&c).unwrap_or_else(|e| panic!("{}: {e}", function.name()));
        let names: Vec<_> = r.cases.iter().map(|c| c.name).collect();
        assert_eq!(names, harness::CASE_NAMES);
        for case in &r.cases {
            // Chains count depth hops each; the references count their reads (requests x depth).
            assert_eq!(case.hops, 60, "{}", case.name);
            assert!(case.samples_ns.is_sorted(), "{}", case.name);
            assert!(case.pct_us(0.5) <= case.pct_us(0.99), "{}", case.name);
            assert!(case.hops_per_s() > 0.0, "{}", case.name);
        }
        assert_eq!(r.mode, "buffered");
        assert_eq!(r.raw_fallback, None);
        assert_eq!(r.stale_chains, 0);
        assert_eq!(std::fs::metadata(&c.file).unwrap().len(), 1 << 20);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_settings_are_refused_before_any_file_is_written() {
    let file = std::env::temp_dir().join(format!("storefn-io-harness-bad-{}", std::process::id()));
    let mut c = cfg(file.clone(), ChainFunction::Rust);
    c.node_bytes = 100;
    let e = harness::run(&c).unwrap_err();
    assert!(matches!(e, IoBenchError::Config(_)), "{e:?}");
    assert_eq!(e.to_string(), "--node 100: must be a power of two in 16..=4096");
    c.node_bytes = 512;
    c.depth = 0;
    assert!(matches!(harness::run(&c), Err(IoBenchError::Config(_))));
    c.depth = 3;
    c.size_bytes = 512;
    assert!(matches!(harness::run(&c), Err(IoBenchError::Config(_))));
    assert!(!file.exists(), "a refused run wrote {}", file.display());
}
