//! One block-based table (SST file), read-only: footer -> metaindex -> properties, index block
//! -> data block -> the entry a point lookup wants.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::RocksError;
use crate::format::block::{Block, Keys, RestartPrefixes, Value, Values};
use crate::format::compress;
use crate::format::filter::Bloom;
use crate::format::table::{Footer, BLOCK_TRAILER_BYTES, FOOTER_BYTES, NO_COMPRESSION};
use crate::format::{
    cmp_internal, with_seek_key, BlockHandle, Cursor, InternalKey, Malformed, ValueType,
};
use crate::limits::MAX_BLOCK_BYTES;
use crate::source::{Files, LocalDir};

/// Metaindex names this reader looks for.
pub const PROPERTIES_BLOCK: &[u8] = b"rocksdb.properties";
/// The metaindex name prefix of a full filter block (then the policy's name).
pub const FULL_FILTER_PREFIX: &[u8] = b"fullfilter.";
/// Table properties it reads.
pub const PROP_COMPARATOR: &[u8] = b"rocksdb.comparator";
pub const PROP_INDEX_KEY_IS_USER_KEY: &[u8] = b"rocksdb.index.key.is.user.key";
pub const PROP_INDEX_VALUE_DELTA: &[u8] = b"rocksdb.index.value.is.delta.encoded";
pub const PROP_INDEX_TYPE: &[u8] = b"rocksdb.block.based.table.index.type";
pub const PROP_RANGE_DELETIONS: &[u8] = b"rocksdb.num.range-deletions";
/// The comparator this reader orders keys by.
pub const BYTEWISE_COMPARATOR: &str = "leveldb.BytewiseComparator";
/// `BlockBasedTableOptions::kBinarySearch`, the only index type read.
pub const INDEX_TYPE_BINARY_SEARCH: u32 = 0;

/// What a table holds for a user key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The newest entry for the key in this file: its type and value.
    Entry { kind: ValueType, sequence: u64, value: Vec<u8> },
    /// No entry for the key in this file.
    Absent,
    /// A block compressed with a codec this reader does not decode: the caller falls back.
    Compressed { offset: u64, compression: u8 },
}

/// An open SST file and what its footer and properties say.
#[derive(Debug)]
pub struct Table {
    path: PathBuf,
    /// The local file; `None` for a table opened through a remote source.
    file: Option<File>,
    size: u64,
    footer: Footer,
    index_key_is_user_key: bool,
    index_values: Values,
    range_deletions: u64,
    /// The index block (without trailer), read once: the in-memory phase of a Get.
    index: Vec<u8>,
    /// Its restart points' key prefixes, the in-memory phase's binary search.
    index_prefixes: RestartPrefixes,
    /// The full filter, read once (the in-memory phase); `None` without one this reader reads.
    filter: Option<Bloom>,
    /// Compressed blocks this table decompressed.
    decompressed: AtomicU64,
    /// Meta block bytes read at open.
    meta_bytes: u64,
    /// Where the full filter block is.
    filter_handle: Option<BlockHandle>,
    /// The largest data block the index names (contents, without the trailer): what a hop
    /// must hold to read any of this file's data blocks whole.
    largest_data_block: u64,
    /// Set once the index and filter were handed to a client's budgeted cache: their sizes
    /// (index bytes, filter bytes if it has one this reader applies), kept for the budget.
    released: Option<(usize, Option<usize>)>,
}

fn t_path(src: &dyn Files, name: &str) -> PathBuf {
    src.path(name)
}

/// A handle must name a block inside the file, of at most [`MAX_BLOCK_BYTES`].
fn t_check_handle(path: &Path, h: BlockHandle, size: u64) -> Result<(), RocksError> {
    let end = h.offset.checked_add(h.size).and_then(|e| e.checked_add(BLOCK_TRAILER_BYTES as u64));
    if h.size > MAX_BLOCK_BYTES || end.is_none_or(|e| e > size) {
        return Err(RocksError::corrupt(
            path,
            h.offset,
            format!("block handle of {} bytes past the file's {size} bytes", h.size),
        ));
    }
    Ok(())
}

/// Opens a table file for point reads: the kernel is told access is random (no readahead),
/// as RocksDB itself does (`advise_random_on_open`), so a block read reads that block.
fn open_random(p: &Path) -> Result<File, RocksError> {
    use std::os::fd::AsRawFd;
    let f = File::open(p).map_err(|e| RocksError::io(p, e))?;
    // SAFETY: the descriptor is open for the call; the advice changes only readahead.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    if r != 0 {
        return Err(RocksError::io(p, std::io::Error::from_raw_os_error(r)));
    }
    Ok(f)
}

