//! `storefn rocks ...`: Gets in RocksDB's own files (crates/storefn-rocksdb), read-only. This
//! module parses and prints.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use storefn_rocksdb::{Db, FallbackReason, Lookup};

use crate::CmdResult;

#[derive(Debug, Subcommand)]
pub enum RocksCmd {
    /// One Get, answered as RocksDB answers it (memtable from the WAL, L0 newest first, one
    /// file per level); prints the value as `ldb get` does, or `not found` with exit 1.
    Get(GetArgs),
    /// Gets for the keys of a file (one per line): one `key<TAB>value` line per key found.
    Multiget(MultigetArgs),
}

/// How a Get reads the files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RocksPath {
    /// Plain reads: index block (cached) -> data block, decompressed where compressed.
    Read,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// The database directory (nothing in it is written or locked).
    dir: PathBuf,
    #[arg(long)]
    key: String,
    #[arg(long, value_enum, default_value = "read")]
    path: RocksPath,
}

#[derive(Debug, Args)]
pub struct MultigetArgs {
    dir: PathBuf,
    /// One key per line.
    #[arg(long)]
    keys_file: PathBuf,
    #[arg(long, value_enum, default_value = "read")]
    path: RocksPath,
}

pub fn run(c: &RocksCmd) -> CmdResult {
    match c {
        RocksCmd::Get(a) => get(a),
        RocksCmd::Multiget(a) => multiget(a),
    }
}

fn fallback_error(key: &[u8], r: &FallbackReason) -> Box<dyn std::error::Error> {
    format!(
        "key {}: this reader cannot answer it ({r:?}); RocksDB itself can (ldb get)",
        String::from_utf8_lossy(key)
    )
    .into()
}

fn get(a: &GetArgs) -> CmdResult {
    let db = Db::open(&a.dir)?;
    let key = a.key.as_bytes();
    match db.get(key)?.0 {
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

fn multiget(a: &MultigetArgs) -> CmdResult {
    let db = Db::open(&a.dir)?;
    let f =
        std::fs::File::open(&a.keys_file).map_err(|e| format!("{}: {e}", a.keys_file.display()))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut asked, mut found) = (0u64, 0u64);
    for line in std::io::BufReader::new(f).split(b'\n') {
        let line = line?;
        asked += 1;
        match db.get(&line)?.0 {
            Lookup::Value(v) => {
                found += 1;
                out.write_all(&line)?;
                out.write_all(b"\t")?;
                out.write_all(&v)?;
                out.write_all(b"\n")?;
            }
            Lookup::NotFound => {}
            Lookup::Fallback(r) => return Err(fallback_error(&line, &r)),
        }
    }
    out.flush()?;
    eprintln!("rocks multiget: {found} of {asked} keys found");
    Ok(ExitCode::SUCCESS)
}
