//! Errors of opening a WiredTiger database and looking keys up in it.

use std::path::PathBuf;

/// Why an open or a lookup failed. Damage names the file and the byte offset in it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WtError {
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    /// Bytes that are not what WiredTiger writes there (a flipped bit, a truncated file, a
    /// cookie pointing elsewhere).
    #[error("{path}: corrupt at byte offset {offset}: {what}")]
    Corrupt { path: PathBuf, offset: u64, what: String },
    /// The database was written by a release whose format this reader does not know.
    #[error("{path}: written by WiredTiger {found}; this reader supports {supported}")]
    Version { path: PathBuf, found: String, supported: &'static str },
    /// A table configuration this reader does not serve at all (column store, a collator, ...).
    #[error("{path}: {what}")]
    Unsupported { path: PathBuf, what: String },
    #[error("{path}: no table {table:?} in the metadata")]
    NoTable { path: PathBuf, table: String },
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// WiredTiger's own C API failed (the fallback and baseline path).
    #[error("WiredTiger {op}: {message} (error {code})")]
    Native { op: &'static str, code: i32, message: String },
    /// A storage-function chain could not run or broke its scratch contract.
    #[error("{path}: storage function: {what}")]
    Chain { path: PathBuf, what: String },
}
