//! storefn-lambda: λ-IO on storefn. One eBPF function (program type `lambda`, context
//! `struct context { buf_o, buf_i, size_i }`) runs over a file range either in this process
//! ([`local`]: io_uring reads into registered buffers, the function on the completed data) or on
//! the storage server (a [`Side`] over the server's LAMBDA frame), chosen per request by
//! [`Dispatcher`], λ-IO's measured cost model with adaptive profiling. [`workloads`] holds the
//! built-in functions' native baselines and data generators; `bench` (feature `bench`) the local
//! benchmark.
//! Design: docs/design/lambda.md, "λ-IO".

#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "bench")]
pub mod bench_dispatch;
#[cfg(feature = "bench")]
pub mod bench_remote;
#[cfg(feature = "bench")]
pub mod bench_server;
pub mod cache;
#[cfg(feature = "bench")]
pub mod cpu_cap;
pub mod dispatch;
pub mod error;
pub mod limits;
pub mod local;
pub mod location;
pub mod prog;
pub mod remote;
pub mod remote_write;
pub mod server_transport;
#[cfg(feature = "bench")]
pub mod workloads;

pub use dispatch::{
    DispatchConfig, DispatchStats, Dispatcher, Profiling, Run, Side, SideKind, Where,
};
pub use error::LambdaError;
pub use local::{pread_lambda, pwrite_lambda, run_local_once, LocalFile, LocalSide, RunReport};
pub use location::{parse_range, Location};
pub use prog::{run_lambda, LambdaProg};
pub use remote::{LambdaTransport, RemoteSide};
pub use remote_write::RemoteWriter;
pub use server_transport::{run_remote_once, RemoteReadSide, RemoteRunReport, ServerTransport};
#[cfg(feature = "bench")]
pub use workloads::Workload;
