//! The lookup paths over the storefn-io engine: `uring` (one io_uring read per hop), `xrp`
//! (one storage-function chain per lookup, synchronous), `xrp-batch` (many chains in flight,
//! [`XrpPath`] in `xrp.rs`). Chains that fail (fault, hop limit, I/O error, or our program's
//! failure flag) are redone on the `read` path and counted as fallbacks.

mod xrp;

pub use crate::program::ProgSource;
pub use xrp::{ChainOptions, XrpPath};

use std::sync::Arc;

use storefn_io::{ChainError, ChainStats, Engine, EngineConfig, EngineError, FileId, IoMode};
use storefn_vm::Instance;

use crate::format::{LOOKUP_OFF_STATE, VALUE_BYTES};
use crate::limits::MAX_BATCH;
use crate::path::{redo_after_stale, walk_blocks, BlockFetch, BlockLru, LookupPath, PathStats};
use crate::store::Store;
use crate::KvError;

/// Byte offset of our built-in programs' `err` word in the lookup scratch (docs/FORMAT.md).
pub const LOOKUP_OFF_ERR: usize = LOOKUP_OFF_STATE + 24;

pub(crate) fn engine_for(
    store: &Store,
    chains: usize,
    max_hops: Option<u32>,
) -> Result<(Engine, FileId), KvError> {
    let n = chains.clamp(1, MAX_BATCH);
    let d = EngineConfig::default();
    let cfg = EngineConfig {
        ring_depth: u32::try_from(n.next_power_of_two().max(8)).expect("small"),
        buffers: n,
        chains: n,
        max_hops: max_hops.unwrap_or(d.max_hops),
        ..d
    };
    let mut eng = Engine::new(cfg).map_err(|e| engine_failed(store, e))?;
    let mode = if store.is_direct() { IoMode::Direct } else { IoMode::Buffered };
    let file = eng.open(store.path(), mode).map_err(|e| engine_failed(store, e))?;
    Ok((eng, file))
}

/// `--io raw`: reopens the store's file in raw mode on `engine` (replacing `file`). When raw
/// mode cannot be set up (no block device access, unsafe extents, a writer holding the file)
/// it says why on stderr and keeps the file path: raw mode is best-effort, like XRP's.
pub(crate) fn switch_to_raw(
    store: &Store,
    engine: &mut Engine,
    file: &mut FileId,
) -> Result<(), KvError> {
    if !store.is_direct() {
        eprintln!("--io raw: {} is not O_DIRECT; using the file path", store.path().display());
        return Ok(());
    }
    match engine.open(store.path(), IoMode::Raw) {
        Ok(raw) => {
            engine.close(*file).map_err(|e| engine_failed(store, e))?;
            *file = raw;
        }
        Err(e @ (EngineError::RawUnavailable { .. } | EngineError::RawBlockSize { .. })) => {
            eprintln!("--io raw: {e}; using the file path");
        }
        Err(e) => return Err(engine_failed(store, e)),
    }
    Ok(())
}

/// One synchronous read through the engine. A raw-mode read that comes back `Stale` is redone
/// (raw mode is off by then, so through the file), counted as a fallback, and raw mode is
/// set up again.
pub(crate) fn engine_read(
    engine: &mut Engine,
    file: FileId,
    offset: u64,
    buf: &mut [u8],
    stats: &mut PathStats,
) -> Result<ChainStats, ChainError> {
    match engine.read(file, offset, buf) {
        Err(e) if e.is_stale() => {
            stats.fallbacks += 1;
            let st = engine.read(file, offset, buf)?;
            refresh_raw(engine, file);
            Ok(st)
        }
        r => r,
    }
}

/// After a `Stale` chain: set raw mode up again. On failure (a writer still holds the file)
/// the file path stays on, and [`Engine::retry_raw`] at the start of later lookups tries again
/// at most once per `RAW_RETRY_INTERVAL`.
pub(crate) fn refresh_raw(engine: &mut Engine, file: FileId) {
    if let Some(Err(e)) = engine.retry_raw(file) {
        eprintln!("--io raw: refresh failed, using the file path until it succeeds: {e}");
    }
}

/// Where a lookup starts: raw mode lost to a writer comes back once the writer is gone. Quiet:
/// the failure that dropped raw mode was reported already.
pub(crate) fn retry_raw_quietly(engine: &mut Engine, file: FileId) {
    let _ = engine.retry_raw(file);
}

pub(crate) fn chain_failed(store: &Store, e: ChainError) -> KvError {
    KvError::Chain { path: store.path().to_path_buf(), source: e }
}

pub(crate) fn engine_failed(store: &Store, e: EngineError) -> KvError {
    KvError::Engine { path: store.path().to_path_buf(), source: e }
}

/// `--path uring`: the same hops as `read`, each through the io_uring engine. In raw mode
/// the hops are read with the staleness check deferred to the end of the lookup
/// ([`Engine::read_deferred`]), one check per lookup as for a storage-function chain.
pub struct UringPath {
    store: Arc<Store>,
    engine: Engine,
    file: FileId,
    buf: Vec<u8>,
    lru: Option<BlockLru>,
    stats: PathStats,
    /// Device reads in the current lookup (the end-of-lookup check is owed when non-zero).
    lookup_device_hops: u32,
}

