//! The cache table: a concurrent cuckoo hash mapping a request key to where its answer lives on
//! storage, `{key, version, file, offset, size}` (DDS's cache table).
//!
//! Shape: a power-of-two array of buckets, [`SLOTS_PER_BUCKET`] slots each; a key lives in one of
//! two buckets chosen by two independent hash functions. Writers (insert, remove) are serialised
//! by one mutex; readers take no lock and never write shared memory.
//!
//! **Concurrency argument** (also in docs/design/dds.md, "Cache table"):
//! - Every field of every slot is an `AtomicU64`, so no access is a data race in Rust's memory
//!   model and the table contains no `unsafe` code. Atomics alone do not make a 4-word item
//!   consistent; the per-bucket sequence number (a seqlock) does.
//! - A writer changes a bucket only inside `begin`/`end`: `seq` goes odd (relaxed store, then a
//!   release fence), the slot words are stored (relaxed), `seq` goes even again (release store).
//! - A reader loads `seq` (acquire), reads the slot words (relaxed), issues an acquire fence and
//!   loads `seq` again. If the two loads are equal and even, no write section overlapped the
//!   reads: had the reader seen any word stored inside a section, its acquire fence would
//!   synchronise with that section's release fence and its second load would see at least the
//!   odd value. A torn item is therefore never returned; a reader that keeps colliding with
//!   writers gives up after [`MAX_READ_RETRIES`] and reports a miss (DDS then forwards the
//!   request to the host, which is always correct).
//! - Displacement never leaves a resident key absent: the whole cuckoo path is found before
//!   anything moves, then items are *copied* from the end of the path backwards, each copy
//!   overwriting a slot whose item already has its new home. A key may briefly be in both of its
//!   buckets (both copies equal), never in neither. A lookup that misses in both buckets re-reads
//!   the first bucket's `seq`; if it moved, an item may have moved from the second bucket into
//!   the first under it, and the lookup starts again (bounded).
//! - A failed insert (no path within [`MAX_DISPLACEMENTS`] moves) leaves the table exactly as it
//!   was: the search is read-only, so there is nothing to roll back.

use crate::limits::{MAX_CAPACITY_ITEMS, MAX_DISPLACEMENTS, MAX_READ_RETRIES, MAX_SEARCH_SLOTS};
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

#[cfg(feature = "bench")]
pub mod bench;

/// Slots per bucket (DDS and libcuckoo use 4: two hash functions x 4 slots reach ~95% load).
pub const SLOTS_PER_BUCKET: usize = 4;
/// Occupancy the constructor sizes for: capacity / 0.9, rounded up to a power of two of buckets.
const SIZING_LOAD_PERCENT: usize = 90;

/// One cache entry: the answer to key `key` at `version` is `size` bytes at `offset` of `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Item {
    /// The request key (e.g. a page id).
    pub key: u64,
    /// Version of the data at that location (e.g. the page's LSN). Checked by
    /// [`CacheTable::get_at_least`] and by inserts (an older version never replaces a newer one).
    pub version: u64,
    /// File id in the file service's table.
    pub file: u32,
    /// Byte offset in that file.
    pub offset: u64,
    /// Bytes.
    pub size: u32,
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inserted {
    /// The key was new; `displaced` items moved to make room (0 = a free slot was at hand).
    New {
        /// Items moved along the cuckoo path.
        displaced: usize,
    },
    /// The key was present with a version <= the new one and now holds the new item.
    Replaced {
        /// The version it replaced.
        previous_version: u64,
    },
    /// The key is present with a newer version; the table is unchanged.
    Stale {
        /// The newer version kept.
        current_version: u64,
    },
}

/// What a versioned lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The key is cached at a version >= the one asked for.
    Hit(Item),
    /// The key is cached, but older than asked for.
    Stale(Item),
    /// Not cached (or a writer kept the buckets busy: see the module comment).
    Miss,
}

