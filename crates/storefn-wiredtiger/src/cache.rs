//! The application's cache of one tree's blocks, XRP's design for a B-tree: the application
//! keeps the upper levels and resolves them itself, so a lookup costs one leaf hop; the leaves
//! it holds are searched by the storage function in place, without any read.
//!
//! - Internal pages are kept parsed (every key rebuilt, every child address decoded) and
//!   searched by binary search on the host.
//! - Leaf blocks are kept whole, each in a fixed [`HOP_BYTES`] slot (the function's whole view,
//!   so its proofs hold and it runs on the JIT), replaced by CLOCK behind TinyLFU's admission
//!   ([`FrequencySketch`]): a missed leaf takes CLOCK's victim's slot only when it was asked
//!   for more often lately. YCSB's zipfian keys are scattered over the leaves, so most missed
//!   leaves hold no hot key and are never asked for again; admitting each would copy it and
//!   evict one that is. A leaf not admitted is read and searched in the chain's own buffer.
//!
//! Entries are keyed by the address that names a block (offset, size, checksum), and a lookup
//! hits only on the exact address its parent named: a block a newer checkpoint rewrote lives
//! at another address, and a block WiredTiger wrote over a freed one carries another checksum,
//! so the cache outlives checkpoints without ever answering for bytes its checkpoint does not
//! hold. Memory is the slots (fixed at creation) plus the parsed internal pages (bounded).

use crate::format::{BlockAddr, BlockHeader, Cell, CellKind, Malformed, PageHeader, PageType};
use crate::format::{PAGE_COMPRESSED, PAGE_ENCRYPTED, PAGE_PREFIX_BYTES};
use crate::limits::MAX_DEPTH;
use crate::page::{child_of, Child, Fallback};
use crate::xrp::HOP_BYTES;
use std::collections::HashMap;
use storefn_io::FrequencySketch;

/// A slot's bytes: the longest block one hop reads.
const SLOT_BYTES: usize = HOP_BYTES as usize;

/// Share of a cache's bytes its parsed internal pages may take (1/16): a tree of 4 KiB internal
/// pages over 32 KiB leaves has ~1 internal page per 100 leaves, so this is never reached by a
/// healthy tree; past it the parsed pages are dropped and read again.
const INTERNAL_SHARE: usize = 16;

/// Where a lookup goes after the cached internal pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The leaf named by this address holds the key if any tree does.
    Leaf(BlockAddr),
    /// This block is not cached (an internal page not read yet, or a root that may be a leaf):
    /// a chain starts here.
    Chain(BlockAddr),
    NotFound,
    Fallback(Fallback),
}

/// How a tree's cache has been used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups whose leaf was in a slot (no read).
    pub leaf_hits: u64,
    /// Lookups whose leaf had to be read.
    pub leaf_misses: u64,
    /// Internal pages parsed into the cache.
    pub internal_parsed: u64,
    /// Times the parsed internal pages outgrew their share and were dropped.
    pub internal_drops: u64,
    /// Chains that found every slot lent (their leaf was not kept).
    pub pins_refused: u64,
    /// Missed leaves not admitted: asked for no more often lately than CLOCK's victim.
    pub leaf_rejected: u64,
}

/// One internal page, parsed: entry i's key is `keys[ends[i-1]..ends[i]]`.
#[derive(Debug)]
struct Internal {
    addr: BlockAddr,
    keys: Box<[u8]>,
    ends: Box<[u32]>,
    children: Box<[Child]>,
}

