//! The measuring behind `storefn io bench` (the CLI parses and prints): chains of `depth` hops
//! over a file of random pointers, timed per hop in six cases run one after another on the
//! same file and engine —
//!
//! - `a_pread_per_hop`: one `pread` per hop (the software path an application pays today);
//! - `b_uring_per_hop`: one io_uring read per hop, the application following the pointer;
//! - `c_one_chain`: one chain at a time, the storage function following the pointers on the
//!   completion path (XRP's case);
//! - `d_chains_in_flight`: `chains` chains in flight per thread;
//! - `ref_read_qd1` / `ref_read_qdN`: the device reference, plain random reads at queue depth 1
//!   and `chains` (the physical bound of the chain cases).
//!
//! Layout: `mod.rs` the configuration, the report and [`run`]; `file.rs` the pointer file and
//! its generator; `cases.rs` the timed cases; `flight.rs` the in-flight loop and its threads.

mod cases;
mod file;
mod flight;

use std::path::PathBuf;

use crate::limits::{MAX_NODE_BYTES, MIN_NODE_BYTES};
use crate::{EngineConfig, EngineError, IoMode, StorageFn};

pub use file::device_of;

/// The cases' names, in the order [`run`] measures them and the report lists them.
pub const CASE_NAMES: [&str; 6] = [
    "a_pread_per_hop",
    "b_uring_per_hop",
    "c_one_chain",
    "d_chains_in_flight",
    "ref_read_qd1",
    "ref_read_qdN",
];

/// Who runs the chain's storage function.
#[derive(Debug, Clone, Copy)]
pub enum ChainFunction<'a> {
    /// A Rust closure (the engine's cost without a VM).
    Rust,
    /// The VM running `elf` (progs/io_hop_chain.bpf.c: scratch[0..8] counts the hops left).
    Vm {
        /// Interpreter or JIT.
        engine: storefn_vm::Engine,
        /// The program's ELF bytes.
        elf: &'a [u8],
    },
}

impl ChainFunction<'_> {
    /// The name the report carries: `rust`, `interp` or `jit`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Vm { engine: storefn_vm::Engine::Interp, .. } => "interp",
            Self::Vm { .. } => "jit",
        }
    }

    /// A fresh function object (built once per case and per thread).
    ///
    /// # Errors
    /// [`IoBenchError::Program`] when the ELF does not load, verify or compile.
    pub fn build(&self) -> Result<Box<dyn StorageFn>, IoBenchError> {
        let (vm, elf) = match *self {
            Self::Rust => return Ok(Box::new(cases::hop_counter())),
            Self::Vm { engine, elf } => (engine, elf),
        };
        let prog = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Xrp)
            .map_err(IoBenchError::Program)?;
        let inst = storefn_vm::Instance::new(prog, vm).map_err(IoBenchError::Program)?;
        Ok(Box::new(inst))
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct IoBenchConfig<'a> {
    /// Hops (block reads) per chain.
    pub depth: u32,
    /// Chains in flight per thread in case d (and the queue depth of `ref_read_qdN`).
    pub chains: usize,
    /// Measured chains per case (the references read `requests x depth` blocks).
    pub requests: usize,
    /// Unmeasured chains before each case.
    pub warmup: usize,
    /// Where the pointer file is written (the caller owns it: [`run`] neither removes it nor
    /// creates anything else).
    pub file: PathBuf,
    /// Pointer file size in bytes.
    pub size_bytes: u64,
    /// Node size in bytes (a power of two in [`MIN_NODE_BYTES`]..=[`MAX_NODE_BYTES`]); nodes sit
    /// at node-aligned offsets.
    pub node_bytes: u64,
    /// Seed of the pointer file and the chain starts.
    pub seed: u64,
    /// Threads of the in-flight cases, each with its own engine (one ring per thread).
    pub threads: usize,
    /// The chain cases' storage function.
    pub function: ChainFunction<'a>,
    /// Read through the page cache instead of O_DIRECT.
    pub buffered: bool,
    /// Ask for raw-device reads through the file's metadata digest (falls back to the file
    /// path, saying why, when raw mode cannot be set up).
    pub raw: bool,
}

/// One case's per-hop latencies (ns, ascending) and costs.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case's name (`a_pread_per_hop` ... `ref_read_qdN`).
    pub name: &'static str,
    /// Hops (or plain reads) measured.
    pub hops: u64,
    /// Wall time of the measured part, seconds.
    pub elapsed_s: f64,
    /// Per-hop latency samples, ns, ascending.
    pub samples_ns: Vec<u64>,
    /// Process CPU time (user + system, getrusage) over the measured part, seconds.
    pub cpu_s: f64,
}

