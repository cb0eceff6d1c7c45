//! The client's block cache: filter, index and (for rpc-read) data blocks by (file, offset),
//! held to a byte budget, least recently used evicted first; a sampled refresh's block is
//! admitted only where it evicts nothing used since the previous sample. Local chains keep
//! their data blocks in one too ([`crate::DataCache`]).

use std::collections::{BTreeMap, HashMap};

use crate::format::filter::Bloom;

/// A cached block's contents (checked and decoded).
#[derive(Debug, Clone)]
pub(crate) enum Cached {
    /// A filter block; `None` for a filter kind this reader does not apply.
    Filter(Option<Bloom>),
    Block(Vec<u8>),
}

/// (file number, block offset).
type Key = (u64, u64);

#[derive(Debug, Default)]
pub(crate) struct BlockCache {
    cap: u64,
    used: u64,
    tick: u64,
    map: HashMap<Key, (Cached, u64, u64)>,
    lru: BTreeMap<u64, Key>,
    pub hits: u64,
    pub misses: u64,
}

impl BlockCache {
    pub(crate) fn new(cap: u64) -> Self {
        BlockCache { cap, ..Self::default() }
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.cap
    }

    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    pub(crate) fn get(&mut self, k: Key) -> Option<&Cached> {
        let Some(e) = self.map.get_mut(&k) else {
            self.misses += 1;
            return None;
        };
        self.hits += 1;
        self.tick += 1;
        self.lru.remove(&e.2);
        e.2 = self.tick;
        self.lru.insert(self.tick, k);
        Some(&e.0)
    }

    /// Whether `bytes` more fit without evicting.
    pub(crate) fn fits(&self, bytes: u64) -> bool {
        self.used + bytes <= self.cap
    }

    /// The clock of the last use: entries used after a tick read now are "used since" it.
    pub(crate) fn tick(&self) -> u64 {
        self.tick
    }

    /// Whether `bytes` fit by evicting only entries not used since tick `since` (cold ones).
    pub(crate) fn admits(&self, bytes: u64, since: u64) -> bool {
        if bytes > self.cap {
            return false;
        }
        let mut free = self.cap - self.used;
        for (t, k) in &self.lru {
            if free >= bytes || *t > since {
                break;
            }
            free += self.map.get(k).map_or(0, |e| e.1);
        }
        free >= bytes
    }

    /// Inserts `v` (`bytes` long) when [`BlockCache::admits`] it, evicting cold entries only
    /// (least recently used first): a sampled block never pushes out one in steady use.
    pub(crate) fn insert_if_cold(&mut self, k: Key, v: Cached, bytes: u64, since: u64) -> bool {
        if self.map.contains_key(&k) || !self.admits(bytes, since) {
            return false;
        }
        self.insert(k, v, bytes);
        true
    }

    /// Inserts `v` (`bytes` long), evicting the least recently used; nothing when it alone is
    /// over the budget.
    pub(crate) fn insert(&mut self, k: Key, v: Cached, bytes: u64) {
        self.insert_recycling(k, v, bytes, &mut Vec::new(), 0);
    }

    /// [`BlockCache::insert`], handing the buffers of evicted blocks to `spare` (up to `keep`
    /// of them) for the caller's next block: a cache that turns over on every miss then
    /// allocates and frees nothing.
    pub(crate) fn insert_recycling(
        &mut self,
        k: Key,
        v: Cached,
        bytes: u64,
        spare: &mut Vec<Vec<u8>>,
        keep: usize,
    ) {
        if bytes > self.cap {
            return;
        }
        if let Some((_, b, t)) = self.map.remove(&k) {
            self.used -= b;
            self.lru.remove(&t);
        }
        while self.used + bytes > self.cap {
            let Some((_, old)) = self.lru.pop_first() else { break };
            if let Some((old, b, _)) = self.map.remove(&old) {
                self.used -= b;
                if let (Cached::Block(buf), true) = (old, spare.len() < keep) {
                    spare.push(buf);
                }
            }
        }
        self.tick += 1;
        self.used += bytes;
        self.lru.insert(self.tick, k);
        self.map.insert(k, (v, bytes, self.tick));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_goes_first_and_the_budget_holds() {
        let mut c = BlockCache::new(100);
        c.insert((1, 0), Cached::Block(vec![0; 40]), 40);
        c.insert((1, 40), Cached::Block(vec![0; 40]), 40);
        assert!(c.get((1, 0)).is_some());
        c.insert((2, 0), Cached::Block(vec![0; 40]), 40);
        assert!(c.get((1, 40)).is_none(), "the least recently used was evicted");
        assert!(c.get((1, 0)).is_some() && c.get((2, 0)).is_some());
        assert!(c.used() <= c.capacity());
        c.insert((3, 0), Cached::Block(vec![0; 200]), 200);
        assert!(c.get((3, 0)).is_none(), "a block over the budget is not kept");
    }

    #[test]
    fn evicted_buffers_are_handed_back_up_to_the_number_asked() {
        let mut c = BlockCache::new(100);
        let mut spare = Vec::new();
        for i in 0..4 {
            c.insert_recycling((1, i), Cached::Block(vec![i as u8; 40]), 40, &mut spare, 1);
        }
        assert_eq!(spare, vec![vec![0u8; 40]], "two evicted, one kept: the first");
        assert!(c.used() <= c.capacity());
        assert!(c.get((1, 2)).is_some() && c.get((1, 3)).is_some());
    }

    #[test]
    fn a_sampled_block_evicts_only_entries_unused_since_the_last_sample() {
        let mut c = BlockCache::new(100);
        c.insert((1, 0), Cached::Block(vec![0; 50]), 50);
        c.insert((2, 0), Cached::Block(vec![0; 40]), 40);
        let since = c.tick();
        assert!(c.get((1, 0)).is_some(), "in use since the sample");
        assert!(!c.admits(60, since), "only the cold 40 bytes could go");
        assert!(!c.insert_if_cold((3, 0), Cached::Block(vec![0; 60]), 60, since));
        assert!(c.get((1, 0)).is_some() && c.get((2, 0)).is_some(), "nothing evicted");
        let since = c.tick();
        assert!(c.get((1, 0)).is_some());
        assert!(c.insert_if_cold((3, 0), Cached::Block(vec![0; 50]), 50, since));
        assert!(c.get((2, 0)).is_none(), "the cold entry made room");
        assert!(c.get((1, 0)).is_some() && c.get((3, 0)).is_some());
        assert!(c.used() <= c.capacity());
    }
}
