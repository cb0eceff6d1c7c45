//! Offload functions: DDS's four entry points (pred, func, cache, invalidate) as verified
//! storefn-vm programs of type `offload`, wired to the [`CacheTable`] (which implements the VM's
//! [`OffloadTable`] trait) and to the file service ([`OffloadHooks`] runs `cache` after each
//! host write and `invalidate` before each host read and after each write).
//!
//! Outputs are checked, not trusted: a verdict count above the batch bound, a cache item count
//! above what fits in `out`, and so on, are [`OffloadError::BadOutput`] naming the entry point.

use std::sync::Arc;

use storefn_vm::offload::{
    OffloadCtx, OffloadTable, ReadOp, TableInsertError, TableItem, OP_READ, OP_WRITE,
    READ_OP_BYTES, TABLE_ITEM_BYTES, VERDICT_HOST, VERDICT_OFFLOAD,
};
use storefn_vm::{Engine, Instance, ProgType, VmError};

use crate::host::FileHooks;
use crate::limits::{MAX_BATCH_REQUESTS, MAX_CACHE_ITEMS, MAX_INVALIDATE_KEYS};
use crate::table::{CacheTable, Inserted, Item};

/// ELF sections of the four entry points.
pub const ENTRY_SECTIONS: [&str; 4] =
    ["offload/pred", "offload/func", "offload/cache", "offload/invalidate"];

impl OffloadTable for CacheTable {
    fn lookup(&self, key: u64) -> Option<TableItem> {
        self.get(key).map(|i| TableItem {
            key: i.key,
            version: i.version,
            file: i.file,
            size: i.size,
            offset: i.offset,
        })
    }

    fn insert(&self, t: TableItem) -> Result<(), TableInsertError> {
        let item =
            Item { key: t.key, version: t.version, file: t.file, offset: t.offset, size: t.size };
        match CacheTable::insert(self, item) {
            Ok(Inserted::Stale { .. }) => Err(TableInsertError::Stale),
            Ok(_) => Ok(()),
            Err(_) => Err(TableInsertError::Full),
        }
    }

    fn delete(&self, key: u64) -> bool {
        self.remove(key).is_some()
    }
}

/// Offload errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OffloadError {
    /// An entry point failed to load, verify or compile.
    #[error("offload {entry}: {source}")]
    Load {
        /// The section.
        entry: &'static str,
        /// Why.
        source: storefn_vm::Error,
    },
    /// The program faulted (bad access, budget, helper).
    #[error("offload {entry}: {source}")]
    Fault {
        /// The section.
        entry: &'static str,
        /// The fault.
        source: VmError,
    },
    /// The program returned something out of range, named.
    #[error("offload {entry}: {what}")]
    BadOutput {
        /// The section.
        entry: &'static str,
        /// What.
        what: String,
    },
}

/// What `pred` decided for one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdicts(pub Vec<bool>);

/// The four entry points, instantiated once each with the table attached.
#[derive(Debug)]
pub struct OffloadFunctions {
    pred: Instance,
    func: Instance,
    cache: Instance,
    invalidate: Instance,
    table: Arc<CacheTable>,
    verdicts: Vec<u8>,
    items: Vec<u8>,
    keys: Vec<u8>,
}

