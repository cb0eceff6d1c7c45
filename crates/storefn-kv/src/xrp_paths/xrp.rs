//! `--path xrp` / `xrp-batch`: storage-function chains over the engine, in either scratch ABI,
//! with the `--cache-bytes` block LRU in front of them.
//!
//! Cache: a lookup first walks the blocks the LRU holds (from the first uncached level); a
//! cached value block answers it without any chain, otherwise the chain starts at the first
//! block the LRU lacks. Every block a chain reads is staged by its token (the engine's
//! [`StorageFn::on_block`]) and enters the LRU only when that chain completed without error,
//! so a raw-mode chain whose data turned out `Stale` never leaves blocks behind; a `Stale`
//! chain clears the LRU as well (the file changed under it).

use std::sync::Arc;
use std::time::Instant;

use storefn_io::{ChainError, Engine, FileId, StorageFn, VmError, XrpCtx};
use storefn_vm::Instance;

use super::{
    chain_failed, engine_failed, engine_for, engine_read, lookup_hops, refresh_raw,
    retry_raw_quietly, switch_to_raw, LOOKUP_OFF_ERR,
};
use crate::abi::{fill_sg_query, get_u32, sg_value, Abi, SG_FLAG_FAILED, SG_OFF_STATE_FLAGS};
use crate::format::{LOOKUP_OFF_FOUND, LOOKUP_OFF_KEY, LOOKUP_OFF_VALUE, VALUE_BYTES};
use crate::limits::SCRATCH_BYTES;
use crate::path::{nanos_since, BlockLru, Lookup, LookupPath, PathStats, ReadPath};
use crate::program::{load_lookup, ProgSource};
use crate::store::{Step, Store};
use crate::KvError;

/// How an [`XrpPath`] runs its chains.
#[derive(Debug, Clone, Copy)]
pub struct ChainOptions {
    /// `xrp-batch`: up to `chains` chains in flight; `xrp`: one at a time.
    pub batch: bool,
    pub chains: usize,
    /// Engine hop limit per chain (`None`: enough for `keys_per_chain` lookups).
    pub max_hops: Option<u32>,
    /// The program's scratch layout.
    pub abi: Abi,
    /// Keys one chain carries (1, or up to 32 in the BPF-KV ABI: `kv multiget`).
    pub keys_per_chain: usize,
    /// LRU block cache in front of the chains, bytes (0 = off).
    pub cache_bytes: u64,
}

impl Default for ChainOptions {
    fn default() -> Self {
        Self {
            batch: false,
            chains: 1,
            max_hops: None,
            abi: Abi::Storefn,
            keys_per_chain: 1,
            cache_bytes: 0,
        }
    }
}

/// Bits of a chain token holding its key count (the rest: the index of its first key).
const TOKEN_LEN_BITS: u32 = 6;
/// Token bit of a plain value-block read (the rest: the key's index).
const PLAIN_READ: u64 = 1 << 63;

/// A block a chain read, kept until the chain's outcome is known: (token, offset, bytes).
type Staged = (u64, u64, Box<[u8]>);

/// The program plus the staging of the blocks its chains read (for the LRU).
struct Tap<'a> {
    prog: &'a mut Instance,
    /// `None` when no LRU is in use (nothing is staged).
    staged: Option<&'a mut Vec<Staged>>,
    node_bytes: usize,
}

impl StorageFn for Tap<'_> {
    fn invoke(
        &mut self,
        _token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        self.prog.run_xrp(ctx, data, scratch)
    }

    fn on_block(&mut self, token: u64, addr: u64, data: &[u8]) {
        let Some(staged) = self.staged.as_deref_mut() else { return };
        // Only whole, aligned blocks are what the LRU holds (nodes and value blocks).
        if data.len() == self.node_bytes && addr.is_multiple_of(self.node_bytes as u64) {
            staged.push((token, addr, data.into()));
        }
    }
}

/// Storage-function chains over the engine (`--path xrp|xrp-batch`).
pub struct XrpPath {
    store: Arc<Store>,
    engine: Engine,
    file: FileId,
    prog: Instance,
    builtin: bool,
    opts: ChainOptions,
    fallback: ReadPath,
    scratch: Vec<u8>,
    block: Vec<u8>,
    lru: Option<BlockLru>,
    staged: Vec<Staged>,
    /// Chains finished in the last `wait`: (token, completed without error).
    finished: Vec<(u64, bool)>,
    /// Plain value-block reads in flight in `run_chains`: (key index, value offset).
    value_reads: Vec<(usize, u64)>,
    stats: PathStats,
}

impl std::fmt::Debug for XrpPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrpPath")
            .field("opts", &self.opts)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A lookup's result from its chain's scratch; `None` = the built-in program flagged an
