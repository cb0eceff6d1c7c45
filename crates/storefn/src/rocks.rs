//! `storefn rocks ...`: Gets in RocksDB's own files (crates/storefn-rocksdb), read-only, locally
//! or through a server. This module parses and prints.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use storefn_rocksdb::remote::{RemoteConfig, RemoteDb, RemotePath};
use storefn_rocksdb::{
    Db, FallbackReason, Lookup, Native, NativeOptions, Source, XrpConfig, XrpDb,
};
use storefn_wire::{Client, ClientConfig};

use crate::rocks_bench::BenchArgs;
use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum RocksCmd {
    /// One Get, answered as RocksDB answers it (memtable from the WAL, L0 newest first, one
    /// file per level); prints the value as `ldb get` does, or `not found` with exit 1.
    Get(GetArgs),
    /// Gets for the keys of a file (one per line): one `key<TAB>value` line per key found.
    Multiget(MultigetArgs),
    /// Gets/s and latency of a path over keys sampled from a file (db_bench's readrandom).
    Bench(BenchArgs),
    /// Remote Gets/s and p99 against RTT from a `bench --remote --rtt-us ... --json` run.
    Plot(crate::rocks_plot::PlotArgs),
}

/// How a Get reads the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RocksPath {
    /// Plain reads: index block (cached) -> data block, decompressed where compressed.
    Read,
    /// One storage-function chain per candidate file (progs/engines/rocksdb/get.bpf.c).
    Xrp,
    /// Chains for many keys at once (multiget: rounds of one chain per open key).
    XrpBatch,
    /// --remote: every block read over the network through the client's block cache.
    RpcRead,
    /// --remote: one XRP request per candidate file, a Get's in one frame, run on the server.
    Pushdown,
    /// RocksDB itself through its C API (librocksdb), read-only: Get per key.
    Native,
    /// RocksDB itself: batched MultiGet (multiget, and bench's --batch keys per call).
    NativeMultiget,
}

/// Where the database is, and how the client reaches it.
#[derive(Debug, Args)]
pub struct Where {
    /// The database directory (nothing in it is written or locked); with --remote, relative
    /// to the server's served directory.
    pub dir: PathBuf,
    #[arg(long, value_enum, default_value = "read")]
    pub path: RocksPath,
    /// Server address (`storefn serve`); --path is then rpc-read or pushdown.
    #[arg(long)]
    pub remote: Option<String>,
    /// Token file (`TENANT SECRET`; the first line is used).
    #[arg(long, requires = "remote")]
    pub token_file: Option<PathBuf>,
    /// The client cache's budget, as a fraction of the database's index and filter bytes.
    #[arg(long, default_value_t = 0.01, requires = "remote")]
    pub cache_fraction: f64,
    /// xrp: start chains at the index block in the file instead of the cached index.
    #[arg(long)]
    pub index_in_file: bool,
    /// xrp, xrp-batch: chains read the device with O_DIRECT, not through the page cache.
    #[arg(long)]
    pub direct: bool,
    /// native: RocksDB's block cache (index and filter blocks charged to it), bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub native_cache_bytes: usize,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub at: Where,
    #[arg(long)]
    key: String,
}

#[derive(Debug, Args)]
pub struct MultigetArgs {
    #[command(flatten)]
    pub at: Where,
    /// One key per line.
    #[arg(long)]
    keys_file: PathBuf,
}

pub fn run(c: &RocksCmd) -> CmdResult {
    match c {
        RocksCmd::Get(a) => get(a),
        RocksCmd::Multiget(a) => multiget(a),
        RocksCmd::Bench(a) => crate::rocks_bench::run(a),
        RocksCmd::Plot(a) => crate::rocks_plot::run(a),
    }
}

/// An open database on one of the paths.
pub enum Getter {
    Read(Db),
    Xrp(Db, Box<XrpDb>, bool),
    Remote(Box<RemoteDb>),
    /// RocksDB itself; `true`: batched MultiGet.
    Native(Box<Native>, bool, Vec<u8>),
}

impl Getter {
    pub fn open(w: &Where) -> Result<Self, Box<dyn std::error::Error>> {
        match (&w.remote, w.path) {
            (Some(addr), p @ (RocksPath::RpcRead | RocksPath::Pushdown)) => {
                Ok(Getter::Remote(Box::new(open_remote(w, addr, p, w.cache_fraction)?)))
            }
            (Some(_), p) => {
                Err(format!("--remote takes --path rpc-read or pushdown, not {p:?}").into())
            }
            (None, RocksPath::RpcRead | RocksPath::Pushdown) => {
                Err("--path rpc-read and pushdown need --remote ADDR".into())
            }
            (None, RocksPath::Read) => Ok(Getter::Read(Db::open(&w.dir)?)),
            (None, p @ (RocksPath::Native | RocksPath::NativeMultiget)) => {
                let o = NativeOptions {
                    block_cache_bytes: w.native_cache_bytes,
                    ..NativeOptions::default()
                };
                let n = Native::open(&w.dir, &o)?;
                Ok(Getter::Native(Box::new(n), p == RocksPath::NativeMultiget, Vec::new()))
            }
            (None, p) => {
                let db = Db::open(&w.dir)?;
                // An engine sized to the database's blocks and a multiget's chains (a few
                // hundred KiB for 4 KiB blocks), not the hop limit's 64 KiB buffers.
                let cfg = XrpConfig {
                    index_cached: !w.index_in_file,
                    direct: w.direct,
                    ..XrpConfig::default()
                }
                .sized_for(&db, MULTIGET_BATCH);
                let x = XrpDb::new(&db, cfg)?;
                Ok(Getter::Xrp(db, Box::new(x), p == RocksPath::XrpBatch))
            }
        }
    }

