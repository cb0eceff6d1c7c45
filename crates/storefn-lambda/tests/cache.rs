//! The uncached fraction through cachestat(2) and through mincore(2) agrees with what the test
//! did to the page cache.

use std::io::Write;
use std::os::unix::fs::FileExt;

use storefn_lambda::{cachestat_fraction, drop_cached, mincore_fraction, uncached_fraction};

/// A way to measure the uncached fraction.
type Probe = fn(&std::fs::File, u64, u64) -> std::io::Result<f64>;

#[test]
fn cold_then_warm_by_both_probes() {
    let path = std::env::temp_dir().join(format!("storefn-lambda-cache-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&vec![7u8; 1 << 20]).unwrap();
    f.sync_all().unwrap();
    let f = std::fs::File::open(&path).unwrap();
    drop_cached(&f, 0, 1 << 20).unwrap();
    let probes: [(&str, Probe); 2] =
        [("cachestat", cachestat_fraction), ("mincore", mincore_fraction)];
    for (name, p) in probes {
        let u = p(&f, 0, 1 << 20).unwrap();
        assert!(u > 0.9, "{name}: dropped file {u} uncached");
    }
    // Read the first half back in: it is cached, the second half still is not.
    let mut buf = vec![0u8; 512 << 10];
    f.read_exact_at(&mut buf, 0).unwrap();
    // Readahead may have pulled some of the second half in: drop it again.
    drop_cached(&f, 512 << 10, 512 << 10).unwrap();
    for (name, p) in probes {
        assert!(p(&f, 0, 512 << 10).unwrap() < 0.1, "{name}: first half");
        assert!(p(&f, 512 << 10, 512 << 10).unwrap() > 0.9, "{name}: second half");
        let whole = p(&f, 0, 1 << 20).unwrap();
        assert!((0.4..0.6).contains(&whole), "{name}: whole {whole}");
        assert_eq!(p(&f, 0, 0).unwrap(), 0.0, "{name}: empty range");
    }
    let (u, _) = uncached_fraction(&f, 0, 4096).unwrap();
    assert!(u < 0.1);
    std::fs::remove_file(&path).unwrap();
}