impl Internal {
    fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.keys.len()
            + self.ends.len() * 4
            + self.children.len() * std::mem::size_of::<Child>()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.keys[start..self.ends[i] as usize]
    }

    /// The child whose range holds `search`: the last entry whose key is at most `search` (the
    /// first entry's key sorts below every key), as [`crate::search_internal`] finds it.
    fn search(&self, search: &[u8]) -> Child {
        let n = self.children.len();
        // Entries 1..n whose key is at most `search` form a prefix (keys are in order).
        let (mut lo, mut hi) = (1, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid) <= search {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.children[lo - 1]
    }

    /// Parses a row-store internal page whose block was checked against `addr`; `None` for a
    /// page this cache does not hold parsed (compressed, encrypted, an overflow key past the
    /// first, a cell it does not read): lookups through it go to the function.
    fn parse(page: &[u8], addr: BlockAddr, alloc: u64) -> Result<Option<Self>, Malformed> {
        let hdr = PageHeader::parse(page)?;
        if hdr.page_type != PageType::RowInternal
            || hdr.flags & (PAGE_COMPRESSED | PAGE_ENCRYPTED) != 0
        {
            return Ok(None);
        }
        let mem = hdr.mem_size as usize;
        if mem < PAGE_PREFIX_BYTES || mem > page.len() {
            return Err(Malformed::new(16, format!("page mem_size {mem} outside the block")));
        }
        let page = &page[..mem];
        let pairs = hdr.entries as usize / 2;
        if !hdr.entries.is_multiple_of(2) || pairs == 0 {
            return Err(Malformed::new(20, format!("internal page with {} cells", hdr.entries)));
        }
        let (mut keys, mut ends, mut children) =
            (Vec::new(), Vec::with_capacity(pairs), Vec::with_capacity(pairs));
        // The previous key's bytes inside `keys`: a key's prefix is shared with it.
        let mut prev = 0..0;
        let mut at = PAGE_PREFIX_BYTES;
        for i in 0..pairs {
            let k = Cell::parse(page, at)?;
            let start = keys.len();
            match k.kind {
                CellKind::Key { prefix, data } => {
                    let p = usize::from(prefix);
                    if p > prev.len() {
                        return Err(Malformed::new(
                            at,
                            format!("key prefix {p} longer than the previous key ({})", prev.len()),
                        ));
                    }
                    keys.extend_from_within(prev.start..prev.start + p);
                    keys.extend_from_slice(&page[data]);
                }
                // The first key is never compared: it stands for everything below the second.
                CellKind::KeyOverflow if i == 0 => {}
                _ => return Ok(None),
            }
            prev = start..keys.len();
            ends.push(u32::try_from(keys.len()).map_err(|_| Malformed::new(at, "keys too long"))?);
            let a = Cell::parse(page, k.end)?;
            children.push(child_of(page, k.end, a.kind, alloc)?);
            at = a.end;
        }
        Ok(Some(Internal { addr, keys: keys.into(), ends: ends.into(), children: children.into() }))
    }
}

/// The children of the internal page `block` read at `offset` (its checksum already checked);
/// `None` for a page [`TreeCache`] would not keep parsed.
///
/// # Errors
/// Damage in the page.
#[cfg(feature = "bench")]
pub(crate) fn internal_children(
    block: &[u8],
    offset: u64,
    alloc: u64,
) -> Result<Option<Box<[Child]>>, Malformed> {
    let hdr = BlockHeader::parse(block)?;
    let addr = BlockAddr { offset, size: block.len() as u64, checksum: hdr.checksum };
    Ok(Internal::parse(block, addr, alloc)?.map(|p| p.children))
}

/// A leaf slot's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    /// Lent to a chain in flight: never evicted, not found by lookups.
    Pinned,
    /// Holds the leaf at this address.
    Ready(BlockAddr),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    /// CLOCK's second chance.
    referenced: bool,
}

/// A leaf slot lent to one chain ([`TreeCache::pin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin(u32);

/// The cache of one tree file's blocks (see the module's documentation).
pub struct TreeCache {
    alloc: u64,
    internals: HashMap<u64, Internal>,
    internal_bytes: usize,
    internal_cap: usize,
    arena: Vec<u8>,
    slots: Vec<Slot>,
    /// Offset -> the slot holding the leaf read there.
    leaves: HashMap<u64, u32>,
    hand: usize,
    /// Recent uses of leaves, by offset: who is admitted.
    sketch: FrequencySketch,
    pub stats: CacheStats,
}

