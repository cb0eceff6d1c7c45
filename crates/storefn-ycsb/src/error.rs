//! Errors of loading and running YCSB.

/// Why a load or run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum YcsbError {
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("BPF-KV {db}: {what}")]
    BpfKv { db: std::path::PathBuf, what: String },
    #[error(transparent)]
    WiredTiger(#[from] storefn_wiredtiger::WtError),
    #[error(transparent)]
    RocksDb(#[from] storefn_rocksdb::RocksError),
    /// A memory cgroup could not be set up or removed.
    #[error("memory cgroup {path}: {op}: {source}")]
    Cgroup { path: std::path::PathBuf, op: &'static str, source: std::io::Error },
    #[error("{path}: {op}: {source}")]
    Io { path: std::path::PathBuf, op: &'static str, source: std::io::Error },
    /// A read returned a record other than the one written (the driver's own check).
    #[error("key {key}: {what}")]
    Wrong { key: String, what: String },
}
