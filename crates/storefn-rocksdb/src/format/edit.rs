//! MANIFEST version edits and WAL write batches (docs/FORMAT.md, "RocksDB: MANIFEST" and
//! "RocksDB: WAL"). Both are sequences of tagged fields; only what a Get needs is kept, and a tag
//! this reader cannot skip safely is an error naming it.

use super::{Cursor, Malformed, Parsed, ValueType};

/// Version edit tags (RocksDB's `Tag` in version_edit.h).
pub mod tag {
    pub const COMPARATOR: u32 = 1;
    pub const LOG_NUMBER: u32 = 2;
    pub const NEXT_FILE_NUMBER: u32 = 3;
    pub const LAST_SEQUENCE: u32 = 4;
    pub const COMPACT_CURSOR: u32 = 5;
    pub const DELETED_FILE: u32 = 6;
    pub const NEW_FILE: u32 = 7;
    pub const PREV_LOG_NUMBER: u32 = 9;
    pub const MIN_LOG_NUMBER_TO_KEEP: u32 = 10;
    pub const NEW_FILE2: u32 = 100;
    pub const NEW_FILE3: u32 = 102;
    pub const NEW_FILE4: u32 = 103;
    pub const COLUMN_FAMILY: u32 = 200;
    pub const COLUMN_FAMILY_ADD: u32 = 201;
    pub const COLUMN_FAMILY_DROP: u32 = 202;
    pub const MAX_COLUMN_FAMILY: u32 = 203;
    pub const IN_ATOMIC_GROUP: u32 = 300;
    pub const BLOB_FILE_ADDITION: u32 = 400;
    pub const BLOB_FILE_GARBAGE: u32 = 401;
    /// Tags with this bit set carry a length-prefixed field a reader may skip.
    pub const SAFE_IGNORE_MASK: u32 = 1 << 13;
    /// `NewFile4`'s custom fields: 1 ends them; one with this bit set must be understood.
    pub const CUSTOM_TERMINATE: u32 = 1;
    pub const CUSTOM_NON_SAFE_IGNORE_MASK: u32 = 1 << 6;
    pub const CUSTOM_PATH_ID: u32 = 65;
}

/// A live SST file as a version edit adds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile {
    pub level: u32,
    pub number: u64,
    pub size: u64,
    /// Internal keys.
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub smallest_seqno: u64,
    pub largest_seqno: u64,
}

/// What one version edit changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionEdit {
    pub comparator: Option<String>,
    pub log_number: Option<u64>,
    pub prev_log_number: Option<u64>,
    pub last_sequence: Option<u64>,
    pub next_file_number: Option<u64>,
    pub column_family: u32,
    pub added_column_family: bool,
    pub dropped_column_family: bool,
    /// Remaining edits of an atomic group, this one included.
    pub atomic_group_remaining: Option<u32>,
    pub deleted: Vec<(u32, u64)>,
    pub added: Vec<NewFile>,
    /// Blob files: this reader does not read them.
    pub blob_files: bool,
}

impl VersionEdit {
    pub(crate) fn decode(record: &[u8]) -> Parsed<Self> {
        let mut e = VersionEdit::default();
        let mut c = Cursor::new(record);
        while !c.is_empty() {
            let at = c.pos();
            let t = c.varint32("edit tag")?;
            if !e.field(t, &mut c)? {
                return Err(Malformed { at, what: "unknown edit tag" });
            }
        }
        Ok(e)
    }

