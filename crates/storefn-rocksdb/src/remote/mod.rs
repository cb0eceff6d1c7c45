//! Gets against a database a storefn server serves (BPF-oF's RocksDB): the client opens it
//! through the wire (CURRENT, MANIFEST, WALs, each table's meta blocks) and answers a Get in two
//! phases. The in-memory phase runs here: memtable, level choice, and the filters and index
//! blocks the client's cache holds (held to a byte budget, a fraction of the database's index
//! and filter bytes). The remote phase is one of:
//! - [`RemotePath::Pushdown`]: one XRP request per candidate file, all of a Get's in one frame,
//!   running `progs/engines/rocksdb/get.bpf.c` next to the data (index -> data block); the
//!   function checks CRC-32C itself. Tables with other checksum types, and what the function
//!   hands back, are answered the rpc-read way and counted in [`RemoteStats::fallbacks`].
//! - [`RemotePath::RpcRead`]: RocksDB on a remote file system: filter, index and data block of
//!   each candidate file read over the network (one round trip each) through the client's block
//!   cache, which also keeps data blocks.
//!
//! Staleness: every reply carries its file's version; a file gone (a compaction dropped it) or
//! replaced since the open reopens the database (CURRENT and the MANIFEST again) and redoes the
//! Get, so no answer comes from a dropped file's blocks.

pub(crate) mod cache;
mod files;

pub use files::{RemoteFiles, MAX_READS_PER_FRAME};

use storefn_wire::limits::{MAX_READ_BYTES, MAX_XRP_READ_BYTES};
use storefn_wire::{Client, ProgHash, Request, PROG_TYPE_XRP};

use crate::chain::{self, abi, ChainAnswer, ChainStart};
use crate::db::{settle, Db, LiveFile, Lookup, Source};
use crate::error::RocksError;
use crate::format::filter::Bloom;
use crate::format::table::BLOCK_TRAILER_BYTES;
use crate::format::BlockHandle;
use crate::limits::{MAX_STALE_REOPENS, REFRESH_SAMPLE_EVERY};
use crate::sst::Found;
use cache::{BlockCache, Cached};

/// Which remote path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemotePath {
    RpcRead,
    Pushdown,
}

/// How the client runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RemoteConfig {
    pub path: RemotePath,
    /// The client cache's budget as a fraction of the database's index and filter bytes.
    pub cache_fraction: f64,
    /// Largest hop the server takes (`storefn serve --hop-bytes`).
    pub hop_bytes: u32,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            path: RemotePath::Pushdown,
            cache_fraction: 0.01,
            hop_bytes: storefn_io::limits::MAX_HOP_BYTES as u32,
        }
    }
}

/// What the client did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    pub gets: u64,
    /// XRP requests sent (one per candidate file).
    pub chains: u64,
    /// Files answered the rpc-read way on the pushdown path.
    pub fallbacks: u64,
    /// Reopens after a file was gone or replaced.
    pub reopens: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Index blocks read into the cache by the sampled refresh.
    pub cache_refreshes: u64,
}

/// A remote database and its client.
#[derive(Debug)]
pub struct RemoteDb {
    files: RemoteFiles,
    db: Db,
    cache: BlockCache,
    prog: ProgHash,
    cfg: RemoteConfig,
    stats: RemoteStats,
    /// Pushdown Gets that asked a file whose index block was not cached (the sample's clock).
    index_misses: u64,
    /// The cache's tick at the previous sample: what was used since is not evicted for a
    /// sampled block.
    sampled_at: u64,
}

