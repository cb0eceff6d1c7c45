//! Lookup paths: every way of resolving a key, behind one trait so the CLI, the bench and the
//! tests treat them alike. All paths drive the same [`Step`] machine of [`Store`], so they return
//! the same bytes by construction; tests check it anyway.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Instant;

use storefn_io::{DigestError, RawAccess, RetryGate};

use crate::aligned::AlignedBuf;
use crate::format::VALUE_BYTES;
use crate::store::{Step, Store};
use crate::KvError;

/// Counters every path keeps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PathStats {
    pub lookups: u64,
    /// Block reads issued to the file (cache hits excluded).
    pub ios: u64,
    /// Chains that failed and were redone on the `read` path.
    pub fallbacks: u64,
    pub cache_hits: u64,
    /// Of `ios`, reads that went to the block device in raw mode (`--io raw`).
    pub device_ios: u64,
}

impl PathStats {
    /// The counts added since `before` (an earlier snapshot of the same path).
    #[must_use]
    pub fn since(&self, before: &PathStats) -> PathStats {
        PathStats {
            lookups: self.lookups - before.lookups,
            ios: self.ios - before.ios,
            fallbacks: self.fallbacks - before.fallbacks,
            cache_hits: self.cache_hits - before.cache_hits,
            device_ios: self.device_ios - before.device_ios,
        }
    }
}

/// Nanoseconds elapsed since `t0`, saturating.
#[must_use]
pub fn nanos_since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One lookup's outcome within a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    pub value: Option<[u8; VALUE_BYTES]>,
    /// Nanoseconds from this lookup's submission to its completion.
    pub latency_ns: u64,
}

/// A way of looking keys up. One instance per thread, built on that thread (io_uring engines
/// are not `Send`); all share the [`Store`].
pub trait LookupPath {
    /// The `--path` name.
    fn name(&self) -> &'static str;
    /// Looks one key up.
    ///
    /// # Errors
    /// I/O errors and corrupt nodes.
    fn get(&mut self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError>;
    /// Looks many keys up; paths with many chains in flight override this.
    ///
    /// # Errors
    /// As [`LookupPath::get`].
    fn get_many(&mut self, keys: &[u64], out: &mut Vec<Lookup>) -> Result<(), KvError> {
        for &k in keys {
            let t0 = Instant::now();
            let value = self.get(k)?;
            out.push(Lookup { value, latency_ns: nanos_since(t0) });
        }
        Ok(())
    }
    fn stats(&self) -> PathStats;
}

/// An LRU cache of blocks keyed by file offset, bounded in bytes.
#[derive(Debug)]
pub struct BlockLru {
    capacity_blocks: usize,
    map: HashMap<u64, (Box<[u8]>, u64)>,
    order: BTreeMap<u64, u64>,
    clock: u64,
}

impl BlockLru {
    /// A cache holding at most `bytes / block_bytes` blocks (0 disables it).
    #[must_use]
    pub fn new(bytes: u64, block_bytes: usize) -> Self {
        Self {
            capacity_blocks: usize::try_from(bytes / block_bytes as u64).unwrap_or(usize::MAX),
            map: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }

    /// Copies the block at `offset` into `out` if cached, refreshing it.
    pub fn get(&mut self, offset: u64, out: &mut [u8]) -> bool {
        let Some((data, stamp)) = self.map.get_mut(&offset) else { return false };
        out.copy_from_slice(data);
        self.order.remove(stamp);
        self.clock += 1;
        *stamp = self.clock;
        self.order.insert(self.clock, offset);
        true
    }

    /// Forgets every block (their source turned out stale).
    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }

    /// Inserts a block, evicting the least recently used beyond capacity.
    pub fn put(&mut self, offset: u64, data: &[u8]) {
        if self.capacity_blocks == 0 || self.map.contains_key(&offset) {
            return;
        }
        self.put_owned(offset, data.into());
    }

