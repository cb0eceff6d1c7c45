//! A RocksDB database opened read-only: `CURRENT` -> MANIFEST (the live SST files of the default
//! column family, per level) and the live WALs replayed into a client-side memtable, so a Get
//! sees every write RocksDB acknowledged before it closed. Nothing in the directory is written,
//! locked or repaired.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::RocksError;
use crate::format::edit::{for_each_op, NewFile, VersionEdit};
use crate::format::log::{LogEnd, LogReader};
use crate::format::{cmp_internal, InternalKey, ValueType};
use crate::limits::{
    MAX_CURRENT_BYTES, MAX_LEVELS, MAX_MANIFEST_BYTES, MAX_WAL_BYTES, MAX_WAL_PROBES,
    WAL_PROBE_SLACK,
};
use crate::source::{Files, LocalDir};
use crate::sst::{Found, Table, BYTEWISE_COMPARATOR};

/// The answer to a Get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Value(Vec<u8>),
    /// No live value: never written, or deleted.
    NotFound,
    /// This reader cannot answer the key (a merge operand, a blob reference, a compressed
    /// block): the caller asks RocksDB itself.
    Fallback(FallbackReason),
}

/// Why a Get fell back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FallbackReason {
    Merge,
    BlobIndex,
    UnknownType(u8),
    Compressed { file: PathBuf, offset: u64, compression: u8 },
}

/// Where a Get's answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Memtable,
    /// The level and the file number.
    File(u32, u64),
    Nowhere,
}

/// A live SST file of the version read.
#[derive(Debug)]
pub struct LiveFile {
    pub meta: NewFile,
    /// Shared with the versions opened after this one that still hold the file
    /// ([`Db::reopen`]): a file's number is never reused and its bytes never change.
    pub table: Arc<Table>,
}

/// The newest write of a key in the live WALs.
#[derive(Debug, Clone)]
struct MemEntry {
    sequence: u64,
    kind: ValueType,
    value: Vec<u8>,
}

/// A database directory, read-only.
#[derive(Debug)]
pub struct Db {
    dir: PathBuf,
    manifest: PathBuf,
    /// Level 0 newest first, then every other level by key range.
    levels: Vec<Vec<LiveFile>>,
    memtable: BTreeMap<Vec<u8>, MemEntry>,
    last_sequence: u64,
}

/// What replaying the MANIFEST leaves for the default column family.
#[derive(Debug, Default)]
struct Version {
    files: BTreeMap<(u32, u64), NewFile>,
    log_number: u64,
    prev_log_number: u64,
    last_sequence: u64,
    next_file_number: u64,
}

impl Db {
    pub fn open(dir: &Path) -> Result<Self, RocksError> {
        Self::open_from(&mut LocalDir(dir.to_path_buf()))
    }

    /// A database of nothing (a placeholder while a client borrows its own).
    pub(crate) fn empty() -> Self {
        Db {
            dir: PathBuf::new(),
            manifest: PathBuf::new(),
            levels: Vec::new(),
            memtable: BTreeMap::new(),
            last_sequence: 0,
        }
    }

    /// Opens the database `src` holds (a local directory, or a server's through the wire).
    pub fn open_from(src: &mut dyn Files) -> Result<Self, RocksError> {
        Self::open_sharing(src, None)
    }

    /// A local database's current version, opened again: the tables this one holds that are still
    /// live are shared, not read and parsed again (a reader that follows a database's changes
    /// then pays only for the files they add, and holds one copy of each index and filter).
    ///
    /// # Errors
    /// As [`Db::open`].
    pub fn reopen(&self) -> Result<Self, RocksError> {
        Self::open_sharing(&mut LocalDir(self.dir.clone()), Some(self))
    }

