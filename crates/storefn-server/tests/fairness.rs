//! Fairness between tenants, measured: one tenant keeps hundreds of 64-hop chains queued, the
//! other does single reads. With fair admission (round robin between tenants, no tenant over
//! its share of engine slots while another waits) the point reads are admitted at the next
//! free slot; with one FIFO they wait behind the whole queue. Both runs print their figures
//! (`cargo test --release -p storefn-server --test fairness -- --nocapture`); the assertions
//! are about correctness only (performance goals live in benchmarks, not timed tests). The
//! scheduling order itself is unit-tested in `server::sched`.

mod common;

use std::time::Duration;

use common::TempDir;
use storefn_server::fairness::{fairness, write_chain_file, FairnessConfig};
use storefn_server::{Server, ServerConfig};

#[test]
fn point_reads_next_to_a_long_chain_flood() {
    let dir = TempDir::new("fair");
    write_chain_file(&dir.join("chain"), 64).unwrap();
    std::fs::write(dir.join("points"), vec![1u8; 4096 * 512]).unwrap();
    for fair in [true, false] {
        let mut cfg = ServerConfig::new(dir.path());
        cfg.fair = fair;
        let server = Server::start("127.0.0.1:0", cfg).unwrap();
        let r = fairness(&FairnessConfig {
            addr: server.local_addr().to_string(),
            long_conns: 2,
            long_depth: 256,
            chain_file: "chain".into(),
            point_file: "points".into(),
            point_blocks: 4096,
            duration: Duration::from_secs(2),
            ramp: Duration::from_millis(300),
        })
        .unwrap();
        println!(
            "fairness fair={fair} point_ops={} point_p50_us={:.1} point_p99_us={:.1} long_chains={} long_hops_per_chain={:.1}",
            r.point_ops,
            r.point_p50_us,
            r.point_p99_us,
            r.long_chains,
            r.long_hops as f64 / r.long_chains.max(1) as f64
        );
        assert!(r.point_ops > 0, "the point tenant made progress");
        assert!(r.long_chains > 0);
        assert_eq!(r.long_hops, r.long_chains * 64, "every chain walked all 64 blocks");
        server.stop();
        server.join().unwrap();
    }
}
