//! A table's lookups as a user asks them: the storefn reader answers, and what it hands back as
//! a fallback is answered by WiredTiger's own API (opened read-only on first need).
//!
//! Staleness: a lookup reads one checkpoint. WiredTiger replaces `WiredTiger.turtle` on every
//! checkpoint; the reader looks at it (one `stat`) at most every [`STALE_CHECK`] and moves to
//! the newest checkpoint when it changed. A block of a dropped checkpoint that WiredTiger reused
//! no longer matches the checksum its parent's address names: the lookup is redone on the newest
//! checkpoint, so no answer holds bytes that belong to no checkpoint.

use crate::db::Table;
use crate::error::WtError;
use crate::limits::MAX_STALE_RETRIES;
use crate::tree::Outcome;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often a reader looks for a newer checkpoint (WiredTiger checkpoints at most every
/// second by default; a test's writer every 100 ms).
pub const STALE_CHECK: Duration = Duration::from_millis(5);

/// A lookup's final answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The value (as stored) is in the caller's buffer.
    Found,
    NotFound,
}

/// How a lookup reads pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadPath {
    /// Plain reads in this process, one page at a time.
    #[default]
    Read,
    /// One storage-function chain per lookup on the io engine.
    Xrp,
    /// Chains of many lookups in flight at once (`get_many`).
    XrpBatch,
}

/// Counts of how lookups were answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupStats {
    pub lookups: u64,
    /// Answered by WiredTiger's own API because the storefn reader could not.
    pub fallbacks: u64,
    /// `xrp`: lookups the storage function handed back to the plain reader.
    pub function_fallbacks: u64,
    /// `xrp`: pages the function read.
    pub hops: u64,
    /// Moves to a newer checkpoint.
    pub reloads: u64,
    /// Lookups redone on a newer checkpoint after a block no longer matched its address.
    pub retries: u64,
}

/// What identifies the turtle file WiredTiger last wrote (it is replaced, never edited).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct TurtleId {
    ino: u64,
    mtime_ns: i128,
    size: u64,
}

fn turtle_id(turtle: &Path) -> Option<TurtleId> {
    let m = std::fs::metadata(turtle).ok()?;
    Some(TurtleId {
        ino: m.ino(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        size: m.size(),
    })
}

/// Lookups in one table with WiredTiger as the fallback.
#[derive(Debug)]
pub struct Lookups {
    dir: PathBuf,
    table: Table,
    xrp: Option<crate::xrp::XrpTree>,
    batch: bool,
    name: String,
    /// `WiredTiger.turtle` in `dir` (joined once: a staleness check allocates nothing).
    turtle_path: PathBuf,
    turtle: Option<TurtleId>,
    checked: Instant,
    /// Keys a batch handed back (reused: no allocation per batch in steady state).
    pending: Vec<usize>,
    uri: String,
    #[cfg(feature = "native")]
    key: Vec<u8>,
    #[cfg(feature = "native")]
    native: Option<crate::native::Native>,
    pub stats: LookupStats,
}

/// How a reader's chains read (`xrp`, `xrp-batch`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainOptions {
    /// O_DIRECT reads (buffered where the file system refuses them).
    pub direct: bool,
    /// The reader's block cache ([`crate::TreeCache`]), bytes; 0: none.
    pub cache_bytes: u64,
}

impl Lookups {
    /// Opens `table` of `dir` read-only, reading pages by `path` (chains buffered, no cache).
    ///
    /// # Errors
    /// As [`Table::open`].
    pub fn open(dir: &Path, table: &str, path: ReadPath) -> Result<Self, WtError> {
        Self::open_with(dir, table, path, ChainOptions::default())
    }

