//! The memtable: newest versions of recently put keys, consulted before the tree.

use std::collections::BTreeMap;

use crate::wal::VALUE_BYTES;

/// Accounted bytes per entry: key, sequence number, value (BTreeMap overhead not counted).
pub const ENTRY_BYTES: usize = 8 + 8 + VALUE_BYTES;

/// One stored version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// WAL sequence number; larger is newer.
    pub seq: u64,
    pub value: [u8; VALUE_BYTES],
}

/// Sorted map key -> newest version, with a size limit.
#[derive(Debug, Clone)]
pub struct Memtable {
    map: BTreeMap<u64, Version>,
    limit_bytes: usize,
}

impl Memtable {
    /// An empty table that reports [`Memtable::is_full`] at `limit_bytes`.
    #[must_use]
    pub fn new(limit_bytes: usize) -> Self {
        assert!(limit_bytes >= ENTRY_BYTES, "memtable limit below one entry");
        Self { map: BTreeMap::new(), limit_bytes }
    }

    /// Records `value` for `key` unless a newer version (larger `seq`) is already there, so
    /// concurrent puts that become durable out of order still leave the newest value.
    pub fn insert(&mut self, key: u64, seq: u64, value: [u8; VALUE_BYTES]) {
        match self.map.get_mut(&key) {
            Some(v) if v.seq >= seq => {}
            Some(v) => *v = Version { seq, value },
            None => {
                self.map.insert(key, Version { seq, value });
            }
        }
    }

    /// The newest value for `key`, if put since the last compaction.
    #[must_use]
    pub fn get(&self, key: u64) -> Option<&[u8; VALUE_BYTES]> {
        self.map.get(&key).map(|v| &v.value)
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8; VALUE_BYTES])> + '_ {
        self.map.iter().map(|(k, v)| (*k, &v.value))
    }

    /// Entries with keys in `[begin, end]` (inclusive; empty when `begin > end`), in key order.
    pub fn range(&self, begin: u64, end: u64) -> impl Iterator<Item = (u64, &[u8; VALUE_BYTES])> {
        let r = if begin <= end { self.map.range(begin..=end) } else { self.map.range(1..1) };
        r.map(|(k, v)| (*k, &v.value))
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Accounted size: entries x [`ENTRY_BYTES`].
    #[must_use]
    pub fn size_bytes(&self) -> usize {
        self.map.len() * ENTRY_BYTES
    }

    /// True once the table has reached its limit: time to compact.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.size_bytes() >= self.limit_bytes
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::DEFAULT_MEMTABLE_LIMIT_BYTES;

    fn val(b: u8) -> [u8; VALUE_BYTES] {
        [b; VALUE_BYTES]
    }

    #[test]
    fn newest_seq_wins_regardless_of_insert_order() {
        let mut m = Memtable::new(DEFAULT_MEMTABLE_LIMIT_BYTES);
        m.insert(7, 2, val(2));
        m.insert(7, 1, val(1));
        assert_eq!(m.get(7), Some(&val(2)));
        m.insert(7, 3, val(3));
        assert_eq!(m.get(7), Some(&val(3)));
        assert_eq!(m.get(8), None);
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn full_at_limit_and_iterates_sorted() {
        let mut m = Memtable::new(3 * ENTRY_BYTES);
        for (i, k) in [30u64, 10, 20].into_iter().enumerate() {
            assert!(!m.is_full());
            m.insert(k, i as u64 + 1, val(0));
        }
        assert!(m.is_full());
        assert_eq!(m.iter().map(|(k, _)| k).collect::<Vec<_>>(), vec![10, 20, 30]);
        m.clear();
        assert!(m.is_empty() && !m.is_full());
    }
}
