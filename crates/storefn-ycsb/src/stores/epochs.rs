//! Which keys a reader of a published copy must ask the engine for: the stores that read an
//! engine's files through the storefn function (a WiredTiger checkpoint, a RocksDB snapshot)
//! while the engine keeps taking writes share this bookkeeping.
//!
//! Every write is tagged with the current epoch. Whoever publishes copies (the checkpointer,
//! the refresher) bumps the epoch to e under the write side of the gate, so every write tagged
//! below e has returned; then makes the copy (which therefore holds all of them) and publishes
//! it as e. A reader on the copy published as p asks the engine for every key whose newest tag
//! is >= p. Tags older than every live reader's copy are pruned.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

/// The epochs of writes and of the copies readers read (see the module's documentation).
#[derive(Debug)]
pub(super) struct Epochs {
    epoch: AtomicU64,
    published: AtomicU64,
    gate: RwLock<()>,
    /// Key number -> the epoch of its newest write.
    dirty: Mutex<HashMap<u64, u64>>,
    /// The epoch each live reader reads at.
    readers: Mutex<Vec<Arc<AtomicU64>>>,
}

/// The tags of written keys, locked: a batch asks for many keys under one lock.
pub(super) struct Tags<'a>(MutexGuard<'a, HashMap<u64, u64>>);

impl Tags<'_> {
    /// Whether key `num` was written at or after `epoch` (the reader's copy lacks it).
    pub(super) fn since(&self, num: u64, epoch: u64) -> bool {
        self.0.get(&num).is_some_and(|&e| e >= epoch)
    }
}

/// A live reader's epoch: tags its copy lacks are kept while it lives.
#[derive(Debug)]
pub(super) struct ReaderSlot<'a> {
    epochs: &'a Epochs,
    epoch: Arc<AtomicU64>,
}

impl ReaderSlot<'_> {
    /// The reader moved to the copy of epoch `e`.
    pub(super) fn moved(&self, e: u64) {
        // Relaxed: only the pruner reads it, and a lower value keeps more entries.
        self.epoch.store(e, Ordering::Relaxed);
    }
}

impl Drop for ReaderSlot<'_> {
    fn drop(&mut self) {
        let mut r = self.epochs.readers.lock().unwrap_or_else(PoisonError::into_inner);
        r.retain(|s| !Arc::ptr_eq(s, &self.epoch));
    }
}

impl Default for Epochs {
    /// Writes are tagged 1, and the copy the store opened with is published as 1.
    fn default() -> Self {
        Self {
            epoch: AtomicU64::new(1),
            published: AtomicU64::new(1),
            gate: RwLock::new(()),
            dirty: Mutex::new(HashMap::new()),
            readers: Mutex::new(Vec::new()),
        }
    }
}

impl Epochs {
    /// Runs `write` of key `num`, tagged with the epoch it belongs to.
    pub(super) fn tagged<T, E>(
        &self,
        num: u64,
        write: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let _g = self.gate.read().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: the gate orders the tag against the publisher's bump.
        let e = self.epoch.load(Ordering::Relaxed);
        let r = write()?;
        self.tags().0.insert(num, e);
        Ok(r)
    }

    /// Starts the next epoch once every write of the current one has returned; the copy made
    /// after this holds them all, and is published as the returned epoch.
    pub(super) fn bump(&self) -> u64 {
        let _g = self.gate.write().unwrap_or_else(PoisonError::into_inner);
        // Release: the gate's lock orders this against every writer's tag; a reader that sees
        // the bump (Acquire, `current`) knows a new copy is under way.
        self.epoch.fetch_add(1, Ordering::Release) + 1
    }

    /// The epoch writes are tagged with now.
    pub(super) fn current(&self) -> u64 {
        // Acquire: pairs with the bump's Release.
        self.epoch.load(Ordering::Acquire)
    }

    /// Publishes the copy of epoch `e` (made after `bump` returned it), then forgets the tags
    /// every live reader's copy holds.
    pub(super) fn publish(&self, e: u64) {
        // Release: a reader that sees e (Acquire, `published`) opens the copy after it was
        // made.
        self.published.store(e, Ordering::Release);
        self.prune();
    }

    /// The epoch of the newest copy published.
    pub(super) fn published(&self) -> u64 {
        // Acquire: pairs with `publish`.
        self.published.load(Ordering::Acquire)
    }

    /// The tags of written keys.
    pub(super) fn tags(&self) -> Tags<'_> {
        Tags(self.dirty.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Registers a new reader at the published epoch; `open` runs under the readers' lock (a
    /// store that keeps its copy beside the epoch takes it there: a copy published after the
    /// epoch was read is newer, which only keeps more tags), so no prune can forget tags the
    /// reader's copy lacks between the two. The reader is gone when its slot drops.
    pub(super) fn join<T>(&self, open: impl FnOnce() -> T) -> (ReaderSlot<'_>, T) {
        let mut r = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        let epoch = Arc::new(AtomicU64::new(self.published()));
        r.push(Arc::clone(&epoch));
        (ReaderSlot { epochs: self, epoch }, open())
    }

    /// Forgets tags every live reader's copy holds. The readers' lock is held across the whole
    /// decision (see `join`).
    fn prune(&self) {
        let readers = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        // Relaxed: a reader's slot only grows, and a stale (smaller) value prunes less.
        let oldest = readers.iter().map(|r| r.load(Ordering::Relaxed)).min();
        let oldest = oldest.unwrap_or_else(|| self.published());
        self.tags().0.retain(|_, e| *e >= oldest);
        drop(readers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_asks_for_keys_written_since_its_copy_until_every_reader_moved_past_them() {
        let ep = Epochs::default();
        let (slot, e) = ep.join(|| ep.published());
        assert_eq!(e, 1);
        ep.tagged(7, || Ok::<_, ()>(())).unwrap();
        assert!(ep.tags().since(7, e));
        let e2 = ep.bump();
        ep.publish(e2);
        // The reader still reads copy 1: key 7 stays tagged.
        assert!(ep.tags().since(7, e));
        assert!(!ep.tags().since(7, e2));
        slot.moved(e2);
        let e3 = ep.bump();
        ep.publish(e3);
        assert!(!ep.tags().since(7, 0), "pruned once every reader read a copy holding it");
        ep.tagged(8, || Ok::<_, ()>(())).unwrap();
        drop(slot);
        assert!(ep.tags().since(8, e3));
        let e4 = ep.bump();
        ep.publish(e4);
        assert!(!ep.tags().since(8, 0), "no reader left: pruned to the published copy");
        assert_eq!((ep.current(), ep.published()), (4, 4));
    }
}
