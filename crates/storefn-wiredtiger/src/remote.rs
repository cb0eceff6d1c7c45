//! Lookups in a WiredTiger table on a `storefn serve` server, through the wire client:
//! `rpc-read` (the reader walks the tree with READs: one round trip per page, a 32 KiB leaf's
//! READs sent in one frame) and `pushdown` (the lookup function runs on the server as one XRP
//! request: one round trip per lookup; it checks every block's CRC-32C itself, since no host
//! here sees the blocks). The turtle and metadata are read with the same READs.
//!
//! Staleness: as locally, a lookup reads one checkpoint. Every reply names the version of the
//! table's file it was served from; WiredTiger writes the file whenever a checkpoint changes the
//! table, so a reply from another version than the one seen when the checkpoint was read makes
//! the next lookup move to the newest checkpoint (no extra round trip while nothing changes: a
//! checkpoint that does not touch the table leaves its old checkpoint valid). A lookup that meets
//! a block that is not the one its address named (a dropped checkpoint's reused block) is redone
//! on the newest checkpoint.

use crate::cache::{Route, TreeCache};
use crate::db::{table_meta, turtle_metadata, Format, TableMeta, METADATA, TURTLE};
use crate::error::WtError;
use crate::format::{BlockAddr, BlockHeader, PageType};
use crate::limits::{MAX_DEPTH, MAX_STALE_RETRIES, MAX_TURTLE_BYTES, REMOTE_INTERNAL_BYTES};
use crate::lookup::Answer;
use crate::tree::{Outcome, Walk};
use crate::xrp::{abi, ChainEnd, ChainStart, FLAG_VERIFY, PROGRAM};
use std::path::Path;
use std::time::Duration;
use storefn_wire::limits::MAX_READ_BYTES;
use storefn_wire::{
    Client, ClientError, FileVersion, ProgHash, Request, StatusCode, PROG_TYPE_XRP,
};

/// Blocks a remote reader remembers as read but not kept (a linear scan per pushdown).
const MAX_OPAQUE: usize = 64;

/// Which remote path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemotePath {
    /// READs: one round trip per page.
    RpcRead,
    /// The lookup function on the server: one round trip per lookup.
    Pushdown,
}

/// Counters of a remote table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    pub lookups: u64,
    /// Request frames sent for lookups (each one network round trip), reloads included.
    pub round_trips: u64,
    /// Pages read on the server (a chain's hops, or the pages READ).
    pub pages: u64,
    /// Pushdown lookups the function handed back, answered with READs.
    pub fallbacks: u64,
    pub reloads: u64,
    pub retries: u64,
    /// Pushdown: READ frames of internal pages for the client's cache (each a round trip,
    /// counted in `round_trips` and `pages` too); once they are cached, none.
    pub internal_reads: u64,
}

/// A table of a database directory served by `storefn serve`.
pub struct RemoteTable {
    client: Client,
    dir: String,
    name: String,
    meta: TableMeta,
    file: String,
    /// The table file's version when its checkpoint was read (`None`: not yet seen).
    version: Option<FileVersion>,
    /// A reply came from another version: move to the newest checkpoint first.
    stale: bool,
    hash: Option<ProgHash>,
    page: Vec<u8>,
    key: Vec<u8>,
    stored: Vec<u8>,
    scratch: Vec<u8>,
    /// The table file's internal pages, parsed (XRP's design: the application keeps the upper
    /// levels, so a pushdown starts at the leaf and the server reads one block). `None`: off.
    internal: Option<TreeCache>,
    internal_off: bool,
    /// Blocks read for the cache that it does not keep (a root that is a leaf, a page it does
    /// not parse): pushdowns start there without reading them again.
    opaque: Vec<BlockAddr>,
    pub stats: RemoteStats,
}

impl std::fmt::Debug for RemoteTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTable")
            .field("dir", &self.dir)
            .field("name", &self.name)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn wire(path: &str, e: impl std::fmt::Display) -> WtError {
    WtError::Chain { path: path.into(), what: format!("server: {e}") }
}

fn past_end(path: &str, offset: u64, read: usize) -> WtError {
    WtError::Corrupt {
        path: path.into(),
        offset,
        what: format!("block runs past the end of the file (read {read} bytes)"),
    }
}

