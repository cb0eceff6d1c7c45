//! Opening a database directory read-only: `WiredTiger.turtle` -> the metadata B-tree
//! `WiredTiger.wt` -> a table's `file:` entry and its newest checkpoint.

use crate::error::WtError;
use crate::format::{config_entries, config_get, CheckpointCookie, Malformed, Turtle};
use crate::limits::{MAX_ALLOCATION_SIZE, MAX_TURTLE_BYTES};
use crate::tree::{Outcome, Tree};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Releases whose files this reader knows: Debian's libwiredtiger (bookworm).
pub const SUPPORTED_VERSIONS: &[(u32, u32, u32)] = &[(3, 2, 1)];
const SUPPORTED_TEXT: &str = "3.2.1";
pub(crate) const TURTLE: &str = "WiredTiger.turtle";
pub(crate) const METADATA: &str = "WiredTiger.wt";

/// How a table stores keys or values (`key_format`, `value_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `S`: a NUL-terminated string; stored with its NUL.
    String,
    /// `u`: raw bytes.
    Raw,
}

impl Format {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "S" => Some(Format::String),
            "u" => Some(Format::Raw),
            _ => None,
        }
    }

    /// The stored form of a user's key: `S` appends the NUL.
    ///
    /// # Errors
    /// An `S` key containing a NUL byte.
    pub fn encode(self, user: &[u8], out: &mut Vec<u8>) -> Result<(), WtError> {
        out.clear();
        out.extend_from_slice(user);
        if self == Format::String {
            if user.contains(&0) {
                return Err(WtError::Invalid(
                    "a key_format=S key cannot contain a NUL byte".into(),
                ));
            }
            out.push(0);
        }
        Ok(())
    }

    /// The user's view of a stored item: `S` without its NUL (`None` when it has none).
    #[must_use]
    pub fn decode(self, stored: &[u8]) -> Option<&[u8]> {
        match self {
            Format::String => stored.strip_suffix(&[0]),
            Format::Raw => Some(stored),
        }
    }
}

/// A table of a WiredTiger database, at the newest checkpoint its metadata names.
#[derive(Debug)]
pub struct Table {
    dir: PathBuf,
    name: String,
    pub key_format: Format,
    pub value_format: Format,
    /// `order` of the checkpoint read (grows with every checkpoint WiredTiger takes).
    pub checkpoint_order: u64,
    tree: Tree,
    key: Vec<u8>,
}

impl Table {
    /// Opens table `name` of database `dir` read-only: nothing in `dir` is written or locked.
    ///
    /// # Errors
    /// A release other than [`SUPPORTED_VERSIONS`], a table that does not exist or that this
    /// reader cannot serve (column store, collator, encryption), damaged metadata.
    pub fn open(dir: &Path, name: &str) -> Result<Self, WtError> {
        let meta = open_metadata(dir)?;
        let mut meta = MetaReader { tree: meta, key: Vec::new(), value: Vec::new() };
        let m = table_meta(&dir.join(METADATA), name, |uri| meta.get(uri))?;
        let tree = Tree::open(&dir.join(&m.file), m.alloc, m.ckpt)?;
        Ok(Table {
            dir: dir.into(),
            name: name.into(),
            key_format: m.key_format,
            value_format: m.value_format,
            checkpoint_order: m.order,
            tree,
            key: Vec::new(),
        })
    }

    /// Looks up a user's key (for `S` without its NUL), copying the stored value into `value`.
    ///
    /// # Errors
    /// As [`Tree::get`], and an `S` key with a NUL byte.
    pub fn get(&mut self, user_key: &[u8], value: &mut Vec<u8>) -> Result<Outcome, WtError> {
        let mut key = std::mem::take(&mut self.key);
        let r =
            self.key_format.encode(user_key, &mut key).and_then(|()| self.tree.get(&key, value));
        self.key = key;
        r
    }

    /// Whether the metadata still names the checkpoint this table reads. A newer checkpoint
    /// means a reopen; WiredTiger rewrites the turtle and metadata on every checkpoint.
    ///
    /// # Errors
    /// As [`Table::open`].
    pub fn is_current(&self) -> Result<bool, WtError> {
        let now = Table::open(&self.dir, &self.name)?;
        Ok(now.checkpoint_order == self.checkpoint_order
            && now.tree.checkpoint() == self.tree.checkpoint())
    }

    /// The B-tree file read.
    #[must_use]
    pub fn tree(&self) -> &Tree {
        &self.tree
    }
}

