//! Three servers in network namespaces the test creates, etcd in the root namespace: lookups
//! on every shard, kill -9 of a server under load, re-replication back to R copies, a server
//! cut off etcd (still reachable by clients) serving nothing stale, and etcd restarted under
//! load; and etcd itself three members in namespaces of their own, one killed under load.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{child_main, etcd, privileged, wait_for, EtcdMembers, Netns, ServerProc, TempDir};
use storefn_cluster::limits::{LEASE_TTL_SECS, RETRY_BUDGET};
use storefn_cluster::{create, run_load, status, CreateSpec, LoadSpec};
use storefn_kv::RemotePath;
use storefn_testkit::etcd::{free_port, Etcd as EtcdProc};
use storefn_wire::{Client, ClientConfig, Request, StatusCode};

#[test]
fn child_serve() {
    child_main();
}

/// Re-replication after a server's death must restore R copies within this (a lease to notice,
/// a leader tick, and the copy of a small shard).
const REREPLICATION_LIMIT: Duration = Duration::from_secs(LEASE_TTL_SECS as u64 + 20);

struct World {
    // Drop order: servers, then etcd, then the namespaces.
    servers: Vec<ServerProc>,
    etcd: EtcdProc,
    net: Netns,
}

fn world(tag: &str) -> Option<World> {
    if !privileged("ip netns, veth pairs and etcd") {
        return None;
    }
    let net = Netns::new(3);
    let ips: Vec<String> =
        std::iter::once("127.0.0.1".to_string()).chain((1..=3).map(Netns::control_ip)).collect();
    let ipr: Vec<&str> = ips.iter().map(String::as_str).collect();
    let etcd = EtcdProc::start_at(&ipr, free_port(), free_port(), None);
    let port = etcd.client_addr.rsplit(':').next().unwrap().to_string();
    let servers = (1..=3)
        .map(|i| {
            // Each namespace is the test's own: a fixed port cannot collide.
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
    Some(World { servers, etcd, net })
}

fn load(e: &EtcdProc, c: &str, max: Duration) -> LoadSpec {
    load_at(&e.client_addr, c, max)
}

fn load_at(endpoints: &str, c: &str, max: Duration) -> LoadSpec {
    LoadSpec {
        endpoints: endpoints.to_string(),
        collection: c.into(),
        threads: 2,
        requests: None,
        batch: 4,
        path: RemotePath::Pushdown,
        seed: 7,
        max_time: max,
        creds: storefn_cluster::Creds::default(),
    }
}

fn replicas_of(e: &EtcdProc, c: &str) -> Vec<Vec<String>> {
    status(&etcd(&e.client_addr), c).unwrap().shards.into_iter().map(|s| s.replicas).collect()
}

#[test]
fn kill_nine_under_load_loses_nothing_and_rereplicates() {
    let Some(mut w) = world("k") else { return };
    let et = etcd(&w.etcd.client_addr);
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "kc".into(), layers: 3, shards: 3, replicas: 2 };
    create(&et, &spec, &work.0).unwrap();
    let stop = AtomicBool::new(false);
    let spec = load(&w.etcd, "kc", Duration::from_secs(60));
    let (rep, healed) = std::thread::scope(|sc| {
        let h = sc.spawn(|| run_load(&spec, &stop).unwrap());
        std::thread::sleep(Duration::from_secs(2));
        let victim = &mut w.servers[0];
        let gone = victim.node.clone();
        victim.kill9();
        let killed = Instant::now();
        let healed = wait_for(REREPLICATION_LIMIT, || {
            replicas_of(&w.etcd, "kc").iter().all(|r| r.len() == 2 && !r.contains(&gone))
        })
        .map(|_| killed.elapsed());
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        (h.join().unwrap(), healed)
    });
    println!(
        "lookups={} wrong={} failed={} retries={} refusals={} p99_us={:.0} max_us={:.0} healed={healed:?}",
        rep.lookups, rep.wrong, rep.failed, rep.retries, rep.refusals,
        rep.latency_us(0.99), rep.latency_us(1.0)
    );
    assert!(rep.lookups > 100, "the load ran");
    assert_eq!(rep.wrong, 0, "wrong answers");
    assert_eq!(rep.failed, 0, "lookups lost: {:?}", rep.errors);
    assert!(
        rep.latency_us(1.0) <= RETRY_BUDGET.as_secs_f64() * 1e6,
        "a lookup over the retry budget"
    );
    let logs: Vec<String> = w.servers.iter().map(ServerProc::log).collect();
    assert!(
        healed.is_some(),
        "not back to 2 copies within {REREPLICATION_LIMIT:?}: {:?}\n{}",
        replicas_of(&w.etcd, "kc"),
        logs.join("\n---\n")
    );
}

/// etcd itself three members, each in its own namespace: kill -9 of one server and of one
/// etcd member under load loses no lookup, answers nothing wrong, and the leader (elected
/// through the two members left) still restores R copies.
#[test]
fn kill_nine_of_a_server_and_an_etcd_member_under_load() {
    if !privileged("ip netns, veth pairs and etcd") {
        return;
    }
    // Drop order (reverse of declaration): servers, etcd members, namespaces.
    let mut net = Netns::new(3);
    let mut members = EtcdMembers::start(&mut net);
    let ep = members.endpoints();
    let mut servers: Vec<ServerProc> = (1..=3)
        .map(|i| {
            let listen = format!("{}:7070", Netns::data_ip(i));
            ServerProc::start(
                "child_serve",
                &format!("q{i}"),
                &listen,
                &ep,
                Some(&net.names[i - 1]),
            )
        })
        .collect();
    let et = etcd(&ep);
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "qc".into(), layers: 3, shards: 3, replicas: 2 };
    create(&et, &spec, &work.0).unwrap();
    let stop = AtomicBool::new(false);
    let ls = load_at(&ep, "qc", Duration::from_secs(60));
    let replicas = |et: &storefn_cluster::Etcd| -> Vec<Vec<String>> {
        status(et, "qc")
            .map(|s| s.shards.into_iter().map(|s| s.replicas).collect())
            .unwrap_or_default()
    };
    let (rep, healed) = std::thread::scope(|sc| {
        let h = sc.spawn(|| run_load(&ls, &stop).unwrap());
        std::thread::sleep(Duration::from_secs(2));
        members.kill9(0);
        std::thread::sleep(Duration::from_millis(500));
        let gone = servers[0].node.clone();
        servers[0].kill9();
        let killed = Instant::now();
        let healed = wait_for(REREPLICATION_LIMIT, || {
            let r = replicas(&et);
            !r.is_empty() && r.iter().all(|r| r.len() == 2 && !r.contains(&gone))
        })
        .map(|_| killed.elapsed());
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        (h.join().unwrap(), healed)
    });
    println!(
        "3-member etcd: lookups={} wrong={} failed={} retries={} p99_us={:.0} max_us={:.0} healed={healed:?}",
        rep.lookups, rep.wrong, rep.failed, rep.retries, rep.latency_us(0.99), rep.latency_us(1.0)
    );
    assert!(rep.lookups > 100, "the load ran");
    assert_eq!(rep.wrong, 0, "wrong answers");
    assert_eq!(rep.failed, 0, "lookups lost: {:?}", rep.errors);
    let logs: Vec<String> = servers.iter().map(ServerProc::log).collect();
    assert!(
        healed.is_some(),
        "not back to 2 copies within {REREPLICATION_LIMIT:?}: {:?}\n{}\n{}",
        replicas(&et),
        logs.join("\n---\n"),
        members.logs()
    );
}

