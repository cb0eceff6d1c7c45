//! A collection's placement as read from etcd: the collection, its shards and the servers,
//! checked. A bad record (a missing shard, a replica naming a node that never joined, ranges
//! that do not tile the keyspace, a version going backwards) is reported in
//! [`Placement::problems`] and not followed: its shard keeps its previous record, or has no
//! route.

use std::collections::BTreeMap;

use crate::etcd::Etcd;
use crate::layout::{
    coll_key, decode, member_key, node_key, shard_key, CollectionRecord, NodeRecord, ShardRecord,
    ROOT,
};
use crate::ClusterError;

/// One collection's placement at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub collection: CollectionRecord,
    /// By id; `None` = no usable record (see `problems`).
    pub shards: Vec<Option<ShardRecord>>,
    /// Live servers (their lease holds), by id.
    pub nodes: BTreeMap<String, NodeRecord>,
    /// Every server that ever joined, by id.
    pub members: BTreeMap<String, NodeRecord>,
    /// Records refused, each naming its key and why.
    pub problems: Vec<String>,
}

/// Servers by id.
pub type Nodes = BTreeMap<String, NodeRecord>;

/// Live servers and every member, from etcd.
///
/// # Errors
/// etcd unreachable.
pub fn load_nodes(etcd: &Etcd) -> Result<(Nodes, Nodes), ClusterError> {
    let mut out = (BTreeMap::new(), BTreeMap::new());
    for (prefix, map) in [(node_key(""), &mut out.0), (member_key(""), &mut out.1)] {
        for kv in etcd.get_prefix(&prefix)? {
            if let Ok(n) = decode::<NodeRecord>(&kv.key, &kv.value) {
                map.insert(n.id.clone(), n);
            }
        }
    }
    Ok(out)
}

/// Names of every collection.
///
/// # Errors
/// etcd unreachable.
pub fn collections(etcd: &Etcd) -> Result<Vec<String>, ClusterError> {
    let p = format!("{ROOT}coll/");
    Ok(etcd
        .get_prefix(&p)?
        .into_iter()
        .filter_map(|kv| kv.key.strip_prefix(&p).filter(|r| !r.contains('/')).map(str::to_string))
        .collect())
}

impl Placement {
    /// Reads collection `c`'s placement; `prev` (the caller's last snapshot) keeps a shard
    /// whose version went backwards at its previous record.
    ///
    /// # Errors
    /// etcd unreachable; `NoCollection`; a collection record that does not decode.
    pub fn load(etcd: &Etcd, c: &str, prev: Option<&Placement>) -> Result<Placement, ClusterError> {
        let ck = coll_key(c);
        let kv = etcd.get(&ck)?.ok_or_else(|| ClusterError::NoCollection(c.to_string()))?;
        let collection: CollectionRecord = decode(&ck, &kv.value)?;
        let records = etcd.get_prefix(&format!("{ck}/shard/"))?;
        let (nodes, members) = load_nodes(etcd)?;
        let mut p = Placement {
            shards: vec![None; collection.shards as usize],
            collection,
            nodes,
            members,
            problems: Vec::new(),
        };
        for kv in records {
            p.take_record(&kv.key, &kv.value);
        }
        p.check(c, prev);
        Ok(p)
    }

    fn take_record(&mut self, key: &str, value: &[u8]) {
        match decode::<ShardRecord>(key, value) {
            Err(e) => self.problems.push(e.to_string()),
            Ok(s) if shard_key(&self.collection.name, s.id) != key => {
                self.problems.push(format!("{key}: record names shard {}", s.id));
            }
            Ok(s) => {
                let i = s.id as usize;
                if i < self.shards.len() {
                    self.shards[i] = Some(s);
                } else {
                    self.problems.push(format!(
                        "{key}: shard {} beyond the collection's {}",
                        s.id, self.collection.shards
                    ));
                }
            }
        }
    }

    /// Refuses what must not be followed; every refusal lands in `problems`.
    fn check(&mut self, c: &str, prev: Option<&Placement>) {
        let keys = crate::create::keyspace(self.collection.layers).unwrap_or(0);
        let mut next_lo = 0u64;
        for i in 0..self.shards.len() {
            let key = shard_key(c, i as u32);
            let Some(s) = self.shards[i].as_mut() else {
                self.problems.push(format!("{key}: shard {i} missing"));
                continue;
            };
            let unknown: Vec<String> =
                s.replicas.iter().filter(|r| !self.members.contains_key(*r)).cloned().collect();
            for u in &unknown {
                self.problems.push(format!("{key}: replica {u:?} is not a known node"));
            }
            s.replicas.retain(|r| !unknown.contains(r));
            if s.lo != next_lo || s.hi < s.lo {
                self.problems.push(format!(
                    "{key}: range {}..={} does not follow the previous shard (expected lo {next_lo})",
                    s.lo, s.hi
                ));
            }
            next_lo = s.hi.saturating_add(1);
            let old = prev.and_then(|p| p.shards.get(i)).and_then(Option::as_ref);
            if let Some(old) = old.filter(|o| o.version > s.version) {
                self.problems.push(format!(
                    "{key}: version went backwards ({} after {}): keeping version {}",
                    s.version, old.version, old.version
                ));
                self.shards[i] = Some(old.clone());
            }
        }
        if next_lo != keys && self.shards.iter().all(Option::is_some) {
            self.problems.push(format!(
                "{}: shards end at key {next_lo}, the keyspace at {keys}",
                coll_key(c)
            ));
        }
    }

    /// The shard holding `key`.
    #[must_use]
    pub fn route(&self, key: u64) -> Option<&ShardRecord> {
        // A handful of shards: a scan, which also stays right around a refused record.
        self.shards.iter().flatten().find(|s| s.lo <= key && key <= s.hi)
    }

    /// The shard's replicas whose server is live.
    #[must_use]
    pub fn live_replicas<'a>(&'a self, s: &'a ShardRecord) -> Vec<&'a NodeRecord> {
        s.replicas.iter().filter_map(|r| self.nodes.get(r)).collect()
    }
}
