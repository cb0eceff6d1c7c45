//! The cluster's benchmark (feature `bench`): aggregate pushdown throughput with 1, 2 and 3
//! servers, each server held to its own CPU quota by a cgroup (v1 `cpu`, so the servers, not
//! the client, are the bottleneck: the client's own CPU use is reported beside it), and the
//! lookup latency across a server's kill -9. Servers run in network namespaces the bench
//! creates; everything is removed after.
//!
//! `cargo test -p storefn-cluster --features bench --release --test bench -- --nocapture`
//! (`STOREFN_CLUSTER_BENCH_JSON=FILE` appends the JSON line there).
#![cfg(feature = "bench")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{child_main, etcd, privileged, Netns, ServerProc, TempDir};
use storefn_cluster::{create, run_load, CreateSpec, LoadReport, LoadSpec};
use storefn_kv::RemotePath;
use storefn_testkit::etcd::{free_port, Etcd as EtcdProc};

#[test]
fn child_serve() {
    child_main();
}

/// Each server's CPU: a fifth of one core.
const QUOTA_US: u64 = 20_000;
const PERIOD_US: u64 = 100_000;
const ROUNDS: usize = 3;
/// Client threads and lookups per batch: enough in flight that the servers' quotas, not the
/// client's round trips, bound the throughput (the client's CPU is reported to show it).
const CLIENT_THREADS: usize = 16;
const BATCH: usize = 16;
const RUN: Duration = Duration::from_secs(4);

/// A cgroup v1 `cpu` group holding one process; removed on drop.
struct CpuGroup(std::path::PathBuf);