    fn open_sharing(src: &mut dyn Files, prev: Option<&Db>) -> Result<Self, RocksError> {
        let held: HashMap<u64, &Arc<Table>> = prev
            .into_iter()
            .flat_map(|p| p.levels.iter().flatten())
            .map(|f| (f.meta.number, &f.table))
            .collect();
        let dir = src.path("");
        let manifest_name = read_current(src)?;
        let manifest = src.path(&manifest_name);
        let version = replay_manifest(src, &manifest_name)?;
        let mut levels: Vec<Vec<LiveFile>> = Vec::new();
        for ((level, number), meta) in version.files.clone() {
            let name = format!("{number:06}.sst");
            let path = src.path(&name);
            let table = match held.get(&number) {
                Some(t) => Arc::clone(t),
                None => Arc::new(Table::open_from(src, &name)?),
            };
            if table.range_deletions() > 0 {
                return Err(RocksError::unsupported(
                    &path,
                    format!(
                        "{} range deletions (this reader does not apply range tombstones)",
                        table.range_deletions()
                    ),
                ));
            }
            let l = level as usize;
            if levels.len() <= l {
                levels.resize_with(l + 1, Vec::new);
            }
            levels[l].push(LiveFile { meta, table });
        }
        if let Some(l0) = levels.first_mut() {
            l0.sort_by(|a, b| {
                (b.meta.largest_seqno, b.meta.number).cmp(&(a.meta.largest_seqno, a.meta.number))
            });
        }
        for l in levels.iter_mut().skip(1) {
            l.sort_by(|a, b| cmp_internal(&a.meta.smallest, &b.meta.smallest));
        }
        let min_log = match version.prev_log_number {
            0 => version.log_number,
            p => p.min(version.log_number),
        };
        let memtable = replay_wals(src, min_log, version.next_file_number)?;
        Ok(Db { dir, manifest, levels, memtable, last_sequence: version.last_sequence })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn manifest(&self) -> &Path {
        &self.manifest
    }
    /// Live files per level (level 0 newest first).
    pub fn levels(&self) -> &[Vec<LiveFile>] {
        &self.levels
    }
    /// Hands every table's index and filter to a client's cache (they are dropped here).
    pub(crate) fn release_meta(&mut self) {
        // Only a reopened version shares its tables, and a remote client never reopens: each
        // table is this version's alone here.
        for f in self.levels.iter_mut().flatten() {
            if let Some(t) = Arc::get_mut(&mut f.table) {
                t.release_meta();
            }
        }
    }

    /// The largest data block of any live file (contents, without the trailer).
    pub fn largest_data_block(&self) -> u64 {
        self.levels.iter().flatten().map(|f| f.table.largest_data_block()).max().unwrap_or(0)
    }

    /// The largest index block of any live file (contents, without the trailer).
    pub fn largest_index_block(&self) -> u64 {
        self.levels.iter().flatten().map(|f| f.table.footer().index.size).max().unwrap_or(0)
    }

    /// Keys written in the live WALs (the client-side memtable).
    pub fn memtable_len(&self) -> usize {
        self.memtable.len()
    }
    pub fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    /// The files a Get for `key` visits, in the order it visits them: every level-0 file whose
    /// range holds the key, newest first, then at most one file per level.
    pub fn candidates<'a>(&'a self, key: &'a [u8]) -> impl Iterator<Item = &'a LiveFile> + 'a {
        self.levels.iter().enumerate().flat_map(move |(l, files)| {
            let pick = if l == 0 {
                files.as_slice()
            } else {
                let i = files.partition_point(|f| user_key_of(&f.meta.largest) < key);
                files.get(i..=i).unwrap_or(&[])
            };
            pick.iter().filter(move |f| user_key_in(f, key))
        })
    }

    /// Get as RocksDB answers it: the memtable, then level 0 newest first, then one file per
    /// level, each file's filter (in memory) asked before its blocks are read; the first entry
    /// found decides.
    pub fn get(&self, key: &[u8]) -> Result<(Lookup, Source), RocksError> {
        if let Some(l) = self.from_memtable(key) {
            return Ok((l, Source::Memtable));
        }
        for f in self.candidates(key).filter(|f| f.table.may_contain(key)) {
            if let Some(answer) = settle(f, f.table.get(key)?) {
                return Ok(answer);
            }
        }
        Ok((Lookup::NotFound, Source::Nowhere))
    }