    /// Reads the field of tag `t`; `false` for a tag this reader does not know.
    fn field(&mut self, t: u32, c: &mut Cursor<'_>) -> Parsed<bool> {
        match t {
            tag::COMPARATOR => {
                let s = c.length_prefixed("comparator name")?;
                self.comparator = Some(String::from_utf8_lossy(s).into_owned());
            }
            tag::LOG_NUMBER => self.log_number = Some(c.varint64("log number")?),
            tag::PREV_LOG_NUMBER => self.prev_log_number = Some(c.varint64("prev log number")?),
            tag::LAST_SEQUENCE => self.last_sequence = Some(c.varint64("last sequence")?),
            tag::NEXT_FILE_NUMBER => self.next_file_number = Some(c.varint64("file number")?),
            tag::MIN_LOG_NUMBER_TO_KEEP => {
                c.varint64("file number")?;
            }
            tag::MAX_COLUMN_FAMILY => {
                c.varint32("max column family")?;
            }
            tag::COMPACT_CURSOR => {
                c.varint32("compact cursor level")?;
                c.length_prefixed("compact cursor key")?;
            }
            tag::DELETED_FILE => {
                let level = c.varint32("deleted file level")?;
                self.deleted.push((level, c.varint64("deleted file number")?));
            }
            tag::NEW_FILE | tag::NEW_FILE2 | tag::NEW_FILE3 | tag::NEW_FILE4 => {
                self.added.push(new_file(t, c)?);
            }
            tag::COLUMN_FAMILY => self.column_family = c.varint32("column family")?,
            tag::COLUMN_FAMILY_ADD => {
                c.length_prefixed("column family name")?;
                self.added_column_family = true;
            }
            tag::COLUMN_FAMILY_DROP => self.dropped_column_family = true,
            tag::IN_ATOMIC_GROUP => {
                self.atomic_group_remaining = Some(c.varint32("atomic group size")?);
            }
            tag::BLOB_FILE_ADDITION | tag::BLOB_FILE_GARBAGE => {
                self.blob_files = true;
                // Their layouts are not read: nothing after them can be parsed.
                c.bytes(usize::MAX, "blob file record")?;
            }
            t if t & tag::SAFE_IGNORE_MASK != 0 => {
                c.length_prefixed("ignorable field")?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn new_file(t: u32, c: &mut Cursor<'_>) -> Parsed<NewFile> {
    let level = c.varint32("new file level")?;
    let number = c.varint64("new file number")?;
    if t == tag::NEW_FILE3 {
        c.varint32("new file path id")?;
    }
    let size = c.varint64("new file size")?;
    let smallest = c.length_prefixed("new file smallest key")?.to_vec();
    let largest = c.length_prefixed("new file largest key")?.to_vec();
    let (smallest_seqno, largest_seqno) = if t == tag::NEW_FILE {
        (0, u64::MAX)
    } else {
        (c.varint64("new file smallest seqno")?, c.varint64("new file largest seqno")?)
    };
    if t == tag::NEW_FILE4 {
        custom_fields(c)?;
    }
    Ok(NewFile { level, number, size, smallest, largest, smallest_seqno, largest_seqno })
}

/// `NewFile4`'s custom fields: skipped, except a path id other than the database directory and
/// any field marked as one a reader must understand.
fn custom_fields(c: &mut Cursor<'_>) -> Parsed<()> {
    loop {
        let at = c.pos();
        let t = c.varint32("new file custom tag")?;
        if t == tag::CUSTOM_TERMINATE {
            return Ok(());
        }
        let field = c.length_prefixed("new file custom field")?;
        if t == tag::CUSTOM_PATH_ID {
            if field != [0] {
                return Err(Malformed { at, what: "SST file in another db_path" });
            }
        } else if t & tag::CUSTOM_NON_SAFE_IGNORE_MASK != 0 {
            return Err(Malformed { at, what: "new file field a reader must understand" });
        }
    }
}

/// Write-batch record tags (RocksDB's `ValueType` in dbformat.h as a batch uses them).
mod batch_tag {
    pub const DELETION: u8 = 0x0;
    pub const VALUE: u8 = 0x1;
    pub const MERGE: u8 = 0x2;
    pub const LOG_DATA: u8 = 0x3;
    pub const CF_DELETION: u8 = 0x4;
    pub const CF_VALUE: u8 = 0x5;
    pub const CF_MERGE: u8 = 0x6;
    pub const SINGLE_DELETION: u8 = 0x7;
    pub const CF_SINGLE_DELETION: u8 = 0x8;
    pub const NOOP: u8 = 0xd;
    pub const CF_RANGE_DELETION: u8 = 0xe;
    pub const RANGE_DELETION: u8 = 0xf;
    pub const CF_BLOB_INDEX: u8 = 0x10;
    pub const BLOB_INDEX: u8 = 0x11;
}

/// One operation of a write batch, on the default column family or another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOp<'a> {
    pub column_family: u32,
    pub sequence: u64,
    pub kind: ValueType,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Calls `f` for each keyed operation of a write batch with its sequence number. Markers that
/// take no sequence (log data, no-ops) are skipped; transaction markers are an error, as this
/// reader does not replay two-phase commits.
pub(crate) fn for_each_op(record: &[u8], mut f: impl FnMut(BatchOp<'_>)) -> Parsed<()> {
    let mut c = Cursor::new(record);
    let mut sequence = c.fixed64("batch sequence")?;
    let count = c.fixed32("batch count")?;
    let mut seen = 0u32;
    while !c.is_empty() {
        let at = c.pos();
        let t = c.u8("batch record type")?;
        let cf = if matches!(
            t,
            batch_tag::CF_DELETION
                | batch_tag::CF_VALUE
                | batch_tag::CF_MERGE
                | batch_tag::CF_SINGLE_DELETION
                | batch_tag::CF_RANGE_DELETION
                | batch_tag::CF_BLOB_INDEX
        ) {
            c.varint32("batch column family")?
        } else {
            0
        };
        let (kind, with_value) = match t {
            batch_tag::DELETION | batch_tag::CF_DELETION => (ValueType::Deletion, false),
            batch_tag::VALUE | batch_tag::CF_VALUE => (ValueType::Value, true),
            batch_tag::MERGE | batch_tag::CF_MERGE => (ValueType::Merge, true),
            batch_tag::SINGLE_DELETION | batch_tag::CF_SINGLE_DELETION => {
                (ValueType::SingleDeletion, false)
            }
            batch_tag::RANGE_DELETION | batch_tag::CF_RANGE_DELETION => {
                (ValueType::RangeDeletion, true)
            }
            batch_tag::BLOB_INDEX | batch_tag::CF_BLOB_INDEX => (ValueType::BlobIndex, true),
            batch_tag::LOG_DATA => {
                c.length_prefixed("batch log data")?;
                continue;
            }
            batch_tag::NOOP => continue,
            _ => {
                return Err(Malformed {
                    at,
                    what: "write batch record this reader does not replay",
                })
            }
        };
        let key = c.length_prefixed("batch key")?;
        let value = if with_value { c.length_prefixed("batch value")? } else { &[] };
        f(BatchOp { column_family: cf, sequence, kind, key, value });
        sequence += 1;
        seen += 1;
    }
    if seen != count {
        return Err(Malformed { at: 8, what: "write batch count differs from its records" });
    }
    Ok(())
}