/// inconsistent node (redo it with reads).
fn parse(abi: Abi, builtin: bool, scratch: &[u8], j: usize) -> Option<Option<[u8; VALUE_BYTES]>> {
    match abi {
        Abi::Storefn => {
            if builtin && scratch[LOOKUP_OFF_ERR..LOOKUP_OFF_ERR + 8] != [0; 8] {
                return None;
            }
            if scratch[LOOKUP_OFF_FOUND] == 0 {
                return Some(None);
            }
            let v = &scratch[LOOKUP_OFF_VALUE..LOOKUP_OFF_VALUE + VALUE_BYTES];
            Some(Some(v.try_into().expect("64 bytes")))
        }
        Abi::BpfKv => {
            if builtin && get_u32(scratch, SG_OFF_STATE_FLAGS) & SG_FLAG_FAILED != 0 {
                return None;
            }
            Some(sg_value(scratch, j))
        }
    }
}

/// Writes the chain's arguments for `keys`, all descending from `root`.
fn fill(abi: Abi, scratch: &mut [u8], root: u64, keys: &[u64]) {
    match abi {
        Abi::Storefn => {
            debug_assert_eq!(keys.len(), 1, "storefn's lookup ABI carries one key");
            scratch[LOOKUP_OFF_KEY..LOOKUP_OFF_KEY + 8].copy_from_slice(&keys[0].to_le_bytes());
        }
        Abi::BpfKv => fill_sg_query(scratch, root, keys),
    }
}