impl Table {
    /// Opens `path` read-only and reads its footer, properties and index block.
    pub fn open(path: &Path) -> Result<Self, RocksError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Self::open_from(&mut LocalDir(dir.to_path_buf()), &name)
    }

    /// Opens file `name` of `src`: its footer, properties, filter and index block are read
    /// through `src` (one read each); the table's data blocks are read through the local file
    /// when `src` has one, else by the caller's path (a remote client).
    pub fn open_from(src: &mut dyn Files, name: &str) -> Result<Self, RocksError> {
        let path = src.path(name);
        let size = src.size(name)?.ok_or_else(|| {
            RocksError::io(&path, std::io::Error::from(std::io::ErrorKind::NotFound))
        })?;
        let tail_at = size.checked_sub(FOOTER_BYTES as u64).ok_or_else(|| {
            RocksError::corrupt(&path, 0, format!("{size} bytes: shorter than a table footer"))
        })?;
        let tail = src.read_at(name, tail_at, FOOTER_BYTES)?;
        let footer = Footer::parse(&tail)
            .map_err(|m| RocksError::corrupt(&path, tail_at + m.at as u64, m.what))?
            .map_err(|what| RocksError::unsupported(&path, what))?;
        let file = match src.local(name) {
            Some(p) => Some(open_random(&p)?),
            None => None,
        };
        let mut t = Table {
            path,
            file,
            size,
            footer,
            index_key_is_user_key: false,
            index_values: Values::Plain,
            range_deletions: 0,
            index: Vec::new(),
            index_prefixes: RestartPrefixes::empty(),
            filter: None,
            decompressed: AtomicU64::new(0),
            meta_bytes: 0,
            filter_handle: None,
            largest_data_block: 0,
            released: None,
        };
        let mut fetch = |h: BlockHandle| -> Result<Vec<u8>, RocksError> {
            t_check_handle(&t_path(src, name), h, size)?;
            src.read_at(name, h.offset, h.size as usize + BLOCK_TRAILER_BYTES)
        };
        t.read_properties(&mut fetch)?;
        let raw = fetch(footer.index)?;
        t.meta_bytes += raw.len() as u64;
        t.index = t.decode_block(footer.index, raw)?.map_err(|c| t.compressed(footer.index, c))?;
        let ih = footer.index;
        let b = Block::parse(&t.index, t.index_values).map_err(|m| t.malformed(ih.offset, m))?;
        let mut largest = 0;
        b.for_each_handle(|h| largest = largest.max(h.size))
            .map_err(|m| t.malformed(ih.offset, m))?;
        t.largest_data_block = largest;
        // A block whose restart points do not all hold a key (an empty index: a table of range
        // deletions only) gets none: its lookups take the plain search, which names the damage
        // when a lookup meets it, as before.
        t.index_prefixes =
            b.restart_prefixes(t.index_keys()).unwrap_or_else(|_| RestartPrefixes::empty());
        Ok(t)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path that opens the very file this table read, even after RocksDB deleted it (a
    /// compaction since the database was opened): the descriptor the table holds, through
    /// /proc/self/fd. The file's own path when the table holds none (a remote table).
    pub(crate) fn open_path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        match &self.file {
            Some(f) => PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())),
            None => self.path.clone(),
        }
    }

    /// Compressed blocks read and decompressed so far.
    pub fn blocks_decompressed(&self) -> u64 {
        self.decompressed.load(Ordering::Relaxed)
    }

    /// Range tombstones in this file (a Get must not ignore them).
    pub fn range_deletions(&self) -> u64 {
        self.range_deletions
    }

    fn compressed(&self, h: BlockHandle, c: u8) -> RocksError {
        RocksError::unsupported(
            &self.path,
            format!("block at {}: compression {} ({c})", h.offset, compress::codec_name(c)),
        )
    }

    fn malformed(&self, base: u64, m: Malformed) -> RocksError {
        RocksError::corrupt(&self.path, base + m.at as u64, m.what)
    }

    /// Reads a block through the local file, checks its trailer and decompresses it: its
    /// contents, or the compression byte of a codec this reader does not decode.
    pub fn read_block(&self, h: BlockHandle) -> Result<Result<Vec<u8>, u8>, RocksError> {
        t_check_handle(&self.path, h, self.size)?;
        let Some(file) = &self.file else {
            return Err(RocksError::unsupported(
                &self.path,
                "a remote table's data blocks are read by the remote client",
            ));
        };
        let mut buf = vec![0u8; h.size as usize + BLOCK_TRAILER_BYTES];
        file.read_exact_at(&mut buf, h.offset).map_err(|e| RocksError::io(&self.path, e))?;
        self.decode_block(h, buf)
    }

    /// Checks a block's trailer (`buf` = contents and trailer, as read from `h`) and
    /// decompresses it.
    pub fn decode_block(
        &self,
        h: BlockHandle,
        mut buf: Vec<u8>,
    ) -> Result<Result<Vec<u8>, u8>, RocksError> {
        let n = h.size as usize;
        if buf.len() != n + BLOCK_TRAILER_BYTES {
            return Err(RocksError::corrupt(&self.path, h.offset, "block read short"));
        }
        let kind = buf[n];
        let stored = u32::from_le_bytes([buf[n + 1], buf[n + 2], buf[n + 3], buf[n + 4]]);
        let computed = self.footer.checksum.compute(&buf[..n], kind);
        if self.footer.checksum != crate::format::table::ChecksumType::None && stored != computed {
            return Err(RocksError::Checksum {
                file: self.path.clone(),
                offset: h.offset,
                kind: self.footer.checksum.name(),
                stored,
                computed,
            });
        }
        if kind == NO_COMPRESSION {
            buf.truncate(n);
            return Ok(Ok(buf));
        }
        match compress::decompress(kind, &buf[..n]).map_err(|m| self.malformed(h.offset, m))? {
            Some(plain) => {
                // Relaxed: a statistic, read after the lookups it counts have returned.
                self.decompressed.fetch_add(1, Ordering::Relaxed);
                Ok(Ok(plain))
            }
            None => Ok(Err(kind)),
        }
    }

    /// The largest data block the index names (contents, without the trailer).
    pub fn largest_data_block(&self) -> u64 {
        self.largest_data_block
    }

    /// Bytes of the meta blocks read at open (properties, metaindex, filter, index), with
    /// trailers: what a client cache of index and filter blocks holds for this file.
    pub fn meta_bytes(&self) -> u64 {
        self.meta_bytes
    }

    /// The cached index block's bytes (its size without the trailer).
    pub fn index_bytes(&self) -> usize {
        self.released.map_or(self.index.len(), |r| r.0)
    }

    /// Where the full filter block is (a filter this reader applies or not).
    pub fn filter_handle(&self) -> Option<BlockHandle> {
        self.filter_handle.filter(|_| self.has_filter())
    }

    /// Drops the index block and filter read at open, keeping their sizes: a remote client
    /// holds them only in its cache, within the cache's budget. A released table answers its
    /// filter "may contain" and its index from nothing: only the remote paths (which take
    /// both from their cache or the network) use it after.
    pub(crate) fn release_meta(&mut self) {
        if self.released.is_none() {
            self.released = Some((self.index.len(), self.filter.as_ref().map(Bloom::len)));
            self.index = Vec::new();
            self.index_prefixes = RestartPrefixes::empty();
            self.filter = None;
        }
    }

    /// Bytes of index and filter this table itself holds (0 once released).
    pub fn held_meta_bytes(&self) -> usize {
        self.index.len() + self.index_prefixes.bytes() + self.filter.as_ref().map_or(0, Bloom::len)
    }

    /// A copy of the filter (a client cache's).
    pub(crate) fn filter_copy(&self) -> Option<Bloom> {
        self.filter.clone()
    }

    /// The index block's contents as read at open (a client cache's copy).
    pub fn index_block(&self) -> &[u8] {
        &self.index
    }

    /// The filter block's bytes, 0 without one.
    pub fn filter_bytes(&self) -> usize {
        match self.released {
            Some((_, f)) => f.unwrap_or(0),
            None => self.filter.as_ref().map_or(0, Bloom::len),
        }
    }

    /// The entry for `user_key` in the data block `h` whose raw bytes (contents and trailer)
    /// the caller read: the remote paths' and the fallback's walk.
    pub fn get_in_raw_block(
        &self,
        h: BlockHandle,
        raw: Vec<u8>,
        user_key: &[u8],
    ) -> Result<Found, RocksError> {
        let data = match self.decode_block(h, raw)? {
            Ok(d) => d,
            Err(compression) => return Ok(Found::Compressed { offset: h.offset, compression }),
        };
        let mut key = Vec::new();
        self.search_data_block(h, user_key, &data, &mut key)
    }

    fn read_properties(
        &mut self,
        fetch: &mut dyn FnMut(BlockHandle) -> Result<Vec<u8>, RocksError>,
    ) -> Result<(), RocksError> {
        let mh = self.footer.metaindex;
        let raw = fetch(mh)?;
        self.meta_bytes += raw.len() as u64;
        let meta = self.decode_block(mh, raw)?.map_err(|c| self.compressed(mh, c))?;
        let mut key = Vec::new();
        let b = Block::parse(&meta, Values::Plain).map_err(|m| self.malformed(mh.offset, m))?;
        self.filter = self.read_filter(&b, mh, fetch)?;
        let v = b
            .seek(PROPERTIES_BLOCK, <[u8]>::cmp, &mut key)
            .map_err(|m| self.malformed(mh.offset, m))?;
        let Some(Value::Bytes(v)) = v.filter(|_| key == PROPERTIES_BLOCK) else {
            return Err(RocksError::corrupt(
                &self.path,
                mh.offset,
                "metaindex has no properties block",
            ));
        };
        let ph =
            BlockHandle::decode(&mut Cursor::new(v)).map_err(|m| self.malformed(mh.offset, m))?;
        let raw = fetch(ph)?;
        self.meta_bytes += raw.len() as u64;
        let props = self.decode_block(ph, raw)?.map_err(|c| self.compressed(ph, c))?;
        let b = Block::parse(&props, Values::Plain).map_err(|m| self.malformed(ph.offset, m))?;
        let prop = |name: &[u8], key: &mut Vec<u8>| -> Result<Option<Vec<u8>>, RocksError> {
            match b.seek(name, <[u8]>::cmp, key).map_err(|m| self.malformed(ph.offset, m))? {
                Some(Value::Bytes(v)) if key == name => Ok(Some(v.to_vec())),
                _ => Ok(None),
            }
        };
        let varint = |v: Option<Vec<u8>>| -> Result<u64, RocksError> {
            v.map_or(Ok(0), |v| {
                Cursor::new(&v).varint64("property").map_err(|m| self.malformed(ph.offset, m))
            })
        };
        if let Some(c) = prop(PROP_COMPARATOR, &mut key)? {
            if c != BYTEWISE_COMPARATOR.as_bytes() {
                return Err(RocksError::unsupported(
                    &self.path,
                    format!(
                        "comparator {} (this reader orders by {BYTEWISE_COMPARATOR})",
                        String::from_utf8_lossy(&c)
                    ),
                ));
            }
        }
        if let Some(t) = prop(PROP_INDEX_TYPE, &mut key)? {
            let t =
                Cursor::new(&t).fixed32("index type").map_err(|m| self.malformed(ph.offset, m))?;
            if t != INDEX_TYPE_BINARY_SEARCH {
                return Err(RocksError::unsupported(
                    &self.path,
                    format!("index type {t} (binary search only)"),
                ));
            }
        }
        let user_key = varint(prop(PROP_INDEX_KEY_IS_USER_KEY, &mut key)?)? != 0;
        let delta = varint(prop(PROP_INDEX_VALUE_DELTA, &mut key)?)? != 0;
        let range_deletions = varint(prop(PROP_RANGE_DELETIONS, &mut key)?)?;
        self.index_key_is_user_key = user_key;
        self.index_values = if delta { Values::DeltaHandles } else { Values::Plain };
        self.range_deletions = range_deletions;
        Ok(())
    }

    /// The full filter named in the metaindex `b`, if there is one of a kind this reader reads.
    fn read_filter(
        &mut self,
        b: &Block<'_>,
        mh: BlockHandle,
        fetch: &mut dyn FnMut(BlockHandle) -> Result<Vec<u8>, RocksError>,
    ) -> Result<Option<Bloom>, RocksError> {
        let mut key = Vec::new();
        let found = b
            .seek(FULL_FILTER_PREFIX, <[u8]>::cmp, &mut key)
            .map_err(|m| self.malformed(mh.offset, m))?;
        let Some(Value::Bytes(v)) = found.filter(|_| key.starts_with(FULL_FILTER_PREFIX)) else {
            return Ok(None);
        };
        let fh =
            BlockHandle::decode(&mut Cursor::new(v)).map_err(|m| self.malformed(mh.offset, m))?;
        self.filter_handle = Some(fh);
        let raw = fetch(fh)?;
        self.meta_bytes += raw.len() as u64;
        Ok(self.decode_block(fh, raw)?.ok().and_then(Bloom::parse))
    }

    /// Whether the file may hold `user_key`: false only when its filter says it does not.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|f| f.may_contain(user_key))
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// What the footer says (checksum type, index and metaindex handles).
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// Whether index keys are user keys (`rocksdb.index.key.is.user.key`), not internal keys.
    pub fn index_key_is_user_key(&self) -> bool {
        self.index_key_is_user_key
    }

    /// Whether index values are delta-encoded handles (`rocksdb.index.value.is.delta.encoded`).
    pub fn index_value_is_delta(&self) -> bool {
        self.index_values == Values::DeltaHandles
    }

    /// Whether the file has a filter this reader applies.
    pub fn has_filter(&self) -> bool {
        match self.released {
            Some((_, f)) => f.is_some(),
            None => self.filter.is_some(),
        }
    }

    /// The data block that may hold `user_key`, from the cached index block (searched by its
    /// restart points' prefixes).
    pub fn data_block_for(
        &self,
        user_key: &[u8],
        key: &mut Vec<u8>,
    ) -> Result<Option<BlockHandle>, RocksError> {
        let ih = self.footer.index;
        let b = Block::parse(&self.index, self.index_values)
            .map_err(|m| self.malformed(ih.offset, m))?;
        let p = &self.index_prefixes;
        let found = match self.index_keys() {
            Keys::User => b.seek_by_prefix(user_key, <[u8]>::cmp, key, p),
            Keys::Internal => {
                with_seek_key(user_key, |t| b.seek_by_prefix(t, cmp_internal, key, p))
            }
        };
        self.handle_of(found.map_err(|m| self.malformed(ih.offset, m))?)
    }

    fn index_keys(&self) -> Keys {
        if self.index_key_is_user_key {
            Keys::User
        } else {
            Keys::Internal
        }
    }

    /// The block handle an index entry holds.
    fn handle_of(&self, v: Option<Value<'_>>) -> Result<Option<BlockHandle>, RocksError> {
        match v {
            None => Ok(None),
            Some(Value::Handle(h)) => Ok(Some(h)),
            Some(Value::Bytes(v)) => BlockHandle::decode(&mut Cursor::new(v))
                .map(Some)
                .map_err(|m| self.malformed(self.footer.index.offset, m)),
        }
    }

    /// The data block that may hold `user_key`, from `index` (this table's index block's
    /// contents, as a client cache or a READ holds them).
    pub fn data_block_in(
        &self,
        index: &[u8],
        user_key: &[u8],
        key: &mut Vec<u8>,
    ) -> Result<Option<BlockHandle>, RocksError> {
        let ih = self.footer.index;
        let b = Block::parse(index, self.index_values).map_err(|m| self.malformed(ih.offset, m))?;
        let found = if self.index_key_is_user_key {
            b.seek(user_key, <[u8]>::cmp, key)
        } else {
            with_seek_key(user_key, |target| b.seek(target, cmp_internal, key))
        };
        self.handle_of(found.map_err(|m| self.malformed(ih.offset, m))?)
    }

    /// The newest entry for `user_key` in the data block `h`.
    pub fn search_data_block(
        &self,
        h: BlockHandle,
        user_key: &[u8],
        data: &[u8],
        key: &mut Vec<u8>,
    ) -> Result<Found, RocksError> {
        let b = Block::parse(data, Values::Plain).map_err(|m| self.malformed(h.offset, m))?;
        let Some(Value::Bytes(v)) = with_seek_key(user_key, |t| b.seek(t, cmp_internal, key))
            .map_err(|m| self.malformed(h.offset, m))?
        else {
            return Ok(Found::Absent);
        };
        let ik = InternalKey::parse(key).ok_or_else(|| {
            RocksError::corrupt(&self.path, h.offset, "data block key shorter than its trailer")
        })?;
        if ik.user_key != user_key {
            return Ok(Found::Absent);
        }
        Ok(Found::Entry { kind: ik.kind, sequence: ik.sequence, value: v.to_vec() })
    }

    /// A point lookup over plain reads: index (cached) -> data block -> entry.
    pub fn get(&self, user_key: &[u8]) -> Result<Found, RocksError> {
        let mut key = Vec::new();
        let Some(h) = self.data_block_for(user_key, &mut key)? else { return Ok(Found::Absent) };
        let data = match self.read_block(h)? {
            Ok(d) => d,
            Err(compression) => return Ok(Found::Compressed { offset: h.offset, compression }),
        };
        self.search_data_block(h, user_key, &data, &mut key)
    }
}