fn rel(dir: &str, file: &str) -> String {
    if dir.is_empty() || dir == "." {
        file.into()
    } else {
        format!("{}/{file}", dir.trim_end_matches('/'))
    }
}

/// Reads `buf.len()` bytes of `path` at `offset` in one frame of READs (one round trip).
/// Returns the version of the file the first READ was served from.
fn read_frame(
    c: &mut Client,
    path: &str,
    offset: u64,
    buf: &mut [u8],
) -> Result<FileVersion, WtError> {
    let step = MAX_READ_BYTES as usize;
    let mut reqs = [Request::Stat { path: b"" }; 16];
    let n = buf.len().div_ceil(step);
    if n > reqs.len() {
        return Err(wire(path, format!("a block of {} bytes is more than one frame", buf.len())));
    }
    for (i, r) in reqs[..n].iter_mut().enumerate() {
        let len = (buf.len() - i * step).min(step) as u32;
        *r = Request::Read { path: path.as_bytes(), offset: offset + (i * step) as u64, len };
    }
    let replies = c.call(&reqs[..n]).map_err(|e| wire(path, e))?;
    let version = replies.first().map(|r| r.version).unwrap_or_default();
    for (i, r) in replies.into_iter().enumerate() {
        // A file now shorter than asked (the turtle is replaced by a rename, a file can be
        // truncated) is the short read below: damage a newer checkpoint may not have.
        if r.status == StatusCode::OutOfRange as u16 {
            return Err(past_end(path, offset + (i * step) as u64, 0));
        }
        let r = r.ok("READ").map_err(|e| wire(path, e))?;
        let total = buf.len();
        let want = &mut buf[i * step..((i + 1) * step).min(total)];
        if r.data.len() != want.len() {
            return Err(past_end(path, offset + (i * step) as u64, r.data.len()));
        }
        want.copy_from_slice(&r.data);
    }
    Ok(version)
}

impl RemoteTable {
    /// Opens table `name` of the database directory `dir` (relative to the served directory).
    ///
    /// # Errors
    /// Connection errors, and as [`crate::Table::open`].
    pub fn open(client: Client, dir: &str, name: &str) -> Result<Self, WtError> {
        let mut t = RemoteTable {
            client,
            dir: dir.into(),
            name: name.into(),
            meta: TableMeta {
                key_format: Format::Raw,
                value_format: Format::Raw,
                order: 0,
                file: String::new(),
                ckpt: crate::format::CheckpointCookie { root: None, file_size: 0, ckpt_size: 0 },
                alloc: 4096,
            },
            file: String::new(),
            version: None,
            stale: false,
            hash: None,
            page: Vec::new(),
            key: Vec::new(),
            stored: Vec::new(),
            scratch: vec![0; abi::KEY + abi::KEY_MAX],
            internal: None,
            internal_off: false,
            opaque: Vec::new(),
            stats: RemoteStats::default(),
        };
        t.load()?;
        Ok(t)
    }

    /// Pushdown without the cache of internal pages: every lookup's chain starts at the root
    /// on the server (its hops read the internal pages there too).
    pub fn without_internal_cache(&mut self) {
        self.internal = None;
        self.internal_off = true;
    }

    /// How keys and values are stored.
    #[must_use]
    pub fn formats(&self) -> (Format, Format) {
        (self.meta.key_format, self.meta.value_format)
    }

