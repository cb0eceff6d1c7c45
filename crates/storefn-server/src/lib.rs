//! storefn-server: run storage functions where the data is, for remote clients (BPF-oF, DDS).
//!
//! - [`proto`]: the wire protocol (docs/FORMAT.md, "Wire protocol").
//! - [`server`]: `storefn serve` — threads, engines, connections, limits, fairness.
//! - [`client`]: a pipelined, reconnecting client; [`remote_kv`]: BPF-KV lookups through it
//!   (`rpc-read` and `pushdown`), with the file-version staleness protocol.
//! - [`auth`]: token files and the HMAC-SHA256 challenge-response; [`access`]: each tenant's
//!   scope (read-only or read-write, directories, quotas) from its token line.
//! - [`confine`]: every path opened beneath the served directory (`openat2` `RESOLVE_BENEATH`).
//! - [`bench`]: the remote lookup benchmark (`kv bench --remote`).
//! - [`registry`]: verified programs by content hash, bounded by bytes (LRU).
pub mod access;
pub mod auth;
pub mod bench;
pub mod client;
pub mod confine;
pub mod proto;
pub mod registry;
pub mod remote_kv;
pub mod server;

pub use client::{Client, ClientConfig, ClientError, Reply, Req};
pub use remote_kv::{RemoteKv, RemotePath};
pub use server::{Server, ServerConfig, ServerError};
