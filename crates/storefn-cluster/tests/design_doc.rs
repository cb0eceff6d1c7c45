//! docs/DESIGN.md's limits rows and docs/design/cluster.md's etcd key table against the code.

use storefn_cluster::layout;

const DESIGN: &str = include_str!("../../../docs/DESIGN.md");
const CLUSTER: &str = include_str!("../../../docs/design/cluster.md");
const LIMITS: &str = include_str!("../src/limits.rs");

#[test]
fn every_cluster_limit_is_in_the_named_limits_table() {
    let table = &DESIGN[DESIGN.find("## Named limits").unwrap()..];
    let table = &table[..table.find("\n## ").unwrap()];
    for l in LIMITS.lines() {
        if let Some(rest) = l.trim().strip_prefix("pub const ") {
            let name = rest.split(':').next().unwrap().trim();
            assert!(table.contains(name), "DESIGN.md's limits table lacks {name}");
        }
    }
}

#[test]
fn the_key_table_names_the_keys_the_code_writes() {
    let rows = storefn_testkit::doc_table_rows(CLUSTER, "## etcd keys");
    let keys: Vec<String> = rows.iter().map(|r| r[0].trim_matches('`').to_string()).collect();
    let want = [
        layout::node_key("<node>"),
        layout::member_key("<node>"),
        layout::coll_key("<c>"),
        layout::drained_key("<node>"),
        layout::ELECTION.to_string(),
    ];
    for k in want {
        assert!(keys.iter().any(|d| d.starts_with(&k)), "cluster.md lacks {k}: {keys:?}");
    }
    assert!(keys.iter().any(|d| d.starts_with("/storefn/coll/<c>/shard/")));
    assert!(keys.iter().any(|d| d.starts_with("/storefn/ready/<c>/")));
    assert_eq!(layout::shard_key("c", 3), "/storefn/coll/c/shard/00003");
    assert_eq!(layout::ready_key("c", 3, "n"), "/storefn/ready/c/00003/n");
}
