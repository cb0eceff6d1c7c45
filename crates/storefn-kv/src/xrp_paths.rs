//! The lookup paths over the storefn-io engine: `uring` (one io_uring read per hop), `xrp`
//! (one storage-function chain per lookup, synchronous), `xrp-batch` (many chains in flight).
//! Chains that fail (fault, hop limit, I/O error, or our program's `err` flag) are redone on
//! the `read` path and counted as fallbacks.

use std::sync::Arc;
use std::time::Instant;

use storefn_io::{ChainError, ChainStats, Engine, EngineConfig, EngineError, FileId, IoMode};
use storefn_vm::Instance;

use crate::format::{
    NodeSize, LOOKUP_OFF_FOUND, LOOKUP_OFF_KEY, LOOKUP_OFF_STATE, LOOKUP_OFF_VALUE, SCRATCH_BYTES,
    VALUE_BYTES,
};
use crate::path::{
    nanos_since, redo_after_stale, walk_blocks, BlockFetch, BlockLru, Lookup, LookupPath,
    PathStats, ReadPath,
};
use crate::store::{Step, Store};
use crate::KvError;

/// Byte offset of our built-in programs' `err` word in the lookup scratch (docs/FORMAT.md).
pub const LOOKUP_OFF_ERR: usize = LOOKUP_OFF_STATE + 24;
/// Chains in flight per thread on `xrp-batch` when the caller does not say.
pub const DEFAULT_BATCH: usize = 32;
/// Most chains in flight per thread (the virtio disk has 128 tags in all).
pub const MAX_BATCH: usize = 1024;

/// Which program a chain runs.
#[derive(Debug, Clone)]
pub enum ProgSource {
    /// Ours: `kv_lookup` (512 B nodes) or `kv_lookup_4k`.
    BuiltIn,
    /// A user's ELF object and optional section; failures are errors, not fallbacks.
    User { elf: Vec<u8>, section: Option<String> },
}

/// Loads, verifies and JIT-compiles the lookup program for `node_size`.
///
/// # Errors
/// `Program` naming the load/verify/JIT failure.
pub fn load_lookup(src: &ProgSource, node_size: NodeSize) -> Result<Instance, KvError> {
    let (elf, section): (&[u8], Option<&str>) = match src {
        ProgSource::BuiltIn => (
            storefn_progs::must(match node_size {
                NodeSize::B512 => "kv_lookup",
                NodeSize::B4096 => "kv_lookup_4k",
            }),
            None,
        ),
        ProgSource::User { elf, section } => (elf, section.as_deref()),
    };
    crate::chain::instance(elf, section)
}

fn engine_for(
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
    let mut eng = Engine::new(cfg).map_err(|e| KvError::Program(format!("engine: {e}")))?;
    let mode = if store.is_direct() { IoMode::Direct } else { IoMode::Buffered };
    let file = eng
        .open(store.path(), mode)
        .map_err(|e| KvError::Program(format!("engine open {}: {e}", store.path().display())))?;
    Ok((eng, file))
}

/// `--io raw`: reopens the store's file in raw mode on `engine` (replacing `file`). When raw
/// mode cannot be set up (no block device access, unsafe extents, a writer holding the file)
/// it says why on stderr and keeps the file path: raw mode is best-effort, like XRP's.
fn switch_to_raw(store: &Store, engine: &mut Engine, file: &mut FileId) -> Result<(), KvError> {
    if !store.is_direct() {
        eprintln!("--io raw: {} is not O_DIRECT; using the file path", store.path().display());
        return Ok(());
    }
    match engine.open(store.path(), IoMode::Raw) {
        Ok(raw) => {
            engine.close(*file).map_err(|e| KvError::Program(format!("engine close: {e}")))?;
            *file = raw;
        }
        Err(e @ (EngineError::RawUnavailable { .. } | EngineError::RawBlockSize { .. })) => {
            eprintln!("--io raw: {e}; using the file path");
        }
        Err(e) => return Err(KvError::Program(format!("engine open (raw): {e}"))),
    }
    Ok(())
}

/// One synchronous read through the engine. A raw-mode read that comes back `Stale` is redone
/// (raw mode is off by then, so through the file), counted as a fallback, and raw mode is
/// set up again.
fn engine_read(
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
fn refresh_raw(engine: &mut Engine, file: FileId) {
    if let Some(Err(e)) = engine.retry_raw(file) {
        eprintln!("--io raw: refresh failed, using the file path until it succeeds: {e}");
    }
}

/// Where a lookup starts: raw mode lost to a writer comes back once the writer is gone. Quiet:
/// the failure that dropped raw mode was reported already.
fn retry_raw_quietly(engine: &mut Engine, file: FileId) {
    let _ = engine.retry_raw(file);
}

fn chain_failed(store: &Store, e: &ChainError) -> KvError {
    KvError::Program(format!("{}: chain failed: {e}", store.path().display()))
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
            .map_err(|e| chain_failed(&self.store, &e))?;
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
            Err(e) => Err(chain_failed(&self.store, &e)),
        }
    }

    fn stats(&self) -> PathStats {
        self.stats
    }
}