impl XrpPath {
    /// # Errors
    /// Program load/verify/JIT failures; engine setup failures; `Invalid` for a keys-per-chain
    /// count the ABI cannot carry.
    pub fn new(store: Arc<Store>, src: &ProgSource, opts: ChainOptions) -> Result<Self, KvError> {
        let kpc = opts.keys_per_chain;
        if kpc == 0 || kpc > opts.abi.max_keys_per_chain() {
            return Err(KvError::Invalid(format!(
                "{kpc} keys per chain: the {} ABI carries 1..={}",
                opts.abi.name(),
                opts.abi.max_keys_per_chain()
            )));
        }
        let prog = load_lookup(src, store.node_size(), opts.abi)?;
        // An explicit `max_hops` lower than the tree's depth forces chain failures (tests).
        let hops = opts.max_hops.unwrap_or_else(|| lookup_hops(&store, kpc).max(64));
        let chains = if opts.batch { opts.chains } else { 1 };
        let (engine, file) = engine_for(&store, chains, Some(hops))?;
        let fallback = ReadPath::new(Arc::clone(&store), 0);
        let nb = store.node_size().bytes();
        let lru = (opts.cache_bytes > 0).then(|| BlockLru::new(opts.cache_bytes, nb));
        Ok(Self {
            store,
            engine,
            file,
            prog,
            builtin: src.is_builtin(),
            opts,
            fallback,
            scratch: vec![0; SCRATCH_BYTES],
            block: vec![0; nb],
            lru,
            staged: Vec::new(),
            finished: Vec::new(),
            value_reads: Vec::new(),
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

    /// Blocks the LRU holds now (0 without one).
    #[must_use]
    pub fn cached_blocks(&self) -> usize {
        self.lru.as_ref().map_or(0, BlockLru::len)
    }

    /// A failed chain: our program falls back to `read`; a user's program is an error.
    /// A raw-mode `Stale` chain falls back for any program (its data was discarded, not
    /// wrong), and raw mode is set up again.
    fn fail_or_fallback(
        &mut self,
        key: u64,
        why: Option<ChainError>,
    ) -> Result<Option<[u8; 64]>, KvError> {
        refresh_raw(&mut self.engine, self.file);
        let stale = why.as_ref().is_some_and(ChainError::is_stale);
        if stale {
            if let Some(lru) = self.lru.as_mut() {
                lru.clear();
            }
        }
        if !self.builtin && !stale {
            return Err(match why {
                Some(e) => chain_failed(&self.store, e),
                None => unreachable!("only built-in programs flag inconsistent nodes"),
            });
        }
        self.stats.fallbacks += 1;
        let before = self.fallback.stats().ios;
        let v = self.fallback.get(key)?;
        self.stats.ios += self.fallback.stats().ios - before;
        Ok(v)
    }

    /// Where `key`'s lookup goes after the blocks the LRU holds.
    fn walk_cached(&mut self, key: u64) -> Result<Step, KvError> {
        let mut step = self.store.start(key)?;
        let Some(lru) = self.lru.as_mut() else { return Ok(step) };
        loop {
            match step {
                Step::Node { offset, level } => {
                    if !lru.get(offset, &mut self.block) {
                        return Ok(step);
                    }
                    self.stats.cache_hits += 1;
                    step = self.store.on_node(key, offset, level, &self.block)?;
                }
                Step::Value { offset } => {
                    let (blk, _) = self.store.value_block(offset);
                    if !lru.get(blk, &mut self.block) {
                        return Ok(step);
                    }
                    self.stats.cache_hits += 1;
                    let v = self.store.value_from_block(offset, &self.block);
                    return Ok(Step::Done(Some(v)));
                }
                Step::Done(_) => return Ok(step),
            }
        }
    }

    /// A lookup whose walk reached the value: one read of its block, no chain.
    fn value_only(&mut self, offset: u64) -> Result<[u8; 64], KvError> {
        let blk = self.store.value_block(offset).0;
        let st = engine_read(&mut self.engine, self.file, blk, &mut self.block, &mut self.stats)
            .map_err(|e| chain_failed(&self.store, e))?;
        self.stats.ios += 1;
        self.stats.device_ios += u64::from(st.device_hops);
        if let Some(lru) = self.lru.as_mut() {
            lru.put(blk, &self.block);
        }
        Ok(self.store.value_from_block(offset, &self.block))
    }

    /// Moves the staged blocks of chain `token` into the LRU (`ok`) or drops them.
    fn settle(&mut self, token: u64, ok: bool) {
        let Some(lru) = self.lru.as_mut() else { return };
        let mut i = 0;
        while i < self.staged.len() {
            if self.staged[i].0 == token {
                let (_, addr, block) = self.staged.swap_remove(i);
                if ok {
                    lru.put_owned(addr, block);
                }
            } else {
                i += 1;
            }
        }
    }

    /// After a synchronous chain (the only one staged): its blocks enter the LRU or go.
    fn settle_all(&mut self, ok: bool) {
        let staged = self.staged.drain(..);
        if let (Some(lru), true) = (self.lru.as_mut(), ok) {
            for (_, addr, block) in staged {
                lru.put_owned(addr, block);
            }
        }
    }

    /// Runs lookups from `keys[i]` on through chains; used by `get_many` when chains carry
    /// several keys or run in batches.
    fn run_chains(&mut self, keys: &[u64], out: &mut Vec<Lookup>) -> Result<(), KvError> {
        retry_raw_quietly(&mut self.engine, self.file);
        // latency_ns holds the submission time (ns since t0) until the lookup completes.
        let t0 = Instant::now();
        let base = out.len();
        out.extend(keys.iter().map(|_| Lookup { value: None, latency_ns: 0 }));
        let nb = self.store.node_size().bytes() as u64;
        let (abi, builtin, kpc) = (self.opts.abi, self.builtin, self.opts.keys_per_chain);
        let mut failed: Vec<(usize, Option<ChainError>)> = Vec::new();
        let mut next = 0;
        let mut live = 0usize;
        // A walk already done for keys[next] while growing a group: (index, its step).
        let mut peeked: Option<(usize, Step)> = None;
        while next < keys.len() || live > 0 {
            while next < keys.len() && self.engine.free_slots() > 0 {
                let i = next;
                next += 1;
                self.stats.lookups += 1;
                out[base + i].latency_ns = nanos_since(t0);
                let step = match peeked.take() {
                    Some((j, s)) if j == i => s,
                    _ => self.walk_cached(keys[i])?,
                };
                let root = match step {
                    Step::Done(v) => {
                        out[base + i].value = v;
                        out[base + i].latency_ns = nanos_since(t0) - out[base + i].latency_ns;
                        continue;
                    }
                    Step::Value { offset } => {
                        // Chains may be in flight: the value block is a plain read among them.
                        let blk = self.store.value_block(offset).0;
                        self.engine
                            .submit_read(self.file, blk, nb, PLAIN_READ | i as u64)
                            .map_err(|source| KvError::Submit {
                                path: self.store.path().to_path_buf(),
                                source,
                            })?;
                        self.value_reads.push((i, offset));
                        live += 1;
                        continue;
                    }
                    Step::Node { offset, .. } => offset,
                };
                // Following keys that start at the same node ride along (BPF-KV ABI).
                let mut len = 1;
                while len < kpc && next < keys.len() {
                    let s = self.walk_cached(keys[next])?;
                    if !matches!(s, Step::Node { offset, .. } if offset == root) {
                        peeked = Some((next, s));
                        break;
                    }
                    self.stats.lookups += 1;
                    out[base + next].latency_ns = nanos_since(t0);
                    next += 1;
                    len += 1;
                }
                let group = &keys[i..i + len];
                let token = ((i as u64) << TOKEN_LEN_BITS) | len as u64;
                self.engine
                    .submit_chain(self.file, root, nb, token, |s| fill(abi, s, root, group))
                    .map_err(|source| KvError::Submit {
                        path: self.store.path().to_path_buf(),
                        source,
                    })?;
                live += 1;
            }
            if live == 0 {
                continue;
            }
            let (mut ios, mut device_ios) = (0u64, 0u64);
            let mut finished = std::mem::take(&mut self.finished);
            let mut tap = Tap {
                prog: &mut self.prog,
                staged: self.lru.is_some().then_some(&mut self.staged),
                node_bytes: nb as usize,
            };
            let (lru, value_reads, store) = (&mut self.lru, &mut self.value_reads, &self.store);
            let got = self
                .engine
                .wait(1, &mut tap, |c| {
                    if c.token & PLAIN_READ != 0 {
                        let i = usize::try_from(c.token & !PLAIN_READ).expect("an index");
                        let at = value_reads.iter().position(|r| r.0 == i).expect("submitted");
                        let (_, offset) = value_reads.swap_remove(at);
                        out[base + i].latency_ns = nanos_since(t0) - out[base + i].latency_ns;
                        match c.result {
                            Ok(st) => {
                                ios += 1;
                                device_ios += u64::from(st.device_hops);
                                out[base + i].value = Some(store.value_from_block(offset, c.data));
                                if let Some(lru) = lru.as_mut() {
                                    lru.put(store.value_block(offset).0, c.data);
                                }
                            }
                            Err(e) => failed.push((i, Some(e))),
                        }
                        return;
                    }
                    let i = usize::try_from(c.token >> TOKEN_LEN_BITS).expect("an index");
                    let len = usize::try_from(c.token & ((1 << TOKEN_LEN_BITS) - 1)).expect("<64");
                    let lat = nanos_since(t0);
                    for o in &mut out[base + i..base + i + len] {
                        o.latency_ns = lat - o.latency_ns;
                    }
                    match c.result {
                        Ok(st) => {
                            ios += u64::from(st.hops);
                            device_ios += u64::from(st.device_hops);
                            let mut ok = true;
                            for j in 0..len {
                                match parse(abi, builtin, c.scratch, j) {
                                    Some(v) => out[base + i + j].value = v,
                                    None => {
                                        ok = false;
                                        failed.push((i + j, None));
                                    }
                                }
                            }
                            finished.push((c.token, ok));
                        }
                        Err(e) => {
                            for j in 0..len {
                                failed.push((i + j, Some(e.clone())));
                            }
                            finished.push((c.token, false));
                        }
                    }
                })
                .map_err(|e| engine_failed(&self.store, e))?;
            for &(token, ok) in &finished {
                self.settle(token, ok);
            }
            finished.clear();
            self.finished = finished;
            self.stats.ios += ios;
            self.stats.device_ios += device_ios;
            live -= got;
        }
        for (i, why) in failed {
            // The fallback's own time is added to the failed chain's.
            let t1 = Instant::now();
            let v = self.fail_or_fallback(keys[i], why)?;
            out[base + i].value = v;
            out[base + i].latency_ns += nanos_since(t1);
        }
        Ok(())
    }
}

impl LookupPath for XrpPath {
    fn name(&self) -> &'static str {
        if self.opts.batch {
            "xrp-batch"
        } else {
            "xrp"
        }
    }

    fn get(&mut self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        self.stats.lookups += 1;
        retry_raw_quietly(&mut self.engine, self.file);
        let nb = self.store.node_size().bytes() as u64;
        let root = match self.walk_cached(key)? {
            Step::Done(v) => return Ok(v),
            Step::Value { offset } => return self.value_only(offset).map(Some),
            Step::Node { offset, .. } => offset,
        };
        let abi = self.opts.abi;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.fill(0);
        fill(abi, &mut scratch, root, &[key]);
        let mut tap = Tap {
            prog: &mut self.prog,
            staged: self.lru.is_some().then_some(&mut self.staged),
            node_bytes: nb as usize,
        };
        let r = self.engine.read_xrp(self.file, root, nb, &mut tap, &mut scratch);
        let outcome = match r {
            Ok(st) => {
                self.stats.ios += u64::from(st.hops);
                self.stats.device_ios += u64::from(st.device_hops);
                match parse(abi, self.builtin, &scratch, 0) {
                    Some(v) => {
                        self.settle_all(true);
                        Ok(v)
                    }
                    None => {
                        self.settle_all(false);
                        self.fail_or_fallback(key, None)
                    }
                }
            }
            Err(e) => {
                self.settle_all(false);
                self.fail_or_fallback(key, Some(e))
            }
        };
        self.scratch = scratch;
        outcome
    }

    fn get_many(&mut self, keys: &[u64], out: &mut Vec<Lookup>) -> Result<(), KvError> {
        if self.opts.batch || self.opts.keys_per_chain > 1 {
            return self.run_chains(keys, out);
        }
        for &k in keys {
            let t0 = Instant::now();
            let value = self.get(k)?;
            out.push(Lookup { value, latency_ns: nanos_since(t0) });
        }
        Ok(())
    }

    fn stats(&self) -> PathStats {
        self.stats
    }
}