impl std::fmt::Debug for TreeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeCache")
            .field("slots", &self.slots.len())
            .field("internals", &self.internals.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl TreeCache {
    /// A cache of about `bytes` for a tree whose allocation unit is `alloc`: leaf slots of
    /// [`HOP_BYTES`] in all but the internal pages' share. The slots' memory is reserved here
    /// and touched as leaves arrive.
    #[must_use]
    pub fn new(bytes: u64, alloc: u64) -> Self {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        let internal_cap = bytes / INTERNAL_SHARE;
        let n = (bytes - internal_cap) / SLOT_BYTES;
        TreeCache {
            alloc,
            internals: HashMap::new(),
            internal_bytes: 0,
            internal_cap,
            arena: vec![0; n * SLOT_BYTES],
            slots: vec![Slot { state: SlotState::Free, referenced: false }; n],
            leaves: HashMap::with_capacity(n),
            hand: 0,
            sketch: FrequencySketch::new(n),
            stats: CacheStats::default(),
        }
    }

    /// A cache of internal pages only (up to `bytes` parsed), no leaf slots: a remote reader's,
    /// whose leaves are read where the data is.
    #[must_use]
    pub fn internal_only(bytes: u64, alloc: u64) -> Self {
        let mut c = Self::new(0, alloc);
        c.internal_cap = usize::try_from(bytes).unwrap_or(usize::MAX);
        c
    }

    /// Leaf slots.
    #[must_use]
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Follows the cached internal pages from `root` towards `key` (as stored).
    ///
    /// # Errors
    /// A child address outside the checkpoint's `file_size` bytes, or a walk deeper than
    /// [`MAX_DEPTH`] (a cycle): damage at that address.
    pub fn route(
        &self,
        root: BlockAddr,
        key: &[u8],
        file_size: u64,
    ) -> Result<Route, (u64, String)> {
        let mut addr = root;
        for _ in 0..MAX_DEPTH {
            let Some(page) = self.internals.get(&addr.offset).filter(|p| p.addr == addr) else {
                return Ok(Route::Chain(addr));
            };
            let found = page.search(key);
            let next = match found {
                Child::Internal(a) | Child::Leaf(a) => a,
                Child::Empty => return Ok(Route::NotFound),
                Child::Fallback(f) => return Ok(Route::Fallback(f)),
            };
            if next.offset.checked_add(next.size).is_none_or(|e| e > file_size) {
                return Err((
                    addr.offset,
                    format!(
                        "child block of {} bytes at {} lies outside the checkpoint's {file_size} \
                         bytes",
                        next.size, next.offset
                    ),
                ));
            }
            if let Child::Leaf(a) = found {
                return Ok(Route::Leaf(a));
            }
            addr = next;
        }
        Err((addr.offset, format!("tree deeper than {MAX_DEPTH} levels (a cycle?)")))
    }

    /// The whole slot (a [`HOP_BYTES`] view) holding the leaf at exactly `addr`.
    pub fn leaf(&mut self, addr: BlockAddr) -> Option<&[u8]> {
        let &i = self.leaves.get(&addr.offset)?;
        let slot = &mut self.slots[i as usize];
        if slot.state != SlotState::Ready(addr) {
            return None;
        }
        slot.referenced = true;
        let at = i as usize * SLOT_BYTES;
        Some(&self.arena[at..at + SLOT_BYTES])
    }

    /// Counts a lookup of the leaf at `addr`, which was (`true`) or was not in a slot.
    pub fn count(&mut self, addr: BlockAddr, hit: bool) {
        self.sketch.record(addr.offset);
        if hit {
            self.stats.leaf_hits += 1;
        } else {
            self.stats.leaf_misses += 1;
        }
    }

    /// Lends a slot to a chain whose first block is not a known leaf (CLOCK picks it, no
    /// admission: which leaf the chain reaches is not known yet); `None` when every slot is lent.
    pub fn pin(&mut self) -> Option<Pin> {
        let i = self.victim()?;
        Some(self.take(i))
    }

    /// Lends a slot to the chain that reads the leaf at `addr` (counted by [`Self::count`]):
    /// CLOCK's victim's, if the leaf was asked for more often lately than the victim (a free
    /// slot admits any leaf); `None` otherwise, or when every slot is lent.
    pub fn pin_leaf(&mut self, addr: BlockAddr) -> Option<Pin> {
        let i = self.victim()?;
        if let SlotState::Ready(v) = self.slots[i].state {
            if !self.sketch.admits(addr.offset, v.offset) {
                // The hand stays: the victim is the next miss's to beat.
                self.stats.leaf_rejected += 1;
                return None;
            }
        }
        Some(self.take(i))
    }

    /// The slot CLOCK evicts next (free, or ready without a second chance), the hand left on
    /// it; `None` when every slot is lent.
    fn victim(&mut self) -> Option<usize> {
        let n = self.slots.len();
        // Two sweeps clear every second chance; a third finds nothing only when all are lent.
        for _ in 0..3 * n {
            let s = &mut self.slots[self.hand];
            match s.state {
                SlotState::Pinned => {}
                SlotState::Ready(_) if s.referenced => s.referenced = false,
                SlotState::Ready(_) | SlotState::Free => return Some(self.hand),
            }
            self.hand = (self.hand + 1) % n;
        }
        self.stats.pins_refused += 1;
        None
    }

    /// Evicts slot `i`'s leaf and lends the slot; the hand moves past it.
    fn take(&mut self, i: usize) -> Pin {
        if let SlotState::Ready(a) = self.slots[i].state {
            if self.leaves.get(&a.offset) == Some(&(i as u32)) {
                self.leaves.remove(&a.offset);
            }
        }
        self.slots[i].state = SlotState::Pinned;
        self.hand = (i + 1) % self.slots.len();
        Pin(i as u32)
    }

    /// Copies a leaf block (at most [`HOP_BYTES`]) into a lent slot.
    pub fn fill(&mut self, pin: Pin, block: &[u8]) {
        let at = pin.0 as usize * SLOT_BYTES;
        let n = block.len().min(SLOT_BYTES);
        self.arena[at..at + n].copy_from_slice(&block[..n]);
    }

    /// The whole of a lent slot.
    #[must_use]
    pub fn pinned(&self, pin: Pin) -> &[u8] {
        let at = pin.0 as usize * SLOT_BYTES;
        &self.arena[at..at + SLOT_BYTES]
    }

    /// Keeps a lent slot, filled with the leaf at `addr` (checked against it), for lookups.
    pub fn commit(&mut self, pin: Pin, addr: BlockAddr) {
        self.slots[pin.0 as usize] = Slot { state: SlotState::Ready(addr), referenced: true };
        if let Some(old) = self.leaves.insert(addr.offset, pin.0) {
            if old != pin.0 {
                // The same leaf read twice at once: keep the newer copy.
                self.slots[old as usize].state = SlotState::Free;
            }
        }
    }

    /// Returns a lent slot unused.
    pub fn release(&mut self, pin: Pin) {
        self.slots[pin.0 as usize].state = SlotState::Free;
    }

    /// Keeps the internal page `block` (read at `offset`, its checksum already checked) parsed.
    ///
    /// # Errors
    /// Damage in the page, named at its byte offset inside the block.
    pub fn put_internal(&mut self, offset: u64, block: &[u8]) -> Result<(), Malformed> {
        let hdr = BlockHeader::parse(block)?;
        let addr = BlockAddr { offset, size: block.len() as u64, checksum: hdr.checksum };
        if self.internals.get(&offset).is_some_and(|p| p.addr == addr) {
            return Ok(()); // chains in flight together read the same page
        }
        let Some(page) = Internal::parse(block, addr, self.alloc)? else { return Ok(()) };
        if self.internal_bytes + page.bytes() > self.internal_cap {
            self.internals.clear();
            self.internal_bytes = 0;
            self.stats.internal_drops += 1;
        }
        self.internal_bytes += page.bytes();
        self.stats.internal_parsed += 1;
        if let Some(old) = self.internals.insert(offset, page) {
            self.internal_bytes -= old.bytes();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{TreeCache, SLOT_BYTES};
    use crate::format::BlockAddr;

    fn addr(i: u64) -> BlockAddr {
        BlockAddr { offset: 4096 * (i + 1), size: 28 << 10, checksum: i as u32 ^ 0x5a5a }
    }

    /// A lookup of leaf `i` as the chains make it: a hit, or a miss that keeps the leaf when
    /// it is admitted. Whether it hit.
    fn lookup(c: &mut TreeCache, i: u64) -> bool {
        let a = addr(i);
        if c.leaf(a).is_some() {
            c.count(a, true);
            return true;
        }
        c.count(a, false);
        if let Some(p) = c.pin_leaf(a) {
            c.fill(p, &i.to_le_bytes());
            c.commit(p, a);
        }
        false
    }

    #[test]
    fn a_frequently_used_leaf_survives_a_scan_of_cold_ones() {
        let mut c = TreeCache::new(64 * SLOT_BYTES as u64, 4096);
        let hot: Vec<u64> = (0..8).collect();
        for _ in 0..4 {
            for &h in &hot {
                lookup(&mut c, h);
            }
        }
        // A scan of many more cold leaves than slots, each asked for once.
        for i in 1000..1000 + 10 * c.slots() as u64 {
            lookup(&mut c, i);
        }
        for &h in &hot {
            assert!(c.leaf(addr(h)).is_some(), "hot leaf {h} evicted by the scan");
        }
        assert!(c.stats.leaf_rejected > 0);
    }

    #[test]
    fn the_cache_stays_within_its_slots() {
        let bytes = 40 * SLOT_BYTES as u64;
        let mut c = TreeCache::new(bytes, 4096);
        assert!(c.arena.len() as u64 <= bytes && c.slots() > 0);
        // Leaves asked for twice each, so that every one beats a colder victim.
        for i in 0..20 * c.slots() as u64 {
            lookup(&mut c, i / 2);
        }
        let ready = c.slots.iter().filter(|s| matches!(s.state, super::SlotState::Ready(_)));
        assert_eq!(ready.count(), c.slots(), "every slot in use");
        assert!(c.leaves.len() <= c.slots());
        assert_eq!(c.arena.len(), c.slots() * SLOT_BYTES, "the arena never grows");
    }

    #[test]
    fn never_answers_for_a_replaced_block() {
        let mut c = TreeCache::new(4 * SLOT_BYTES as u64, 4096);
        let a = addr(1);
        lookup(&mut c, 1);
        assert_eq!(&c.leaf(a).expect("kept")[..8], &1u64.to_le_bytes());
        // The same offset rewritten by a later checkpoint: another checksum, another block.
        let rewritten = BlockAddr { checksum: a.checksum ^ 1, ..a };
        assert!(c.leaf(rewritten).is_none());
        // Evicted for others (asked for more often): the slot answers for them only.
        for _ in 0..3 {
            for i in 10..10 + c.slots() as u64 + 1 {
                lookup(&mut c, i);
            }
        }
        assert!(c.leaf(a).is_none(), "an evicted leaf answered");
        for (i, s) in c.slots.iter().enumerate() {
            if let super::SlotState::Ready(b) = s.state {
                let at = i * SLOT_BYTES;
                let k = u64::from_le_bytes(c.arena[at..at + 8].try_into().unwrap());
                assert_eq!(addr(k), b, "slot {i} holds another leaf's bytes");
            }
        }
    }
}