    pub fn get(&mut self, key: &[u8]) -> Result<(Lookup, Source), storefn_rocksdb::RocksError> {
        match self {
            Getter::Read(db) => db.get(key),
            Getter::Xrp(db, x, false) => x.get(db, key),
            Getter::Xrp(db, x, true) => {
                let mut out = Vec::with_capacity(1);
                x.multi_get(db, &[key], &mut out)?;
                Ok(out.remove(0))
            }
            Getter::Remote(r) => r.get(key),
            Getter::Native(n, _, buf) => {
                let l = if n.get(key, buf)? {
                    Lookup::Value(std::mem::take(buf))
                } else {
                    Lookup::NotFound
                };
                Ok((l, Source::Nowhere))
            }
        }
    }

    /// Gets for `keys` (one round of chains per candidate level on xrp-batch).
    pub fn multi_get(
        &mut self,
        keys: &[&[u8]],
        out: &mut Vec<(Lookup, Source)>,
    ) -> Result<(), storefn_rocksdb::RocksError> {
        match self {
            Getter::Xrp(db, x, true) => return x.multi_get(db, keys, out),
            Getter::Native(n, true, _) => {
                let mut vals = vec![Vec::new(); keys.len()];
                let mut found = vec![false; keys.len()];
                n.multi_get(keys, &mut vals, &mut found)?;
                out.clear();
                out.extend(vals.into_iter().zip(found).map(|(v, f)| {
                    (if f { Lookup::Value(v) } else { Lookup::NotFound }, Source::Nowhere)
                }));
                return Ok(());
            }
            _ => {}
        }
        out.clear();
        for k in keys {
            out.push(self.get(k)?);
        }
        Ok(())
    }
}

pub fn open_remote(
    w: &Where,
    addr: &str,
    p: RocksPath,
    cache_fraction: f64,
) -> Result<RemoteDb, Box<dyn std::error::Error>> {
    let ccfg = match &w.token_file {
        Some(t) => storefn_server::client_config(t)?,
        None => ClientConfig::default(),
    };
    let c = Client::connect(addr, ccfg)?;
    let path = if p == RocksPath::Pushdown { RemotePath::Pushdown } else { RemotePath::RpcRead };
    let cfg = RemoteConfig { path, cache_fraction, ..RemoteConfig::default() };
    Ok(RemoteDb::open(c, addr, dir_str(&w.dir)?, cfg)?)
}

fn dir_str(d: &Path) -> Result<&str, Box<dyn std::error::Error>> {
    d.to_str().ok_or_else(|| "DIR must be UTF-8 with --remote".into())
}

fn fallback_error(key: &[u8], r: &FallbackReason) -> Box<dyn std::error::Error> {
    format!(
        "key {}: this reader cannot answer it ({r:?}); RocksDB itself can (ldb get)",
        String::from_utf8_lossy(key)
    )
    .into()
}

fn get(a: &GetArgs) -> CmdResult {
    let mut g = Getter::open(&a.at)?;
    let key = a.key.as_bytes();
    match g.get(key)?.0 {
        Lookup::Value(v) => {
            let mut out = std::io::stdout().lock();
            out.write_all(&v)?;
            out.write_all(b"\n")?;
            Ok(ExitCode::SUCCESS)
        }
        Lookup::NotFound => {
            println!("not found");
            Ok(ExitCode::FAILURE)
        }
        Lookup::Fallback(r) => Err(fallback_error(key, &r)),
    }
}

/// Keys read per multi-get call (a round of chains on xrp-batch).
const MULTIGET_BATCH: usize = 64;

fn multiget(a: &MultigetArgs) -> CmdResult {
    let mut g = Getter::open(&a.at)?;
    let f =
        std::fs::File::open(&a.keys_file).map_err(|e| format!("{}: {e}", a.keys_file.display()))?;
    let keys: Vec<Vec<u8>> = std::io::BufReader::new(f).split(b'\n').collect::<Result<_, _>>()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut found = 0u64;
    let mut answers = Vec::new();
    for chunk in keys.chunks(MULTIGET_BATCH) {
        let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
        g.multi_get(&refs, &mut answers)?;
        for (k, (l, _)) in chunk.iter().zip(answers.drain(..)) {
            match l {
                Lookup::Value(v) => {
                    found += 1;
                    out.write_all(k)?;
                    out.write_all(b"\t")?;
                    out.write_all(&v)?;
                    out.write_all(b"\n")?;
                }
                Lookup::NotFound => {}
                Lookup::Fallback(r) => return Err(fallback_error(k, &r)),
            }
        }
    }
    out.flush()?;
    eprintln!("rocks multiget: {found} of {} keys found", keys.len());
    Ok(ExitCode::SUCCESS)
}
