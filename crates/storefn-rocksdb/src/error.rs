//! Errors of opening and reading a RocksDB database. Each names the file, and the byte offset
//! where the reader found what was wrong.

use std::path::PathBuf;

/// What went wrong opening a database or answering a Get.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RocksError {
    #[error("{}: {source}", file.display())]
    Io { file: PathBuf, source: std::io::Error },
    /// The bytes are not what RocksDB writes there.
    #[error("{}: offset {offset}: {what}", file.display())]
    Corrupt { file: PathBuf, offset: u64, what: String },
    /// A stored checksum does not match the bytes it covers.
    #[error("{}: offset {offset}: {kind} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})", file.display())]
    Checksum { file: PathBuf, offset: u64, kind: &'static str, stored: u32, computed: u32 },
    /// A storage-function chain could not run (the program, the engine, the server).
    #[error("{}: storage-function chain: {what}", file.display())]
    Chain { file: PathBuf, what: String },
    /// A remote file is gone or was replaced since the database was opened: reopen it.
    #[error("{}: {what} since the database was opened (a compaction replaced it)", file.display())]
    Stale { file: PathBuf, what: String },
    /// A format or feature this reader does not read (a version, a comparator, a table type).
    #[error("{}: {what}", file.display())]
    Unsupported { file: PathBuf, what: String },
    /// RocksDB's own C API reported an error (the `native` feature).
    #[error("{}: RocksDB {op}: {what}", file.display())]
    Native { file: PathBuf, op: &'static str, what: String },
}

impl RocksError {
    pub(crate) fn corrupt(file: &std::path::Path, offset: u64, what: impl Into<String>) -> Self {
        RocksError::Corrupt { file: file.to_path_buf(), offset, what: what.into() }
    }
    pub(crate) fn io(file: &std::path::Path, source: std::io::Error) -> Self {
        RocksError::Io { file: file.to_path_buf(), source }
    }
    pub(crate) fn chain(file: &std::path::Path, what: impl std::fmt::Display) -> Self {
        RocksError::Chain { file: file.to_path_buf(), what: what.to_string() }
    }
    pub(crate) fn unsupported(file: &std::path::Path, what: impl Into<String>) -> Self {
        RocksError::Unsupported { file: file.to_path_buf(), what: what.into() }
    }
}
