//! storefn-server: run storage functions where the data is, for remote clients (BPF-oF, DDS).
//!
//! - [`Server`] / [`ServerConfig`]: `storefn serve` — threads, engines, connections, fairness
//!   between tenants.
//! - [`load_tokens`] / [`client_config`]: token files (the challenge-response itself is
//!   storefn-wire's); [`load_token_file`]: each tenant's [`Scope`] (read-only or read-write,
//!   directories, quotas) from its token line.
//! - [`Root`]: every path opened beneath the served directory (`openat2` `RESOLVE_BENEATH`).
//! - Programs are verified once and kept by content hash, bounded by bytes (LRU).
//! - `fairness` (feature `bench`): the fairness measurement (one tenant's long chains against
//!   another's reads).
//! - [`metrics`]: the `--metrics` endpoint's families; [`LogFormat`]: `--log-format`.
//! - [`limits`]: every bound of the server, and the wire's and engine's it must agree with.
//!
//! The protocol and the client are storefn-wire's: an application reaches the server through
//! the wire and runs code on it through a program type (xrp, lambda) or a plug-in trait
//! ([`OffloadHook`], DDS's).
mod access;
#[cfg(feature = "bench")]
pub mod attack;
mod auth;
mod confine;
#[cfg(feature = "bench")]
pub mod fairness;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod limits;
mod log;
pub mod metrics;
mod registry;
mod server;

pub use access::{
    load_token_file, Access, Denied, Intent, Located, Quota, QuotaError, Scope, ScopeError,
    TokenFileError,
};
pub use auth::{client_config, load_tokens, Token, TokenError};
pub use confine::{ConfineError, Root};
pub use log::LogFormat;
pub use registry::LoadError;
pub use server::fence::{request_path, Fence};
pub use server::offload::{
    token_thread, HostAnswer, OffloadDecision, OffloadHook, ReadCheck, TOKEN_THREAD_SHIFT,
};
pub use server::{PolicyError, Server, ServerConfig, ServerError, ServerStats};