    /// As [`Lookups::open`], the chains reading as `chains` says.
    ///
    /// # Errors
    /// As [`Table::open`].
    pub fn open_with(
        dir: &Path,
        table: &str,
        path: ReadPath,
        chains: ChainOptions,
    ) -> Result<Self, WtError> {
        let turtle_path = dir.join(crate::db::TURTLE);
        let turtle = turtle_id(&turtle_path);
        let t = Table::open(dir, table)?;
        let alloc = t.tree().allocation_size();
        let opts = crate::xrp::XrpOptions {
            cache: (chains.cache_bytes > 0).then(|| {
                let c = crate::cache::TreeCache::new(chains.cache_bytes, alloc);
                std::sync::Arc::new(std::sync::Mutex::new(c))
            }),
            direct: chains.direct,
        };
        let xrp = match path {
            ReadPath::Read => None,
            ReadPath::Xrp | ReadPath::XrpBatch => {
                Some(crate::xrp::XrpTree::open_with(t.tree(), opts)?)
            }
        };
        Ok(Lookups {
            dir: dir.into(),
            table: t,
            xrp,
            batch: path == ReadPath::XrpBatch,
            name: table.into(),
            turtle_path,
            turtle,
            checked: Instant::now(),
            pending: Vec::new(),
            uri: format!("table:{table}"),
            #[cfg(feature = "native")]
            key: Vec::new(),
            #[cfg(feature = "native")]
            native: None,
            stats: LookupStats::default(),
        })
    }

    /// The table read.
    #[must_use]
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Moves to the newest checkpoint if WiredTiger wrote one since the last look; whether it
    /// moved. Lookups call this at most every [`STALE_CHECK`].
    ///
    /// # Errors
    /// The newest metadata cannot be read (after [`MAX_STALE_RETRIES`] tries: WiredTiger may be
    /// replacing it).
    pub fn refresh(&mut self) -> Result<bool, WtError> {
        self.checked = Instant::now();
        let now = turtle_id(&self.turtle_path);
        if now == self.turtle {
            return Ok(false);
        }
        self.reload(now)
    }