/// A server cut off etcd (its lease lost) but still reachable by clients answers nothing for
/// its shards: its self-fence refuses before etcd expires the lease.
#[test]
fn a_partitioned_server_serves_nothing_stale() {
    let Some(w) = world("p") else { return };
    let et = etcd(&w.etcd.client_addr);
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "pc".into(), layers: 2, shards: 2, replicas: 3 };
    let shards = create(&et, &spec, &work.0).unwrap();
    let s0 = &shards[0];
    let victim = &w.servers[1];
    let read = Request::Read { path: s0.file.as_bytes(), offset: 0, len: 512 };
    let mut c = Client::connect(&victim.addr, ClientConfig::default()).unwrap();
    c.set_fence(Some(s0.version));
    assert_eq!(c.one(&read).unwrap().status, 0);
    w.net.control_link(2, false);
    let cut = Instant::now();
    // Refused within the lease (before etcd could have handed its shards to anyone else).
    let refused = wait_for(
        Duration::from_secs(LEASE_TTL_SECS as u64 + 2),
        || matches!(c.one(&read), Err(e) if e.status() == Some(StatusCode::StalePlacement as u16)),
    );
    let refused = refused.expect("the partitioned server kept answering");
    assert!(refused < Duration::from_secs(LEASE_TTL_SECS as u64), "refused only after {refused:?}");
    // Still refused while cut off, at any version.
    std::thread::sleep(Duration::from_secs(LEASE_TTL_SECS as u64));
    c.set_fence(None);
    assert!(c.one(&read).is_err());
    // Meanwhile the cluster dropped it, and clients route around it.
    let gone = wait_for(Duration::from_secs(15), || {
        replicas_of(&w.etcd, "pc").iter().all(|r| !r.contains(&victim.node))
    });
    assert!(gone.is_some(), "lease of a partitioned server did not expire");
    let mut cc = storefn_cluster::ClusterClient::connect(&w.etcd.client_addr, "pc").unwrap();
    assert!(cc.get(s0.lo, RemotePath::Pushdown).unwrap().is_some());
    // Healed: it re-registers and re-reads the placement; it is no replica any more, so it
    // still refuses fenced requests for the shard.
    w.net.control_link(2, true);
    let et2 = etcd(&w.etcd.client_addr);
    assert!(wait_for(Duration::from_secs(15), || et2
        .get(&storefn_cluster::layout::node_key(&victim.node))
        .unwrap()
        .is_some())
    .is_some());
    c.set_fence(Some(s0.version + 1));
    let e = c.one(&read).unwrap_err();
    assert_eq!(
        e.status(),
        Some(StatusCode::StalePlacement as u16),
        "{e} (cut {:?} ago)",
        cut.elapsed()
    );
}

