//! Membership, placement, routing and fencing with a real etcd and servers on loopback.

mod common;

use std::time::Duration;

use common::{child_main, etcd, wait_for, ServerProc, TempDir};
use storefn_cluster::layout::{coll_key, member_key, node_key, shard_key, ShardRecord};
use storefn_cluster::limits::LEASE_TTL_SECS;
use storefn_cluster::{create, status, ClusterClient, CreateSpec, Placement};
use storefn_kv::bpfkv_value;
use storefn_kv::RemotePath;
use storefn_testkit::etcd::{free_port, Etcd as EtcdProc};
use storefn_wire::{Client, ClientConfig, Request, StatusCode};

#[test]
fn child_serve() {
    child_main();
}

fn up() -> Option<EtcdProc> {
    if let Some(why) = EtcdProc::available() {
        storefn_testkit::skip(&why);
        return None;
    }
    Some(EtcdProc::start())
}

fn server(node: &str, e: &EtcdProc) -> ServerProc {
    let listen = format!("127.0.0.1:{}", free_port());
    ServerProc::start("child_serve", node, &listen, &e.client_addr, None)
}

#[test]
fn a_server_registers_renews_its_lease_and_leaves() {
    let Some(e) = up() else { return };
    let et = etcd(&e.client_addr);
    let mut a = server("a", &e);
    let mut b = server("b", &e);
    assert!(et.get(&node_key("a")).unwrap().is_some());
    assert!(et.get(&member_key("a")).unwrap().is_some());
    // Renewed: still registered well past one TTL.
    std::thread::sleep(Duration::from_secs(LEASE_TTL_SECS as u64 + 2));
    assert!(et.get(&node_key("a")).unwrap().is_some(), "lease not renewed: {}", a.log());
    // A clean stop revokes the lease: the record goes at once, not after the TTL.
    a.stop_clean();
    assert!(
        wait_for(Duration::from_millis(900), || et.get(&node_key("a")).unwrap().is_none())
            .is_some(),
        "node record outlived a clean stop"
    );
    assert!(et.get(&member_key("a")).unwrap().is_some(), "membership history stays");
    // kill -9: the lease expires by itself within the TTL (plus etcd's expiry tick).
    b.kill9();
    let ttl = Duration::from_secs(LEASE_TTL_SECS as u64 + 3);
    assert!(wait_for(ttl, || et.get(&node_key("b")).unwrap().is_none()).is_some());
}

fn check_all_shards(c: &mut ClusterClient, path: RemotePath) {
    let p = c.placement();
    for s in p.shards.iter().flatten() {
        let keys = [s.lo, s.hi, s.lo + (s.hi - s.lo) / 2];
        let got = c.get_many(&keys, path).unwrap();
        for (k, v) in keys.iter().zip(got) {
            assert_eq!(v, Some(bpfkv_value(*k)), "key {k} of shard {}", s.id);
        }
    }
}

#[test]
fn create_splits_places_and_routes_every_shard() {
    let Some(e) = up() else { return };
    let et = etcd(&e.client_addr);
    let servers: Vec<ServerProc> = ["n1", "n2", "n3"].iter().map(|n| server(n, &e)).collect();
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "kv".into(), layers: 3, shards: 4, replicas: 2 };
    let shards = create(&et, &spec, &work.0).unwrap();
    assert_eq!(shards.len(), 4);
    let st = status(&et, "kv").unwrap();
    assert!(st.problems.is_empty(), "{:?}", st.problems);
    let mut next = 0;
    for s in &st.shards {
        assert_eq!(s.range[0], next);
        next = s.range[1] + 1;
        assert_eq!(s.replicas.len(), 2, "shard {}", s.id);
        assert_eq!(s.version, 3, "created at 1, one publish per replica");
    }
    assert_eq!(next, 31u64.pow(3));
    // Each replica's file is the shard's own valid tree, byte-identical to the record's CRC.
    for s in &shards {
        for r in &s.replicas {
            let dir = &servers.iter().find(|x| &x.node == r).unwrap().dir.0;
            let bytes = std::fs::read(dir.join(&s.file)).unwrap();
            assert_eq!(crc32fast::hash(&bytes), s.crc32);
            let meta = storefn_kv::Meta::decode(
                &std::fs::read(dir.join(format!("{}.meta", s.file))).unwrap(),
                std::path::Path::new(&s.file),
            )
            .unwrap();
            assert_eq!(meta.key_count, s.hi - s.lo + 1);
        }
    }
    let json = serde_json::to_value(&st).unwrap();
    assert!(json["shards"][0]["range"].is_array() && json["nodes"][0]["alive"].is_boolean());
    let mut c = ClusterClient::connect(&e.client_addr, "kv").unwrap();
    check_all_shards(&mut c, RemotePath::Pushdown);
    check_all_shards(&mut c, RemotePath::RpcRead);
    // Out of the keyspace: an error naming the key, not a wrong answer.
    assert!(c.get(31u64.pow(3), RemotePath::Pushdown).is_err());
    drop(servers);
}