    /// The client (its counters, or to send other requests).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    fn stat(&mut self, path: &str) -> Result<(FileVersion, u64), WtError> {
        let r =
            self.client.one(&Request::Stat { path: path.as_bytes() }).map_err(|e| wire(path, e))?;
        Ok((r.version, r.value))
    }

    /// Reads the turtle, the metadata and the table's newest checkpoint.
    fn load(&mut self) -> Result<(), WtError> {
        // The file's version before its checkpoint is read: a change after it shows in a reply.
        let before =
            if self.file.is_empty() { None } else { Some(self.stat(&self.file.clone())?.0) };
        let turtle_path = rel(&self.dir, TURTLE);
        let (_, size) = self.stat(&turtle_path)?;
        if size > MAX_TURTLE_BYTES {
            return Err(WtError::Corrupt {
                path: turtle_path.into(),
                offset: 0,
                what: format!("{size} bytes: not a turtle file"),
            });
        }
        let mut text = vec![0; size as usize];
        for (i, chunk) in text.chunks_mut(MAX_READ_BYTES as usize).enumerate() {
            read_frame(
                &mut self.client,
                &turtle_path,
                (i * MAX_READ_BYTES as usize) as u64,
                chunk,
            )?;
        }
        let text = String::from_utf8(text).map_err(|_| WtError::Corrupt {
            path: turtle_path.clone().into(),
            offset: 0,
            what: "not UTF-8".into(),
        })?;
        let (mckpt, malloc) = turtle_metadata(&text, Path::new(&turtle_path))?;
        let meta_path = rel(&self.dir, METADATA);
        let (client, page, key) = (&mut self.client, &mut self.page, &mut self.key);
        let mut value = Vec::new();
        let mut stored = Vec::new();
        let meta = table_meta(Path::new(&meta_path), &self.name, |uri| {
            Format::String.encode(uri.as_bytes(), &mut stored)?;
            let mut w =
                Walk { path: Path::new(&meta_path), alloc: malloc, ckpt: &mckpt, page, key };
            let o = w.get(&stored, &mut value, |off, buf| {
                read_frame(client, &meta_path, off, buf).map(drop)
            })?;
            match o {
                Outcome::NotFound => Ok(None),
                Outcome::Found => Format::String
                    .decode(&value)
                    .and_then(|v| String::from_utf8(v.to_vec()).ok())
                    .map(Some)
                    .ok_or_else(|| WtError::Corrupt {
                        path: meta_path.clone().into(),
                        offset: 0,
                        what: format!("{uri:?}: value is not a NUL-terminated UTF-8 string"),
                    }),
                Outcome::Fallback(f) => Err(WtError::Unsupported {
                    path: meta_path.clone().into(),
                    what: format!("metadata entry {uri:?} needs {f:?}"),
                }),
            }
        })?;
        let file = rel(&self.dir, &meta.file);
        if !self.internal_off && (file != self.file || self.internal.is_none()) {
            self.internal = Some(TreeCache::internal_only(REMOTE_INTERNAL_BYTES, meta.alloc));
        }
        self.version = match before {
            Some(v) if file == self.file => Some(v),
            _ => Some(self.stat(&file)?.0),
        };
        self.file = file;
        self.meta = meta;
        self.stale = false;
        Ok(())
    }

    /// Reads the newest checkpoint; whether it differs from the one read so far.
    fn refresh(&mut self) -> Result<bool, WtError> {
        let old = (self.meta.order, self.meta.ckpt);
        let mut last = None;
        for _ in 0..MAX_STALE_RETRIES {
            let sent = self.client.round_trips;
            let r = self.load();
            self.stats.round_trips += self.client.round_trips - sent;
            match r {
                Ok(()) => {
                    let moved = (self.meta.order, self.meta.ckpt) != old;
                    self.stats.reloads += u64::from(moved);
                    return Ok(moved);
                }
                Err(e @ WtError::Corrupt { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(last.expect("the loop ran"))
    }

    /// Looks a user's key up on `path`, copying the stored value into `value`.
    ///
    /// # Errors
    /// Connection errors; damage that persists on the newest checkpoint; an item only
    /// WiredTiger's own API reads (overflow items: `Unsupported`, as no WiredTiger runs here).
    pub fn get(
        &mut self,
        user_key: &[u8],
        path: RemotePath,
        value: &mut Vec<u8>,
    ) -> Result<Answer, WtError> {
        self.stats.lookups += 1;
        if self.stale {
            self.refresh()?;
        }
        self.meta.key_format.encode(user_key, &mut self.stored)?;
        let mut tries = 0;
        loop {
            let r = match path {
                RemotePath::RpcRead => self.walk(value),
                RemotePath::Pushdown => self.pushdown(value),
            };
            match r {
                Err(e @ WtError::Corrupt { .. }) => {
                    tries += 1;
                    if tries > MAX_STALE_RETRIES || !self.refresh()? {
                        return Err(e);
                    }
                    self.stats.retries += 1;
                }
                Ok(Outcome::Found) => return Ok(Answer::Found),
                Ok(Outcome::NotFound) => return Ok(Answer::NotFound),
                Ok(Outcome::Fallback(f)) => {
                    return Err(WtError::Unsupported {
                        path: self.file.clone().into(),
                        what: format!(
                            "key {user_key:?} needs {f:?}: only WiredTiger's own API reads it"
                        ),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// rpc-read: the walk with one frame of READs per page.
    fn walk(&mut self, value: &mut Vec<u8>) -> Result<Outcome, WtError> {
        let (client, file, stats) = (&mut self.client, &self.file, &mut self.stats);
        let mut w = Walk {
            path: Path::new(file),
            alloc: self.meta.alloc,
            ckpt: &self.meta.ckpt,
            page: &mut self.page,
            key: &mut self.key,
        };
        let (known, stale) = (self.version, &mut self.stale);
        w.get(&self.stored, value, |off, buf| {
            stats.round_trips += 1;
            stats.pages += 1;
            let v = read_frame(client, file, off, buf)?;
            *stale |= known != Some(v);
            Ok(())
        })
    }

    /// Where the pushdown of the stored key starts: the leaf the cached internal pages name,
    /// reading (one READ frame each, verified against its address) the internal pages on the
    /// way that are not cached yet. Without the cache, the root.
    fn route(&mut self, root: BlockAddr) -> Result<Route, WtError> {
        let Some(cache) = self.internal.as_mut() else { return Ok(Route::Chain(root)) };
        let (file_size, file) = (self.meta.ckpt.file_size, &self.file);
        let mut last_read = None;
        for _ in 0..=MAX_DEPTH {
            let route = cache.route(root, &self.stored, file_size).map_err(|(offset, what)| {
                WtError::Corrupt { path: file.clone().into(), offset, what }
            })?;
            let Route::Chain(a) = route else { return Ok(route) };
            // Read and still not cached: a leaf (a root that is one), or a page the cache does
            // not parse: the function starts there.
            if self.opaque.contains(&a) || a.size > u64::from(crate::xrp::HOP_BYTES) {
                return Ok(route);
            }
            if last_read == Some(a) {
                if self.opaque.len() == MAX_OPAQUE {
                    self.opaque.clear();
                }
                self.opaque.push(a);
                return Ok(route);
            }
            self.page.resize(a.size as usize, 0);
            self.stats.round_trips += 1;
            self.stats.pages += 1;
            self.stats.internal_reads += 1;
            let v = read_frame(&mut self.client, file, a.offset, &mut self.page)?;
            self.stale |= self.version != Some(v);
            let corrupt = |m: crate::format::Malformed| WtError::Corrupt {
                path: file.clone().into(),
                offset: a.offset + m.at as u64,
                what: m.what,
            };
            BlockHeader::verify(&self.page, a).map_err(corrupt)?;
            if PageType::of(&self.page) == Some(PageType::RowInternal) {
                cache.put_internal(a.offset, &self.page).map_err(corrupt)?;
            }
            last_read = Some(a);
        }
        Err(WtError::Corrupt {
            path: file.clone().into(),
            offset: root.offset,
            what: format!("tree deeper than {MAX_DEPTH} levels (a cycle?)"),
        })
    }

    fn prog(&mut self) -> Result<ProgHash, WtError> {
        if let Some(h) = self.hash {
            return Ok(h);
        }
        let elf = storefn_progs::must(PROGRAM);
        let h = self.client.load_prog(PROG_TYPE_XRP, b"", elf).map_err(|e| wire(&self.file, e))?;
        self.hash = Some(h);
        Ok(h)
    }

    /// pushdown: one XRP request; what the function hands back is walked with READs.
    fn pushdown(&mut self, value: &mut Vec<u8>) -> Result<Outcome, WtError> {
        let Some(root) = self.meta.ckpt.root else { return Ok(Outcome::NotFound) };
        if self.stored.len() > abi::KEY_MAX || root.size > u64::from(crate::xrp::HOP_BYTES) {
            self.stats.fallbacks += 1;
            return self.walk(value);
        }
        let (from, leaf) = match self.route(root)? {
            Route::Leaf(a) => (a, true),
            Route::Chain(a) => (a, false),
            Route::NotFound => return Ok(Outcome::NotFound),
            Route::Fallback(_) => {
                self.stats.fallbacks += 1;
                return self.walk(value);
            }
        };
        let start =
            ChainStart { root: from, alloc: self.meta.alloc, file_size: self.meta.ckpt.file_size };
        let hash = self.prog()?;
        let n = abi::KEY + self.stored.len();
        self.scratch[..n].fill(0);
        start.fill(&self.stored, FLAG_VERIFY, &mut self.scratch[..n]);
        // A leaf is read with the function's whole view where the file allows: the server runs
        // a hop lent less than the view on the interpreter (the function bounds every access
        // by the block's size).
        let view = u64::from(crate::xrp::HOP_BYTES);
        let len =
            if leaf && self.meta.ckpt.file_size - from.offset >= view { view } else { from.size };
        let (file, scratch) = (self.file.as_bytes(), &self.scratch[..n]);
        let req = |len: u64| Request::Xrp {
            path: file,
            offset: from.offset,
            len: len as u32,
            hash: &hash,
            scratch,
            out_len: (abi::VALUE + abi::VALUE_MAX) as u32,
        };
        let mut r = self.client.one(&req(len));
        self.stats.round_trips += 1;
        let past_end = |r: &Result<_, ClientError>| matches!(r, Err(e) if e.status() == Some(StatusCode::OutOfRange as u16));
        if len > from.size && past_end(&r) {
            // The checkpoint's recorded size can exceed the file: WiredTiger truncates free
            // blocks at the end while it checkpoints, before its metadata names the new
            // checkpoint. The leaf alone is asked for.
            r = self.client.one(&req(from.size));
            self.stats.round_trips += 1;
        }
        let r = match r {
            Ok(r) => r,
            // The server's instruction budget per invocation is smaller than this page's scan:
            // READs answer, as for anything else the function does not handle. (The wire names
            // the fault only in its message.)
            Err(e) if e.to_string().contains("instruction budget exhausted") => {
                self.stats.fallbacks += 1;
                return self.walk(value);
            }
            // A chain the server refused (a block past the file's end) can be a dropped
            // checkpoint: answered as damage, which is redone on the newest checkpoint.
            Err(e) => {
                return Err(WtError::Corrupt {
                    path: self.file.clone().into(),
                    offset: from.offset,
                    what: e.to_string(),
                })
            }
        };
        self.stats.pages += u64::from(r.hops);
        self.stale |= self.version != Some(r.version);
        match ChainEnd::parse(&r.data).map_err(|w| wire(&self.file, w))? {
            ChainEnd::Found(v) => {
                value.clear();
                value.extend_from_slice(v);
                Ok(Outcome::Found)
            }
            ChainEnd::NotFound => Ok(Outcome::NotFound),
            ChainEnd::Fallback => {
                self.stats.fallbacks += 1;
                self.walk(value)
            }
            ChainEnd::Corrupt(at) => Err(crate::xrp::function_corrupt(Path::new(&self.file), at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use storefn_server::{Server, ServerConfig};
    use storefn_wire::ClientConfig;

    // Regression: a turtle replaced by a shorter one between its STAT and its READs was answered
    // OUT_OF_RANGE and reported as a broken connection, so the reload gave up instead of
    // rereading the newer checkpoint.
    #[test]
    fn a_read_past_a_shrunk_file_is_damage_a_reload_retries() {
        let dir = std::env::temp_dir().join(format!("storefn-wt-shrunk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("f"), [7u8; 100]).unwrap();
        let mut cfg = ServerConfig::new(&dir);
        cfg.threads = 1;
        let s = Server::start("127.0.0.1:0", cfg).unwrap();
        let mut c = Client::connect(&s.local_addr().to_string(), ClientConfig::default()).unwrap();
        let mut buf = [0u8; 64];
        for offset in [50, 200] {
            match read_frame(&mut c, "f", offset, &mut buf) {
                Err(WtError::Corrupt { offset: at, .. }) => assert_eq!(at, offset),
                other => panic!("offset {offset}: {other:?}"),
            }
        }
        read_frame(&mut c, "f", 36, &mut buf).unwrap();
        assert_eq!(buf, [7u8; 64]);
        drop(s);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