/// Cache-table errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// No free slot within [`MAX_DISPLACEMENTS`] moves; the table is unchanged.
    #[error("cache table full: no room for key {key} within {MAX_DISPLACEMENTS} displacements ({len} of {capacity} slots used)")]
    Full {
        /// The key that did not fit.
        key: u64,
        /// Items in the table.
        len: usize,
        /// Slots in the table.
        capacity: usize,
    },
    /// A capacity of 0 or above [`MAX_CAPACITY_ITEMS`].
    #[error("cache table capacity {0}: must be 1..={MAX_CAPACITY_ITEMS} items")]
    Capacity(usize),
}

/// A bucket: 144 bytes from a cache-line boundary (two buckets never share a line). Fields are
/// arrays by slot so `seq`, `occupied` and all four keys sit in the first line: a lookup that
/// misses reads one line per bucket. Slot i is meaningful only while bit i of `occupied` is set.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Bucket {
    /// Seqlock: odd while a writer is inside the bucket.
    seq: AtomicU64,
    /// Bit i set: slot i holds an item.
    occupied: AtomicU64,
    keys: [AtomicU64; SLOTS_PER_BUCKET],
    versions: [AtomicU64; SLOTS_PER_BUCKET],
    offsets: [AtomicU64; SLOTS_PER_BUCKET],
    /// `file << 32 | size`.
    file_sizes: [AtomicU64; SLOTS_PER_BUCKET],
}

impl Bucket {
    /// Slot `i`'s item (relaxed loads: a reader validates them with `seq`; the writer, being
    /// the only one storing, reads its own latest values).
    fn item(&self, i: usize) -> Item {
        let file_size = self.file_sizes[i].load(Ordering::Relaxed);
        Item {
            key: self.keys[i].load(Ordering::Relaxed),
            version: self.versions[i].load(Ordering::Relaxed),
            offset: self.offsets[i].load(Ordering::Relaxed),
            file: (file_size >> 32) as u32,
            size: file_size as u32,
        }
    }

    /// The occupied slot holding `key`, per the occupancy bits and keys loaded now (relaxed).
    fn slot_of(&self, key: u64) -> Option<usize> {
        let occupied = self.occupied.load(Ordering::Relaxed);
        (0..SLOTS_PER_BUCKET)
            .find(|&i| occupied & (1 << i) != 0 && self.keys[i].load(Ordering::Relaxed) == key)
    }
}

/// A node of the breadth-first cuckoo-path search: slot `slot` of `bucket`, reached from
/// `parent` (an index into the search queue, or `NO_PARENT` for the key's own buckets).
#[derive(Debug, Clone, Copy)]
struct SearchNode {
    bucket: u32,
    slot: u8,
    depth: u8,
    parent: u16,
}
const NO_PARENT: u16 = u16::MAX;
const _: () = assert!(MAX_SEARCH_SLOTS < NO_PARENT as usize);

/// State only the (single, mutex-held) writer touches: the preallocated search queue.
#[derive(Debug)]
struct Writer {
    queue: Vec<SearchNode>,
}

/// The concurrent cuckoo cache table. `Sync`: share it with `Arc`; lookups from any number of
/// threads run concurrently with one writer at a time.
#[derive(Debug)]
pub struct CacheTable {
    buckets: Box<[Bucket]>,
    mask: usize,
    len: AtomicUsize,
    writer: Mutex<Writer>,
}

/// Seeds of the two hash functions (arbitrary odd constants; they only need to differ).
const SEED_1: u64 = 0x9E37_79B9_7F4A_7C15;
const SEED_2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// SplitMix64's finaliser: a full-avalanche 64-bit mix.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn pack_file_size(file: u32, size: u32) -> u64 {
    (u64::from(file) << 32) | u64::from(size)
}