    /// [`BlockLru::put`] of a block the caller already owns (no copy).
    pub fn put_owned(&mut self, offset: u64, data: Box<[u8]>) {
        if self.capacity_blocks == 0 || self.map.contains_key(&offset) {
            return;
        }
        while self.map.len() >= self.capacity_blocks {
            let (_, victim) = self.order.pop_first().expect("non-empty when full");
            self.map.remove(&victim);
        }
        self.clock += 1;
        self.map.insert(offset, (data, self.clock));
        self.order.insert(self.clock, offset);
        debug_assert_eq!(self.map.len(), self.order.len());
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// XRP's `read()` baseline: one pread (O_DIRECT) per level, then one for the value. With
/// `--io raw` the same preads go to the block device through the metadata digest: the
/// user-space bound on what skipping the file system saves, one syscall per hop.
#[derive(Debug)]
pub struct ReadPath {
    store: Arc<Store>,
    buf: AlignedBuf,
    lru: Option<BlockLru>,
    stats: PathStats,
    raw: Option<RawRead>,
}

/// Raw mode on the `read` path: this path's own file description (the lease belongs to it,
/// not to the store's shared file), the digest and device, and an aligned device window.
#[derive(Debug)]
struct RawRead {
    file: std::fs::File,
    access: Option<RawAccess>,
    window: AlignedBuf,
    /// Set on suspicion during a lookup: the rest of it reads the file, then it is redone.
    suspect: bool,
    /// Spaces [`ReadPath::retry_raw`]'s attempts.
    retry: RetryGate,
}

impl ReadPath {
    /// `cache_bytes` > 0 adds an LRU block cache of that many bytes.
    #[must_use]
    pub fn new(store: Arc<Store>, cache_bytes: u64) -> Self {
        let nb = store.node_size().bytes();
        let lru = (cache_bytes > 0).then(|| BlockLru::new(cache_bytes, nb));
        Self { store, buf: AlignedBuf::new(nb), lru, stats: PathStats::default(), raw: None }
    }

    /// `--io raw`: reads go to the block device through the metadata digest. When raw mode
    /// cannot be set up (no device access, unsafe extents, a writer holding the file) it says
    /// why on stderr and keeps the file path, as the engine paths do.
    ///
    /// # Errors
    /// `Io` when the path's own descriptor of the file cannot be opened.
    pub fn with_io(mut self, raw: bool) -> Result<Self, KvError> {
        let path = self.store.path();
        if !raw {
            return Ok(self);
        }
        if !self.store.is_direct() {
            eprintln!("--io raw: {} is not O_DIRECT; using the file path", path.display());
            return Ok(self);
        }
        let file = std::fs::File::open(path).map_err(|e| KvError::io(path, "open", e))?;
        match RawAccess::open(&file) {
            Ok(access) => {
                let bytes = access.window_capacity(self.store.node_size().bytes() as u64);
                let window = AlignedBuf::new(usize::try_from(bytes).expect("small window"));
                self.raw = Some(RawRead {
                    file,
                    access: Some(access),
                    window,
                    suspect: false,
                    retry: RetryGate::default(),
                });
            }
            Err(e) => eprintln!(
                "--io raw: {}: raw mode unavailable: {e}; using the file path",
                path.display()
            ),
        }
        Ok(self)
    }

    /// Reads the node-size block at `offset` from the device into `buf`; `false` when this hop
    /// must read the file instead (a range across two extents, or a digest under suspicion).
    fn read_device(&mut self, offset: u64) -> Result<bool, KvError> {
        let Some(raw) = self.raw.as_mut().filter(|r| !r.suspect) else { return Ok(false) };
        let Some(access) = raw.access.as_ref() else { return Ok(false) };
        let len = self.buf.len();
        let w = match access.translate(offset, len as u64) {
            Ok(w) => w,
            Err(DigestError::SpansExtents { .. }) => return Ok(false),
            Err(_) => {
                // The store checked this offset against the file's shape, so a digest that
                // does not cover it no longer describes the file.
                raw.suspect = true;
                return Ok(false);
            }
        };
        let span = usize::try_from(w.len).expect("window fits the buffer");
        let win = &mut raw.window[..span];
        access.device().file().read_exact_at(win, w.dev_offset).map_err(|e| {
            KvError::io(
                self.store.path(),
                "pread (raw device)",
                std::io::Error::new(e.kind(), format!("file offset {offset}: {e}")),
            )
        })?;
        let skip = usize::try_from(w.skip).expect("inside the window");
        self.buf.copy_from_slice(&win[skip..skip + len]);
        self.stats.device_ios += 1;
        Ok(true)
    }

    /// After a raw-mode lookup: the lease is intact and the file unchanged, or the lookup's
    /// data is discarded and it is redone on the file (a fallback), then raw mode is set up
    /// again. A lookup that failed (e.g. a node that looked corrupt) is judged the same way:
    /// stale device data must not surface as a corruption error either.
    fn raw_lookup(&mut self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        let got = walk_blocks(self, key);
        let raw = self.raw.as_mut().expect("raw lookups only in raw mode");
        let stale =
            raw.suspect || raw.access.as_ref().is_some_and(|a| a.check_after_chain().is_err());
        if !stale {
            return got;
        }
        raw.suspect = true;
        let again = redo_after_stale(self, key);
        let raw = self.raw.as_mut().expect("still raw");
        raw.suspect = false;
        raw.access = None; // drops the old lease before a new one is taken
        if let Some(Err(e)) = self.retry_raw() {
            eprintln!("--io raw: refresh failed, using the file path until it succeeds: {e}");
        }
        again
    }

    /// Sets raw mode up again when it is off (a check failed, or the last attempt found a
    /// writer holding the file), at most once per `RAW_RETRY_INTERVAL`. `None` when nothing
    /// was due.
    fn retry_raw(&mut self) -> Option<Result<(), DigestError>> {
        let raw = self.raw.as_mut().filter(|r| r.access.is_none())?;
        if !raw.retry.try_now() {
            return None;
        }
        Some(RawAccess::open(&raw.file).map(|a| raw.access = Some(a)))
    }

    /// Counts a fallback taken by a path built on this one.
    pub fn count_fallback(&mut self) {
        self.stats.fallbacks += 1;
    }
}

/// A path that reads the tree one block per hop itself (`read`, `uring`): the walk is the same,
/// only how a block arrives in the buffer differs.
pub(crate) trait BlockFetch {
    fn store(&self) -> &Store;
    fn block(&self) -> &[u8];
    /// The block cache (if any), the block buffer and the counters, borrowed together.
    fn cache_parts(&mut self) -> (Option<&mut BlockLru>, &mut [u8], &mut PathStats);
    /// Reads the block at `offset` from storage into the buffer (a cache miss), counting it.
    fn read_uncached(&mut self, offset: u64) -> Result<(), KvError>;

    /// Leaves the block at `offset` in [`BlockFetch::block`], from the cache when it has it.
    fn fetch_block(&mut self, offset: u64) -> Result<(), KvError> {
        if let (Some(lru), buf, stats) = self.cache_parts() {
            if lru.get(offset, buf) {
                stats.cache_hits += 1;
                return Ok(());
            }
        }
        self.read_uncached(offset)?;
        if let (Some(lru), buf, _) = self.cache_parts() {
            lru.put(offset, buf);
        }
        Ok(())
    }
}

/// Redoes a lookup whose device reads turned out stale (the caller has already switched reads
/// to the file): counts the fallback and forgets the cached blocks first, since the lookup may
/// have cached some of the suspect ones.
pub(crate) fn redo_after_stale<P: BlockFetch>(
    path: &mut P,
    key: u64,
) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
    let (lru, _, stats) = path.cache_parts();
    stats.fallbacks += 1;
    if let Some(lru) = lru {
        lru.clear();
    }
    walk_blocks(path, key)
}

/// One lookup by reading block after block from the root.
pub(crate) fn walk_blocks<P: BlockFetch>(
    path: &mut P,
    key: u64,
) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
    let mut step = path.store().start(key)?;
    // Each hop descends a level, and on_node rejects levels past the leaves: this loop
    // ends after at most layers + 1 reads.
    loop {
        step = match step {
            Step::Node { offset, level } => {
                path.fetch_block(offset)?;
                path.store().on_node(key, offset, level, path.block())?
            }
            Step::Value { offset } => {
                let (block, _) = path.store().value_block(offset);
                path.fetch_block(block)?;
                return Ok(Some(path.store().value_from_block(offset, path.block())));
            }
            Step::Done(v) => return Ok(v),
        };
    }
}

impl BlockFetch for ReadPath {
    fn store(&self) -> &Store {
        &self.store
    }

    fn cache_parts(&mut self) -> (Option<&mut BlockLru>, &mut [u8], &mut PathStats) {
        (self.lru.as_mut(), &mut self.buf, &mut self.stats)
    }

    fn read_uncached(&mut self, offset: u64) -> Result<(), KvError> {
        if !self.read_device(offset)? {
            self.store.read_block(&mut self.buf, offset)?;
        }
        self.stats.ios += 1;
        Ok(())
    }

    fn block(&self) -> &[u8] {
        &self.buf
    }
}

impl LookupPath for ReadPath {
    fn name(&self) -> &'static str {
        "read"
    }

    fn get(&mut self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        self.stats.lookups += 1;
        // Quiet: the failure that dropped raw mode was reported already.
        let _ = self.retry_raw();
        if self.raw.as_ref().is_some_and(|r| r.access.is_some()) {
            return self.raw_lookup(key);
        }
        walk_blocks(self, key)
    }

    fn stats(&self) -> PathStats {
        self.stats
    }
}