impl std::fmt::Debug for UringPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringPath").field("stats", &self.stats).finish_non_exhaustive()
    }
}

impl UringPath {
    /// # Errors
    /// Engine setup failures.
    /// `cache_bytes` > 0 adds an LRU block cache of that many bytes.
    pub fn new(store: Arc<Store>, cache_bytes: u64) -> Result<Self, KvError> {
        let (engine, file) = engine_for(&store, 1, None)?;
        let nb = store.node_size().bytes();
        let lru = (cache_bytes > 0).then(|| BlockLru::new(cache_bytes, nb));
        let stats = PathStats::default();
        Ok(Self { store, engine, file, buf: vec![0; nb], lru, stats, lookup_device_hops: 0 })
    }

    /// `--io raw` when `raw` (see [`switch_to_raw`]).
    ///
    /// # Errors
    /// Engine failures other than "raw mode unavailable".
    pub fn with_io(mut self, raw: bool) -> Result<Self, KvError> {
        if raw {
            switch_to_raw(&self.store, &mut self.engine, &mut self.file)?;
        }
        Ok(self)
    }
}

impl BlockFetch for UringPath {
    fn store(&self) -> &Store {
        &self.store
    }

    fn cache_parts(&mut self) -> (Option<&mut BlockLru>, &mut [u8], &mut PathStats) {
        (self.lru.as_mut(), &mut self.buf, &mut self.stats)
    }

    fn read_uncached(&mut self, offset: u64) -> Result<(), KvError> {
        let st = self
            .engine
            .read_deferred(self.file, offset, &mut self.buf)
            .map_err(|e| chain_failed(&self.store, e))?;
        self.stats.ios += 1;
        self.stats.device_ios += u64::from(st.device_hops);
        self.lookup_device_hops += st.device_hops;
        Ok(())
    }

    fn block(&self) -> &[u8] {
        &self.buf
    }
}

impl LookupPath for UringPath {
    fn name(&self) -> &'static str {
        "uring"
    }

    /// A lookup that read the device is delivered only after the raw-mode check passed (a
    /// failed one, or an error, is judged the same way: stale device data must not surface as
    /// a corruption error); otherwise it is redone through the file (raw mode is off by then),
    /// counted as a fallback, and raw mode is set up again.
    fn get(&mut self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        self.stats.lookups += 1;
        retry_raw_quietly(&mut self.engine, self.file);
        let epoch = self.engine.raw_epoch(self.file);
        self.lookup_device_hops = 0;
        let got = walk_blocks(self, key);
        if self.lookup_device_hops == 0 {
            return got;
        }
        match self.engine.check_raw(self.file, epoch) {
            Ok(()) => got,
            Err(e) if e.is_stale() => {
                self.lookup_device_hops = 0;
                let again = redo_after_stale(self, key);
                debug_assert_eq!(self.lookup_device_hops, 0, "a redo after Stale read the device");
                refresh_raw(&mut self.engine, self.file);
                again
            }
            Err(e) => Err(chain_failed(&self.store, e)),
        }
    }

    fn stats(&self) -> PathStats {
        self.stats
    }
}

/// One engine, one file, one program: runs single chains synchronously (XRP's `read_xrp`),
/// e.g. the range function's calls or a user's program.
pub struct EngineChain {
    engine: Engine,
    file: FileId,
    prog: Instance,
    path: std::path::PathBuf,
}

impl std::fmt::Debug for EngineChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineChain").finish_non_exhaustive()
    }
}

impl EngineChain {
    /// `max_hops` bounds every chain (`None`: the engine's default, 64).
    ///
    /// # Errors
    /// Engine setup failures.
    pub fn new(store: &Store, prog: Instance, max_hops: Option<u32>) -> Result<Self, KvError> {
        let (engine, file) = engine_for(store, 1, max_hops)?;
        Ok(Self { engine, file, prog, path: store.path().to_path_buf() })
    }

    /// Runs one chain from `[start, start + len)`; returns its hops.
    ///
    /// # Errors
    /// `Chain` with the chain's error (fault, hop limit, bad request, I/O).
    pub fn run(&mut self, start: u64, len: u64, scratch: &mut [u8]) -> Result<u32, KvError> {
        self.engine
            .read_xrp(self.file, start, len, &mut self.prog, scratch)
            .map(|st| st.hops)
            .map_err(|source| KvError::Chain { path: self.path.clone(), source })
    }
}

/// The engine max_hops a lookup chain of `keys` keys needs on `store` (each key descends at
/// most every level and reads its value).
pub(crate) fn lookup_hops(store: &Store, keys: usize) -> u32 {
    let per_key = store.meta().layers + 1;
    u32::try_from(keys).expect("<= 32 keys").saturating_mul(per_key)
}
