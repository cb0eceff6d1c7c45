//! Cells: the items on a page (cell.i). One descriptor byte, then type-dependent fields.
//!
//! ```text
//! short:  [len:6 | kind:2]  [prefix, KEY_SHORT_PFX only]  data (len bytes)
//!         kind 1 KEY_SHORT, 2 KEY_SHORT_PFX, 3 VALUE_SHORT; len <= 63
//! long:   [type:4 | second_desc:1 | rle:1 | 00]  [prefix, KEY_PFX only]  [rle, packed]
//!         then by type: ADDR_*, *_OVFL*: packed len + cookie; KEY, KEY_PFX, VALUE: packed
//!         (len - 64) + data; VALUE_COPY: packed distance back to the cell it repeats; DEL: nothing
//! ```

use super::{intpack::unpack_uint, take, Malformed};

/// Long key and value cells store their length minus this (`WT_CELL_SIZE_ADJUST`): a shorter
/// one would have been a short cell.
pub const CELL_SIZE_ADJUST: u64 = 64;

const SHORT_KEY: u8 = 0x01;
const SHORT_KEY_PFX: u8 = 0x02;
const SHORT_VALUE: u8 = 0x03;
/// `WT_CELL_64V`: a packed run-length count follows (column stores).
const FLAG_RLE: u8 = 0x04;
/// Bit 3 of a long cell's descriptor: a second descriptor byte (a validity window) follows in
/// releases after 3.2; 3.2.1 leaves it clear.
const FLAG_SECOND_DESC: u8 = 0x08;

/// What a cell holds. Byte ranges are inside the page the cell was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CellKind {
    /// A key: `prefix` leading bytes shared with the page's previous key, then `data`.
    Key {
        prefix: u8,
        data: std::ops::Range<usize>,
    },
    /// A value stored on the page.
    Value {
        data: std::ops::Range<usize>,
    },
    /// A value that repeats the value cell `offset` bytes before this cell (dictionary).
    ValueCopy {
        offset: u64,
    },
    /// A child address: an internal page.
    AddrInternal {
        cookie: std::ops::Range<usize>,
    },
    /// A child address: a leaf page (`with_overflow`: it holds overflow items).
    AddrLeaf {
        cookie: std::ops::Range<usize>,
        with_overflow: bool,
    },
    /// A child deleted by a fast truncate.
    AddrDeleted,
    /// A key or value too large for the page: stored in its own overflow block.
    KeyOverflow,
    ValueOverflow,
    /// A deleted value (column stores).
    Deleted,
    /// A cell this reader does not interpret (a validity window, an RLE count on a row page,
    /// a removed overflow item): the lookup falls back.
    Unsupported {
        descriptor: u8,
    },
}

/// One parsed cell: its kind and the page offset just past it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub kind: CellKind,
    pub end: usize,
}

impl Cell {
    /// Parses the cell at `at` in `page`, never reading past `page`'s end.
    ///
    /// # Errors
    /// A cell type WiredTiger does not define, a damaged length, or data past the end.
    pub fn parse(page: &[u8], at: usize) -> Result<Cell, Malformed> {
        let d = *page.get(at).ok_or_else(|| Malformed::new(at, "cell past the end of the page"))?;
        let short = d & 0x03;
        if short != 0 {
            return Self::parse_short(page, at, d, short);
        }
        let ty = d & 0xf0;
        let mut pos = at + 1;
        if d & FLAG_SECOND_DESC != 0 || (d & FLAG_RLE != 0 && ty != 0x40) {
            // Skipping it needs its length, which this reader cannot trust to know.
            return Ok(Cell { kind: CellKind::Unsupported { descriptor: d }, end: page.len() });
        }
        let mut prefix = 0;
        if ty == 0x70 {
            prefix =
                *page.get(pos).ok_or_else(|| Malformed::new(pos, "key prefix past the end"))?;
            pos += 1;
        }
        if d & FLAG_RLE != 0 {
            unpack_uint(page, &mut pos)?;
        }
        let kind = match ty {
            0x00 | 0x10 | 0x20 | 0x30 | 0x60 | 0xa0 | 0xb0 | 0xc0 => {
                let r = Self::data(page, &mut pos, 0)?;
                match ty {
                    0x00 => CellKind::AddrDeleted,
                    0x10 => CellKind::AddrInternal { cookie: r },
                    0x20 => CellKind::AddrLeaf { cookie: r, with_overflow: true },
                    0x30 => CellKind::AddrLeaf { cookie: r, with_overflow: false },
                    0x60 => CellKind::KeyOverflow,
                    0xa0 => CellKind::ValueOverflow,
                    _ => CellKind::Unsupported { descriptor: d },
                }
            }
            0x50 | 0x70 => {
                CellKind::Key { prefix, data: Self::data(page, &mut pos, CELL_SIZE_ADJUST)? }
            }
            0x80 => CellKind::Value { data: Self::data(page, &mut pos, CELL_SIZE_ADJUST)? },
            0x90 => CellKind::ValueCopy { offset: unpack_uint(page, &mut pos)? },
            0x40 => CellKind::Deleted,
            _ => {
                return Err(Malformed::new(
                    at,
                    format!("cell descriptor {d:#04x}: no such cell type"),
                ))
            }
        };
        Ok(Cell { kind, end: pos })
    }

    fn parse_short(page: &[u8], at: usize, d: u8, short: u8) -> Result<Cell, Malformed> {
        let len = usize::from(d >> 2);
        let mut pos = at + 1;
        let mut prefix = 0;
        if short == SHORT_KEY_PFX {
            prefix =
                *page.get(pos).ok_or_else(|| Malformed::new(pos, "key prefix past the end"))?;
            pos += 1;
        }
        take(page, pos, len, "short cell data")?;
        let data = pos..pos + len;
        let kind = match short {
            SHORT_KEY | SHORT_KEY_PFX => CellKind::Key { prefix, data },
            SHORT_VALUE => CellKind::Value { data },
            _ => unreachable!("two bits, zero handled by the caller"),
        };
        Ok(Cell { kind, end: pos + len })
    }

    /// A packed length (plus `adjust`) and that many bytes at `*pos`.
    fn data(
        page: &[u8],
        pos: &mut usize,
        adjust: u64,
    ) -> Result<std::ops::Range<usize>, Malformed> {
        let at = *pos;
        let len = unpack_uint(page, pos)?
            .checked_add(adjust)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| Malformed::new(at, "cell length overflows"))?;
        take(page, *pos, len, "cell data")?;
        let r = *pos..*pos + len;
        *pos += len;
        Ok(r)
    }
}
