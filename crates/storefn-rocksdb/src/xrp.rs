//! Gets as storage-function chains on the storefn-io engine (`progs/engines/rocksdb/get.bpf.c`):
//! one chain per candidate file, index block -> data block in one chain. The in-memory phase
//! (memtable, filters, level choice, and the index block when it is cached) runs here first.
//!
//! Checksums: every block a local chain reads is checked on the host as it arrives
//! ([`StorageFn::on_block`], any checksum type RocksDB writes) before the function's answer is
//! used; with [`XrpConfig::verify_in_function`] the function checks CRC-32C itself (what a
//! pushed-down chain relies on). What the function hands back (compressed blocks, large values)
//! is answered by plain reads and the Rust walk, and counted in [`XrpStats::fallbacks`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use storefn_io::{Doorkeeper, Engine, EngineConfig, FileId, IoMode, StorageFn, VmError, XrpCtx};

use crate::chain::{self, abi, ChainAnswer, ChainStart};
use crate::db::{settle, Db, LiveFile, Lookup, Source};
use crate::error::RocksError;
use crate::format::table::{ChecksumType, BLOCK_TRAILER_BYTES};
use crate::format::BlockHandle;
use crate::remote::cache::{BlockCache, Cached};
use crate::sst::Found;

/// How chains run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrpConfig {
    /// Start at the data block the cached index names (one hop), not at the index block.
    pub index_cached: bool,
    /// The function checks CRC-32C block checksums (then the host checks only other types).
    pub verify_in_function: bool,
    /// Largest hop: a block and its trailer longer than this is answered by plain reads.
    pub hop_bytes: usize,
    /// Chains in flight at once (a batch's keys beyond it wait for the next round).
    pub chains: usize,
    /// Instructions per invocation (`None`: the VM's default).
    pub insn_budget: Option<u64>,
    /// Chains read with O_DIRECT (the device, not the page cache): with data many times the
    /// memory budget most reads miss the cache anyway, and a buffered miss also pays for
    /// inserting the page and reclaiming another under the budget. Plain reads (fallbacks)
    /// stay buffered. A file system that refuses O_DIRECT (tmpfs) is read buffered.
    pub direct: bool,
}

impl Default for XrpConfig {
    fn default() -> Self {
        XrpConfig {
            index_cached: true,
            verify_in_function: false,
            hop_bytes: storefn_io::limits::MAX_HOP_BYTES,
            chains: 64,
            insn_budget: None,
            direct: false,
        }
    }
}

impl XrpConfig {
    /// This configuration with an engine that holds what `db`'s Gets need and no more:
    /// `chains` chains in flight (one registered buffer each) and hops as long as the largest
    /// block a chain reads (data blocks, and index blocks when the index is not cached) with
    /// its trailer, rounded up to 4 KiB. A thread's engine is then a few hundred KiB, not the
    /// 4 MiB of 64 chains with 64 KiB hops. A block longer than that (a file a later version
    /// adds) is answered by plain reads and counted as a fallback.
    #[must_use]
    pub fn sized_for(self, db: &Db, chains: usize) -> XrpConfig {
        let mut largest = db.largest_data_block();
        if !self.index_cached {
            largest = largest.max(db.largest_index_block());
        }
        let hop = usize::try_from(largest + BLOCK_TRAILER_BYTES as u64)
            .unwrap_or(usize::MAX)
            .clamp(4096, storefn_io::limits::MAX_HOP_BYTES)
            .next_multiple_of(4096);
        XrpConfig { chains, hop_bytes: hop, ..self }
    }
}

/// What the chains did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XrpStats {
    /// Chains run (one per candidate file asked).
    pub chains: u64,
    /// Block reads the chains made.
    pub hops: u64,
    /// Files answered by plain reads instead (the function handed the lookup back, or the
    /// block was longer than a hop, or the key longer than the scratch holds).
    pub fallbacks: u64,
    /// Files answered from the data cache, without a chain.
    pub cache_hits: u64,
}

