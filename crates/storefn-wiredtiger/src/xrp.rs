//! The lookup as a storage-function chain (`progs/engines/wiredtiger/lookup.bpf.c`) on the
//! storefn-io engine: one hop per page. The host checks every block's CRC-32C as it arrives;
//! the function checks each block is the one its parent named. Scratch ABI: docs/FORMAT.md,
//! "WiredTiger lookup scratch ABI".

use crate::cache::{Pin, Route, TreeCache};
use crate::error::WtError;
use crate::format::{
    checksum_with_hole, BlockAddr, BlockHeader, PageType, BLOCK_DATA_CKSUM, CHECKSUM_SKIP_BYTES,
    PAGE_PREFIX_BYTES,
};
use crate::page::Fallback;
use crate::tree::{Outcome, Tree};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};
use storefn_io::{Engine, EngineConfig, FileId, IoMode, StorageFn, VmError, XrpCtx};

/// The compiled function's name in storefn-progs.
pub const PROGRAM: &str = "engines/wiredtiger/lookup";

/// Scratch offsets (docs/FORMAT.md, "WiredTiger lookup scratch ABI").
pub mod abi {
    pub const KEY_LEN: usize = 0;
    pub const HOP_BYTES: usize = 4;
    pub const ALLOC: usize = 8;
    pub const FILE_SIZE: usize = 16;
    pub const STATUS: usize = 24;
    pub const HOPS: usize = 28;
    pub const CUR_OFFSET: usize = 32;
    pub const CUR_SIZE: usize = 40;
    pub const CUR_CHECKSUM: usize = 44;
    pub const VALUE_LEN: usize = 48;
    pub const REASON: usize = 52;
    pub const FLAGS: usize = 56;
    pub const KEY: usize = 64;
    pub const KEY_MAX: usize = 512;
    pub const VALUE: usize = 1088;
    pub const VALUE_MAX: usize = 3008;
    pub const FOUND: u32 = 1;
    pub const NOT_FOUND: u32 = 2;
    pub const FALLBACK: u32 = 3;
    pub const CORRUPT: u32 = 4;
}

/// The longest block one hop reads: WiredTiger's default `leaf_page_max` (32 KiB), so pages at
/// WiredTiger's default sizes (internal 4 KiB, leaf up to 32 KiB) are one hop each. The
/// function's view (`VIEW` in the program) is the same.
pub const HOP_BYTES: u32 = 32 << 10;
const _: () = assert!(HOP_BYTES as usize <= storefn_io::limits::MAX_HOP_BYTES);

/// Chains one [`XrpTree`] keeps in flight for a batch (`xrp-batch`).
pub const BATCH_CHAINS: usize = 64;

/// Scratch flag: the function checks each block's CRC-32C itself (a remote server runs the
/// chain and no host sees the blocks).
pub const FLAG_VERIFY: u32 = 1;

/// Where a chain starts and what it is told: the checkpoint's root and the file's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainStart {
    pub root: crate::format::BlockAddr,
    pub alloc: u64,
    pub file_size: u64,
}

impl ChainStart {
    /// The start of a lookup in `tree`; `None` for an empty checkpoint or a root longer than a
    /// hop (the caller answers those without the function).
    #[must_use]
    pub fn of(tree: &Tree) -> Option<Self> {
        let ck = tree.checkpoint();
        let root = ck.root?;
        (root.size <= u64::from(HOP_BYTES)).then_some(ChainStart {
            root,
            alloc: tree.allocation_size(),
            file_size: ck.file_size,
        })
    }

