//! The benchmark harness behind `storefn kv bench` and `storefn demo`, kept beside the store it
//! measures but outside the store's API: [`bench`] (threads, key distributions, warm-up,
//! latency percentiles), [`compare`] (file vs raw mode interleaved in rounds) and [`device`]
//! (random single-block reads through the same engine: the physical reference), and
//! [`remote`] (`kv bench --remote`: pushdown vs rpc-read against a server).

pub mod bench;
pub mod compare;
pub mod device;
/// `kv bench --remote`, beside the remote client it drives.
pub use crate::remote::bench as remote;