/// What the metadata says of a table: its formats, its file (inside the database directory)
/// and the newest checkpoint of that file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableMeta {
    pub key_format: Format,
    pub value_format: Format,
    pub order: u64,
    pub file: String,
    pub ckpt: CheckpointCookie,
    pub alloc: u64,
}

/// Table `name` from the metadata entries `get(uri)` answers (`meta_path` names the metadata
/// in errors). Shared by the local reader and the remote one (entries read over the wire).
pub(crate) fn table_meta(
    meta_path: &Path,
    name: &str,
    mut get: impl FnMut(&str) -> Result<Option<String>, WtError>,
) -> Result<TableMeta, WtError> {
    let table_cfg = get(&format!("table:{name}"))?
        .ok_or_else(|| WtError::NoTable { path: meta_path.into(), table: name.into() })?;
    let unsupported = |what: String| WtError::Unsupported { path: meta_path.into(), what };
    let kf = cfg_get(meta_path, &table_cfg, "key_format")?;
    let vf = cfg_get(meta_path, &table_cfg, "value_format")?;
    let (Some(key_format), Some(value_format)) = (Format::parse(kf), Format::parse(vf)) else {
        return Err(unsupported(format!(
            "table {name:?}: key_format={kf}, value_format={vf} (this reader serves S and u)"
        )));
    };
    let colgroup = get(&format!("colgroup:{name}"))?.unwrap_or_default();
    let source = cfg_get(meta_path, &colgroup, "source")?;
    let Some(file) = source.strip_prefix("file:") else {
        return Err(unsupported(format!(
            "table {name:?}: source {source:?} is not a file (LSM or column groups)"
        )));
    };
    if file.contains('/') || file.contains("..") {
        return Err(unsupported(format!(
            "table {name:?}: file {file:?} outside the database directory"
        )));
    }
    let file_cfg = get(&format!("file:{file}"))?.ok_or_else(|| WtError::NoTable {
        path: meta_path.into(),
        table: format!("file:{file}"),
    })?;
    check_file_config(&file_cfg, meta_path)?;
    let (order, ckpt, alloc) = newest_checkpoint(&file_cfg, meta_path)?;
    Ok(TableMeta { key_format, value_format, order, file: file.into(), ckpt, alloc })
}

fn cfg_get<'a>(path: &Path, s: &'a str, k: &str) -> Result<&'a str, WtError> {
    config_get(s, k).map_err(|m| corrupt_config(path, &m)).map(Option::unwrap_or_default)
}

fn corrupt_config(path: &Path, m: &Malformed) -> WtError {
    WtError::Corrupt {
        path: path.into(),
        offset: 0,
        what: format!("configuration at character {}: {}", m.at, m.what),
    }
}

/// Reads the turtle, checks the release, and opens the metadata file at its checkpoint.
fn open_metadata(dir: &Path) -> Result<Tree, WtError> {
    let turtle_path = dir.join(TURTLE);
    let io = |op, source| WtError::Io { path: turtle_path.clone(), op, source };
    let mut text = String::new();
    std::fs::File::open(&turtle_path)
        .map_err(|e| io("open", e))?
        .take(MAX_TURTLE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| io("read", e))?;
    let (ckpt, alloc) = turtle_metadata(&text, &turtle_path)?;
    Tree::open(&dir.join(METADATA), alloc, ckpt)
}

/// The metadata file's checkpoint and allocation size from the turtle's text, after checking
/// the release that wrote it.
pub(crate) fn turtle_metadata(
    text: &str,
    turtle_path: &Path,
) -> Result<(CheckpointCookie, u64), WtError> {
    let turtle = Turtle::parse(text).map_err(|m| WtError::Corrupt {
        path: turtle_path.into(),
        offset: 0,
        what: m.what,
    })?;
    if !SUPPORTED_VERSIONS.contains(&turtle.version) {
        let (a, b, c) = turtle.version;
        return Err(WtError::Version {
            path: turtle_path.into(),
            found: format!("{a}.{b}.{c}"),
            supported: SUPPORTED_TEXT,
        });
    }
    check_file_config(&turtle.metadata_config, turtle_path)?;
    let (_, ckpt, alloc) = newest_checkpoint(&turtle.metadata_config, turtle_path)?;
    Ok((ckpt, alloc))
}