    /// Writes a lookup of the stored `key` (at most [`abi::KEY_MAX`] bytes) into `s`, a zeroed
    /// scratch.
    pub fn fill(&self, key: &[u8], flags: u32, s: &mut [u8]) {
        let put32 =
            |s: &mut [u8], at: usize, v: u32| s[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |s: &mut [u8], at: usize, v: u64| s[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put32(s, abi::KEY_LEN, key.len() as u32);
        put32(s, abi::HOP_BYTES, HOP_BYTES);
        put64(s, abi::ALLOC, self.alloc);
        put64(s, abi::FILE_SIZE, self.file_size);
        put64(s, abi::CUR_OFFSET, self.root.offset);
        put32(s, abi::CUR_SIZE, self.root.size as u32);
        put32(s, abi::CUR_CHECKSUM, self.root.checksum);
        put32(s, abi::FLAGS, flags);
        s[abi::KEY..abi::KEY + key.len()].copy_from_slice(key);
    }
}

/// What a finished chain's scratch says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainEnd<'s> {
    Found(&'s [u8]),
    NotFound,
    Fallback,
    /// The function found the block at this offset damaged, or not the one its parent named.
    Corrupt(u64),
}

impl<'s> ChainEnd<'s> {
    /// Reads a finished chain's scratch (at least [`abi::VALUE`] bytes plus the value).
    ///
    /// # Errors
    /// A scratch too short or a status outside the ABI, named.
    pub fn parse(s: &'s [u8]) -> Result<Self, String> {
        if s.len() < abi::VALUE {
            return Err(format!("scratch of {} bytes, shorter than the ABI's header", s.len()));
        }
        let u32_at = |o: usize| u32::from_le_bytes(s[o..o + 4].try_into().expect("4 bytes"));
        let at = u64::from_le_bytes(s[abi::CUR_OFFSET..abi::CUR_OFFSET + 8].try_into().expect("8"));
        match u32_at(abi::STATUS) {
            abi::FOUND => {
                let n = u32_at(abi::VALUE_LEN) as usize;
                s.get(abi::VALUE..abi::VALUE + n)
                    .filter(|_| n <= abi::VALUE_MAX)
                    .map(ChainEnd::Found)
                    .ok_or_else(|| format!("value of {n} bytes does not fit the scratch"))
            }
            abi::NOT_FOUND => Ok(ChainEnd::NotFound),
            abi::FALLBACK => Ok(ChainEnd::Fallback),
            abi::CORRUPT => Ok(ChainEnd::Corrupt(at)),
            st => Err(format!("status {st} is not in the scratch ABI")),
        }
    }
}

/// Why `block` (a hop read at `addr`) fails WiredTiger's checksum; `None` when it passes.
/// The checksum runs over the bytes in place (no copy: the hop's buffer is the engine's).
fn checksum_fault(data: &[u8]) -> Option<String> {
    let Ok(h) = BlockHeader::parse(data) else {
        return Some(format!(
            "block of {} bytes, shorter than its headers ({PAGE_PREFIX_BYTES})",
            data.len()
        ));
    };
    let size = h.disk_size as usize;
    if size > data.len() || size < PAGE_PREFIX_BYTES {
        return Some(format!("block header says {size} bytes; the hop read {}", data.len()));
    }
    let n = if h.flags & BLOCK_DATA_CKSUM != 0 { size } else { CHECKSUM_SKIP_BYTES.min(size) };
    let sum = checksum_with_hole(&data[..n], BlockHeader::CHECKSUM_AT);
    (sum != h.checksum)
        .then(|| format!("checksum mismatch: stored {:#010x}, computed {sum:#010x}", h.checksum))
}

/// What one chain of a batch (its token) left behind for its completion.
#[derive(Debug, Default, Clone, Copy)]
struct TokenState {
    /// The first block whose checksum failed: its offset.
    fault_at: Option<u64>,
    /// The cache slot lent to the chain for its leaf.
    pin: Option<Pin>,
    /// The leaf copied into `pin`, as its header names it.
    leaf: Option<BlockAddr>,
    /// The chain started at this leaf (the cache's route): lookups of the same leaf wait for it.
    reads_leaf: Option<BlockAddr>,
}

/// What the cache made of a lookup ([`XrpTree::through_cache`]).
enum Cached {
    Done(Began),
    /// Start a chain at `from`; `reads_leaf`: `from` is the leaf the cache's route named.
    Chain {
        from: BlockAddr,
        pin: Option<Pin>,
        reads_leaf: Option<BlockAddr>,
    },
}

/// What [`XrpTree::begin`] did with a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Began {
    Answered,
    Submitted,
    /// Its leaf is being read by a chain of this batch: answered when that chain ends.
    Waiting,
}

/// Per chain (its token), and the reason of each checksum fault.
#[derive(Debug, Default)]
struct Tokens {
    states: Vec<TokenState>,
    /// Why `fault_at` failed, per token (kept apart: a `String` per token only when one fails).
    why: Vec<(u64, String)>,
    /// The token whose leaf `on_block` just copied into its slot: the next `invoke` (of the
    /// same block) runs on the slot.
    fresh: Option<u64>,
}

/// The function plus the host's checksum check of every block a chain reads, and the tree's
/// cache (when it has one) fed with the blocks chains read.
struct Checked {
    inst: storefn_vm::Instance,
    /// Shared with the completion callback of the same `wait` (never borrowed by both at once:
    /// the engine calls one, then the other).
    tokens: Rc<RefCell<Tokens>>,
    cache: Option<Arc<Mutex<TreeCache>>>,
}

fn lock(c: &Mutex<TreeCache>) -> MutexGuard<'_, TreeCache> {
    c.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl StorageFn for Checked {
    fn invoke(
        &mut self,
        t: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        let pin = {
            let mut tk = self.tokens.borrow_mut();
            let fresh = tk.fresh.take() == Some(t);
            let st = tk.states.get(t as usize).copied().unwrap_or_default();
            if st.fault_at.is_some() {
                ctx.done = 1;
                return Ok(0);
            }
            st.pin.filter(|_| fresh)
        };
        match (pin, &self.cache) {
            // The leaf's whole slot: the function's full view, so its proofs hold.
            (Some(p), Some(c)) => self.inst.run_xrp(ctx, lock(c).pinned(p), scratch),
            _ => self.inst.run_xrp(ctx, data, scratch),
        }
    }

    fn on_block(&mut self, t: u64, addr: u64, data: &[u8]) {
        let mut tk = self.tokens.borrow_mut();
        let Some(st) = tk.states.get_mut(t as usize) else { return };
        if st.fault_at.is_some() {
            return;
        }
        if let Some(w) = checksum_fault(data) {
            st.fault_at = Some(addr);
            tk.why.push((t, w));
            return;
        }
        let Some(cache) = &self.cache else { return };
        match PageType::of(data) {
            // Damage the parse finds is the function's to report: the page is just not kept.
            Some(PageType::RowInternal) => drop(lock(cache).put_internal(addr, data)),
            Some(PageType::RowLeaf) => {
                let (Some(pin), Ok(h)) = (st.pin, BlockHeader::parse(data)) else { return };
                if data.len() > HOP_BYTES as usize {
                    return;
                }
                lock(cache).fill(pin, data);
                // The block's own size: the hop may have read the function's whole view.
                let size = u64::from(h.disk_size);
                st.leaf = Some(BlockAddr { offset: addr, size, checksum: h.checksum });
                tk.fresh = Some(t);
            }
            _ => {}
        }
    }
}

/// How an [`XrpTree`] reads.
#[derive(Debug, Clone, Default)]
pub struct XrpOptions {
    /// The tree's block cache, shared by every reader of the tree: lookups walk its internal
    /// pages on the host and read only leaves it lacks.
    pub cache: Option<Arc<Mutex<TreeCache>>>,
    /// O_DIRECT reads (the cache is then the only copy kept: no page cache), falling back to
    /// buffered reads where the file system refuses O_DIRECT.
    pub direct: bool,
}

/// Lookups in one tree by chains of the storage function.
pub struct XrpTree {
    path: PathBuf,
    engine: Engine,
    file: FileId,
    func: Checked,
    /// A cached leaf's lookup: the function runs here, without the engine.
    scratch: Box<[u8]>,
    /// Leaves chains of this batch are reading (the cache's route named them).
    reading: Vec<BlockAddr>,
    /// Lookups waiting for one of `reading` (key index, leaf).
    waiters: Vec<(usize, BlockAddr)>,
    /// Leaves whose chains ended in the last `reap`.
    finished: Vec<BlockAddr>,
    /// Lookups to start again (their leaf's chain ended), before the batch's next keys.
    redo: Vec<usize>,
    /// Lookups the function handed back (answered by the plain reader or WiredTiger).
    pub fallbacks: u64,
    /// Hops of every chain run (pages the function read), cached leaves included.
    pub hops: u64,
}

impl std::fmt::Debug for XrpTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrpTree")
            .field("path", &self.path)
            .field("fallbacks", &self.fallbacks)
            .finish_non_exhaustive()
    }
}

