//! Searching one page for a key: the step a lookup takes per B-tree level, shared by the plain
//! reader and (re-expressed in C) the storage function.

use crate::format::{BlockAddr, Cell, CellKind, Malformed, PageHeader, PAGE_PREFIX_BYTES};
use std::cmp::Ordering;
use std::ops::Range;

/// Why a lookup hands its key to WiredTiger's own API instead of answering it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fallback {
    /// A key on the search path is stored in an overflow block.
    OverflowKey,
    /// The value is stored in an overflow block.
    OverflowValue,
    /// The page is compressed (`block_compressor`).
    CompressedPage,
    /// The page is encrypted.
    EncryptedPage,
    /// The child on the search path was deleted by a fast truncate.
    DeletedChild,
    /// A cell this reader does not interpret (its descriptor byte).
    Cell(u8),
    /// The storage function handed the key back (what it does not read: overflow items,
    /// blocks longer than a hop, keys or values larger than its scratch).
    Function,
}

/// Where an internal page sends the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Child {
    Internal(BlockAddr),
    Leaf(BlockAddr),
    /// The child's subtree is empty (an empty address).
    Empty,
    Fallback(Fallback),
}

/// A leaf page's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeafHit {
    /// The value's bytes inside the page.
    Found(Range<usize>),
    NotFound,
    Fallback(Fallback),
}

/// The page's cells: `entries` cells from the end of the headers up to `mem_size`.
fn cells<'p>(page: &'p [u8], hdr: &PageHeader) -> Result<&'p [u8], Malformed> {
    let mem = hdr.mem_size as usize;
    if mem < PAGE_PREFIX_BYTES || mem > page.len() {
        return Err(Malformed::new(
            16,
            format!("page mem_size {mem} outside {PAGE_PREFIX_BYTES}..={}", page.len()),
        ));
    }
    Ok(&page[..mem])
}

/// Rebuilds a (possibly prefix-compressed) key into `key`, which holds the page's previous key.
fn rebuild_key(
    page: &[u8],
    at: usize,
    prefix: u8,
    data: Range<usize>,
    key: &mut Vec<u8>,
) -> Result<(), Malformed> {
    let p = usize::from(prefix);
    if p > key.len() {
        return Err(Malformed::new(
            at,
            format!("key prefix {p} longer than the previous key ({})", key.len()),
        ));
    }
    key.truncate(p);
    key.extend_from_slice(&page[data]);
    Ok(())
}

/// WiredTiger's default collation: bytewise, a prefix sorts first.
fn compare(a: &[u8], b: &[u8]) -> Ordering {
    a.cmp(b)
}

/// Finds the child of a row-store internal page whose range holds `search`: the last entry
/// whose key is at most `search` (the first entry's key sorts below every key). `key` is
/// caller-owned scratch for rebuilt keys.
///
/// # Errors
/// Damage: cells out of order or out of bounds, an entry without an address.
pub fn search_internal(
    page: &[u8],
    hdr: &PageHeader,
    search: &[u8],
    alloc: u64,
    key: &mut Vec<u8>,
) -> Result<Child, Malformed> {
    let page = cells(page, hdr)?;
    let mut at = PAGE_PREFIX_BYTES;
    let mut chosen = None;
    key.clear();
    let pairs = hdr.entries / 2;
    if !hdr.entries.is_multiple_of(2) || pairs == 0 {
        return Err(Malformed::new(
            20,
            format!("internal page with {} cells (pairs expected)", hdr.entries),
        ));
    }
    for i in 0..pairs {
        let k = Cell::parse(page, at)?;
        match k.kind {
            CellKind::Key { prefix, data } => rebuild_key(page, at, prefix, data, key)?,
            CellKind::KeyOverflow if i > 0 => return Ok(Child::Fallback(Fallback::OverflowKey)),
            CellKind::KeyOverflow => key.clear(),
            CellKind::Unsupported { descriptor } => {
                return Ok(Child::Fallback(Fallback::Cell(descriptor)))
            }
            other => {
                return Err(Malformed::new(
                    at,
                    format!("internal page: expected a key cell, found {other:?}"),
                ))
            }
        }
        if i > 0 && compare(key, search) == Ordering::Greater {
            break;
        }
        let a = Cell::parse(page, k.end)?;
        chosen = Some((k.end, a.kind.clone()));
        at = a.end;
    }
    let (addr_at, kind) = chosen.expect("pairs > 0 and the first entry is always taken");
    child_of(page, addr_at, kind, alloc)
}