impl OffloadFunctions {
    /// Loads, verifies and prepares the four sections of `elf` on `engine`, reaching `table`.
    ///
    /// # Errors
    /// `Load` naming the section that failed.
    pub fn load(elf: &[u8], engine: Engine, table: Arc<CacheTable>) -> Result<Self, OffloadError> {
        let make = |entry: &'static str| -> Result<Instance, OffloadError> {
            let prog = storefn_vm::load_verified(elf, Some(entry), ProgType::Offload)
                .map_err(|source| OffloadError::Load { entry, source })?;
            let mut inst = Instance::new(prog, engine)
                .map_err(|source| OffloadError::Load { entry, source })?;
            let shared: Arc<dyn OffloadTable> = Arc::clone(&table) as Arc<dyn OffloadTable>;
            inst.host_mut().offload_table = Some(shared);
            Ok(inst)
        };
        Ok(Self {
            pred: make(ENTRY_SECTIONS[0])?,
            func: make(ENTRY_SECTIONS[1])?,
            cache: make(ENTRY_SECTIONS[2])?,
            invalidate: make(ENTRY_SECTIONS[3])?,
            table,
            verdicts: vec![0; MAX_BATCH_REQUESTS],
            items: vec![0; MAX_CACHE_ITEMS * TABLE_ITEM_BYTES],
            keys: vec![0; MAX_INVALIDATE_KEYS * 8],
        })
    }

    /// The table the functions use.
    pub fn table(&self) -> &Arc<CacheTable> {
        &self.table
    }

    /// `pred` on a batched message: one verdict per request (true = offload).
    ///
    /// # Errors
    /// `Fault`, or `BadOutput` for a count above [`MAX_BATCH_REQUESTS`], a negative count or a
    /// verdict byte other than 0/1.
    pub fn pred(&mut self, msg: &[u8]) -> Result<Verdicts, OffloadError> {
        let mut out = Vec::new();
        self.pred_into(msg, &mut out)?;
        Ok(Verdicts(out))
    }

    /// [`pred`](Self::pred) into a reused vector (cleared first): no allocation once it has
    /// grown to the batch size.
    ///
    /// # Errors
    /// As [`pred`](Self::pred).
    pub fn pred_into(&mut self, msg: &[u8], out: &mut Vec<bool>) -> Result<(), OffloadError> {
        out.clear();
        let entry = ENTRY_SECTIONS[0];
        let mut ctx = OffloadCtx::default();
        // A verdict the program leaves unwritten reads as "host" (the safe answer), never as a
        // stale verdict from the previous batch.
        self.verdicts.fill(VERDICT_HOST);
        let r = self
            .pred
            .run_offload(&mut ctx, msg, &mut self.verdicts)
            .map_err(|source| OffloadError::Fault { entry, source })?;
        let n = usize::try_from(r as i64).ok().filter(|&n| n <= MAX_BATCH_REQUESTS).ok_or_else(
            || OffloadError::BadOutput { entry, what: format!("returned {} requests", r as i64) },
        )?;
        for (i, &v) in self.verdicts[..n].iter().enumerate() {
            match v {
                VERDICT_HOST => out.push(false),
                VERDICT_OFFLOAD => out.push(true),
                other => {
                    return Err(OffloadError::BadOutput {
                        entry,
                        what: format!("verdict {other} for request {i}"),
                    })
                }
            }
        }
        Ok(())
    }

    /// `func` for request `index` of `msg`: the read to serve it, or `None` (forward to host).
    ///
    /// # Errors
    /// `Fault`.
    pub fn func(&mut self, msg: &[u8], index: u32) -> Result<Option<ReadOp>, OffloadError> {
        let entry = ENTRY_SECTIONS[1];
        let mut ctx = OffloadCtx { index, ..OffloadCtx::default() };
        let mut out = [0u8; READ_OP_BYTES];
        let r = self
            .func
            .run_offload(&mut ctx, msg, &mut out)
            .map_err(|source| OffloadError::Fault { entry, source })?;
        if (r as i64) < 0 {
            return Ok(None);
        }
        let word = |a: usize| u32::from_le_bytes(out[a..a + 4].try_into().expect("4 bytes"));
        Ok(Some(ReadOp {
            file: word(0),
            size: word(4),
            offset: u64::from_le_bytes(out[8..16].try_into().expect("8 bytes")),
        }))
    }

    /// `cache` after a host write of `data` at `offset` of `file`: inserts the items it returns.
    /// Returns how many were inserted (stale ones are skipped; a full table skips the item:
    /// the request then goes to the host, which is always correct).
    ///
    /// # Errors
    /// `Fault`, or `BadOutput` for a count above what `out` holds.
    pub fn cache(&mut self, file: u32, offset: u64, data: &[u8]) -> Result<usize, OffloadError> {
        let entry = ENTRY_SECTIONS[2];
        let mut ctx = OffloadCtx {
            file,
            offset,
            io_len: data.len() as u32,
            op: OP_WRITE,
            ..OffloadCtx::default()
        };
        let r = self
            .cache
            .run_offload(&mut ctx, data, &mut self.items)
            .map_err(|source| OffloadError::Fault { entry, source })?;
        let n =
            usize::try_from(r as i64).ok().filter(|&n| n <= MAX_CACHE_ITEMS).ok_or_else(|| {
                OffloadError::BadOutput { entry, what: format!("returned {} items", r as i64) }
            })?;
        let mut inserted = 0;
        for raw in self.items[..n * TABLE_ITEM_BYTES].chunks_exact(TABLE_ITEM_BYTES) {
            let u64_at = |a: usize| u64::from_le_bytes(raw[a..a + 8].try_into().expect("8 bytes"));
            let u32_at = |a: usize| u32::from_le_bytes(raw[a..a + 4].try_into().expect("4 bytes"));
            let item = Item {
                key: u64_at(0),
                version: u64_at(8),
                file: u32_at(16),
                size: u32_at(20),
                offset: u64_at(24),
            };
            if matches!(
                self.table.insert(item),
                Ok(Inserted::New { .. } | Inserted::Replaced { .. })
            ) {
                inserted += 1;
            }
        }
        Ok(inserted)
    }

    /// `invalidate` for a host read (`write == false`) or write of `len` bytes at `offset`:
    /// removes the keys it returns. Returns how many were present.
    ///
    /// # Errors
    /// `Fault`, or `BadOutput` for a count above what `out` holds.
    pub fn invalidate(
        &mut self,
        write: bool,
        file: u32,
        offset: u64,
        len: u32,
    ) -> Result<usize, OffloadError> {
        let entry = ENTRY_SECTIONS[3];
        let op = if write { OP_WRITE } else { OP_READ };
        let mut ctx = OffloadCtx { file, offset, io_len: len, op, ..OffloadCtx::default() };
        let r = self
            .invalidate
            .run_offload(&mut ctx, &[], &mut self.keys)
            .map_err(|source| OffloadError::Fault { entry, source })?;
        let n = usize::try_from(r as i64).ok().filter(|&n| n <= MAX_INVALIDATE_KEYS).ok_or_else(
            || OffloadError::BadOutput { entry, what: format!("returned {} keys", r as i64) },
        )?;
        Ok(self.keys[..n * 8]
            .chunks_exact(8)
            .filter(|k| {
                self.table.remove(u64::from_le_bytes((*k).try_into().expect("8 bytes"))).is_some()
            })
            .count())
    }
}

/// [`FileHooks`] running the offload functions in the file service: `invalidate` before each
/// read and after each write, then `cache` after each write. A function fault is counted and
/// the hook does nothing more (the table then misses, and requests go to the host).
#[derive(Debug)]
pub struct OffloadHooks {
    /// The functions.
    pub functions: OffloadFunctions,
    /// Faults and bad outputs seen.
    pub errors: u64,
}

impl FileHooks for OffloadHooks {
    fn on_write(&mut self, file: u32, offset: u64, data: &[u8]) {
        let r = self
            .functions
            .invalidate(true, file, offset, data.len() as u32)
            .and_then(|_| self.functions.cache(file, offset, data));
        self.errors += u64::from(r.is_err());
    }

    fn on_read(&mut self, file: u32, offset: u64, len: u32) {
        self.errors += u64::from(self.functions.invalidate(false, file, offset, len).is_err());
    }
}