/// Loads and verifies the lookup function for this process.
///
/// # Errors
/// The program does not load or verify (named).
pub(crate) fn instance(path: &std::path::Path) -> Result<storefn_vm::Instance, WtError> {
    let chain = |what: String| WtError::Chain { path: path.into(), what };
    let elf = storefn_progs::must(PROGRAM);
    let prog = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Xrp)
        .map_err(|e| chain(e.to_string()))?;
    storefn_vm::Instance::new(Arc::clone(&prog), storefn_vm::Engine::Jit)
        .or_else(|_| storefn_vm::Instance::new(prog, storefn_vm::Engine::Interp))
        .map_err(|e| chain(e.to_string()))
}

/// A finished lookup's answer from its scratch; `Ok(None)` for damage the function found.
fn answer(s: &[u8]) -> Result<(Outcome, &[u8]), Result<u64, String>> {
    match ChainEnd::parse(s) {
        Ok(ChainEnd::Found(v)) => Ok((Outcome::Found, v)),
        Ok(ChainEnd::NotFound) => Ok((Outcome::NotFound, &[])),
        Ok(ChainEnd::Fallback) => Ok((Outcome::Fallback(Fallback::Function), &[])),
        Ok(ChainEnd::Corrupt(offset)) => Err(Ok(offset)),
        Err(what) => Err(Err(what)),
    }
}

