//! storefn-server: run storage functions where the data is, for remote clients (BPF-oF, DDS).
//!
//! - [`server`]: `storefn serve` — threads, engines, connections, limits, fairness.
//! - [`auth`]: token files (the challenge-response itself is storefn-wire's); [`access`]: each
//!   tenant's scope (read-only or read-write, directories, quotas) from its token line.
//! - [`confine`]: every path opened beneath the served directory (`openat2` `RESOLVE_BENEATH`).
//! - `fairness` (feature `bench`): the fairness measurement (one tenant's long chains against another's reads).
//! - [`registry`]: verified programs by content hash, bounded by bytes (LRU).
//! - [`metrics`]: the `--metrics` endpoint's families; [`LogFormat`]: `--log-format`.
//! - [`limits`]: every bound of the server, and the wire's and engine's it must agree with.
//!
//! The protocol and the client are storefn-wire's: an application reaches the server through
//! the wire and runs code on it through a program type (xrp, lambda) or a plug-in trait
//! ([`server::offload::OffloadHook`], DDS's).
pub mod access;
pub mod auth;
pub mod confine;
#[cfg(feature = "bench")]
pub mod fairness;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod limits;
mod log;
pub mod metrics;
pub mod registry;
pub mod server;

/// The wire protocol as the server's modules name it (`crate::proto::...`): storefn-wire's
/// face, its layouts and its limits in one namespace.
mod proto {
    pub use storefn_wire::layout::*;
    pub use storefn_wire::limits::*;
    pub use storefn_wire::*;

    /// The payload layouts, under their old path.
    pub mod msg {
        pub use super::*;
    }
}

pub use log::LogFormat;
pub use server::{Server, ServerConfig, ServerError};