/// etcd stopped mid-load: lookups continue from the cached placement; after the restart
/// placement changes resume (a drain goes through).
#[test]
fn etcd_restart_under_load_keeps_lookups_going() {
    let Some(mut w) = world("e") else { return };
    let et = etcd(&w.etcd.client_addr);
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "ec".into(), layers: 2, shards: 3, replicas: 2 };
    create(&et, &spec, &work.0).unwrap();
    drop(et);
    let stop = AtomicBool::new(false);
    let spec = load(&w.etcd, "ec", Duration::from_secs(60));
    let rep = std::thread::scope(|sc| {
        let h = sc.spawn(|| run_load(&spec, &stop).unwrap());
        std::thread::sleep(Duration::from_secs(1));
        w.etcd.stop();
        // Down for a moment: servers may fence themselves for a while until their renewals
        // reach the restarted etcd; batches wait that out within the retry budget.
        std::thread::sleep(Duration::from_millis(1000));
        w.etcd.restart();
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap()
    });
    assert!(rep.lookups > 50);
    assert_eq!(rep.wrong, 0);
    assert_eq!(rep.failed, 0, "{:?}", rep.errors);
    // Changes resume: drain a server through the restarted etcd.
    let et = etcd(&w.etcd.client_addr);
    let node = w.servers[2].node.clone();
    let r = storefn_cluster::drain(&et, &node).unwrap();
    assert!(!r.dropped.is_empty() || replicas_of(&w.etcd, "ec").iter().all(|x| !x.contains(&node)));
    assert!(replicas_of(&w.etcd, "ec").iter().all(|x| x.len() == 2 && !x.contains(&node)));
}