/// The function plus the host's check of every block's trailer checksum.
struct Checked {
    inst: storefn_vm::Instance,
    /// Per token: the checksum type the host checks, and the first block that failed it.
    check: Vec<ChecksumType>,
    bad: Vec<Option<(u64, u32, u32)>>,
    /// With a data cache: per token, the chain's first block (a data block: the index is
    /// cached) and its offset, committed to the cache once the chain answered without error.
    keep: bool,
    kept: Vec<Option<(u64, Vec<u8>)>>,
    /// Buffers of blocks the data cache evicted (or chains kept but did not commit), reused
    /// for the next kept block: no allocation per chain. At most one per chain in flight; in
    /// steady state each kept block evicts about one, so the list holds a buffer or two.
    spare: Vec<Vec<u8>>,
    /// Per token: whether the data cache admits the chain's block (seen before).
    admit: Vec<bool>,
}

/// A spare buffer is reused for a block when it holds at most 1/this more than the block.
const SPARE_SLACK: usize = 16;

impl StorageFn for Checked {
    fn invoke(
        &mut self,
        token: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        if self.bad.get(token as usize).is_some_and(Option::is_some) {
            ctx.done = 1;
            return Ok(0);
        }
        self.inst.run_xrp(ctx, data, scratch)
    }

    fn on_block(&mut self, token: u64, addr: u64, data: &[u8]) {
        let t = token as usize;
        let (Some(kind), Some(None)) = (self.check.get(t), self.bad.get(t)) else { return };
        let Some(n) = data.len().checked_sub(BLOCK_TRAILER_BYTES) else { return };
        if *kind != ChecksumType::None {
            let stored = u32::from_le_bytes([data[n + 1], data[n + 2], data[n + 3], data[n + 4]]);
            let computed = kind.compute(&data[..n], data[n]);
            if stored != computed {
                self.bad[t] = Some((addr, stored, computed));
                return;
            }
        }
        // Uncompressed blocks only (the function hands compressed ones back).
        let admitted = self.keep && data[n] == 0 && self.admit.get(t) == Some(&true);
        if let (true, Some(slot @ None)) = (admitted, self.kept.get_mut(t)) {
            let mut buf = self.spare.pop().unwrap_or_default();
            // The cache counts a buffer's capacity: reuse one only where it fits the block
            // closely (blocks of one file are near one size), else allocate exactly.
            if buf.capacity() < n || buf.capacity() > n + n / SPARE_SLACK {
                buf = Vec::with_capacity(n);
            }
            buf.clear();
            buf.extend_from_slice(&data[..n]);
            *slot = Some((addr, buf));
        }
    }
}

/// Data blocks the chains read, kept for later Gets: RocksDB's block cache, for the function's
/// path. Shared by the engines of many threads (one lock per lookup); held to a byte budget,
/// least recently used out. Keyed by file number and offset: RocksDB never reuses a number, so
/// a block cached for one version of the database is the same bytes in the next.
///
/// A block is admitted the second time a lookup misses it within a window ([`Doorkeeper`],
/// TinyLFU's): under skewed keys with a long tail most missed blocks are never asked again,
/// and admitting each would copy it and evict a block that is.
#[derive(Debug, Clone)]
pub struct DataCache(Arc<Mutex<Local>>);

#[derive(Debug)]
struct Local {
    blocks: BlockCache,
    seen: Doorkeeper,
}

/// Doorkeeper bits per block the cache holds (4 KiB blocks assumed): its memory is 1/4096 of
/// the cache's budget.
const DOORKEEPER_BITS_PER_BLOCK: u64 = 8;

/// A block's doorkeeper key: its file number and offset, mixed into one word.
fn door_key(k: (u64, u64)) -> u64 {
    k.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.1
}

/// What the data cache says of a chain's data block.
enum CacheLookup {
    Hit(Found),
    /// Not cached; `keep`: the cache admits it once the chain read it.
    Miss {
        keep: bool,
    },
}