/// A fenced request to a server that is not a replica, or fenced by a version newer than the
/// server knows, is refused STALE_PLACEMENT; the current version is answered.
#[test]
fn fencing_refuses_requests_routed_by_another_placement() {
    let Some(e) = up() else { return };
    let et = etcd(&e.client_addr);
    let servers: Vec<ServerProc> = ["f1", "f2"].iter().map(|n| server(n, &e)).collect();
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "fc".into(), layers: 2, shards: 2, replicas: 1 };
    let shards = create(&et, &spec, &work.0).unwrap();
    let s0 = &shards[0];
    let holder = servers.iter().find(|s| s.node == s0.replicas[0]).unwrap();
    let other = servers.iter().find(|s| s.node != s0.replicas[0]).unwrap();
    let read = Request::Read { path: s0.file.as_bytes(), offset: 0, len: 512 };
    let mut c = Client::connect(&holder.addr, ClientConfig::default()).unwrap();
    c.set_fence(Some(s0.version));
    assert_eq!(c.one(&read).unwrap().status, 0);
    c.set_fence(Some(s0.version + 1));
    let err = c.one(&read).unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::StalePlacement as u16), "{err}");
    // The other server holds no copy: refused even unfenced (the file does not exist there
    // either, but fencing answers first).
    let mut o = Client::connect(&other.addr, ClientConfig::default()).unwrap();
    o.set_fence(Some(s0.version));
    let err = o.one(&read).unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::StalePlacement as u16), "{err}");
    // Files outside the cluster directory keep the server's usual rules.
    std::fs::write(holder.dir.0.join("plain"), b"x").unwrap();
    c.set_fence(Some(1));
    assert_eq!(c.one(&Request::Stat { path: b"plain" }).unwrap().value, 1);
}

fn put_shard(et: &storefn_cluster::Etcd, c: &str, s: &ShardRecord) {
    et.put(&shard_key(c, s.id), &serde_json::to_vec(s).unwrap(), None).unwrap();
}

/// Bad placement records are reported by name and not followed.
#[test]
fn bad_placement_records_are_reported_not_followed() {
    let Some(e) = up() else { return };
    let et = etcd(&e.client_addr);
    let _s = server("b1", &e);
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "bad".into(), layers: 2, shards: 3, replicas: 1 };
    let shards = create(&et, &spec, &work.0).unwrap();
    let good = Placement::load(&et, "bad", None).unwrap();
    assert!(good.problems.is_empty(), "{:?}", good.problems);

    // A version going backwards: the previous record is kept.
    let mut back = shards[1].clone();
    back.version = 1;
    back.replicas = vec!["b1".into()];
    put_shard(&et, "bad", &back);
    let p = Placement::load(&et, "bad", Some(&good)).unwrap();
    assert!(p.problems.iter().any(|m| m.contains("backwards")), "{:?}", p.problems);
    assert_eq!(p.shards[1].as_ref().unwrap().version, shards[1].version);

    // A replica naming a node that never joined: dropped from the route.
    let mut unknown = shards[2].clone();
    unknown.replicas.push("ghost".into());
    unknown.version += 1;
    put_shard(&et, "bad", &unknown);
    // A missing shard: no route for its keys.
    et.txn(&[], &[storefn_cluster::Op::Delete { key: shard_key("bad", 0) }]).unwrap();
    let p = Placement::load(&et, "bad", None).unwrap();
    assert!(p.problems.iter().any(|m| m.contains("ghost")), "{:?}", p.problems);
    assert!(p.problems.iter().any(|m| m.contains("shard 0 missing")), "{:?}", p.problems);
    assert!(p.route(0).is_none());
    assert_eq!(p.shards[2].as_ref().unwrap().replicas, vec!["b1".to_string()]);
    let st = status(&et, "bad").unwrap();
    assert!(st.problems.len() >= 2);
    // A collection record that is not JSON: an error naming its key.
    et.put(&coll_key("junk"), b"{", None).unwrap();
    let err = Placement::load(&et, "junk", None).unwrap_err().to_string();
    assert!(err.contains("/storefn/coll/junk"), "{err}");
}