/// The child the address cell of kind `kind` at `at` of an internal page names.
///
/// # Errors
/// A damaged cookie, or a cell that is not an address.
pub(crate) fn child_of(
    page: &[u8],
    at: usize,
    kind: CellKind,
    alloc: u64,
) -> Result<Child, Malformed> {
    let addr = |cookie: Range<usize>| {
        let mut pos = cookie.start;
        let a = BlockAddr::unpack(&page[..cookie.end], &mut pos, alloc)?;
        if pos != cookie.end {
            return Err(Malformed::new(at, "address cookie longer than its fields"));
        }
        Ok(a)
    };
    Ok(match kind {
        CellKind::AddrInternal { cookie } => addr(cookie)?.map_or(Child::Empty, Child::Internal),
        CellKind::AddrLeaf { cookie, .. } => addr(cookie)?.map_or(Child::Empty, Child::Leaf),
        CellKind::AddrDeleted => Child::Fallback(Fallback::DeletedChild),
        CellKind::Unsupported { descriptor } => Child::Fallback(Fallback::Cell(descriptor)),
        other => {
            return Err(Malformed::new(
                at,
                format!("internal page: expected an address cell, found {other:?}"),
            ))
        }
    })
}

/// Finds `search` on a row-store leaf: key cells each followed by their value cell (none: the
/// value is empty). `key` is caller-owned scratch for rebuilt keys.
///
/// # Errors
/// Damage: cells out of bounds, a value without a key, a copy cell pointing nowhere.
pub fn search_leaf(
    page: &[u8],
    hdr: &PageHeader,
    search: &[u8],
    key: &mut Vec<u8>,
) -> Result<LeafHit, Malformed> {
    let page = cells(page, hdr)?;
    let mut at = PAGE_PREFIX_BYTES;
    let mut left = hdr.entries;
    key.clear();
    while left > 0 {
        let k = Cell::parse(page, at)?;
        left -= 1;
        match k.kind {
            CellKind::Key { prefix, data } => rebuild_key(page, at, prefix, data, key)?,
            CellKind::KeyOverflow => return Ok(LeafHit::Fallback(Fallback::OverflowKey)),
            CellKind::Unsupported { descriptor } => {
                return Ok(LeafHit::Fallback(Fallback::Cell(descriptor)))
            }
            other => {
                return Err(Malformed::new(
                    at,
                    format!("leaf page: expected a key cell, found {other:?}"),
                ))
            }
        }
        at = k.end;
        // The value cell, if the next cell is not the next key.
        let value = if left > 0 {
            let v = Cell::parse(page, at)?;
            match v.kind {
                CellKind::Key { .. } | CellKind::KeyOverflow => None,
                kind => {
                    left -= 1;
                    let start = at;
                    at = v.end;
                    Some((start, kind))
                }
            }
        } else {
            None
        };
        match compare(key, search) {
            Ordering::Less => continue,
            Ordering::Greater => return Ok(LeafHit::NotFound),
            Ordering::Equal => {}
        }
        return match value {
            None => Ok(LeafHit::Found(at..at)),
            Some((start, kind)) => leaf_value(page, start, kind),
        };
    }
    Ok(LeafHit::NotFound)
}

fn leaf_value(page: &[u8], at: usize, kind: CellKind) -> Result<LeafHit, Malformed> {
    match kind {
        CellKind::Value { data } => Ok(LeafHit::Found(data)),
        CellKind::ValueCopy { offset } => {
            // The offset counts back from the copy cell to the value it repeats.
            let off = usize::try_from(offset)
                .ok()
                .and_then(|o| at.checked_sub(o))
                .filter(|&o| o >= PAGE_PREFIX_BYTES && o < at);
            let off = off.ok_or_else(|| {
                Malformed::new(at, format!("value copy points at {offset}, not an earlier cell"))
            })?;
            match Cell::parse(page, off)?.kind {
                CellKind::Value { data } => Ok(LeafHit::Found(data)),
                CellKind::ValueOverflow => Ok(LeafHit::Fallback(Fallback::OverflowValue)),
                other => Err(Malformed::new(at, format!("value copy points at {other:?}"))),
            }
        }
        CellKind::ValueOverflow => Ok(LeafHit::Fallback(Fallback::OverflowValue)),
        CellKind::Unsupported { descriptor } => Ok(LeafHit::Fallback(Fallback::Cell(descriptor))),
        other => {
            Err(Malformed::new(at, format!("leaf page: expected a value cell, found {other:?}")))
        }
    }
}
