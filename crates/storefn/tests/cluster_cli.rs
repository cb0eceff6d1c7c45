//! `storefn serve --cluster`, `storefn cluster create|status|place|drain` and `kv get|multiget|
//! bench --cluster` as processes, with a real etcd on loopback (started and removed by the
//! test): a collection created, placed, looked up on every shard, a server drained, and a
//! server stopped by SIGTERM leaving the cluster at once.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use storefn_testkit::etcd::{free_port, Etcd};

mod common;
use common::{storefn, Dir};

/// A `storefn serve --cluster` child; killed on drop.
struct Node {
    child: Child,
    id: String,
    _dir: Dir,
}

impl Node {
    fn start(id: &str, etcd: &str) -> Node {
        Self::start_with(id, etcd, None)
    }

    /// A node whose server requires the tokens of `tokens` when given.
    fn start_with(id: &str, etcd: &str, tokens: Option<&std::path::Path>) -> Node {
        let dir = common::temp_dir("storefn-cluster-cli", id);
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.0.join("log")).unwrap();
        let served = dir.0.join("served");
        std::fs::create_dir_all(&served).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_storefn"));
        cmd.args(["serve", "--dir", served.to_str().unwrap(), "--listen", &addr]).args([
            "--cluster",
            etcd,
            "--node",
            id,
            "--advertise",
            &addr,
        ]);
        if let Some(t) = tokens {
            cmd.arg("--token-file").arg(t);
        }
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
        let n = Node { child, id: id.into(), _dir: dir };
        n.wait_log("listening on");
        n
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.0.join("log")).unwrap_or_default()
    }

    fn wait_log(&self, what: &str) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if self.log().contains(what) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{}: no {what:?}: {}", self.id, self.log());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status(ep: &str) -> serde_json::Value {
    let (code, out, err) =
        storefn(&["cluster", "status", "--etcd", ep, "--collection", "cc", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn a_collection_is_created_looked_up_drained_and_left() {
    if let Some(why) = Etcd::available() {
        storefn_testkit::skip(&why);
        return;
    }
    let etcd = Etcd::start();
    let ep = etcd.client_addr.clone();
    let mut nodes: Vec<Node> = ["c1", "c2", "c3"].iter().map(|n| Node::start(n, &ep)).collect();
    let (code, out, err) = storefn(&[
        "cluster",
        "create",
        "cc",
        "--etcd",
        &ep,
        "--layers",
        "2",
        "--shards",
        "3",
        "--replicas",
        "2",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().count(), 3, "{out}");
    let st = status(&ep);
    let shards = st["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 3);
    for s in shards {
        assert_eq!(s["replicas"].as_array().unwrap().len(), 2, "{st}");
        assert!(s["id"].is_u64() && s["version"].is_u64() && s["range"].is_array());
    }
    assert!(st["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["alive"] == true && n["addr"].is_string()));
    // Every shard's first and last key, through the cluster, on both remote paths.
    for s in shards {
        for k in [s["range"][0].as_u64().unwrap(), s["range"][1].as_u64().unwrap()] {
            for path in ["pushdown", "rpc-read"] {
                let (code, out, err) = storefn(&[
                    "kv",
                    "get",
                    "cc",
                    "--key",
                    &k.to_string(),
                    "--path",
                    path,
                    "--cluster",
                    &ep,
                ]);
                assert_eq!(code, 0, "{err}");
                assert_eq!(out.trim(), k.to_string(), "key {k} via {path}");
            }
        }
    }
    let (code, out, err) =
        storefn(&["kv", "multiget", "x", "--random", "50", "--cluster", &ep, "--collection", "cc"]);
    assert_eq!(code, 0, "{out}{err}");
    for l in out.lines() {
        let (k, v) = l.split_once(' ').unwrap();
        assert_eq!(k, v.trim());
    }
    let (code, out, err) = storefn(&[
        "kv",
        "bench",
        "cc",
        "--cluster",
        &ep,
        "--requests",
        "200",
        "--threads",
        "2",
        "--path",
        "pushdown",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("wrong=0 failed_batches=0"), "{out}");

    // Drain c3: its shards move to c1 and c2, keeping 2 copies.
    let (code, out, err) = storefn(&["cluster", "drain", "--etcd", &ep, "--node", "c3"]);
    assert_eq!(code, 0, "{out}{err}");
    let st = status(&ep);
    for s in st["shards"].as_array().unwrap() {
        let r: Vec<&str> =
            s["replicas"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(r.len(), 2, "{st}");
        assert!(!r.contains(&"c3"), "{st}");
    }

    // SIGTERM: the server leaves at once (its lease revoked), well before the TTL.
    let c2 = &mut nodes[1];
    // SAFETY: kill on our own child's pid.
    unsafe { libc::kill(i32::try_from(c2.child.id()).unwrap(), libc::SIGTERM) };
    let t0 = Instant::now();
    let st = c2.child.wait().unwrap();
    assert!(st.success(), "{}", c2.log());
    assert!(c2.log().contains("left the cluster"), "{}", c2.log());
    let alive = |s: &serde_json::Value| {
        s["nodes"].as_array().unwrap().iter().find(|n| n["id"] == "c2").unwrap()["alive"] == true
    };
    assert!(!alive(&status(&ep)), "c2 still alive {:?} after SIGTERM", t0.elapsed());
    drop(etcd);
}

/// Servers started with `--token-file`: `cluster create` and `kv get --cluster` succeed with
/// `--token-file` and fail without it.
#[test]
fn token_servers_need_the_token_file_for_copies_and_lookups() {
    if let Some(why) = Etcd::available() {
        storefn_testkit::skip(&why);
        return;
    }
    let etcd = Etcd::start();
    let ep = etcd.client_addr.clone();
    let dir = common::temp_dir("storefn-cluster-cli", "tokens");
    let tokens = dir.0.join("tokens");
    std::fs::write(&tokens, "ops 0123456789abcdef-ops rw\n").unwrap();
    let t = tokens.to_str().unwrap();
    let _nodes: Vec<Node> =
        ["k1", "k2"].iter().map(|n| Node::start_with(n, &ep, Some(&tokens))).collect();
    let create = |c: &str| {
        vec!["cluster", "create", c, "--etcd", &ep, "--layers", "2", "--shards", "2"]
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<String>>()
    };
    let run = |a: &[String]| storefn(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, out, err) = run(&create("open"));
    assert_ne!(code, 0, "created without a token: {out}");
    assert!(err.to_lowercase().contains("auth"), "{err}");
    let mut with = create("tc");
    with.extend(["--token-file".to_string(), t.to_string()]);
    let (code, out, err) = run(&with);
    assert_eq!(code, 0, "{out}{err}");
    let get = ["kv", "get", "tc", "--key", "700", "--path", "pushdown", "--cluster", &ep];
    let (code, out, err) = storefn(&[&get[..], &["--token-file", t]].concat());
    assert_eq!((code, out.trim()), (0, "700"), "{err}");
    let (code, _, _) = storefn(&get);
    assert_ne!(code, 0, "a lookup without the token was answered");
}
