//! storefn-lambda: λ-IO on storefn. One eBPF function (program type `lambda`, context
//! `struct context { buf_o, buf_i, size_i }`) runs over a file range either in this process
//! ([`LocalSide`], [`pread_lambda`]: io_uring range reads into a caller-owned buffer, the
//! function on the completed data) or on the storage server ([`RemoteSide`] over the server's
//! LAMBDA frame), chosen per request by [`Dispatcher`], λ-IO's measured cost model with
//! adaptive profiling. With the `bench` feature: `workloads` (the built-in functions' native
//! baselines and data generators) and the benchmark harnesses (`bench`, `bench_remote`,
//! `bench_server`, `bench_dispatch`, `cpu_cap`). Every bound is in [`limits`].
//! Design: docs/design/lambda.md, "λ-IO".

#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "bench")]
pub mod bench_dispatch;
#[cfg(feature = "bench")]
pub mod bench_remote;
#[cfg(feature = "bench")]
pub mod bench_server;
mod cache;
#[cfg(feature = "bench")]
pub mod cpu_cap;
mod dispatch;
mod error;
pub mod limits;
mod local;
mod location;
mod prog;
mod remote;
mod remote_write;
mod server_transport;
#[cfg(feature = "bench")]
pub mod workloads;

pub use cache::{cachestat_fraction, drop_cached, mincore_fraction, uncached_fraction};
pub use dispatch::{
    Decision, DispatchConfig, DispatchStats, Dispatcher, Profiling, Run, Side, SideKind, Where,
};
pub use error::LambdaError;
pub use local::{pread_lambda, pwrite_lambda, run_local_once, LocalFile, LocalSide, RunReport};
pub use location::{parse_range, Location};
pub use prog::{run_lambda, LambdaProg};
pub use remote::{LambdaTransport, RemoteSide};
pub use remote_write::{write_local_once, write_remote_once, RemoteWriter};
pub use server_transport::{run_remote_once, RemoteReadSide, RemoteRunReport, ServerTransport};
#[cfg(feature = "bench")]
pub use workloads::Workload;