impl RemoteDb {
    /// Opens the database at `dir` (relative to the served directory) through `client`.
    ///
    /// # Errors
    /// As [`Db::open_from`]; loading the function on the server.
    pub fn open(
        mut client: Client,
        addr: &str,
        dir: &str,
        cfg: RemoteConfig,
    ) -> Result<Self, RocksError> {
        let elf = storefn_progs::must(chain::PROGRAM);
        let prog = client
            .load_prog(PROG_TYPE_XRP, b"", elf)
            .map_err(|e| RocksError::chain(std::path::Path::new(addr), e))?;
        let mut files = RemoteFiles::new(client, addr, dir);
        let db = Db::open_from(&mut files)?;
        let mut r = RemoteDb {
            files,
            db,
            cache: BlockCache::new(0),
            prog,
            cfg,
            stats: RemoteStats::default(),
            index_misses: 0,
            sampled_at: 0,
        };
        r.warm();
        Ok(r)
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    pub fn stats(&self) -> RemoteStats {
        RemoteStats { cache_hits: self.cache.hits, cache_misses: self.cache.misses, ..self.stats }
    }

    /// Request frames sent so far (each one round trip).
    pub fn round_trips(&self) -> u64 {
        self.files.client.round_trips
    }

    /// The cache's budget and use, in bytes.
    pub fn cache_bytes(&self) -> (u64, u64) {
        (self.cache.capacity(), self.cache.used())
    }

    /// The database's index and filter bytes (what a 100% cache holds).
    pub fn meta_bytes(&self) -> u64 {
        let files = self.db.levels().iter().flatten();
        files.map(|f| (f.table.index_bytes() + f.table.filter_bytes()) as u64).sum()
    }

    /// Index and filter bytes the client holds outside its cache: 0 once open (the tables
    /// hand theirs to the cache, which keeps what its budget allows).
    pub fn held_meta_bytes(&self) -> u64 {
        self.db.levels().iter().flatten().map(|f| f.table.held_meta_bytes() as u64).sum()
    }

    /// Sizes the cache to its budget and fills it the way a Get asks: level 0 first, each
    /// file's filter then its index block, until the budget is used; then the tables drop
    /// theirs, so the cache's budget is all the index and filter memory the client holds.
    fn warm(&mut self) {
        let cap = (self.meta_bytes() as f64 * self.cfg.cache_fraction).ceil() as u64;
        self.cache = BlockCache::new(cap);
        for f in self.db.levels().iter().flatten() {
            let t = &f.table;
            if let (Some(h), Some(b)) = (t.filter_handle(), t.filter_copy()) {
                let n = t.filter_bytes() as u64;
                if self.cache.fits(n) {
                    self.cache.insert((f.meta.number, h.offset), Cached::Filter(Some(b)), n);
                }
            }
            let n = t.index_bytes() as u64;
            if self.cache.fits(n) {
                let k = (f.meta.number, t.footer().index.offset);
                self.cache.insert(k, Cached::Block(t.index_block().to_vec()), n);
            }
        }
        self.db.release_meta();
        self.cache.hits = 0;
        self.cache.misses = 0;
    }

    fn reopen(&mut self) -> Result<(), RocksError> {
        self.stats.reopens += 1;
        self.files.versions.clear();
        self.db = Db::open_from(&mut self.files)?;
        let (h, m) = (self.cache.hits, self.cache.misses);
        self.warm();
        self.cache.hits = h;
        self.cache.misses = m;
        Ok(())
    }

    /// One Get; a file gone or replaced reopens the database and asks again.
    ///
    /// # Errors
    /// Damage (checksums, the function's or the walk's findings), the wire, or a database that
    /// keeps changing under the Get.
    pub fn get(&mut self, key: &[u8]) -> Result<(Lookup, Source), RocksError> {
        self.stats.gets += 1;
        for _ in 0..MAX_STALE_REOPENS {
            let r = match self.cfg.path {
                RemotePath::Pushdown => self.get_pushdown(key),
                RemotePath::RpcRead => self.get_rpc_read(key),
            };
            match r {
                Err(RocksError::Stale { .. }) => self.reopen()?,
                r => return r,
            }
        }
        Err(RocksError::Stale {
            file: self.files.path_of(""),
            what: format!("changed {MAX_STALE_REOPENS} times during one Get"),
        })
    }

    /// A filter's verdict from the cache: `None` when the cache does not hold it.
    fn cached_filter(&mut self, f: &LiveFile, key: &[u8]) -> Option<bool> {
        let h = f.table.filter_handle()?;
        match self.cache.get((f.meta.number, h.offset))? {
            Cached::Filter(Some(b)) => Some(b.may_contain(key)),
            _ => Some(true),
        }
    }

    fn get_pushdown(&mut self, key: &[u8]) -> Result<(Lookup, Source), RocksError> {
        if let Some(l) = self.db.from_memtable(key) {
            return Ok((l, Source::Memtable));
        }
        let db = std::mem::replace(&mut self.db, Db::empty());
        let r = self.pushdown_files(&db, key);
        self.db = db;
        r
    }

    fn pushdown_files(&mut self, db: &Db, key: &[u8]) -> Result<(Lookup, Source), RocksError> {
        let mut asked: Vec<(&LiveFile, Option<ChainStart>)> = Vec::new();
        for f in db.candidates(key) {
            if self.cached_filter(f, key) == Some(false) {
                continue;
            }
            let t = &f.table;
            let k = (f.meta.number, t.footer().index.offset);
            let start = match self.cache.get(k) {
                Some(Cached::Block(idx)) => {
                    let idx = idx.clone();
                    match t.data_block_in(&idx, key, &mut Vec::new())? {
                        None => continue,
                        Some(h) => ChainStart { block: h, phase: abi::PHASE_DATA },
                    }
                }
                _ => ChainStart { block: t.footer().index, phase: abi::PHASE_INDEX },
            };
            let ok = chain::function_verifies(t)
                && key.len() <= abi::KEY_MAX
                && start.hop_len() <= u64::from(self.cfg.hop_bytes);
            asked.push((f, ok.then_some(start)));
        }
        let names: Vec<String> = asked.iter().map(|(f, _)| sst_name(f)).collect();
        let paths: Vec<String> = names.iter().map(|n| self.files.wire_path(n)).collect();
        let mut scratches = vec![[0u8; abi::KEY + abi::KEY_MAX]; asked.len()];
        let mut reqs = Vec::new();
        let mut which = Vec::new();
        for (i, (f, start)) in asked.iter().enumerate() {
            let Some(start) = *start else { continue };
            let s = &mut scratches[i];
            let mut full = [0u8; abi::OUT_BYTES];
            chain::fill(&mut full, &f.table, key, start, true, self.cfg.hop_bytes)
                .expect("key length checked");
            let n = s.len();
            s.copy_from_slice(&full[..n]);
            which.push(i);
        }
        let refresh = self.sample_refresh(&asked);
        for &i in &which {
            let start = asked[i].1.expect("asked");
            reqs.push(Request::Xrp {
                path: paths[i].as_bytes(),
                offset: start.block.offset,
                len: (start.hop_len() as u32).min(MAX_XRP_READ_BYTES),
                hash: &self.prog,
                scratch: &scratches[i][..abi::KEY + key.len()],
                out_len: abi::OUT_BYTES as u32,
            });
        }
        if let Some((i, h, _)) = refresh {
            reqs.push(Request::Read {
                path: paths[i].as_bytes(),
                offset: h.offset,
                len: h.size as u32 + BLOCK_TRAILER_BYTES as u32,
            });
        }
        let mut replies = if which.is_empty() && refresh.is_none() {
            Vec::new()
        } else {
            self.stats.chains += which.len() as u64;
            let addr = self.files.path_of("");
            self.files.call(&reqs).map_err(|e| RocksError::chain(&addr, e))?
        };
        if let Some((i, h, since)) = refresh {
            let r = replies.pop().ok_or_else(|| {
                RocksError::chain(&self.files.path_of(&names[i]), "no reply to the refresh read")
            })?;
            let r = self.files.checked(&names[i], r)?;
            let f = asked[i].0;
            if let Ok(b) = f.table.decode_block(h, r.data)? {
                let n = b.len() as u64;
                let k = (f.meta.number, h.offset);
                if self.cache.insert_if_cold(k, Cached::Block(b), n, since) {
                    self.stats.cache_refreshes += 1;
                }
            }
        }
        let mut answers: Vec<Option<Result<ChainAnswer, String>>> = vec![None; asked.len()];
        for (r, &i) in replies.into_iter().zip(&which) {
            answers[i] =
                Some(if r.status == 0 || r.status == storefn_wire::StatusCode::NotFound as u16 {
                    let r = self.files.checked(&names[i], r)?;
                    chain::answer(&r.data)
                } else {
                    Err(r.message)
                });
        }
        for (i, (f, _)) in asked.iter().enumerate() {
            let found = match answers[i].take() {
                Some(Ok(ChainAnswer::Entry { kind, sequence, value })) => {
                    Found::Entry { kind, sequence, value }
                }
                Some(Ok(ChainAnswer::Absent)) => Found::Absent,
                Some(Ok(ChainAnswer::Corrupt { offset, line })) => {
                    return Err(RocksError::corrupt(
                        &self.files.path_of(&names[i]),
                        offset,
                        format!(
                            "the storage function found this block damaged (get.bpf.c line {line})"
                        ),
                    ))
                }
                // Handed back, not pushed down, or the chain failed on the server: the
                // rpc-read walk answers (and names any damage it finds).
                _ => {
                    self.stats.fallbacks += 1;
                    self.rpc_read_file(f, key)?
                }
            };
            if let Some(a) = settle(f, found) {
                return Ok(a);
            }
        }
        Ok((Lookup::NotFound, Source::Nowhere))
    }

    /// BPF-oF's sampled refresh: every [`REFRESH_SAMPLE_EVERY`]th Get whose first asked file
    /// starts at its index block (not cached) also reads that block into the cache, in the
    /// same frame. The file asked, its index block's handle and the cache tick of the previous
    /// sample (what was used since stays), when this Get is sampled and the block would fit.
    fn sample_refresh(
        &mut self,
        asked: &[(&LiveFile, Option<ChainStart>)],
    ) -> Option<(usize, BlockHandle, u64)> {
        let (i, (f, _)) = asked
            .iter()
            .enumerate()
            .find(|(_, (_, s))| s.is_some_and(|s| s.phase == abi::PHASE_INDEX))?;
        self.index_misses += 1;
        if !self.index_misses.is_multiple_of(REFRESH_SAMPLE_EVERY) {
            return None;
        }
        // A sampled block may push out only what no Get used since the previous sample: a
        // small cache keeps the filters every Get asks (which spare whole chains) rather than
        // trading them for one file's index block.
        let since = std::mem::replace(&mut self.sampled_at, self.cache.tick());
        let h = f.table.footer().index;
        let fits = h.size + BLOCK_TRAILER_BYTES as u64 <= u64::from(MAX_READ_BYTES)
            && self.cache.admits(h.size, since);
        fits.then_some((i, h, since))
    }

    fn get_rpc_read(&mut self, key: &[u8]) -> Result<(Lookup, Source), RocksError> {
        if let Some(l) = self.db.from_memtable(key) {
            return Ok((l, Source::Memtable));
        }
        let db = std::mem::replace(&mut self.db, Db::empty());
        let r = (|| {
            for f in db.candidates(key) {
                if let Some(a) = settle(f, self.rpc_read_file(f, key)?) {
                    return Ok(a);
                }
            }
            Ok((Lookup::NotFound, Source::Nowhere))
        })();
        self.db = db;
        r
    }

    /// One block through the cache: its decoded contents, or the compression byte of a codec
    /// this reader does not decode.
    fn block(&mut self, f: &LiveFile, h: BlockHandle) -> Result<Result<Vec<u8>, u8>, RocksError> {
        let k = (f.meta.number, h.offset);
        if let Some(Cached::Block(b)) = self.cache.get(k) {
            return Ok(Ok(b.clone()));
        }
        let raw =
            self.files.read_range(&sst_name(f), h.offset, h.size as usize + BLOCK_TRAILER_BYTES)?;
        let b = f.table.decode_block(h, raw)?;
        if let Ok(b) = &b {
            self.cache.insert(k, Cached::Block(b.clone()), b.len() as u64);
        }
        Ok(b)
    }

    /// One file the rpc-read way: filter, index block, data block, each from the cache or one
    /// round trip.
    fn rpc_read_file(&mut self, f: &LiveFile, key: &[u8]) -> Result<Found, RocksError> {
        let t = &f.table;
        if let Some(h) = t.filter_handle() {
            let may = match self.cached_filter(f, key) {
                Some(m) => m,
                None => {
                    let raw = self.files.read_range(
                        &sst_name(f),
                        h.offset,
                        h.size as usize + BLOCK_TRAILER_BYTES,
                    )?;
                    let bloom = t.decode_block(h, raw)?.ok().and_then(Bloom::parse);
                    let may = bloom.as_ref().is_none_or(|b| b.may_contain(key));
                    self.cache.insert((f.meta.number, h.offset), Cached::Filter(bloom), h.size);
                    may
                }
            };
            if !may {
                return Ok(Found::Absent);
            }
        }
        let ih = t.footer().index;
        let index = match self.block(f, ih)? {
            Ok(b) => b,
            Err(c) => return Ok(Found::Compressed { offset: ih.offset, compression: c }),
        };
        let mut k = Vec::new();
        let Some(h) = t.data_block_in(&index, key, &mut k)? else { return Ok(Found::Absent) };
        let data = match self.block(f, h)? {
            Ok(b) => b,
            Err(c) => return Ok(Found::Compressed { offset: h.offset, compression: c }),
        };
        t.search_data_block(h, key, &data, &mut k)
    }
}

fn sst_name(f: &LiveFile) -> String {
    format!("{:06}.sst", f.meta.number)
}