impl DataCache {
    pub fn new(bytes: u64) -> Self {
        let local = Local {
            blocks: BlockCache::new(bytes),
            seen: Doorkeeper::new(bytes / 4096 * DOORKEEPER_BITS_PER_BLOCK),
        };
        DataCache(Arc::new(Mutex::new(local)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Local> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lookups answered from the cache, and lookups that were not.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        let c = self.lock();
        (c.blocks.hits, c.blocks.misses)
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.lock().blocks.used()
    }
}

/// One chain's work: a key in one file.
struct Job<'a> {
    file: &'a LiveFile,
    key: &'a [u8],
    answer: Option<Found>,
}

/// Gets by chains on one engine (one per thread).
pub struct XrpDb {
    engine: Engine,
    func: Checked,
    /// Open files by number: the engine's id and the tick of the last job that used it.
    files: HashMap<u64, (FileId, u64)>,
    /// Counts file uses (the file table's recency order).
    tick: u64,
    cfg: XrpConfig,
    pub stats: XrpStats,
    /// Per job of a round: the chain's answer (kept between rounds: no allocation per Get).
    results: Vec<Option<Result<ChainAnswer, String>>>,
    /// The index's key scratch for the in-memory phase.
    key: Vec<u8>,
    /// Data blocks earlier chains read (with the index cached).
    cache: Option<DataCache>,
}

impl std::fmt::Debug for XrpDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrpDb").field("cfg", &self.cfg).field("stats", &self.stats).finish()
    }
}

impl XrpDb {
    /// Loads and verifies the function and starts an engine for `db`'s files.
    ///
    /// # Errors
    /// The program does not load or verify; the engine cannot start.
    pub fn new(db: &Db, cfg: XrpConfig) -> Result<Self, RocksError> {
        let err = |e: &dyn std::fmt::Display| RocksError::chain(db.dir(), e);
        let prog = storefn_vm::load_verified(
            storefn_progs::must(chain::PROGRAM),
            None,
            storefn_vm::ProgType::Xrp,
        )
        .map_err(|e| err(&e))?;
        let mut inst = storefn_vm::Instance::new(Arc::clone(&prog), storefn_vm::Engine::Jit)
            .or_else(|_| storefn_vm::Instance::new(prog, storefn_vm::Engine::Interp))
            .map_err(|e| err(&e))?;
        if let Some(b) = cfg.insn_budget {
            inst.set_insn_budget(b);
        }
        let chains = cfg.chains.clamp(1, storefn_io::limits::MAX_CHAINS);
        let hop = cfg.hop_bytes.clamp(4096, storefn_io::limits::MAX_HOP_BYTES) & !4095;
        let ecfg = EngineConfig {
            ring_depth: (chains as u32 * 2).max(8),
            buffers: chains,
            chains,
            hop_bytes: hop,
            ..EngineConfig::default()
        };
        let engine = Engine::new(ecfg).map_err(|e| err(&e))?;
        let func = Checked {
            inst,
            check: Vec::new(),
            bad: Vec::new(),
            keep: false,
            kept: Vec::new(),
            spare: Vec::new(),
            admit: Vec::new(),
        };
        let cfg = XrpConfig { chains, hop_bytes: hop, ..cfg };
        Ok(XrpDb {
            engine,
            func,
            files: HashMap::new(),
            tick: 0,
            cfg,
            stats: XrpStats::default(),
            results: Vec::new(),
            key: Vec::new(),
            cache: None,
        })
    }

    /// Keeps the data blocks chains read in `cache` and answers later lookups of those blocks
    /// from it (only with the index cached: a chain then reads the data block first).
    pub fn set_data_cache(&mut self, cache: Option<DataCache>) {
        self.func.keep = cache.is_some() && self.cfg.index_cached;
        self.cache = cache.filter(|_| self.cfg.index_cached);
    }

    /// The configuration the engine was built with (chains and hop clamped to its limits).
    pub fn config(&self) -> XrpConfig {
        self.cfg
    }