/// Refuses files whose layout this reader does not parse at all.
fn check_file_config(cfg: &str, path: &Path) -> Result<(), WtError> {
    let get =
        |k| config_get(cfg, k).map_err(|m| corrupt_config(path, &m)).map(Option::unwrap_or_default);
    let bad = |what: String| Err(WtError::Unsupported { path: path.into(), what });
    let version = get("version")?;
    let major = config_get(version, "major").map_err(|m| corrupt_config(path, &m))?;
    if major != Some("1") {
        return Err(WtError::Version {
            path: path.into(),
            found: format!("btree file version ({version})"),
            supported: "btree file version 1.x (WiredTiger 3.2.1)",
        });
    }
    if get("format")? != "btree" {
        return bad(format!("format={} (row-store btree files only)", get("format")?));
    }
    for k in ["collator", "huffman_key", "huffman_value"] {
        if !get(k)?.is_empty() && get(k)? != "none" {
            return bad(format!("{k}={} is not read by this reader", get(k)?));
        }
    }
    let enc = get("encryption")?;
    let name = config_get(enc, "name").map_err(|m| corrupt_config(path, &m))?.unwrap_or_default();
    if !name.is_empty() && name != "none" {
        return bad(format!("encryption name={name} is not read by this reader"));
    }
    Ok(())
}

/// The newest `WiredTigerCheckpoint.N` of a `file:` configuration: its order, cookie, and the
/// file's allocation size.
fn newest_checkpoint(cfg: &str, path: &Path) -> Result<(u64, CheckpointCookie, u64), WtError> {
    let c = |m: Malformed| corrupt_config(path, &m);
    let alloc_s = config_get(cfg, "allocation_size").map_err(c)?.unwrap_or("4KB");
    let alloc = parse_size(alloc_s)
        .filter(|&a| (512..=MAX_ALLOCATION_SIZE).contains(&a) && a.is_power_of_two())
        .ok_or_else(|| WtError::Corrupt {
            path: path.into(),
            offset: 0,
            what: format!("allocation_size={alloc_s}"),
        })?;
    let list = config_get(cfg, "checkpoint").map_err(c)?.unwrap_or_default();
    let mut best: Option<(u64, &str)> = None;
    for (name, body) in config_entries(list).map_err(c)? {
        if !name.starts_with("WiredTigerCheckpoint") {
            continue;
        }
        let order = config_get(body, "order").map_err(c)?.and_then(|o| o.parse().ok()).unwrap_or(0);
        let addr = config_get(body, "addr").map_err(c)?.unwrap_or_default();
        if best.is_none_or(|(o, _)| order > o) {
            best = Some((order, addr));
        }
    }
    let Some((order, hex)) = best else {
        // Never checkpointed: the checkpoint holds nothing.
        return Ok((0, CheckpointCookie { root: None, file_size: 0, ckpt_size: 0 }, alloc));
    };
    let raw = decode_hex(hex).ok_or_else(|| WtError::Corrupt {
        path: path.into(),
        offset: 0,
        what: format!("checkpoint addr {hex:?} is not hex"),
    })?;
    if raw.is_empty() {
        return Ok((order, CheckpointCookie { root: None, file_size: 0, ckpt_size: 0 }, alloc));
    }
    let ck = CheckpointCookie::parse(&raw, alloc).map_err(|m| WtError::Corrupt {
        path: path.into(),
        offset: 0,
        what: format!("checkpoint cookie byte {}: {}", m.at, m.what),
    })?;
    Ok((order, ck, alloc))
}

/// `4KB`, `512B`, `1MB`, `4096`: WiredTiger's size suffixes.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.trim_end_matches(['B', 'b']) {
        t if t.ends_with(['K', 'k']) => (&t[..t.len() - 1], 1 << 10),
        t if t.ends_with(['M', 'm']) => (&t[..t.len() - 1], 1 << 20),
        t if t.ends_with(['G', 'g']) => (&t[..t.len() - 1], 1 << 30),
        t => (t, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Lookups in the metadata B-tree (`key_format=S`, `value_format=S`).
struct MetaReader {
    tree: Tree,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl MetaReader {
    fn get(&mut self, uri: &str) -> Result<Option<String>, WtError> {
        Format::String.encode(uri.as_bytes(), &mut self.key)?;
        let path: PathBuf = self.tree.path().into();
        let corrupt = |what: String| WtError::Corrupt { path: path.clone(), offset: 0, what };
        match self.tree.get(&self.key, &mut self.value)? {
            Outcome::NotFound => Ok(None),
            Outcome::Fallback(f) => Err(WtError::Unsupported {
                path: path.clone(),
                what: format!(
                    "metadata entry {uri:?} needs {f:?}, which this reader does not read"
                ),
            }),
            Outcome::Found => {
                let v = Format::String
                    .decode(&self.value)
                    .ok_or_else(|| corrupt(format!("{uri:?}: value without its NUL")))?;
                String::from_utf8(v.to_vec())
                    .map(Some)
                    .map_err(|_| corrupt(format!("{uri:?}: value is not UTF-8")))
            }
        }
    }
}
