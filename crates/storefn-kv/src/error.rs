//! Errors of the BPF-KV store: one enum for building, opening and looking up.

use std::path::PathBuf;

/// Why a BPF-KV operation failed. Variants carry the file and byte offset involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    #[error("{path}: cannot read the sidecar: {source} (docs/FORMAT.md)")]
    MetaMissing { path: PathBuf, source: std::io::Error },
    #[error(
        "{path}: no sidecar, and the shape cannot be inferred from its {size} bytes: {reason}"
    )]
    ShapeUnknown { path: PathBuf, size: u64, reason: String },
    #[error("{path}: corrupt sidecar: {reason}")]
    MetaCorrupt { path: PathBuf, reason: String },
    #[error("{path}: file is {actual} bytes but its sidecar says {expected}")]
    SizeMismatch { path: PathBuf, expected: u64, actual: u64 },
    #[error("{path}: corrupt node at byte offset {offset}: {reason}")]
    CorruptNode { path: PathBuf, offset: u64, reason: String },
    #[error("entry #{index}: key {key} is not greater than the previous key {prev} (input must be sorted, unique)")]
    Unsorted { index: u64, key: u64, prev: u64 },
    #[error("entry stream yielded {actual} entries but announced {expected}")]
    CountMismatch { expected: u64, actual: u64 },
    #[error("{what} is too large: {value} (limit {limit})")]
    TooLarge { what: &'static str, value: u64, limit: u64 },
    #[error(
        "{path}: needs {need_bytes} bytes but its file system has {free_bytes} bytes free; \
         nothing was written"
    )]
    NoSpace { path: PathBuf, need_bytes: u64, free_bytes: u64 },
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The storage function could not be loaded, verified or compiled.
    #[error("storage function: {0}")]
    Program(#[from] storefn_vm::Error),
    /// A storage-function chain (or an engine read) failed: the cause keeps its type, so a
    /// caller tells raw mode's `Stale` (redo it) from a `Fault` (the program's bug).
    #[error("{path}: chain failed: {source}")]
    Chain { path: PathBuf, source: storefn_io::ChainError },
    /// The io engine could not be set up, open the file or reap completions.
    #[error("{path}: io engine: {source}")]
    Engine { path: PathBuf, source: storefn_io::EngineError },
    /// A chain could not be submitted.
    #[error("{path}: submit: {source}")]
    Submit { path: PathBuf, source: storefn_io::SubmitError },
    /// A program broke its scratch ABI's contract (a count out of range, no progress).
    #[error("{path}: storage function broke its scratch ABI: {reason}")]
    ProgramOutput { path: PathBuf, reason: String },
}

impl KvError {
    /// The chain error behind this one, if any (e.g. to tell `Stale` from `Fault`).
    #[must_use]
    pub fn chain_error(&self) -> Option<&storefn_io::ChainError> {
        match self {
            KvError::Chain { source, .. } => Some(source),
            _ => None,
        }
    }

    pub(crate) fn io(path: &std::path::Path, op: &'static str, source: std::io::Error) -> Self {
        KvError::Io { path: path.to_path_buf(), op, source }
    }
}