    /// The memtable's answer for `key`, if the WALs wrote it.
    pub fn from_memtable(&self, key: &[u8]) -> Option<Lookup> {
        self.memtable.get(key).map(|e| decide(e.kind, e.value.clone()))
    }
}

/// What one file's entry means for a Get: `None` (not in this file: ask the next one), or the
/// answer and where it came from.
pub fn settle(f: &LiveFile, found: Found) -> Option<(Lookup, Source)> {
    let src = Source::File(f.meta.level, f.meta.number);
    match found {
        Found::Absent => None,
        Found::Entry { kind, value, .. } => Some((decide(kind, value), src)),
        Found::Compressed { offset, compression } => {
            let file = f.table.path().to_path_buf();
            Some((Lookup::Fallback(FallbackReason::Compressed { file, offset, compression }), src))
        }
    }
}

fn decide(kind: ValueType, value: Vec<u8>) -> Lookup {
    match kind {
        ValueType::Value => Lookup::Value(value),
        ValueType::Deletion | ValueType::SingleDeletion => Lookup::NotFound,
        ValueType::Merge => Lookup::Fallback(FallbackReason::Merge),
        ValueType::BlobIndex => Lookup::Fallback(FallbackReason::BlobIndex),
        ValueType::RangeDeletion => {
            Lookup::Fallback(FallbackReason::UnknownType(ValueType::RANGE_DELETION))
        }
        ValueType::Other(b) => Lookup::Fallback(FallbackReason::UnknownType(b)),
    }
}

fn user_key_of(internal: &[u8]) -> &[u8] {
    InternalKey::parse(internal).map_or(internal, |k| k.user_key)
}

fn user_key_in(f: &LiveFile, key: &[u8]) -> bool {
    user_key_of(&f.meta.smallest) <= key && key <= user_key_of(&f.meta.largest)
}

/// `CURRENT` names the MANIFEST: `MANIFEST-<number>\n`.
fn read_current(src: &mut dyn Files) -> Result<String, RocksError> {
    let path = src.path("CURRENT");
    let b = src.read_all("CURRENT", MAX_CURRENT_BYTES)?;
    let name = std::str::from_utf8(&b).ok().and_then(|s| s.strip_suffix('\n'));
    match name {
        Some(n)
            if n.strip_prefix("MANIFEST-")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())) =>
        {
            Ok(n.to_string())
        }
        _ => Err(RocksError::corrupt(&path, 0, "not a MANIFEST name and a newline")),
    }
}

fn replay_manifest(src: &mut dyn Files, name: &str) -> Result<Version, RocksError> {
    let bytes = src.read_all(name, MAX_MANIFEST_BYTES)?;
    let path = &src.path(name);
    let mut log = LogReader::new(&bytes, None);
    let mut v = Version::default();
    let mut group: Vec<VersionEdit> = Vec::new();
    loop {
        let (at, rec) = match log.next_record() {
            Ok(r) => r,
            Err(LogEnd::Clean) => break,
            Err(LogEnd::Damaged(m)) => return Err(RocksError::corrupt(path, m.at as u64, m.what)),
        };
        let e = VersionEdit::decode(rec)
            .map_err(|m| RocksError::corrupt(path, (at + m.at) as u64, m.what))?;
        // An atomic group applies whole or not at all (a MANIFEST cut inside one drops it).
        let remaining = e.atomic_group_remaining;
        group.push(e);
        if remaining.is_some_and(|r| r > 1) {
            continue;
        }
        for e in group.drain(..) {
            apply(&mut v, e, path, at)?;
        }
    }
    Ok(v)
}

