//! `storefn wt`: point lookups in a WiredTiger database's own files, read-only.

use crate::CmdResult;
use clap::{Args, Subcommand, ValueEnum};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use storefn_wiredtiger::{Answer, Format, Lookups, ReadPath};

#[derive(Debug, Subcommand)]
pub enum WtCmd {
    /// Print a key's value as `wt read` does (exit 1 and `not found` if absent).
    Get(GetArgs),
    /// Look up one key per line of a file; print `key<TAB>value` lines.
    Multiget(MultigetArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum WtPath {
    /// Plain reads, one page at a time, in this process.
    Read,
    /// The storage function progs/engines/wiredtiger: one chain per lookup, a hop per page.
    Xrp,
}

#[derive(Debug, Args)]
pub struct TableArgs {
    /// The database directory (holds WiredTiger.turtle).
    dir: PathBuf,
    /// The table name (as in `table:NAME`).
    #[arg(long)]
    table: String,
    #[arg(long, value_enum, default_value = "read")]
    path: WtPath,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    t: TableArgs,
    #[arg(long)]
    key: String,
}

#[derive(Debug, Args)]
pub struct MultigetArgs {
    #[command(flatten)]
    t: TableArgs,
    /// One key per line.
    #[arg(long)]
    keys_file: PathBuf,
}

pub fn run(cmd: &WtCmd) -> CmdResult {
    match cmd {
        WtCmd::Get(a) => get(a),
        WtCmd::Multiget(a) => multiget(a),
    }
}

fn open(t: &TableArgs) -> Result<Lookups, Box<dyn std::error::Error>> {
    let path = match t.path {
        WtPath::Read => ReadPath::Read,
        WtPath::Xrp => ReadPath::Xrp,
    };
    Ok(Lookups::open(&t.dir, &t.table, path)?)
}

/// The value as `wt read` prints it: an `S` value without its NUL.
fn shown(format: Format, stored: &[u8]) -> Result<&[u8], Box<dyn std::error::Error>> {
    format.decode(stored).ok_or_else(|| "a key_format=S value without its NUL byte".into())
}

fn get(a: &GetArgs) -> CmdResult {
    let mut l = open(&a.t)?;
    let mut value = Vec::new();
    let mut out = std::io::stdout().lock();
    match l.get(a.key.as_bytes(), &mut value)? {
        Answer::Found => {
            out.write_all(shown(l.table().value_format, &value)?)?;
            out.write_all(b"\n")?;
            Ok(ExitCode::SUCCESS)
        }
        Answer::NotFound => {
            writeln!(out, "not found")?;
            Ok(ExitCode::from(1))
        }
    }
}

fn multiget(a: &MultigetArgs) -> CmdResult {
    let mut l = open(&a.t)?;
    let keys = std::io::BufReader::new(
        std::fs::File::open(&a.keys_file).map_err(|e| format!("{}: {e}", a.keys_file.display()))?,
    );
    let mut value = Vec::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut missing = 0u64;
    for line in keys.split(b'\n') {
        let mut key = line?;
        if key.last() == Some(&b'\r') {
            key.pop();
        }
        out.write_all(&key)?;
        out.write_all(b"\t")?;
        match l.get(&key, &mut value)? {
            Answer::Found => out.write_all(shown(l.table().value_format, &value)?)?,
            Answer::NotFound => {
                missing += 1;
                out.write_all(b"not found")?;
            }
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    let s = l.stats;
    eprintln!(
        "{} lookups, {} not found, {} answered by WiredTiger's own API (fallbacks), {} handed \
         back by the storage function",
        s.lookups, missing, s.fallbacks, s.function_fallbacks
    );
    Ok(if missing == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