impl XrpTree {
    /// Loads and verifies the function and opens the tree's file (buffered, no cache) on an
    /// engine that keeps up to [`BATCH_CHAINS`] chains in flight.
    ///
    /// # Errors
    /// The program does not load or verify; the engine cannot start or open the file.
    pub fn open(tree: &Tree) -> Result<Self, WtError> {
        Self::open_with(tree, XrpOptions::default())
    }

    /// As [`XrpTree::open`], reading as `opts` says.
    ///
    /// # Errors
    /// As [`XrpTree::open`].
    pub fn open_with(tree: &Tree, opts: XrpOptions) -> Result<Self, WtError> {
        let path: PathBuf = tree.path().into();
        let chain = |what: String| WtError::Chain { path: path.clone(), what };
        let inst = instance(&path)?;
        // Chain reads only: no range reads, no range buffers (a smaller ring and table per
        // reader thread).
        let cfg = EngineConfig {
            ring_depth: 2 * BATCH_CHAINS as u32,
            buffers: BATCH_CHAINS,
            chains: BATCH_CHAINS,
            hop_bytes: HOP_BYTES as usize,
            range_reads: 0,
            range_buf_slots: 0,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(cfg).map_err(|e| chain(e.to_string()))?;
        let file = if opts.direct {
            engine.open(&path, IoMode::Direct).or_else(|_| engine.open(&path, IoMode::Buffered))
        } else {
            engine.open(&path, IoMode::Buffered)
        }
        .map_err(|e| chain(e.to_string()))?;
        let tokens = Tokens {
            states: Vec::with_capacity(BATCH_CHAINS),
            why: Vec::with_capacity(BATCH_CHAINS),
            fresh: None,
        };
        let func = Checked { inst, tokens: Rc::new(RefCell::new(tokens)), cache: opts.cache };
        let scratch = vec![0; storefn_io::limits::SCRATCH_BYTES].into_boxed_slice();
        Ok(XrpTree {
            path,
            engine,
            file,
            func,
            scratch,
            reading: Vec::with_capacity(BATCH_CHAINS),
            waiters: Vec::with_capacity(BATCH_CHAINS),
            finished: Vec::with_capacity(BATCH_CHAINS),
            redo: Vec::with_capacity(BATCH_CHAINS),
            fallbacks: 0,
            hops: 0,
        })
    }

    /// Looks a stored-form key up by one chain; a [`Outcome::Fallback`] is for the caller.
    ///
    /// # Errors
    /// Damage the function or the host's checksum found (named with file and offset), or the
    /// chain failing.
    pub fn get(
        &mut self,
        tree: &Tree,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> Result<Outcome, WtError> {
        let mut r = Ok(Outcome::NotFound);
        self.get_batch(tree, &[key], |_, o, v| {
            if let Ok(Outcome::Found) = o {
                value.clear();
                value.extend_from_slice(v);
            }
            r = o;
        })?;
        r
    }

    /// Looks stored-form keys up with up to [`BATCH_CHAINS`] chains in flight; `each(i, outcome,
    /// value)` hears key i's answer (the value is meaningful for `Found`), in completion order.
    /// With a cache, a key whose leaf is cached is answered at once by the function on the
    /// cached leaf, and a chain starts at the first block the cache lacks.
    ///
    /// # Errors
    /// The engine failing (a lookup's own damage goes to `each`).
    pub fn get_batch<K: AsRef<[u8]>>(
        &mut self,
        tree: &Tree,
        keys: &[K],
        mut each: impl FnMut(usize, Result<Outcome, WtError>, &[u8]),
    ) -> Result<(), WtError> {
        let mut start = ChainStart::of(tree);
        // A newer checkpoint may lie past the size the engine saw when it opened the file.
        if self.engine.file_size(self.file).is_some_and(|n| n < tree.checkpoint().file_size) {
            self.engine.refresh_size(self.file).map_err(|e| self.chain_err(e.to_string()))?;
        }
        // The function reads a leaf with its whole view where the file allows, judged by the
        // size it is given: the smaller of the checkpoint's and the file's (see `file_shrank`).
        if let (Some(s), Some(n)) = (start.as_mut(), self.engine.file_size(self.file)) {
            s.file_size = s.file_size.min(n);
        }
        {
            let mut tk = self.func.tokens.borrow_mut();
            tk.states.clear();
            tk.states.resize(keys.len(), TokenState::default());
            tk.why.clear();
            tk.fresh = None;
        }
        self.reading.clear();
        self.waiters.clear();
        self.redo.clear();
        let (mut next, mut done) = (0usize, 0usize);
        while done < keys.len() {
            while self.engine.live() < BATCH_CHAINS {
                let i = match self.redo.pop() {
                    Some(i) => i,
                    None if next < keys.len() => {
                        next += 1;
                        next - 1
                    }
                    None => break,
                };
                if self.begin(tree, start, i, keys[i].as_ref(), &mut each)? == Began::Answered {
                    done += 1;
                }
            }
            if self.engine.live() > 0 {
                self.finished.clear();
                done += self.reap(&mut each)?;
                self.wake();
            }
        }
        Ok(())
    }

    /// Moves the lookups that waited for a leaf whose chain just ended to `redo`: the leaf is
    /// cached now, or (its chain failed) they read it themselves.
    fn wake(&mut self) {
        let finished = &self.finished;
        self.reading.retain(|a| !finished.contains(a));
        let mut k = 0;
        while k < self.waiters.len() {
            let (i, a) = self.waiters[k];
            if finished.contains(&a) {
                self.waiters.swap_remove(k);
                self.redo.push(i);
            } else {
                k += 1;
            }
        }
    }

    /// Re-reads the file's size; whether it shrank. WiredTiger truncates free blocks at a
    /// file's end while it checkpoints, before its metadata names the new checkpoint, so the
    /// live checkpoint's recorded size can exceed the file: a leaf's view read to that size
    /// comes back short, and is read again within the file.
    ///
    /// # Errors
    /// The file's size cannot be read.
    pub fn file_shrank(&mut self) -> Result<bool, WtError> {
        let before = self.engine.file_size(self.file);
        let now = self.engine.refresh_size(self.file).map_err(|e| self.chain_err(e.to_string()))?;
        Ok(now < before)
    }

    fn chain_err(&self, what: String) -> WtError {
        WtError::Chain { path: self.path.clone(), what }
    }

    /// Starts lookup `i`: answers it at once (from the cache, or without the function), submits
    /// its chain, or has it wait for a chain of this batch reading its leaf.
    fn begin(
        &mut self,
        tree: &Tree,
        start: Option<ChainStart>,
        i: usize,
        key: &[u8],
        each: &mut impl FnMut(usize, Result<Outcome, WtError>, &[u8]),
    ) -> Result<Began, WtError> {
        let st = match start {
            Some(st) if key.len() <= abi::KEY_MAX => st,
            _ => {
                let o = if tree.checkpoint().root.is_none() {
                    Outcome::NotFound
                } else {
                    self.fallbacks += 1;
                    Outcome::Fallback(Fallback::Function)
                };
                each(i, Ok(o), &[]);
                return Ok(Began::Answered);
            }
        };
        let (from, pin, reads_leaf) = match self.func.cache.clone() {
            None => (st.root, None, None),
            Some(cache) => match self.through_cache(&cache, st, i, key, each) {
                Cached::Done(b) => return Ok(b),
                Cached::Chain { from, pin, reads_leaf } => (from, pin, reads_leaf),
            },
        };
        {
            let mut tk = self.func.tokens.borrow_mut();
            tk.states[i].pin = pin;
            tk.states[i].reads_leaf = reads_leaf.filter(|_| pin.is_some());
        }
        let st = ChainStart { root: from, ..st };
        let submitted =
            self.engine.submit_chain(self.file, from.offset, from.size, i as u64, |s| {
                st.fill(key, 0, s);
            });
        if let Err(e) = submitted {
            if let (Some(p), Some(c)) = (pin, &self.func.cache) {
                lock(c).release(p);
            }
            return Err(self.chain_err(e.to_string()));
        }
        if let (Some(a), Some(_)) = (reads_leaf, pin) {
            self.reading.push(a);
        }
        Ok(Began::Submitted)
    }

    /// Lookup `i` through the cache: answered from a cached leaf, waiting for a chain of this
    /// batch that reads its leaf, or a chain to start at the first block the cache lacks (with a
    /// slot lent for its leaf).
    fn through_cache(
        &mut self,
        cache: &Mutex<TreeCache>,
        st: ChainStart,
        i: usize,
        key: &[u8],
        each: &mut impl FnMut(usize, Result<Outcome, WtError>, &[u8]),
    ) -> Cached {
        let mut c = lock(cache);
        let (from, reads_leaf) = match c.route(st.root, key, st.file_size) {
            Err((offset, what)) => {
                drop(c);
                let path = self.path.clone();
                each(i, Err(WtError::Corrupt { path, offset, what }), &[]);
                return Cached::Done(Began::Answered);
            }
            Ok(Route::NotFound) => {
                drop(c);
                each(i, Ok(Outcome::NotFound), &[]);
                return Cached::Done(Began::Answered);
            }
            Ok(Route::Fallback(f)) => {
                drop(c);
                self.fallbacks += 1;
                each(i, Ok(Outcome::Fallback(f)), &[]);
                return Cached::Done(Began::Answered);
            }
            Ok(Route::Leaf(a)) if c.leaf(a).is_some() => {
                c.count(a, true);
                let (o, v) = self.run_cached(&mut c, st, a, key);
                drop(c);
                each(i, o, v_of(&self.scratch, v));
                return Cached::Done(Began::Answered);
            }
            Ok(Route::Leaf(a)) if self.reading.contains(&a) => {
                self.waiters.push((i, a));
                return Cached::Done(Began::Waiting);
            }
            Ok(Route::Leaf(a)) => {
                c.count(a, false);
                (a, Some(a))
            }
            Ok(Route::Chain(a)) => (a, None),
        };
        // A leaf not admitted has no slot: its chain reads and searches it in its own buffer.
        let pin = match reads_leaf {
            Some(a) => c.pin_leaf(a),
            None => c.pin(),
        };
        Cached::Chain { from, pin, reads_leaf }
    }

    /// Runs the function on the cached leaf at `leaf` for `key`; the value, when found, is the
    /// range of the scratch it names.
    fn run_cached(
        &mut self,
        c: &mut TreeCache,
        st: ChainStart,
        leaf: BlockAddr,
        key: &[u8],
    ) -> (Result<Outcome, WtError>, Option<std::ops::Range<usize>>) {
        let view = c.leaf(leaf).expect("the caller found it cached");
        self.scratch[..abi::VALUE].fill(0);
        ChainStart { root: leaf, ..st }.fill(key, 0, &mut self.scratch);
        let mut ctx = XrpCtx::default();
        self.hops += 1;
        let r = self.func.inst.run_xrp(&mut ctx, view, &mut self.scratch);
        let path = &self.path;
        match r {
            Err(VmError::BudgetExhausted { .. }) => {
                self.fallbacks += 1;
                return (Ok(Outcome::Fallback(Fallback::Function)), None);
            }
            Err(e) => return (Err(chain_error(path, e.to_string())), None),
            Ok(_) if ctx.done == 0 => {
                let what = "the function asked for another block after a leaf".to_string();
                return (Err(function_corrupt_why(path, leaf.offset, what)), None);
            }
            Ok(_) => {}
        }
        match answer(&self.scratch) {
            Ok((Outcome::Found, v)) => {
                let at = abi::VALUE;
                (Ok(Outcome::Found), Some(at..at + v.len()))
            }
            Ok((o, _)) => {
                if matches!(o, Outcome::Fallback(_)) {
                    self.fallbacks += 1;
                }
                (Ok(o), None)
            }
            Err(Ok(offset)) => (Err(function_corrupt(path, offset)), None),
            Err(Err(what)) => (Err(chain_error(path, what)), None),
        }
    }

    /// Waits for the first chain to finish and delivers every one finished; how many.
    fn reap(
        &mut self,
        each: &mut impl FnMut(usize, Result<Outcome, WtError>, &[u8]),
    ) -> Result<usize, WtError> {
        let (path, tokens) = (&self.path, Rc::clone(&self.func.tokens));
        let cache = self.func.cache.clone();
        let (fallbacks, hops, finished) = (&mut self.fallbacks, &mut self.hops, &mut self.finished);
        let mut reaped = 0;
        let mut deliver = |c: storefn_io::Completion<'_>| {
            reaped += 1;
            let i = c.token as usize;
            if let Ok(st) = &c.result {
                *hops += u64::from(st.hops);
            }
            let (state, why) = {
                let mut tk = tokens.borrow_mut();
                let st = tk.states.get_mut(i).map(std::mem::take).unwrap_or_default();
                let why = st.fault_at.and_then(|_| {
                    let k = tk.why.iter().position(|(t, _)| *t == c.token)?;
                    Some(tk.why.swap_remove(k).1)
                });
                (st, why)
            };
            let o = match (state.fault_at, c.result) {
                (Some(offset), _) => Err(WtError::Corrupt {
                    path: path.clone(),
                    offset,
                    what: why.unwrap_or_default(),
                }),
                // A page whose scan costs more than an invocation's instruction budget (a
                // 32 KiB leaf of tiny items): the plain reader answers, as for anything
                // else the function does not handle.
                (
                    None,
                    Err(storefn_io::ChainError::Fault {
                        fault: VmError::BudgetExhausted { .. },
                        ..
                    }),
                ) => Ok((Outcome::Fallback(Fallback::Function), &[][..])),
                (None, Err(e)) => Err(chain_error(path, e.to_string())),
                (None, Ok(_)) => answer(c.scratch).map_err(|e| match e {
                    Ok(offset) => function_corrupt(path, offset),
                    Err(what) => chain_error(path, what),
                }),
            };
            settle(cache.as_deref(), state, o.is_ok());
            finished.extend(state.reads_leaf);
            match o {
                Ok((o, v)) => {
                    if matches!(o, Outcome::Fallback(_)) {
                        *fallbacks += 1;
                    }
                    each(i, Ok(o), v);
                }
                Err(e) => each(i, Err(e), &[]),
            }
        };
        // The first arrival suffices: the caller refills the freed slots at once.
        self.engine
            .wait(1, &mut self.func, &mut deliver)
            .map_err(|e| chain_error(&self.path, e.to_string()))?;
        Ok(reaped)
    }
}

/// A finished chain's slot: kept for lookups when the chain read a leaf into it and ended
/// without damage, returned otherwise.
fn settle(cache: Option<&Mutex<TreeCache>>, st: TokenState, ok: bool) {
    let (Some(c), Some(pin)) = (cache, st.pin) else { return };
    let mut c = lock(c);
    match st.leaf {
        Some(a) if ok => c.commit(pin, a),
        _ => c.release(pin),
    }
}

/// The scratch bytes a cached lookup's value range names (none: empty).
fn v_of(s: &[u8], r: Option<std::ops::Range<usize>>) -> &[u8] {
    r.map_or(&[], |r| &s[r])
}

fn chain_error(path: &std::path::Path, what: String) -> WtError {
    WtError::Chain { path: path.into(), what }
}

fn function_corrupt_why(path: &std::path::Path, offset: u64, what: String) -> WtError {
    WtError::Corrupt { path: path.into(), offset, what }
}

/// The error of a chain the function stopped as corrupt at `offset`.
pub(crate) fn function_corrupt(path: &std::path::Path, offset: u64) -> WtError {
    WtError::Corrupt {
        path: path.into(),
        offset,
        what: "the storage function found this block damaged or not the one its address named"
            .into(),
    }
}
