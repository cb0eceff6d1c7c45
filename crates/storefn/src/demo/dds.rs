//! The demo's DDS table: the page server on loopback with its host application as a separate
//! process, GetPage(page, LSN) requests with 10% asking a version only the host has, offload
//! on (the offload functions answer the rest next to the data) and off (every GetPage goes to
//! the host): the host application's CPU per GetPage.

use std::path::Path;

use storefn_dds::bench::pageserver::PageBenchConfig;
use storefn_dds::bench::spawn::{spawn_and_run, HostCommand};

use crate::CmdResult;

const PAGES: u64 = 2048;
const REQUESTS: u64 = 3000;

pub fn run(dir: &Path, seed: u64) -> CmdResult {
    let host = HostCommand {
        program: std::env::current_exe().map_err(|e| format!("current executable: {e}"))?,
        args: vec!["pageserver".into(), "host".into()],
    };
    let elf = storefn_progs::must("dds/pageserver");
    println!();
    println!(
        "DDS: GetPage on the page server ({REQUESTS} requests, 10% need the host's newer version)"
    );
    println!(
        "{:<8} {:>16} {:>20} {:>10} {:>10}",
        "offload", "offloaded share", "host CPU µs/GetPage", "p50 µs", "p99 µs"
    );
    for offload in [false, true] {
        let sub = dir.join(if offload { "dds-on" } else { "dds-off" });
        std::fs::create_dir_all(&sub)?;
        let cfg = PageBenchConfig {
            addr: String::new(),
            requests: REQUESTS,
            warmup: 300,
            clients: 1,
            threads: 1,
            // --spawn sets the spawned server's generated tenant.
            client: storefn_wire::ClientConfig::default(),
            host_share: 0.1,
            seed,
            offload,
        };
        let r = spawn_and_run(&sub, elf, PAGES, 1000, &host, &cfg)?;
        if r.stale_pages != 0 {
            return Err(format!("DDS: {} stale pages served", r.stale_pages).into());
        }
        println!(
            "{:<8} {:>16.2} {:>20.2} {:>10.1} {:>10.1}",
            if offload { "on" } else { "off" },
            r.offloaded_share,
            r.host_cpu_us_per_op,
            r.p50_us,
            r.p99_us
        );
    }
    println!("(offloaded GetPages never reach the host application: its CPU goes to what only it can answer)");
    Ok(std::process::ExitCode::SUCCESS)
}