    /// The engine's id of `f`, opening it (`None` when the engine's file table is full of
    /// files this round needs: the caller reads that file plainly).
    fn file_id(&mut self, f: &LiveFile) -> Result<Option<FileId>, RocksError> {
        self.tick += 1;
        if let Some((id, used)) = self.files.get_mut(&f.meta.number) {
            *used = self.tick;
            return Ok(Some(*id));
        }
        if self.files.len() >= storefn_io::limits::MAX_FILES {
            return Ok(None);
        }
        let path = f.table.path();
        let open = |e: &mut Engine, mode| e.open(&f.table.open_path(), mode);
        let id = match self.cfg.direct {
            true => open(&mut self.engine, IoMode::Direct)
                .or_else(|_| open(&mut self.engine, IoMode::Buffered)),
            false => open(&mut self.engine, IoMode::Buffered),
        }
        .map_err(|e| RocksError::chain(path, e))?;
        self.files.insert(f.meta.number, (id, self.tick));
        Ok(Some(id))
    }

    /// Closes files no job of this round needs when the round's new files would not fit the
    /// engine's file table (a database may hold more tables than it registers).
    fn make_room(&mut self, jobs: &[Job<'_>]) {
        if self.files.len() + jobs.len() <= storefn_io::limits::MAX_FILES {
            return;
        }
        let needed: std::collections::HashSet<u64> =
            jobs.iter().map(|j| j.file.meta.number).collect();
        let new = needed.iter().filter(|n| !self.files.contains_key(n)).count();
        if self.files.len() + new <= storefn_io::limits::MAX_FILES {
            return;
        }
        // The least recently used files this round does not need, as many as it opens: a
        // database of more files than the table holds keeps its hot files open.
        let mut idle: Vec<(u64, u64)> = self
            .files
            .iter()
            .filter(|(n, _)| !needed.contains(n))
            .map(|(n, (_, used))| (*used, *n))
            .collect();
        idle.sort_unstable();
        let excess = self.files.len() + new - storefn_io::limits::MAX_FILES;
        for (_, n) in idle.into_iter().take(excess) {
            if let Some((id, _)) = self.files.remove(&n) {
                // The engine is idle between rounds: the slot is released now. A refused
                // unregistration still frees the slot (storefn-io), so it is not an error here.
                let _ = self.engine.close(id);
            }
        }
    }

    /// One Get: the in-memory phase, then one chain per candidate file, newest first, until
    /// one holds an entry for the key.
    ///
    /// # Errors
    /// Damage found (by the host's checksum check, the function or the plain walk), or the
    /// engine failing.
    pub fn get(&mut self, db: &Db, key: &[u8]) -> Result<(Lookup, Source), RocksError> {
        if let Some(l) = db.from_memtable(key) {
            return Ok((l, Source::Memtable));
        }
        for f in db.candidates(key).filter(|f| f.table.may_contain(key)) {
            let mut jobs = [Job { file: f, key, answer: None }];
            self.run(&mut jobs)?;
            let found = jobs[0].answer.take().expect("every job answered");
            if let Some(a) = settle(f, found) {
                return Ok(a);
            }
        }
        Ok((Lookup::NotFound, Source::Nowhere))
    }

    /// Gets for many keys, in rounds: each round runs, in parallel, one chain for every key
    /// still open (its next candidate file), so a key costs the chains `get` would run.
    ///
    /// # Errors
    /// As [`XrpDb::get`].
    pub fn multi_get(
        &mut self,
        db: &Db,
        keys: &[&[u8]],
        out: &mut Vec<(Lookup, Source)>,
    ) -> Result<(), RocksError> {
        out.clear();
        // Every key's candidate files in one list: key i's still to ask are
        // `cands[next[i]..ends[i]]` (one allocation a batch, not one a key).
        let mut cands: Vec<&LiveFile> = Vec::with_capacity(keys.len() * 2);
        let mut next = Vec::with_capacity(keys.len());
        let mut ends = Vec::with_capacity(keys.len());
        for k in keys {
            next.push(cands.len());
            match db.from_memtable(k) {
                Some(l) => out.push((l, Source::Memtable)),
                None => {
                    out.push((Lookup::NotFound, Source::Nowhere));
                    cands.extend(db.candidates(k).filter(|f| f.table.may_contain(k)));
                }
            }
            ends.push(cands.len());
        }
        let (mut jobs, mut owner) = (Vec::new(), Vec::new());
        loop {
            jobs.clear();
            owner.clear();
            for (i, key) in keys.iter().enumerate() {
                if next[i] < ends[i] {
                    jobs.push(Job { file: cands[next[i]], key, answer: None });
                    owner.push(i);
                }
            }
            if jobs.is_empty() {
                return Ok(());
            }
            self.run(&mut jobs)?;
            for (j, &i) in jobs.iter_mut().zip(&owner) {
                let found = j.answer.take().expect("every job answered");
                match settle(j.file, found) {
                    Some(a) => {
                        out[i] = a;
                        next[i] = ends[i];
                    }
                    None => next[i] += 1,
                }
            }
        }
    }

    /// Runs `jobs`' chains, at most `chains` in flight, and fills every answer.
    fn run(&mut self, jobs: &mut [Job<'_>]) -> Result<(), RocksError> {
        self.make_room(jobs);
        self.func.check.clear();
        self.func.bad.clear();
        self.func.admit.clear();
        // Blocks a chain kept but did not commit (it failed, or fell back) are reused.
        let f = &mut self.func;
        // At most one spare a chain in flight (as many as the engine's registered buffers).
        let keep = self.cfg.chains;
        for (_, b) in f.kept.drain(..).flatten() {
            if f.spare.len() < keep {
                f.spare.push(b);
            }
        }
        let mut results = std::mem::take(&mut self.results);
        results.clear();
        results.resize(jobs.len(), None);
        let r = self.run_with(jobs, &mut results);
        self.results = results;
        r
    }

    fn run_with(
        &mut self,
        jobs: &mut [Job<'_>],
        results: &mut [Option<Result<ChainAnswer, String>>],
    ) -> Result<(), RocksError> {
        let mut submitted = 0;
        let mut done = 0;
        while done < jobs.len() {
            while submitted < jobs.len() && self.engine.free_slots() > 0 {
                let j = &mut jobs[submitted];
                match self.submit(submitted, j)? {
                    Some(found) => {
                        j.answer = Some(found);
                        done += 1;
                    }
                    None => self.stats.chains += 1,
                }
                submitted += 1;
            }
            if done == jobs.len() {
                break;
            }
            let stats = &mut self.stats;
            let n = self
                .engine
                .wait(1, &mut self.func, |c| {
                    let r = match c.result {
                        Ok(st) => {
                            stats.hops += u64::from(st.hops);
                            chain::answer(c.scratch)
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    results[c.token as usize] = Some(r);
                })
                .map_err(|e| RocksError::chain(jobs[0].file.table.path(), e))?;
            done += n;
        }
        for (i, j) in jobs.iter_mut().enumerate() {
            if j.answer.is_some() {
                continue;
            }
            let r = results[i].take().expect("a completion for every chain");
            j.answer = Some(self.settle_chain(i, j, r)?);
        }
        Ok(())
    }

    /// Submits job `i`'s chain; `Some` when the job is answered without one.
    fn submit(&mut self, i: usize, j: &Job<'_>) -> Result<Option<Found>, RocksError> {
        let t = &j.file.table;
        let mut keep = false;
        let start = if self.cfg.index_cached {
            match t.data_block_for(j.key, &mut self.key)? {
                None => return Ok(Some(Found::Absent)),
                Some(h) => match self.cached_answer(j, h)? {
                    CacheLookup::Hit(found) => return Ok(Some(found)),
                    CacheLookup::Miss { keep: k } => {
                        keep = k;
                        ChainStart { block: h, phase: abi::PHASE_DATA }
                    }
                },
            }
        } else {
            ChainStart { block: t.footer().index, phase: abi::PHASE_INDEX }
        };
        self.func.check.resize(i + 1, ChecksumType::None);
        self.func.bad.resize(i + 1, None);
        self.func.kept.resize(i + 1, None);
        self.func.admit.resize(i + 1, false);
        self.func.admit[i] = keep;
        let id = match self.file_id(j.file)? {
            Some(id)
                if start.hop_len() <= self.cfg.hop_bytes as u64 && j.key.len() <= abi::KEY_MAX =>
            {
                id
            }
            _ => {
                self.stats.fallbacks += 1;
                return t.get(j.key).map(Some);
            }
        };
        // The function checks CRC-32C itself when asked to; the host checks everything else.
        let by_function =
            self.cfg.verify_in_function && t.footer().checksum == ChecksumType::Crc32c;
        self.func.check[i] = if by_function { ChecksumType::None } else { t.footer().checksum };
        let (verify, hop) = (self.cfg.verify_in_function, self.cfg.hop_bytes as u32);
        self.engine
            .submit_chain(id, start.block.offset, start.hop_len(), i as u64, |s| {
                chain::fill(s, t, j.key, start, verify, hop).expect("key length checked");
            })
            .map_err(|e| RocksError::chain(t.path(), e))?;
        Ok(None)
    }

    /// The entry for `j`'s key in data block `h`, when the data cache holds the block.
    fn cached_answer(&mut self, j: &Job<'_>, h: BlockHandle) -> Result<CacheLookup, RocksError> {
        let Some(cache) = &self.cache else { return Ok(CacheLookup::Miss { keep: false }) };
        let mut c = cache.lock();
        let k = (j.file.meta.number, h.offset);
        let Some(Cached::Block(b)) = c.blocks.get(k) else {
            return Ok(CacheLookup::Miss { keep: c.seen.seen_before(door_key(k)) });
        };
        let found = j.file.table.search_data_block(h, j.key, b, &mut self.key)?;
        self.stats.cache_hits += 1;
        Ok(CacheLookup::Hit(found))
    }

    /// Commits chain `i`'s data block to the data cache (the chain answered without error).
    fn keep_block(&mut self, i: usize, j: &Job<'_>) {
        let (Some(cache), Some(kept)) = (&self.cache, self.func.kept.get_mut(i)) else {
            return;
        };
        let Some((addr, b)) = kept.take() else { return };
        // A reused buffer may hold more than this block: the budget counts what it holds.
        let n = b.capacity() as u64;
        let f = &mut self.func;
        let keep = self.cfg.chains;
        cache.lock().blocks.insert_recycling(
            (j.file.meta.number, addr),
            Cached::Block(b),
            n,
            &mut f.spare,
            keep,
        );
    }

    fn settle_chain(
        &mut self,
        i: usize,
        j: &Job<'_>,
        r: Result<ChainAnswer, String>,
    ) -> Result<Found, RocksError> {
        let t = &j.file.table;
        if let Some((offset, stored, computed)) = self.func.bad[i] {
            let kind = t.footer().checksum.name();
            let file = t.path().to_path_buf();
            return Err(RocksError::Checksum { file, offset, kind, stored, computed });
        }
        match r.map_err(|e| RocksError::chain(t.path(), e))? {
            ChainAnswer::Entry { kind, sequence, value } => {
                self.keep_block(i, j);
                Ok(Found::Entry { kind, sequence, value })
            }
            ChainAnswer::Absent => {
                self.keep_block(i, j);
                Ok(Found::Absent)
            }
            ChainAnswer::Fallback { .. } => {
                self.stats.fallbacks += 1;
                t.get(j.key)
            }
            ChainAnswer::Corrupt { offset, line } => Err(RocksError::corrupt(
                t.path(),
                offset,
                format!("the storage function found this block damaged (get.bpf.c line {line})"),
            )),
        }
    }
}
