//! The `offload` program type (DDS's offload functions): one context layout shared by
//! the four entry points, and the cache-table helpers.
//!
//! Entry points (one ELF section each, all of type `offload`; docs/FORMAT.md, "Offload context"):
//! - `pred`: `msg` = a batched request message; writes one verdict byte per request into `out`
//!   ([`VERDICT_HOST`] / [`VERDICT_OFFLOAD`]); returns the number of requests.
//! - `func`: `msg` = the message, `index` = the request the predicate offloaded; writes a
//!   [`ReadOp`] into `out`; returns 0, or a negative value to send the request to the host.
//! - `cache`: run by the file service on each host write; `msg` = the written data, `file`,
//!   `offset`, `io_len` say where; writes [`TableItem`]s into `out`; returns how many.
//! - `invalidate`: run on each host read (`op` = [`OP_READ`]) or write ([`OP_WRITE`]); writes the
//!   keys (`u64`) to drop into `out`; returns how many.
//!
//! The table is reached through [`OffloadTable`], a trait the VM defines and the DDS crate
//! implements (data flows one way: the VM never names the offload crate). Helpers check every
//! item pointer against the invocation's regions like a load or store.

use std::sync::Arc;

/// `msg` bytes; read-only.
pub const OFF_MSG: usize = 0;
/// `msg_len`.
pub const OFF_MSG_LEN: usize = 8;
/// `index`: the request (func).
pub const OFF_INDEX: usize = 12;
/// `op`: [`OP_READ`] / [`OP_WRITE`] (invalidate), 0 otherwise.
pub const OFF_OP: usize = 16;
/// `file`: file id of the I/O (cache, invalidate).
pub const OFF_FILE: usize = 20;
/// `offset`: file offset of the I/O (cache, invalidate).
pub const OFF_OFFSET: usize = 24;
/// `out`: the output buffer; read-write.
pub const OFF_OUT: usize = 32;
/// `out_len`: bytes of `out`.
pub const OFF_OUT_LEN: usize = 40;
/// `io_len`: bytes of the I/O (cache, invalidate).
pub const OFF_IO_LEN: usize = 44;
/// Context bytes.
pub const OFFLOAD_CTX_BYTES: usize = 48;

/// `pred` verdict: forward the request to the host application.
pub const VERDICT_HOST: u8 = 0;
/// `pred` verdict: serve it here (run `func`).
pub const VERDICT_OFFLOAD: u8 = 1;
/// `invalidate` on a host read.
pub const OP_READ: u32 = 1;
/// `invalidate` on a host write.
pub const OP_WRITE: u32 = 2;

/// `long storefn_table_lookup(__u64 key, struct storefn_cache_item *out)`: 0, or -ENOENT.
pub const STOREFN_TABLE_LOOKUP: u32 = 0x1100;
/// `long storefn_table_insert(const struct storefn_cache_item *item)`: 0, -ENOSPC (full) or
/// -ESTALE (a newer version is cached).
pub const STOREFN_TABLE_INSERT: u32 = 0x1101;
/// `long storefn_table_delete(__u64 key)`: 0, or -ENOENT.
pub const STOREFN_TABLE_DELETE: u32 = 0x1102;

/// `struct storefn_offload_ctx`, as the program sees it. `msg`, `out` are set by
/// [`Instance::run_offload`](crate::Instance::run_offload); the rest by the caller.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct OffloadCtx {
    pub msg: u64,
    pub msg_len: u32,
    pub index: u32,
    pub op: u32,
    pub file: u32,
    pub offset: u64,
    pub out: u64,
    pub out_len: u32,
    pub io_len: u32,
}

const _: () = {
    assert!(std::mem::size_of::<OffloadCtx>() == OFFLOAD_CTX_BYTES);
    assert!(std::mem::offset_of!(OffloadCtx, msg) == OFF_MSG);
    assert!(std::mem::offset_of!(OffloadCtx, msg_len) == OFF_MSG_LEN);
    assert!(std::mem::offset_of!(OffloadCtx, index) == OFF_INDEX);
    assert!(std::mem::offset_of!(OffloadCtx, op) == OFF_OP);
    assert!(std::mem::offset_of!(OffloadCtx, file) == OFF_FILE);
    assert!(std::mem::offset_of!(OffloadCtx, offset) == OFF_OFFSET);
    assert!(std::mem::offset_of!(OffloadCtx, out) == OFF_OUT);
    assert!(std::mem::offset_of!(OffloadCtx, out_len) == OFF_OUT_LEN);
    assert!(std::mem::offset_of!(OffloadCtx, io_len) == OFF_IO_LEN);
};