    fn reload(&mut self, id: Option<TurtleId>) -> Result<bool, WtError> {
        let mut last = None;
        for _ in 0..MAX_STALE_RETRIES {
            match Table::open(&self.dir, &self.name) {
                Ok(t) => {
                    self.turtle = id;
                    let moved = t.checkpoint_order != self.table.checkpoint_order
                        || t.tree().checkpoint() != self.table.tree().checkpoint();
                    if moved {
                        self.stats.reloads += 1;
                        self.table = t;
                    }
                    return Ok(moved);
                }
                // The metadata's own blocks can be mid-replacement: look again.
                Err(e @ WtError::Corrupt { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Err(last.expect("the loop ran"))
    }

    fn maybe_refresh(&mut self) -> Result<(), WtError> {
        if self.checked.elapsed() >= STALE_CHECK {
            self.refresh()?;
        }
        Ok(())
    }

    /// Looks a user's key up, copying the stored value into `value`.
    ///
    /// # Errors
    /// Damage on the read path (that persists on the newest checkpoint), or WiredTiger's own
    /// error on a fallback.
    pub fn get(&mut self, user_key: &[u8], value: &mut Vec<u8>) -> Result<Answer, WtError> {
        self.stats.lookups += 1;
        self.maybe_refresh()?;
        let mut tries = 0;
        loop {
            match self.get_once(user_key, value) {
                // Damage, or a chain the engine refused (a block past the file's end): both can
                // be a checkpoint WiredTiger dropped meanwhile.
                Err(e @ (WtError::Corrupt { .. } | WtError::Chain { .. })) => {
                    tries += 1;
                    if tries > MAX_STALE_RETRIES
                        || !(self.reload(turtle_id(&self.turtle_path))? || self.file_shrank()?)
                    {
                        return Err(e);
                    }
                    self.stats.retries += 1;
                }
                r => return r,
            }
        }
    }

    /// Whether the function's engine found the file shorter than it last saw (the checkpoint
    /// the same): its chains then read within the new end.
    fn file_shrank(&mut self) -> Result<bool, WtError> {
        self.xrp.as_mut().map_or(Ok(false), crate::xrp::XrpTree::file_shrank)
    }

    fn get_once(&mut self, user_key: &[u8], value: &mut Vec<u8>) -> Result<Answer, WtError> {
        if let Some(x) = &mut self.xrp {
            #[cfg(feature = "native")]
            let key = &mut self.key;
            #[cfg(not(feature = "native"))]
            let key = &mut Vec::new();
            self.table.key_format.encode(user_key, key)?;
            let hops = x.hops;
            let r = x.get(self.table.tree(), key, value);
            self.stats.hops += x.hops - hops;
            match r? {
                Outcome::Found => return Ok(Answer::Found),
                Outcome::NotFound => return Ok(Answer::NotFound),
                Outcome::Fallback(_) => self.stats.function_fallbacks += 1,
            }
        }
        self.get_plain(user_key, value)
    }

    fn get_plain(&mut self, user_key: &[u8], value: &mut Vec<u8>) -> Result<Answer, WtError> {
        match self.table.get(user_key, value)? {
            Outcome::Found => Ok(Answer::Found),
            Outcome::NotFound => Ok(Answer::NotFound),
            Outcome::Fallback(_) => {
                self.stats.fallbacks += 1;
                self.fallback(user_key, value)
            }
        }
    }

    /// Looks many user keys up; `each(i, answer, value)` hears key i's answer (in completion
    /// order on `xrp-batch`, which keeps many chains in flight; in order otherwise). Stored
    /// keys go in `stored` (caller-owned, reused).
    ///
    /// # Errors
    /// As [`Lookups::get`]: the first error stops the batch.
    pub fn get_many<K: AsRef<[u8]>>(
        &mut self,
        keys: &[K],
        stored: &mut Vec<Vec<u8>>,
        value: &mut Vec<u8>,
        mut each: impl FnMut(usize, Answer, &[u8]),
    ) -> Result<(), WtError> {
        if !self.batch || self.xrp.is_none() {
            for (i, k) in keys.iter().enumerate() {
                let a = self.get(k.as_ref(), value)?;
                each(i, a, value);
            }
            return Ok(());
        }
        self.maybe_refresh()?;
        self.stats.lookups += keys.len() as u64;
        stored.resize_with(keys.len().max(stored.len()), Vec::new);
        for (k, s) in keys.iter().zip(stored.iter_mut()) {
            self.table.key_format.encode(k.as_ref(), s)?;
        }
        let x = self.xrp.as_mut().expect("checked above");
        let hops = x.hops;
        self.pending.clear();
        let pending = &mut self.pending;
        x.get_batch(self.table.tree(), &stored[..keys.len()], |i, o, v| match o {
            Ok(Outcome::Found) => each(i, Answer::Found, v),
            Ok(Outcome::NotFound) => each(i, Answer::NotFound, &[]),
            // Fallbacks and damage (possibly a reused block: a newer checkpoint) are redone
            // one by one below.
            Ok(Outcome::Fallback(_)) | Err(_) => pending.push(i),
        })?;
        self.stats.hops += x.hops - hops;
        self.stats.lookups -= self.pending.len() as u64;
        let pending = std::mem::take(&mut self.pending);
        for &i in &pending {
            let a = self.get(keys[i].as_ref(), value)?;
            each(i, a, value);
        }
        self.pending = pending;
        Ok(())
    }

    #[cfg(feature = "native")]
    fn fallback(&mut self, user_key: &[u8], value: &mut Vec<u8>) -> Result<Answer, WtError> {
        if self.native.is_none() {
            self.native = Some(crate::native::Native::open(&self.dir, "readonly=true")?);
        }
        let native = self.native.as_ref().expect("opened above");
        self.table.key_format.encode(user_key, &mut self.key)?;
        let found = native.cursor(&self.uri)?.search(&self.key, value)?;
        Ok(if found { Answer::Found } else { Answer::NotFound })
    }

    #[cfg(not(feature = "native"))]
    fn fallback(&mut self, _user_key: &[u8], _value: &mut Vec<u8>) -> Result<Answer, WtError> {
        Err(WtError::Unsupported {
            path: self.dir.clone(),
            what: format!(
                "{}: this key needs WiredTiger's own API (build with the `native` feature)",
                self.uri
            ),
        })
    }
}