/// Parses a finished lookup chain's scratch; `None` = the program flagged an inconsistency.
fn parse_scratch(scratch: &[u8], builtin: bool) -> Option<Option<[u8; VALUE_BYTES]>> {
    if builtin && scratch[LOOKUP_OFF_ERR..LOOKUP_OFF_ERR + 8] != [0; 8] {
        return None;
    }
    if scratch[LOOKUP_OFF_FOUND] == 0 {
        return Some(None);
    }
    let v: [u8; VALUE_BYTES] =
        scratch[LOOKUP_OFF_VALUE..LOOKUP_OFF_VALUE + VALUE_BYTES].try_into().expect("64 bytes");
    Some(Some(v))
}

fn fill_key(scratch: &mut [u8], key: u64) {
    scratch[LOOKUP_OFF_KEY..LOOKUP_OFF_KEY + 8].copy_from_slice(&key.to_le_bytes());
}

/// `--path xrp` / `xrp-batch`: storage-function chains over the engine.
pub struct XrpPath {
    store: Arc<Store>,
    engine: Engine,
    file: FileId,
    prog: Instance,
    builtin: bool,
    batch: bool,
    fallback: ReadPath,
    scratch: Vec<u8>,
    value_buf: Vec<u8>,
    stats: PathStats,
}