fn apply(v: &mut Version, e: VersionEdit, path: &Path, at: usize) -> Result<(), RocksError> {
    if e.blob_files {
        return Err(RocksError::unsupported(path, "blob files (BlobDB)"));
    }
    if let Some(c) = &e.comparator {
        if e.column_family == 0 && c != BYTEWISE_COMPARATOR {
            return Err(RocksError::unsupported(path, format!("comparator {c}")));
        }
    }
    if let Some(s) = e.last_sequence {
        v.last_sequence = s;
    }
    if let Some(n) = e.next_file_number {
        v.next_file_number = n;
    }
    if e.column_family != 0 {
        return Ok(());
    }
    if let Some(n) = e.log_number {
        v.log_number = n;
    }
    if let Some(n) = e.prev_log_number {
        v.prev_log_number = n;
    }
    for (level, number) in e.deleted {
        v.files.remove(&(level, number));
    }
    for f in e.added {
        if f.level >= MAX_LEVELS {
            return Err(RocksError::corrupt(
                path,
                at as u64,
                format!("file {} at level {}", f.number, f.level),
            ));
        }
        v.files.insert((f.level, f.number), f);
    }
    Ok(())
}

/// Replays every WAL numbered `min_log` or later, oldest first, into the memtable. A local
/// directory is listed; a remote one is asked for the numbers a WAL can have: from `min_log`
/// up to the MANIFEST's next file number and [`WAL_PROBE_SLACK`] past it (the newest WAL's
/// number may be taken after the MANIFEST last recorded the counter).
fn replay_wals(
    src: &mut dyn Files,
    min_log: u64,
    next_file: u64,
) -> Result<BTreeMap<Vec<u8>, MemEntry>, RocksError> {
    let mut logs = Vec::new();
    if let Some(dir) = src.local("") {
        for entry in std::fs::read_dir(&dir).map_err(|e| RocksError::io(&dir, e))? {
            let name = entry.map_err(|e| RocksError::io(&dir, e))?.file_name();
            let name = name.to_string_lossy();
            if let Some(n) = name.strip_suffix(".log").and_then(|d| d.parse::<u64>().ok()) {
                if n >= min_log {
                    logs.push(n);
                }
            }
        }
    } else {
        let end = next_file.max(min_log) + WAL_PROBE_SLACK;
        if end - min_log > MAX_WAL_PROBES {
            return Err(RocksError::unsupported(
                &src.path(""),
                format!("WAL numbers {min_log}..{end}: more than {MAX_WAL_PROBES} to ask for"),
            ));
        }
        let nums: Vec<u64> = (min_log..end).collect();
        let names: Vec<String> = nums.iter().map(|n| format!("{n:06}.log")).collect();
        let there = src.existing(&names)?;
        logs.extend(nums.iter().zip(there).filter(|(_, t)| *t).map(|(n, _)| *n));
    }
    logs.sort_unstable();
    let mut mem = BTreeMap::new();
    let mut total = 0u64;
    for n in logs {
        let name = format!("{n:06}.log");
        let path = src.path(&name);
        let bytes = src.read_all(&name, MAX_WAL_BYTES - total)?;
        total += bytes.len() as u64;
        replay_wal(&path, &bytes, u32::try_from(n).ok(), &mut mem)?;
    }
    Ok(mem)
}

fn replay_wal(
    path: &Path,
    bytes: &[u8],
    number: Option<u32>,
    mem: &mut BTreeMap<Vec<u8>, MemEntry>,
) -> Result<(), RocksError> {
    let mut log = LogReader::new(bytes, number);
    let mut unsupported = None;
    loop {
        let (at, rec) = match log.next_record() {
            Ok(r) => r,
            Err(LogEnd::Clean) => return Ok(()),
            Err(LogEnd::Damaged(m)) => return Err(RocksError::corrupt(path, m.at as u64, m.what)),
        };
        for_each_op(rec, |op| {
            if op.column_family != 0 {
                return;
            }
            if op.kind == ValueType::RangeDeletion {
                unsupported.get_or_insert(at);
                return;
            }
            let newer = mem.get(op.key).is_none_or(|e: &MemEntry| e.sequence < op.sequence);
            if newer {
                let e = MemEntry { sequence: op.sequence, kind: op.kind, value: op.value.to_vec() };
                mem.insert(op.key.to_vec(), e);
            }
        })
        .map_err(|m| RocksError::corrupt(path, (at + m.at) as u64, m.what))?;
        if let Some(at) = unsupported {
            return Err(RocksError::unsupported(
                path,
                format!("range deletion in the WAL at {at}"),
            ));
        }
    }
}
