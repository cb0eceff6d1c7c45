//! Re-replication without an operator: every server campaigns in etcd's election
//! ([`ELECTION`]) under its lease; the leader (one at a time; a new one wins within a lease
//! when it dies) re-plans every [`LEADER_TICK`]: a replica whose server is gone is dropped from
//! its shard (the version moves, so fenced requests routed by the old list are refused), and a
//! shard with fewer than R live copies gets one more, copied from a live replica and published
//! atomically ([`crate::copy::copy_to`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use crate::copy::{copy_to, fetch, update_shard, Creds};
use crate::etcd::Etcd;
use crate::layout::{drained_key, shard_key, ELECTION};
use crate::limits::LEADER_TICK;
use crate::placement::{collections, Placement};
use crate::ClusterError;

/// What one planning pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanReport {
    /// `(collection, shard, node)` replicas dropped because their server is gone or drained.
    pub dropped: Vec<(String, u32, String)>,
    /// `(collection, shard, node)` copies made and published.
    pub copied: Vec<(String, u32, String)>,
    /// Problems met (bad records, failed copies).
    pub problems: Vec<String>,
}

/// The leader thread of a server: campaign, then plan while leading.
pub(crate) fn leader_loop(
    endpoints: &str,
    id: &str,
    creds: &Creds,
    lease: &AtomicI64,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(etcd) = Etcd::connect(endpoints) else {
            std::thread::sleep(LEADER_TICK);
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let l = lease.load(Ordering::Relaxed);
            if l == 0 {
                std::thread::sleep(LEADER_TICK);
                continue;
            }
            match etcd.campaign(ELECTION, id, l, Duration::from_secs(2)) {
                Ok(true) => {
                    eprintln!("cluster leader {id}: elected");
                    lead(&etcd, id, creds, l, lease, stop);
                }
                Ok(false) => {}
                Err(e) => {
                    eprintln!("cluster leader {id}: campaign: {e}");
                    break; // reconnect
                }
            }
        }
    }
}

fn lead(etcd: &Etcd, id: &str, creds: &Creds, my_lease: i64, lease: &AtomicI64, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) && lease.load(Ordering::Relaxed) == my_lease {
        // Still the leader? (The election key goes with the lease.)
        match etcd.leader(ELECTION) {
            Ok(Some(l)) if l == id => {}
            _ => return,
        }
        match plan_as(etcd, &[], creds) {
            Ok(r) => {
                for (c, s, n) in &r.copied {
                    eprintln!("cluster leader {id}: copied {c} shard {s} to {n}");
                }
                for (c, s, n) in &r.dropped {
                    eprintln!("cluster leader {id}: dropped {c} shard {s} from {n}");
                }
                for p in &r.problems {
                    eprintln!("cluster leader {id}: {p}");
                }
            }
            Err(e) => eprintln!("cluster leader {id}: {e}"),
        }
        std::thread::sleep(LEADER_TICK);
    }
}

/// One planning pass over every collection; `drained` servers keep no replica once their
/// shards have R copies elsewhere.
///
/// # Errors
/// etcd unreachable.
pub fn plan(etcd: &Etcd, drained: &[String]) -> Result<PlanReport, ClusterError> {
    plan_as(etcd, drained, &Creds::default())
}

/// [`plan`], copying as `creds` (servers started with a token file).
///
/// # Errors
/// etcd unreachable.
pub fn plan_as(etcd: &Etcd, drained: &[String], creds: &Creds) -> Result<PlanReport, ClusterError> {
    let mut rep = PlanReport::default();
    let prefix = drained_key("");
    let mut drained = drained.to_vec();
    for kv in etcd.get_prefix(&prefix)? {
        drained.extend(kv.key.strip_prefix(&prefix).map(str::to_string));
    }
    let drained = &drained[..];
    for c in collections(etcd)? {
        let p = match Placement::load(etcd, &c, None) {
            Ok(p) => p,
            Err(e) => {
                rep.problems.push(e.to_string());
                continue;
            }
        };
        rep.problems.extend(p.problems.iter().cloned());
        plan_collection(etcd, &p, drained, creds, &mut rep)?;
    }
    Ok(rep)
}

fn plan_collection(
    etcd: &Etcd,
    p: &Placement,
    drained: &[String],
    creds: &Creds,
    rep: &mut PlanReport,
) -> Result<(), ClusterError> {
    let c = &p.collection.name;
    let want = p.collection.replicas as usize;
    let mut load: BTreeMap<&str, usize> = p.nodes.keys().map(|k| (k.as_str(), 0)).collect();
    for s in p.shards.iter().flatten() {
        for r in &s.replicas {
            if let Some(n) = load.get_mut(r.as_str()) {
                *n += 1;
            }
        }
    }
    for s in p.shards.iter().flatten() {
        let key = shard_key(c, s.id);
        let usable = |r: &String| p.nodes.contains_key(r) && !drained.contains(r);
        let good: Vec<&String> = s.replicas.iter().filter(|r| usable(r)).collect();
        // Copies under way count: the leader never races a copier past R.
        let underway = s.pending.iter().filter(|r| usable(r)).count();
        // A copy first, while a drained server can still be a source.
        if good.len() + underway < want {
            let held =
                |n: &&str| s.replicas.iter().any(|r| r == n) || s.pending.iter().any(|r| r == n);
            let target = load
                .iter()
                .filter(|(n, _)| !held(n) && !drained.iter().any(|d| d == *n))
                .min_by_key(|(_, l)| **l)
                .map(|(n, _)| (*n).to_string());
            let sources: Vec<&String> =
                s.replicas.iter().filter(|r| p.nodes.contains_key(*r)).collect();
            if let (Some(t), false) = (target, sources.is_empty()) {
                let src = &p.nodes[sources[s.id as usize % sources.len()]];
                let res = fetch(&src.addr, s, creds)
                    .and_then(|b| copy_to(etcd, c, s.id, &p.nodes[&t], &b, creds));
                match res {
                    Ok(_) => {
                        rep.copied.push((c.clone(), s.id, t.clone()));
                        *load.entry(p.nodes[&t].id.as_str()).or_default() += 1;
                    }
                    Err(e) => rep.problems.push(format!("{key}: copy to {t}: {e}")),
                }
                continue; // re-read before dropping anything
            }
        }
        let gone: Vec<String> = s
            .replicas
            .iter()
            .filter(|r| !p.nodes.contains_key(*r) || (drained.contains(r) && good.len() >= want))
            .cloned()
            .collect();
        if !gone.is_empty() {
            update_shard(etcd, &key, &[], |s| {
                let before = s.replicas.len();
                s.replicas.retain(|r| !gone.contains(r));
                s.pending.retain(|r| !gone.contains(r));
                if s.replicas.len() != before {
                    s.version += 1;
                }
                s.replicas.len() != before
            })?;
            rep.dropped.extend(gone.into_iter().map(|g| (c.clone(), s.id, g)));
        }
    }
    Ok(())
}