impl std::fmt::Debug for XrpPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrpPath")
            .field("batch", &self.batch)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl XrpPath {
    /// `chains` in flight when `batch`; 1 otherwise.
    ///
    /// # Errors
    /// Program load/verify/JIT failures; engine setup failures.
    pub fn new(
        store: Arc<Store>,
        src: &ProgSource,
        batch: bool,
        chains: usize,
        max_hops: Option<u32>,
    ) -> Result<Self, KvError> {
        let prog = load_lookup(src, store.node_size())?;
        // `max_hops` lower than the tree's depth forces chain failures (fallback tests).
        let (engine, file) = engine_for(&store, if batch { chains } else { 1 }, max_hops)?;
        let fallback = ReadPath::new(Arc::clone(&store), 0);
        let nb = store.node_size().bytes();
        Ok(Self {
            store,
            engine,
            file,
            prog,
            builtin: matches!(src, ProgSource::BuiltIn),
            batch,
            fallback,
            scratch: vec![0; SCRATCH_BYTES],
            value_buf: vec![0; nb],
            stats: PathStats::default(),
        })
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

    /// A failed chain: our program falls back to `read`; a user's program is an error.
    /// A raw-mode `Stale` chain falls back for any program (its data was discarded, not
    /// wrong), and raw mode is set up again.
    fn fail_or_fallback(
        &mut self,
        key: u64,
        why: String,
        stale: bool,
    ) -> Result<Option<[u8; 64]>, KvError> {
        refresh_raw(&mut self.engine, self.file);
        if !self.builtin && !stale {
            return Err(KvError::Program(why));
        }
        self.stats.fallbacks += 1;
        let before = self.fallback.stats().ios;
        let v = self.fallback.get(key)?;
        self.stats.ios += self.fallback.stats().ios - before;
        Ok(v)
    }

    /// Lookups whose leaves are cached need only the value read: done without a chain.
    fn value_only(&mut self, offset: u64) -> Result<[u8; 64], KvError> {
        let blk = self.store.value_block(offset).0;
        let st =
            engine_read(&mut self.engine, self.file, blk, &mut self.value_buf, &mut self.stats)
                .map_err(|e| chain_failed(&self.store, &e))?;
        self.stats.ios += 1;
        self.stats.device_ios += u64::from(st.device_hops);
        Ok(self.store.value_from_block(offset, &self.value_buf))
    }
}

impl LookupPath for XrpPath {
    fn name(&self) -> &'static str {
        if self.batch {
            "xrp-batch"
        } else {
            "xrp"
        }
    }

    fn get(&mut self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        self.stats.lookups += 1;
        retry_raw_quietly(&mut self.engine, self.file);
        let nb = self.store.node_size().bytes() as u64;
        let offset = match self.store.start(key)? {
            Step::Done(v) => return Ok(v),
            Step::Value { offset } => return self.value_only(offset).map(Some),
            Step::Node { offset, .. } => offset,
        };
        self.scratch.fill(0);
        fill_key(&mut self.scratch, key);
        match self.engine.read_xrp(self.file, offset, nb, &mut self.prog, &mut self.scratch) {
            Ok(st) => {
                self.stats.ios += u64::from(st.hops);
                self.stats.device_ios += u64::from(st.device_hops);
                match parse_scratch(&self.scratch, self.builtin) {
                    Some(v) => Ok(v),
                    None => {
                        self.fail_or_fallback(key, "program flagged a corrupt node".into(), false)
                    }
                }
            }
            Err(e) => self.fail_or_fallback(key, e.to_string(), e.is_stale()),
        }
    }

    fn get_many(&mut self, keys: &[u64], out: &mut Vec<Lookup>) -> Result<(), KvError> {
        if !self.batch {
            for &k in keys {
                let t0 = Instant::now();
                let value = self.get(k)?;
                out.push(Lookup { value, latency_ns: nanos_since(t0) });
            }
            return Ok(());
        }
        retry_raw_quietly(&mut self.engine, self.file);
        // latency_ns holds the submission time (ns since t0) until the lookup completes.
        let t0 = Instant::now();
        let base = out.len();
        out.extend(keys.iter().map(|_| Lookup { value: None, latency_ns: 0 }));
        let nb = self.store.node_size().bytes() as u64;
        let mut failed: Vec<(usize, String, bool)> = Vec::new();
        let mut next = 0;
        let mut live = 0usize;
        while next < keys.len() || live > 0 {
            // Submit while slots are free.
            while next < keys.len() && self.engine.free_slots() > 0 {
                let (i, key) = (next, keys[next]);
                next += 1;
                self.stats.lookups += 1;
                out[base + i].latency_ns = nanos_since(t0);
                match self.store.start(key)? {
                    Step::Done(v) => out[base + i].value = v,
                    Step::Value { offset } => out[base + i].value = Some(self.value_only(offset)?),
                    Step::Node { offset, .. } => {
                        self.engine
                            .submit_chain(self.file, offset, nb, i as u64, |s| fill_key(s, key))
                            .map_err(|e| KvError::Program(format!("submit: {e}")))?;
                        live += 1;
                        continue;
                    }
                }
                out[base + i].latency_ns = nanos_since(t0) - out[base + i].latency_ns;
            }
            if live == 0 {
                continue;
            }
            let builtin = self.builtin;
            let (mut ios, mut device_ios) = (0u64, 0u64);
            let got = self
                .engine
                .wait(1, &mut self.prog, |c| {
                    let i = usize::try_from(c.token).expect("token is an index");
                    out[base + i].latency_ns = nanos_since(t0) - out[base + i].latency_ns;
                    match c.result {
                        Ok(st) => {
                            ios += u64::from(st.hops);
                            device_ios += u64::from(st.device_hops);
                            match parse_scratch(c.scratch, builtin) {
                                Some(v) => out[base + i].value = v,
                                None => {
                                    let why = "program flagged a corrupt node".into();
                                    failed.push((i, why, false));
                                }
                            }
                        }
                        Err(e) => failed.push((i, e.to_string(), e.is_stale())),
                    }
                })
                .map_err(|e| KvError::Program(format!("engine: {e}")))?;
            self.stats.ios += ios;
            self.stats.device_ios += device_ios;
            live -= got;
        }
        for (i, why, stale) in failed {
            // The fallback's own time is added to the failed chain's.
            let t1 = Instant::now();
            let v = self.fail_or_fallback(keys[i], why, stale)?;
            out[base + i].value = v;
            out[base + i].latency_ns += nanos_since(t1);
        }
        Ok(())
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
}

impl std::fmt::Debug for EngineChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineChain").finish_non_exhaustive()
    }
}

impl EngineChain {
    /// # Errors
    /// Program load/verify failures; engine setup failures.
    pub fn new(store: &Store, elf: &[u8], section: Option<&str>) -> Result<Self, KvError> {
        let prog = crate::chain::instance(elf, section)?;
        let (engine, file) = engine_for(store, 1, None)?;
        Ok(Self { engine, file, prog })
    }

    /// Runs one chain from `[start, start + len)`; returns its hops.
    ///
    /// # Errors
    /// `Program` with the chain's error (fault, hop limit, bad request, I/O).
    pub fn run(&mut self, start: u64, len: u64, scratch: &mut [u8]) -> Result<u32, KvError> {
        self.engine
            .read_xrp(self.file, start, len, &mut self.prog, scratch)
            .map(|st| st.hops)
            .map_err(|e| KvError::Program(e.to_string()))
    }
}