impl CpuGroup {
    fn new(tag: &str, pid: u32) -> CpuGroup {
        let p = std::path::PathBuf::from(format!(
            "/sys/fs/cgroup/cpu/storefn-cluster-{tag}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("cpu.cfs_period_us"), PERIOD_US.to_string()).unwrap();
        std::fs::write(p.join("cpu.cfs_quota_us"), QUOTA_US.to_string()).unwrap();
        // Every thread of the server (tasks, not just the leader's pid).
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
            let _ = std::fs::write(p.join("tasks"), t.file_name().to_string_lossy().as_bytes());
        }
        std::fs::write(p.join("cgroup.procs"), pid.to_string()).unwrap();
        CpuGroup(p)
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // Move anything left back to the root group, then remove.
        if let Ok(procs) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
            for p in procs.lines() {
                let _ = std::fs::write("/sys/fs/cgroup/cpu/cgroup.procs", p);
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF covers every thread of this (client) process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut ru) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

struct Rig {
    servers: Vec<ServerProc>,
    groups: Vec<CpuGroup>,
    etcd: EtcdProc,
    _net: Netns,
}

fn rig(n: usize, tag: &str) -> Rig {
    let net = Netns::new(3);
    let ips: Vec<String> =
        std::iter::once("127.0.0.1".to_string()).chain((1..=3).map(Netns::control_ip)).collect();
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let etcd = EtcdProc::start_at(&ipr, free_port(), free_port(), None);
    let port = etcd.client_addr.rsplit(':').next().unwrap().to_string();
    let servers: Vec<ServerProc> = (1..=n)
        .map(|i| {
            let listen = format!("{}:7070", Netns::data_ip(i));
            let ep = format!("{}:{port}", Netns::control_ip(i));
            ServerProc::start(
                "child_serve",
                &format!("{tag}{i}"),
                &listen,
                &ep,
                Some(&net.names[i - 1]),
            )
        })
        .collect();
    let groups = servers.iter().map(|s| CpuGroup::new(&s.node, s.pid().unwrap())).collect();
    Rig { servers, groups, etcd, _net: net }
}

fn spec(e: &EtcdProc, c: &str, threads: usize, max: Duration) -> LoadSpec {
    LoadSpec {
        endpoints: e.client_addr.clone(),
        collection: c.into(),
        threads,
        requests: None,
        batch: BATCH,
        path: RemotePath::Pushdown,
        seed: 11,
        max_time: max,
    }
}

/// Throughput of `n` servers: median of rounds, and the client's CPU share.
fn scaling(n: usize) -> (f64, f64, Vec<f64>) {
    let r = rig(n, &format!("s{n}x"));
    let work = TempDir::new("bench");
    let cs = CreateSpec { collection: "b".into(), layers: 3, shards: 6, replicas: 1 };
    create(&etcd(&r.etcd.client_addr), &cs, &work.0).unwrap();
    let mut tputs = Vec::new();
    let mut client_cpu = 0.0;
    for _ in 0..ROUNDS {
        let (c0, t0) = (cpu_secs(), Instant::now());
        let rep =
            run_load(&spec(&r.etcd, "b", CLIENT_THREADS, RUN), &AtomicBool::new(false)).unwrap();
        client_cpu = (cpu_secs() - c0) / t0.elapsed().as_secs_f64();
        assert_eq!((rep.wrong, rep.failed), (0, 0), "{:?}", rep.errors);
        tputs.push(rep.throughput());
    }
    drop(r);
    tputs.sort_by(f64::total_cmp);
    (tputs[ROUNDS / 2], client_cpu, tputs)
}

/// Batch latencies across a kill -9 of one of 3 servers (R = 2).
fn failover() -> (LoadReport, Duration) {
    let mut r = rig(3, "fo");
    let work = TempDir::new("bench");
    let cs = CreateSpec { collection: "f".into(), layers: 3, shards: 6, replicas: 2 };
    create(&etcd(&r.etcd.client_addr), &cs, &work.0).unwrap();
    let stop = AtomicBool::new(false);
    let sp = spec(&r.etcd, "f", 2, Duration::from_secs(30));
    let mut killed_at = Duration::ZERO;
    let rep = std::thread::scope(|sc| {
        let t0 = Instant::now();
        let h = sc.spawn(|| run_load(&sp, &stop).unwrap());
        std::thread::sleep(Duration::from_secs(3));
        r.servers[0].kill9();
        killed_at = t0.elapsed();
        std::thread::sleep(Duration::from_secs(6));
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap()
    });
    drop(r.groups);
    (rep, killed_at)
}

#[test]
fn bench_scaling_and_failover() {
    if !privileged("network namespaces, cgroups and etcd") {
        return;
    }
    let mut results = Vec::new();
    for n in 1..=3 {
        let (t, cpu, all) = scaling(n);
        println!(
            "servers={n} throughput={t:.0} lookups/s (rounds {all:.0?}) client_cpu={cpu:.2} cores"
        );
        results.push(serde_json::json!({"servers": n, "throughput": t, "rounds": all, "client_cpu_cores": cpu}));
    }
    let base = results[0]["throughput"].as_f64().unwrap();
    let (rep, killed_at) = failover();
    // The lookups sent from 1 s before the kill to 5 s after: the window across the failover.
    let k = killed_at.as_nanos() as u64;
    let window: Vec<u64> = rep
        .samples
        .iter()
        .filter(|s| s.at_ns + 1_000_000_000 >= k && s.at_ns <= k + 5_000_000_000)
        .map(|s| s.lat_ns)
        .collect();
    let mut w = window.clone();
    w.sort_unstable();
    let q = |p: f64| w[((w.len() - 1) as f64 * p).round() as usize] as f64 / 1e3;
    let timeline: Vec<[u64; 2]> =
        rep.samples.iter().map(|s| [s.at_ns / 1000, s.lat_ns / 1000]).collect();
    let out = serde_json::json!({
        "bench": "cluster",
        "device": "2-vCPU VM, servers' files in the page cache (tmpfs-backed /tmp or ext4 on virtio)",
        "bottleneck": format!("each server's CPU: cgroup v1 cpu quota {QUOTA_US}/{PERIOD_US} us"),
        "path": "pushdown", "batch": BATCH, "client_threads": CLIENT_THREADS, "layers": 3, "shards": 6,
        "scaling": results,
        "ratio_3_to_1": results[2]["throughput"].as_f64().unwrap() / base,
        "ratio_2_to_1": results[1]["throughput"].as_f64().unwrap() / base,
        "failover": {
            "killed_at_us": k / 1000,
            "lookups": rep.lookups, "wrong": rep.wrong, "failed_batches": rep.failed,
            "retries": rep.retries, "refusals": rep.refusals,
            "window_p50_us": q(0.5), "window_p99_us": q(0.99), "window_max_us": q(1.0),
            "timeline_us": timeline,
        },
    });
    println!(
        "ratio 3:1 = {:.2}, 2:1 = {:.2}; failover p50={:.0} us p99={:.0} us max={:.0} us lost={} wrong={}",
        out["ratio_3_to_1"].as_f64().unwrap(),
        out["ratio_2_to_1"].as_f64().unwrap(),
        q(0.5), q(0.99), q(1.0), rep.failed, rep.wrong
    );
    if let Ok(p) = std::env::var("STOREFN_CLUSTER_BENCH_JSON") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(p).unwrap();
        writeln!(f, "{out}").unwrap();
    }
    assert_eq!((rep.wrong, rep.failed), (0, 0));
}