impl CacheTable {
    /// A table sized for `capacity_items` items at 90% load.
    ///
    /// # Errors
    /// [`TableError::Capacity`] for 0 or more than [`MAX_CAPACITY_ITEMS`].
    pub fn with_capacity(capacity_items: usize) -> Result<Self, TableError> {
        if capacity_items == 0 || capacity_items > MAX_CAPACITY_ITEMS {
            return Err(TableError::Capacity(capacity_items));
        }
        let slots = (capacity_items * 100).div_ceil(SIZING_LOAD_PERCENT);
        // At least two buckets, so a key's two buckets can always differ.
        let buckets = slots.div_ceil(SLOTS_PER_BUCKET).next_power_of_two().max(2);
        let buckets: Box<[Bucket]> = (0..buckets).map(|_| Bucket::default()).collect();
        Ok(Self {
            mask: buckets.len() - 1,
            buckets,
            len: AtomicUsize::new(0),
            writer: Mutex::new(Writer { queue: Vec::with_capacity(MAX_SEARCH_SLOTS) }),
        })
    }

    /// Slots in the table (buckets x [`SLOTS_PER_BUCKET`]).
    pub fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS_PER_BUCKET
    }

    /// Items in the table.
    pub fn len(&self) -> usize {
        // Relaxed: a statistic; it synchronises nothing.
        self.len.load(Ordering::Relaxed)
    }

    /// No items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key's two buckets (always different).
    fn buckets_of(&self, key: u64) -> (usize, usize) {
        let b1 = (mix(key ^ SEED_1) as usize) & self.mask;
        let mut b2 = (mix(key ^ SEED_2) as usize) & self.mask;
        if b2 == b1 {
            b2 = b1 ^ 1;
        }
        (b1, b2)
    }

    /// The other bucket of `key`, which lives in `bucket`.
    fn alt_bucket(&self, key: u64, bucket: usize) -> usize {
        let (b1, b2) = self.buckets_of(key);
        debug_assert!(bucket == b1 || bucket == b2, "key {key} found outside its buckets");
        if bucket == b1 {
            b2
        } else {
            b1
        }
    }

    // ---- readers -------------------------------------------------------------------------

    /// The item cached for `key`, if any. Never returns a torn item; may miss while a writer
    /// is working on the key's buckets (see the module comment).
    pub fn get(&self, key: u64) -> Option<Item> {
        let (b1, b2) = self.buckets_of(key);
        for _ in 0..MAX_READ_RETRIES {
            let (found, seq1) = self.read_bucket(b1, key)?;
            if found.is_some() {
                return found;
            }
            let (found, _) = self.read_bucket(b2, key)?;
            if found.is_some() {
                return found;
            }
            // Missed in both. If b1 changed since we read it, the item may have moved from b2
            // into b1 between our two reads; look again. Acquire: pairs with the writer's
            // release so that a b2 read that saw the item leave implies we see b1's new seq.
            if self.buckets[b1].seq.load(Ordering::Acquire) == seq1 {
                return None;
            }
        }
        None
    }

    /// [`get`](Self::get) with the version checked: a hit only at `version >= min_version`.
    pub fn get_at_least(&self, key: u64, min_version: u64) -> Lookup {
        match self.get(key) {
            Some(item) if item.version >= min_version => Lookup::Hit(item),
            Some(item) => Lookup::Stale(item),
            None => Lookup::Miss,
        }
    }

    /// One consistent read of bucket `b`: `Some((item for key or None, seq))`, or `None` when
    /// a writer kept changing the bucket for [`MAX_READ_RETRIES`] attempts.
    #[allow(clippy::option_option)] // inner: found or not; outer: consistent read or not
    fn read_bucket(&self, b: usize, key: u64) -> Option<(Option<Item>, u64)> {
        let bucket = &self.buckets[b];
        for _ in 0..MAX_READ_RETRIES {
            // Acquire: every slot word we read below is at least as new as the section that
            // ended with this seq value (pairs with `end`'s release store).
            let seq0 = bucket.seq.load(Ordering::Acquire);
            if seq0 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            // Relaxed loads: consistency is decided by the seq re-check, not by these.
            let found = bucket.slot_of(key).map(|i| bucket.item(i));
            // Acquire fence: if any load above saw a store made inside a write section, this
            // fence synchronises with that section's release fence (in `begin`), so the load
            // below sees the section's odd seq or later: the comparison fails.
            fence(Ordering::Acquire);
            // Relaxed: ordered after the data loads by the fence above.
            if bucket.seq.load(Ordering::Relaxed) == seq0 {
                return Some((found, seq0));
            }
        }
        None
    }

    // ---- writers -------------------------------------------------------------------------

    /// Inserts or replaces `item` (an older version never replaces a newer one: [`Inserted::Stale`]).
    ///
    /// # Errors
    /// [`TableError::Full`] when no cuckoo path of at most [`MAX_DISPLACEMENTS`] moves frees a
    /// slot; the table is unchanged.
    pub fn insert(&self, item: Item) -> Result<Inserted, TableError> {
        let mut writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (b1, b2) = self.buckets_of(item.key);
        for b in [b1, b2] {
            if let Some(slot) = self.find_slot(b, item.key) {
                let current = self.read_slot_as_writer(b, slot);
                if current.version > item.version {
                    return Ok(Inserted::Stale { current_version: current.version });
                }
                self.write_slot(b, slot, &item);
                return Ok(Inserted::Replaced { previous_version: current.version });
            }
        }
        for b in [b1, b2] {
            if let Some(slot) = self.free_slot(b) {
                self.write_slot(b, slot, &item);
                self.len.fetch_add(1, Ordering::Relaxed);
                return Ok(Inserted::New { displaced: 0 });
            }
        }
        let queue = &mut writer.queue;
        let Some(end) = self.search_path(queue, b1, b2) else {
            return Err(TableError::Full {
                key: item.key,
                len: self.len(),
                capacity: self.capacity(),
            });
        };
        let displaced = self.move_along(queue, end, &item);
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(Inserted::New { displaced })
    }

    /// Removes every item (a host application that re-attached starts over: its files and
    /// versions are not the previous host's). Each bucket is emptied in its own write section.
    pub fn clear(&self) {
        let _writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for b in 0..self.buckets.len() {
            // Relaxed: only the lock-holding writer changes `occupied`.
            if self.buckets[b].occupied.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let seq = self.begin(b);
            // Relaxed: inside the write section; `end` publishes it.
            let was = self.buckets[b].occupied.swap(0, Ordering::Relaxed);
            self.end(b, seq);
            self.len.fetch_sub(was.count_ones() as usize, Ordering::Relaxed);
        }
    }

    /// Removes `key`; returns the item it held.
    pub fn remove(&self, key: u64) -> Option<Item> {
        self.remove_if(key, |_| true)
    }

    /// Removes `key` only if its cached version is <= `max_version` (an invalidation that raced
    /// with a newer write must not drop the newer entry). Returns the removed item.
    pub fn remove_at_most(&self, key: u64, max_version: u64) -> Option<Item> {
        self.remove_if(key, |item| item.version <= max_version)
    }

    fn remove_if(&self, key: u64, remove: impl Fn(&Item) -> bool) -> Option<Item> {
        let _writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (b1, b2) = self.buckets_of(key);
        for b in [b1, b2] {
            if let Some(slot) = self.find_slot(b, key) {
                let item = self.read_slot_as_writer(b, slot);
                if !remove(&item) {
                    return None;
                }
                let seq = self.begin(b);
                // Relaxed: inside the write section; `end` publishes it.
                self.buckets[b].occupied.fetch_and(!(1 << slot), Ordering::Relaxed);
                self.end(b, seq);
                self.len.fetch_sub(1, Ordering::Relaxed);
                return Some(item);
            }
        }
        None
    }

    /// Opens a write section on bucket `b` (caller holds the writer lock). Returns the even seq.
    fn begin(&self, b: usize) -> u64 {
        let bucket = &self.buckets[b];
        // Relaxed: only the lock-holding writer stores seq, so this reads its own last store.
        let seq = bucket.seq.load(Ordering::Relaxed);
        debug_assert_eq!(seq & 1, 0, "bucket {b} left odd");
        // Relaxed store + release fence: the fence orders this odd value before every slot
        // store that follows, for any reader whose acquire fence sees one of those stores.
        bucket.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        seq
    }

    /// Closes the write section opened by [`begin`](Self::begin).
    fn end(&self, b: usize, seq: u64) {
        // Release: a reader that acquires this even value sees every slot store of the section.
        self.buckets[b].seq.store(seq + 2, Ordering::Release);
    }

    /// Writes `item` into slot `slot` of bucket `b` and marks it occupied, in one section.
    fn write_slot(&self, b: usize, slot: usize, item: &Item) {
        let seq = self.begin(b);
        let bucket = &self.buckets[b];
        // Relaxed: inside the write section (see `begin`/`end`).
        bucket.keys[slot].store(item.key, Ordering::Relaxed);
        bucket.versions[slot].store(item.version, Ordering::Relaxed);
        bucket.offsets[slot].store(item.offset, Ordering::Relaxed);
        bucket.file_sizes[slot].store(pack_file_size(item.file, item.size), Ordering::Relaxed);
        bucket.occupied.fetch_or(1 << slot, Ordering::Relaxed);
        self.end(b, seq);
    }

    /// The item in an occupied slot, read by the writer (no other writer exists, so plain
    /// relaxed loads see the latest values).
    fn read_slot_as_writer(&self, b: usize, slot: usize) -> Item {
        self.buckets[b].item(slot)
    }

    /// The slot of bucket `b` holding `key` (writer only).
    fn find_slot(&self, b: usize, key: u64) -> Option<usize> {
        self.buckets[b].slot_of(key)
    }

    /// A free slot of bucket `b` (writer only).
    fn free_slot(&self, b: usize) -> Option<usize> {
        let occupied = self.buckets[b].occupied.load(Ordering::Relaxed);
        (0..SLOTS_PER_BUCKET).find(|&i| occupied & (1 << i) == 0)
    }

    /// Breadth-first search for the shortest cuckoo path from the new key's buckets to a free
    /// slot. Returns the queue index of the path's last node (whose item's other bucket has a
    /// free slot). Read-only. The shortest path never visits a bucket twice (a repeat could be
    /// cut out for a shorter path), so moving along it is well defined.
    fn search_path(&self, queue: &mut Vec<SearchNode>, b1: usize, b2: usize) -> Option<usize> {
        queue.clear();
        for b in [b1, b2] {
            for slot in 0..SLOTS_PER_BUCKET {
                queue.push(SearchNode {
                    bucket: b as u32,
                    slot: slot as u8,
                    depth: 1,
                    parent: NO_PARENT,
                });
            }
        }
        let mut head = 0;
        while head < queue.len() {
            let node = queue[head];
            let resident =
                self.buckets[node.bucket as usize].keys[node.slot as usize].load(Ordering::Relaxed);
            let alt = self.alt_bucket(resident, node.bucket as usize);
            if self.free_slot(alt).is_some() {
                return Some(head);
            }
            if usize::from(node.depth) < MAX_DISPLACEMENTS {
                for slot in 0..SLOTS_PER_BUCKET {
                    if queue.len() == MAX_SEARCH_SLOTS {
                        break;
                    }
                    queue.push(SearchNode {
                        bucket: alt as u32,
                        slot: slot as u8,
                        depth: node.depth + 1,
                        parent: head as u16,
                    });
                }
            }
            head += 1;
        }
        None
    }

    /// Moves the items along the path ending at `queue[end]`, last first, then writes `item`
    /// into the path's first slot. Every step copies an item into a slot whose previous item
    /// already sits in its other bucket, so no resident key is ever absent. Returns the moves.
    fn move_along(&self, queue: &[SearchNode], end: usize, item: &Item) -> usize {
        let mut idx = end;
        let mut moves = 0;
        // The destination of the current move: the free slot in the last item's other bucket.
        let last = queue[end];
        let resident = self.read_slot_as_writer(last.bucket as usize, last.slot as usize);
        let alt = self.alt_bucket(resident.key, last.bucket as usize);
        let mut dest = (alt, self.free_slot(alt).expect("search_path found a free slot here"));
        loop {
            let node = queue[idx];
            let (b, slot) = (node.bucket as usize, node.slot as usize);
            let moving = self.read_slot_as_writer(b, slot);
            debug_assert_eq!(self.alt_bucket(moving.key, b), dest.0, "cuckoo path broken");
            self.write_slot(dest.0, dest.1, &moving);
            moves += 1;
            dest = (b, slot);
            if node.parent == NO_PARENT {
                break;
            }
            idx = usize::from(node.parent);
        }
        // `dest` is now a slot of one of the new key's own buckets, its item already moved.
        self.write_slot(dest.0, dest.1, item);
        moves
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: u64, version: u64) -> Item {
        Item { key, version, file: (key % 7) as u32, offset: key * 4096, size: 4096 }
    }

    #[test]
    fn bucket_is_cache_line_aligned_with_its_keys_in_the_first_line() {
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
        assert_eq!(std::mem::size_of::<Bucket>(), 192);
        // seq, occupied and the four keys share the first cache line.
        assert!(std::mem::offset_of!(Bucket, versions) <= 64);
    }

    #[test]
    fn version_is_checked_on_insert_lookup_and_remove() {
        let t = CacheTable::with_capacity(64).unwrap();
        assert_eq!(t.insert(item(5, 10)).unwrap(), Inserted::New { displaced: 0 });
        assert_eq!(t.insert(item(5, 9)).unwrap(), Inserted::Stale { current_version: 10 });
        assert_eq!(t.get_at_least(5, 10), Lookup::Hit(item(5, 10)));
        assert_eq!(t.get_at_least(5, 11), Lookup::Stale(item(5, 10)));
        assert_eq!(t.insert(item(5, 12)).unwrap(), Inserted::Replaced { previous_version: 10 });
        assert_eq!(t.remove_at_most(5, 11), None);
        assert_eq!(t.remove_at_most(5, 12), Some(item(5, 12)));
        assert_eq!(t.get_at_least(5, 0), Lookup::Miss);
        assert!(t.is_empty());
    }

    #[test]
    fn fills_past_90_percent_with_displacements_then_fails_cleanly() {
        let t = CacheTable::with_capacity(4096).unwrap();
        let cap = t.capacity();
        let mut displaced_total = 0;
        let mut key = 0;
        let full = loop {
            match t.insert(item(key, 1)) {
                Ok(Inserted::New { displaced }) => displaced_total += displaced,
                Ok(other) => panic!("fresh key {key}: {other:?}"),
                Err(e) => break e,
            }
            key += 1;
        };
        assert!(matches!(full, TableError::Full { key: k, .. } if k == key), "{full}");
        assert!(t.len() * 100 >= cap * 90, "only {} of {cap} slots before Full", t.len());
        assert!(displaced_total > 0, "a 90%-full cuckoo table never displaced anything");
        // The failed insert changed nothing: every key inserted before is still there.
        assert_eq!(t.len(), key as usize);
        for k in 0..key {
            assert_eq!(t.get(k), Some(item(k, 1)), "key {k} lost");
        }
        assert_eq!(t.get(key), None);
    }

    #[test]
    fn capacity_is_checked() {
        assert_eq!(CacheTable::with_capacity(0).unwrap_err(), TableError::Capacity(0));
        assert!(CacheTable::with_capacity(MAX_CAPACITY_ITEMS + 1).is_err());
    }
}