/// A multiget whose keys span every shard (each shard's batch in flight at once) answers
/// exactly what one server holding the whole, unsplit keyspace answers, on both paths.
#[test]
fn a_multiget_spanning_every_shard_equals_one_servers_answers() {
    let Some(e) = up() else { return };
    let et = etcd(&e.client_addr);
    let _servers: Vec<ServerProc> = ["m1", "m2", "m3"].iter().map(|n| server(n, &e)).collect();
    let work = TempDir::new("work");
    let spec = CreateSpec { collection: "mg".into(), layers: 3, shards: 6, replicas: 2 };
    let shards = create(&et, &spec, &work.0).unwrap();
    // The reference: one plain server serving one BPF-KV file of the whole keyspace.
    let whole = TempDir::new("whole");
    storefn_kv::create_bpfkv(
        &whole.0.join("all.kv"),
        storefn_kv::NodeSize::B512,
        3,
        &mut |_, _| {},
    )
    .unwrap();
    let one =
        storefn_server::Server::start("127.0.0.1:0", storefn_server::ServerConfig::new(&whole.0))
            .unwrap();
    let cl = Client::connect(&one.local_addr().to_string(), ClientConfig::default()).unwrap();
    let mut reference = storefn_kv::RemoteKv::open(cl, "all.kv", 1).unwrap();
    // Every shard's bounds and middle, and a spread of others, in an order that interleaves
    // the shards.
    let mut keys: Vec<u64> = shards.iter().flat_map(|s| [s.hi, s.lo, (s.lo + s.hi) / 2]).collect();
    keys.extend((0..200u64).map(|i| (i * 7919 + 13) % 31u64.pow(3)));
    let mut c = ClusterClient::connect(&e.client_addr, "mg").unwrap();
    for path in [RemotePath::Pushdown, RemotePath::RpcRead] {
        let got = c.get_many(&keys, path).unwrap();
        let want = reference.get_many(&keys, path).unwrap();
        assert_eq!(got, want, "{path:?}");
        assert!(want.iter().zip(&keys).all(|(v, k)| *v == Some(bpfkv_value(*k))));
        assert_eq!(c.stats().most_in_flight, 6, "every shard's batch in flight at once");
    }
    assert_eq!(c.stats().retries, 0);
    one.stop();
    let _ = one.join();
}

/// Servers started with a token file accept a copy (and lookups) from a copier holding a
/// token, refuse one without, and their leader re-replicates with the server's own token.
#[test]
fn token_servers_take_authenticated_copies_only() {
    let Some(e) = up() else { return };
    let et = etcd(&e.client_addr);
    let work = TempDir::new("tokens");
    let tokens = work.0.join("tokens");
    std::fs::write(&tokens, "ops s3cret-ops-0123456789 rw\n").unwrap();
    let mut servers: Vec<ServerProc> = ["t1", "t2", "t3"]
        .iter()
        .map(|n| {
            let listen = format!("127.0.0.1:{}", free_port());
            ServerProc::start_with_tokens(
                "child_serve",
                n,
                &listen,
                &e.client_addr,
                None,
                Some(&tokens),
            )
        })
        .collect();
    let spec = |c: &str| CreateSpec { collection: c.into(), layers: 2, shards: 3, replicas: 2 };
    // No token: the copy is refused, nothing is published.
    let err = create(&et, &spec("open"), &work.0).unwrap_err().to_string();
    assert!(err.contains("AUTH") || err.to_lowercase().contains("auth"), "{err}");
    let st = status(&et, "open").unwrap();
    assert!(st.shards.iter().all(|s| s.replicas.is_empty()), "{:?}", st.shards);
    // A wrong secret: refused too.
    let wrong = storefn_cluster::Creds::token("ops", "guess-guess-guess-guess");
    assert!(storefn_cluster::create_as(&et, &spec("wrong"), &work.0, &wrong).is_err());
    // The server's token: every shard on 2 replicas, and lookups answered with it.
    let creds = storefn_cluster::Creds::from_token_file(&tokens).unwrap();
    let shards = storefn_cluster::create_as(&et, &spec("closed"), &work.0, &creds).unwrap();
    assert!(shards.iter().all(|s| s.replicas.len() == 2));
    let mut c = ClusterClient::connect_as(&e.client_addr, "closed", creds.clone()).unwrap();
    check_all_shards(&mut c, RemotePath::Pushdown);
    let mut anon = ClusterClient::connect(&e.client_addr, "closed").unwrap();
    assert!(anon.get(0, RemotePath::Pushdown).is_err(), "an unauthenticated lookup answered");
    // The checked load (`kv bench --cluster --token-file`) as the tenant.
    let load = storefn_cluster::LoadSpec {
        endpoints: e.client_addr.clone(),
        collection: "closed".into(),
        threads: 2,
        requests: Some(64),
        batch: 8,
        path: RemotePath::Pushdown,
        seed: 3,
        max_time: Duration::from_secs(30),
        creds: creds.clone(),
    };
    let r = storefn_cluster::run_load(&load, &std::sync::atomic::AtomicBool::new(false)).unwrap();
    assert_eq!((r.lookups, r.wrong, r.failed), (128, 0, 0), "{:?}", r.errors);
    // kill -9 of a server: the leader copies its shards to the third with its own token.
    let gone = shards[0].replicas[0].clone();
    servers.iter_mut().find(|s| s.node == gone).unwrap().kill9();
    let back = wait_for(Duration::from_secs(LEASE_TTL_SECS as u64 + 25), || {
        status(&et, "closed").is_ok_and(|st| {
            st.shards.iter().all(|s| s.replicas.len() == 2 && !s.replicas.contains(&gone))
        })
    });
    let logs: Vec<String> = servers.iter().map(ServerProc::log).collect();
    assert!(
        back.is_some(),
        "not re-replicated: {:?} {logs:?}",
        status(&et, "closed").unwrap().shards
    );
    drop(c);
    let mut c = ClusterClient::connect_as(&e.client_addr, "closed", creds).unwrap();
    check_all_shards(&mut c, RemotePath::Pushdown);
}