#[allow(clippy::cast_precision_loss)]
impl Case {
    /// Nearest-rank percentile `q` of the per-hop latency, µs (0 without samples).
    #[must_use]
    pub fn pct_us(&self, q: f64) -> f64 {
        storefn_stats::percentile_us(&self.samples_ns, q).unwrap_or(0.0)
    }

    /// Mean per-hop latency, µs.
    #[must_use]
    pub fn mean_us(&self) -> f64 {
        let n = self.samples_ns.len().max(1) as f64;
        self.samples_ns.iter().sum::<u64>() as f64 / n / 1000.0
    }

    /// Hops per second over the measured wall time.
    #[must_use]
    pub fn hops_per_s(&self) -> f64 {
        self.hops as f64 / self.elapsed_s
    }

    /// Process CPU µs per hop.
    #[must_use]
    pub fn cpu_us_per_hop(&self) -> f64 {
        self.cpu_s * 1e6 / self.hops.max(1) as f64
    }
}

/// What [`run`] measured.
#[derive(Debug, Clone)]
pub struct IoBenchReport {
    /// The six cases, in the order of the module documentation.
    pub cases: Vec<Case>,
    /// The read path the cases ran on: `raw`, `buffered` or `direct`.
    pub mode: &'static str,
    /// Why `raw` was asked for and not used (the cases ran on the file path).
    pub raw_fallback: Option<String>,
    /// Chains that completed `Stale` in raw mode (redone on the file path, raw mode refreshed).
    pub stale_chains: u64,
    /// The file's O_DIRECT offset alignment, bytes.
    pub alignment_bytes: u64,
    /// The block device under the file (e.g. `/dev/vda (virtio_blk)`).
    pub device: String,
}

/// What stopped the bench.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoBenchError {
    /// A setting out of range (names the flag).
    #[error("{0}")]
    Config(String),
    /// Writing or opening the pointer file.
    #[error("{path}: {source}")]
    File {
        /// The pointer file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The engine refused a setup step (ring, open, raw mode).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The chain program did not load, verify or compile.
    #[error("io_hop_chain: {0}")]
    Program(storefn_vm::Error),
    /// A measured read or chain failed, or a chain ended with the wrong number of hops.
    #[error("{case}: {what}")]
    Failed {
        /// The case.
        case: &'static str,
        /// What went wrong.
        what: String,
    },
}

/// Checks `cfg`, writes the pointer file and runs the six cases.
///
/// # Errors
/// [`IoBenchError`] naming the setting, the file or the case.
pub fn run(cfg: &IoBenchConfig<'_>) -> Result<IoBenchReport, IoBenchError> {
    if cfg.depth == 0 || cfg.chains == 0 || cfg.requests == 0 || cfg.threads == 0 {
        return Err(IoBenchError::Config(
            "--depth, --chains, --requests and --threads must be at least 1".into(),
        ));
    }
    let node = cfg.node_bytes;
    if !(MIN_NODE_BYTES..=MAX_NODE_BYTES).contains(&node) || !node.is_power_of_two() {
        return Err(IoBenchError::Config(format!(
            "--node {node}: must be a power of two in {MIN_NODE_BYTES}..={MAX_NODE_BYTES}"
        )));
    }
    if cfg.size_bytes < node * 2 {
        return Err(IoBenchError::Config(format!(
            "file size {} bytes: too small for two {node}-byte nodes",
            cfg.size_bytes
        )));
    }
    let file_err = |source| IoBenchError::File { path: cfg.file.clone(), source };
    file::make_file(&cfg.file, cfg.size_bytes, node, cfg.seed).map_err(file_err)?;
    let chains_cfg = cfg.chains.next_power_of_two().max(64);
    let ecfg = EngineConfig {
        chains: chains_cfg,
        buffers: chains_cfg.min(16384),
        ring_depth: u32::try_from(chains_cfg).unwrap_or(u32::MAX).clamp(256, 16384),
        max_hops: cfg.depth.max(64),
        ..EngineConfig::default()
    };
    let mut b = cases::Bench::open(cfg, ecfg)?;
    let cases = vec![
        b.case_pread()?,
        b.case_uring_hop()?,
        b.case_one_chain()?,
        b.case_chains_in_flight()?,
        b.case_reference(1)?,
        b.case_reference(cfg.chains)?,
    ];
    Ok(IoBenchReport {
        cases,
        mode: match b.mode {
            IoMode::Raw => "raw",
            IoMode::Buffered => "buffered",
            _ => "direct",
        },
        raw_fallback: b.raw_fallback.take(),
        stale_chains: b.stale,
        alignment_bytes: b.align,
        device: device_of(&cfg.file),
    })
}
