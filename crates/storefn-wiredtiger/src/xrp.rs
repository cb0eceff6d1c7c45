//! The lookup as a storage-function chain (`progs/engines/wiredtiger/lookup.bpf.c`) on the
//! storefn-io engine: one hop per page. The host checks every block's CRC-32C as it arrives;
//! the function checks each block is the one its parent named. Scratch ABI: docs/FORMAT.md,
//! "WiredTiger lookup scratch ABI".

use crate::error::WtError;
use crate::format::{
    crc32c, BlockHeader, BLOCK_DATA_CKSUM, CHECKSUM_SKIP_BYTES, PAGE_PREFIX_BYTES,
};
use crate::page::Fallback;
use crate::tree::{Outcome, Tree};
use std::path::PathBuf;
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
    pub const KEY: usize = 64;
    pub const KEY_MAX: usize = 512;
    pub const VALUE: usize = 1088;
    pub const VALUE_MAX: usize = 3008;
    pub const FOUND: u32 = 1;
    pub const NOT_FOUND: u32 = 2;
    pub const FALLBACK: u32 = 3;
    pub const CORRUPT: u32 = 4;
}

/// The block reads of one hop: the function's data view today.
pub const HOP_BYTES: u32 = storefn_io::limits::DATA_VIEW_BYTES as u32;

/// The function plus the host's checksum check of every block a chain reads.
struct Checked {
    inst: storefn_vm::Instance,
    /// The first block whose checksum failed in the current chain.
    bad: Option<(u64, String)>,
}

impl StorageFn for Checked {
    fn invoke(
        &mut self,
        _t: u64,
        ctx: &mut XrpCtx,
        data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        if self.bad.is_some() {
            ctx.done = 1;
            return Ok(0);
        }
        self.inst.run_xrp(ctx, data, scratch)
    }

    fn on_block(&mut self, _t: u64, addr: u64, data: &[u8]) {
        if self.bad.is_some() {
            return;
        }
        let Ok(h) = BlockHeader::parse(data) else {
            self.bad = Some((
                addr,
                format!(
                    "block of {} bytes, shorter than its headers ({PAGE_PREFIX_BYTES})",
                    data.len()
                ),
            ));
            return;
        };
        let n = if h.flags & BLOCK_DATA_CKSUM != 0 {
            data.len()
        } else {
            CHECKSUM_SKIP_BYTES.min(data.len())
        };
        let mut copy = data[..n].to_vec();
        copy[BlockHeader::CHECKSUM_AT..BlockHeader::CHECKSUM_AT + 4].fill(0);
        let sum = crc32c(&copy);
        if sum != h.checksum {
            self.bad = Some((
                addr,
                format!("checksum mismatch: stored {:#010x}, computed {sum:#010x}", h.checksum),
            ));
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
}

impl std::fmt::Debug for XrpTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrpTree")
            .field("path", &self.path)
            .field("fallbacks", &self.fallbacks)
            .finish_non_exhaustive()
    }
}

impl XrpTree {
    /// Loads and verifies the function and opens the tree's file on an engine.
    ///
    /// # Errors
    /// The program does not load or verify; the engine cannot start or open the file.
    pub fn open(tree: &Tree) -> Result<Self, WtError> {
        let path: PathBuf = tree.path().into();
        let chain = |what: String| WtError::Chain { path: path.clone(), what };
        let elf = storefn_progs::must(PROGRAM);
        let prog = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Xrp)
            .map_err(|e| chain(e.to_string()))?;
        let inst = storefn_vm::Instance::new(Arc::clone(&prog), storefn_vm::Engine::Jit)
            .or_else(|_| storefn_vm::Instance::new(prog, storefn_vm::Engine::Interp))
            .map_err(|e| chain(e.to_string()))?;
        let cfg = EngineConfig { ring_depth: 8, buffers: 4, chains: 1, ..EngineConfig::default() };
        let mut engine = Engine::new(cfg).map_err(|e| chain(e.to_string()))?;
        let file = engine.open(&path, IoMode::Buffered).map_err(|e| chain(e.to_string()))?;
        Ok(XrpTree { path, engine, file, func: Checked { inst, bad: None }, fallbacks: 0 })
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
        let ck = tree.checkpoint();
        let Some(root) = ck.root else { return Ok(Outcome::NotFound) };
        if key.len() > abi::KEY_MAX || root.size > u64::from(HOP_BYTES) {
            self.fallbacks += 1;
            return Ok(Outcome::Fallback(Fallback::Function));
        }
        let fill = |s: &mut [u8]| {
            s[abi::KEY_LEN..abi::KEY_LEN + 4].copy_from_slice(&(key.len() as u32).to_le_bytes());
            s[abi::HOP_BYTES..abi::HOP_BYTES + 4].copy_from_slice(&HOP_BYTES.to_le_bytes());
            s[abi::ALLOC..abi::ALLOC + 8].copy_from_slice(&tree.allocation_size().to_le_bytes());
            s[abi::FILE_SIZE..abi::FILE_SIZE + 8].copy_from_slice(&ck.file_size.to_le_bytes());
            s[abi::CUR_OFFSET..abi::CUR_OFFSET + 8].copy_from_slice(&root.offset.to_le_bytes());
            s[abi::CUR_SIZE..abi::CUR_SIZE + 4].copy_from_slice(&(root.size as u32).to_le_bytes());
            s[abi::CUR_CHECKSUM..abi::CUR_CHECKSUM + 4]
                .copy_from_slice(&root.checksum.to_le_bytes());
            s[abi::KEY..abi::KEY + key.len()].copy_from_slice(key);
        };
        let chain = |what: String| WtError::Chain { path: self.path.clone(), what };
        self.func.bad = None;
        self.engine
            .submit_chain(self.file, root.offset, root.size, 0, fill)
            .map_err(|e| chain(e.to_string()))?;
        let mut out: Option<Result<(u32, u64), String>> = None;
        let mut buf = std::mem::take(value);
        self.engine
            .wait(1, &mut self.func, |c| {
                out = Some(match c.result {
                    Err(e) => Err(e.to_string()),
                    Ok(_) => {
                        let s = c.scratch;
                        let u32_at =
                            |o: usize| u32::from_le_bytes(s[o..o + 4].try_into().expect("4"));
                        let status = u32_at(abi::STATUS);
                        let at = u64::from_le_bytes(
                            s[abi::CUR_OFFSET..abi::CUR_OFFSET + 8].try_into().expect("8"),
                        );
                        let n = (u32_at(abi::VALUE_LEN) as usize).min(abi::VALUE_MAX);
                        buf.clear();
                        buf.extend_from_slice(&s[abi::VALUE..abi::VALUE + n]);
                        Ok((status, at))
                    }
                });
            })
            .map_err(|e| chain(e.to_string()))?;
        *value = buf;
        if let Some((offset, what)) = self.func.bad.take() {
            return Err(WtError::Corrupt { path: self.path.clone(), offset, what });
        }
        let (status, at) =
            out.ok_or_else(|| chain("the chain did not complete".into()))?.map_err(chain)?;
        match status {
            abi::FOUND => Ok(Outcome::Found),
            abi::NOT_FOUND => Ok(Outcome::NotFound),
            abi::FALLBACK => {
                self.fallbacks += 1;
                Ok(Outcome::Fallback(Fallback::Function))
            }
            abi::CORRUPT => Err(WtError::Corrupt {
                path: self.path.clone(),
                offset: at,
                what:
                    "the storage function found this block damaged or not the one its address named"
                        .into(),
            }),
            s => Err(chain(format!("status {s} is not in the scratch ABI"))),
        }
    }
}
