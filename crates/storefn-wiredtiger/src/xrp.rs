//! The lookup as a storage-function chain (`progs/engines/wiredtiger/lookup.bpf.c`) on the
//! storefn-io engine: one hop per page. The host checks every block's CRC-32C as it arrives;
//! the function checks each block is the one its parent named. Scratch ABI: docs/FORMAT.md,
//! "WiredTiger lookup scratch ABI".

use crate::error::WtError;
use crate::format::{
    checksum_with_hole, BlockHeader, BLOCK_DATA_CKSUM, CHECKSUM_SKIP_BYTES, PAGE_PREFIX_BYTES,
};
use crate::page::Fallback;
use crate::tree::{Outcome, Tree};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
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
pub const BATCH_CHAINS: usize = 32;

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

/// Per chain (its token): the first block whose checksum failed, with why.
type Faults = Rc<RefCell<Vec<Option<(u64, String)>>>>;

/// The function plus the host's checksum check of every block a chain reads.
struct Checked {
    inst: storefn_vm::Instance,
    /// Per chain (its token): the first block whose checksum failed. Shared with the
    /// completion callback of the same `wait` (never borrowed by both at once: the engine calls
    /// one, then the other).
    bad: Faults,
}

impl StorageFn for Checked {
    fn invoke(
        &mut self,
        t: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        if self.bad.borrow().get(t as usize).is_some_and(Option::is_some) {
            ctx.done = 1;
            return Ok(0);
        }
        self.inst.run_xrp(ctx, data, scratch)
    }

    fn on_block(&mut self, t: u64, addr: u64, data: &[u8]) {
        let mut bad = self.bad.borrow_mut();
        let Some(slot) = bad.get_mut(t as usize) else { return };
        if slot.is_none() {
            *slot = checksum_fault(data).map(|w| (addr, w));
        }
    }
}

/// Lookups in one tree by chains of the storage function.
pub struct XrpTree {
    path: PathBuf,
    engine: Engine,
    file: FileId,
    func: Checked,
    /// Lookups the function handed back (answered by the plain reader or WiredTiger).
    pub fallbacks: u64,
    /// Hops of every chain run (pages the function read).
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

impl XrpTree {
    /// Loads and verifies the function and opens the tree's file on an engine that keeps up to
    /// [`BATCH_CHAINS`] chains in flight.
    ///
    /// # Errors
    /// The program does not load or verify; the engine cannot start or open the file.
    pub fn open(tree: &Tree) -> Result<Self, WtError> {
        let path: PathBuf = tree.path().into();
        let chain = |what: String| WtError::Chain { path: path.clone(), what };
        let inst = instance(&path)?;
        let cfg = EngineConfig {
            ring_depth: 2 * BATCH_CHAINS as u32,
            buffers: BATCH_CHAINS,
            chains: BATCH_CHAINS,
            hop_bytes: HOP_BYTES as usize,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(cfg).map_err(|e| chain(e.to_string()))?;
        let file = engine.open(&path, IoMode::Buffered).map_err(|e| chain(e.to_string()))?;
        let func = Checked { inst, bad: Rc::new(RefCell::new(Vec::with_capacity(BATCH_CHAINS))) };
        Ok(XrpTree { path, engine, file, func, fallbacks: 0, hops: 0 })
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
    ///
    /// # Errors
    /// The engine failing (a lookup's own damage goes to `each`).
    pub fn get_batch<K: AsRef<[u8]>>(
        &mut self,
        tree: &Tree,
        keys: &[K],
        mut each: impl FnMut(usize, Result<Outcome, WtError>, &[u8]),
    ) -> Result<(), WtError> {
        let chain_err = |p: &PathBuf, what: String| WtError::Chain { path: p.clone(), what };
        let start = ChainStart::of(tree);
        // A newer checkpoint may lie past the size the engine saw when it opened the file.
        if self.engine.file_size(self.file).is_some_and(|n| n < tree.checkpoint().file_size) {
            self.engine
                .refresh_size(self.file)
                .map_err(|e| chain_err(&self.path, e.to_string()))?;
        }
        {
            let mut bad = self.func.bad.borrow_mut();
            bad.clear();
            bad.resize(keys.len(), None);
        }
        let (mut next, mut done) = (0usize, 0usize);
        while done < keys.len() {
            while next < keys.len() && self.engine.live() < BATCH_CHAINS {
                let key = keys[next].as_ref();
                match start {
                    Some(st) if key.len() <= abi::KEY_MAX => {
                        self.engine
                            .submit_chain(
                                self.file,
                                st.root.offset,
                                st.root.size,
                                next as u64,
                                |s| {
                                    st.fill(key, 0, s);
                                },
                            )
                            .map_err(|e| chain_err(&self.path, e.to_string()))?;
                    }
                    _ => {
                        let o = if tree.checkpoint().root.is_none() {
                            Outcome::NotFound
                        } else {
                            self.fallbacks += 1;
                            Outcome::Fallback(Fallback::Function)
                        };
                        each(next, Ok(o), &[]);
                        done += 1;
                    }
                }
                next += 1;
            }
            if self.engine.live() == 0 {
                continue;
            }
            let (path, bad) = (&self.path, Rc::clone(&self.func.bad));
            let (fallbacks, hops) = (&mut self.fallbacks, &mut self.hops);
            let mut reaped = 0;
            let mut deliver = |c: storefn_io::Completion<'_>| {
                reaped += 1;
                let i = c.token as usize;
                if let Ok(st) = &c.result {
                    *hops += u64::from(st.hops);
                }
                let fault = bad.borrow_mut().get_mut(i).and_then(Option::take);
                let o = match (fault, c.result) {
                    (Some((offset, what)), _) => {
                        Err(WtError::Corrupt { path: path.clone(), offset, what })
                    }
                    // A page whose scan costs more than an invocation's instruction budget (a
                    // 32 KiB leaf of tiny items): the plain reader answers, as for anything
                    // else the function does not handle.
                    (
                        None,
                        Err(storefn_io::ChainError::Fault {
                            fault: VmError::BudgetExhausted { .. },
                            ..
                        }),
                    ) => {
                        *fallbacks += 1;
                        Ok(Outcome::Fallback(Fallback::Function))
                    }
                    (None, Err(e)) => Err(chain_err(path, e.to_string())),
                    (None, Ok(_)) => match ChainEnd::parse(c.scratch) {
                        Ok(ChainEnd::Found(v)) => return each(i, Ok(Outcome::Found), v),
                        Ok(ChainEnd::NotFound) => Ok(Outcome::NotFound),
                        Ok(ChainEnd::Fallback) => {
                            *fallbacks += 1;
                            Ok(Outcome::Fallback(Fallback::Function))
                        }
                        Ok(ChainEnd::Corrupt(offset)) => Err(function_corrupt(path, offset)),
                        Err(what) => Err(chain_err(path, what)),
                    },
                };
                each(i, o, &[]);
            };
            // The first arrival suffices: the loop above refills the freed slots at once.
            self.engine
                .wait(1, &mut self.func, &mut deliver)
                .map_err(|e| chain_err(&self.path, e.to_string()))?;
            done += reaped;
        }
        Ok(())
    }
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