/// `struct storefn_cache_item` (32 bytes): a cache-table entry as programs read and write it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableItem {
    pub key: u64,
    pub version: u64,
    pub file: u32,
    pub size: u32,
    pub offset: u64,
}
/// Bytes of a [`TableItem`].
pub const TABLE_ITEM_BYTES: usize = 32;
const _: () = assert!(std::mem::size_of::<TableItem>() == TABLE_ITEM_BYTES);

/// `struct storefn_read_op` (16 bytes): what `func` asks the engine to read.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOp {
    pub file: u32,
    pub size: u32,
    pub offset: u64,
}
/// Bytes of a [`ReadOp`].
pub const READ_OP_BYTES: usize = 16;
const _: () = assert!(std::mem::size_of::<ReadOp>() == READ_OP_BYTES);

/// Why a table insert was refused (mapped to the helper's negative errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableInsertError {
    /// No room (-ENOSPC).
    Full,
    /// A newer version is cached (-ESTALE).
    Stale,
}

/// The cache table as offload helpers see it. Implemented by the DDS crate's table; shared with
/// the instance through [`HostState::offload_table`](crate::helpers::HostState).
pub trait OffloadTable: Send + Sync + std::fmt::Debug {
    /// The item cached for `key`.
    fn lookup(&self, key: u64) -> Option<TableItem>;
    /// Inserts or replaces (never with an older version).
    ///
    /// # Errors
    /// [`TableInsertError`].
    fn insert(&self, item: TableItem) -> Result<(), TableInsertError>;
    /// Removes `key`; whether it was there.
    fn delete(&self, key: u64) -> bool;
}

/// The shared handle helpers use.
pub type SharedTable = Arc<dyn OffloadTable>;

const ENOENT: u64 = (-2i64) as u64;
const ENOSPC: u64 = (-28i64) as u64;
const ESTALE: u64 = (-116i64) as u64;
/// -ENODEV: an offload helper called with no table attached to the instance.
const ENODEV: u64 = (-19i64) as u64;

/// Runs one of the table helpers; `check(addr, len, write)` validates pointer arguments.
pub(crate) fn call_table_helper(
    table: Option<&SharedTable>,
    id: u32,
    args: [u64; 5],
    check: impl Fn(u64, u64, bool) -> Result<(), crate::VmError>,
) -> Result<u64, crate::VmError> {
    let Some(table) = table else { return Ok(ENODEV) };
    Ok(match id {
        STOREFN_TABLE_LOOKUP => {
            let (key, out) = (args[0], args[1]);
            check(out, TABLE_ITEM_BYTES as u64, true)?;
            match table.lookup(key) {
                Some(item) => {
                    // SAFETY: `[out, out+32)` lies in a write region of this invocation
                    // (checked above); unaligned is fine for write_unaligned.
                    unsafe { std::ptr::write_unaligned(out as *mut TableItem, item) };
                    0
                }
                None => ENOENT,
            }
        }
        STOREFN_TABLE_INSERT => {
            let p = args[0];
            check(p, TABLE_ITEM_BYTES as u64, false)?;
            // SAFETY: `[p, p+32)` lies in a read region (checked above); every bit pattern is a
            // valid TableItem.
            let item = unsafe { std::ptr::read_unaligned(p as *const TableItem) };
            match table.insert(item) {
                Ok(()) => 0,
                Err(TableInsertError::Full) => ENOSPC,
                Err(TableInsertError::Stale) => ESTALE,
            }
        }
        STOREFN_TABLE_DELETE => {
            if table.delete(args[0]) {
                0
            } else {
                ENOENT
            }
        }
        _ => unreachable!("caller dispatches only table helper ids"),
    })
}
