//! Opening a lookup path by name: the one entry point the CLI, the C API and the benchmark
//! harness share for building any of the store's lookup paths over an open [`Store`].

use std::sync::Arc;

use crate::abi::Abi;
use crate::path::{LookupPath, ReadPath};
use crate::store::Store;
use crate::xrp_paths::{ChainOptions, ProgSource, UringPath, XrpPath};
use crate::KvError;

/// Every lookup path [`open_path`] builds, by name.
pub const LOOKUP_PATHS: &[&str] = &["read", "uring", "xrp", "xrp-batch"];

/// Options shared by every path constructor.
#[derive(Debug, Clone, Default)]
pub struct PathOptions {
    /// LRU block cache per path instance, bytes (0 = off): read, uring, xrp and xrp-batch.
    pub cache_bytes: u64,
    /// Lookups (or block reads) in flight per thread on batching paths.
    pub batch: usize,
    /// `--io raw`: the read path and the engine paths (uring, xrp, xrp-batch) read the block
    /// device through the metadata digest; when raw mode cannot be set up they say why and use
    /// the file.
    pub raw: bool,
    /// The chain paths' program (`--prog`; built-in by default) and its scratch layout.
    pub prog: ProgSource,
    pub abi: Abi,
    /// Keys per chain on the chain paths (0 or 1: one; up to 32 in the BPF-KV ABI).
    pub keys_per_chain: usize,
}

/// Builds the lookup path called `name` (one of [`LOOKUP_PATHS`]).
///
/// # Errors
/// `Invalid` for an unknown name or a path this build cannot run.
pub fn open_path(
    name: &str,
    store: &Arc<Store>,
    opts: &PathOptions,
) -> Result<Box<dyn LookupPath>, KvError> {
    let chains = |batch: bool| ChainOptions {
        batch,
        chains: opts.batch.max(1),
        abi: opts.abi,
        cache_bytes: opts.cache_bytes,
        keys_per_chain: opts.keys_per_chain.max(1),
        ..ChainOptions::default()
    };
    if !opts.prog.is_builtin() && !name.starts_with("xrp") {
        return Err(KvError::Invalid(format!(
            "--prog runs storage-function chains: use --path xrp or xrp-batch, not {name}"
        )));
    }
    match name {
        "read" => {
            Ok(Box::new(ReadPath::new(Arc::clone(store), opts.cache_bytes).with_io(opts.raw)?))
        }
        "uring" => {
            Ok(Box::new(UringPath::new(Arc::clone(store), opts.cache_bytes)?.with_io(opts.raw)?))
        }
        "xrp" => Ok(Box::new(
            XrpPath::new(Arc::clone(store), &opts.prog, chains(false))?.with_io(opts.raw)?,
        )),
        "xrp-batch" => Ok(Box::new(
            XrpPath::new(Arc::clone(store), &opts.prog, chains(true))?.with_io(opts.raw)?,
        )),
        _ => Err(KvError::Invalid(format!(
            "--path {name}: expected one of {}",
            LOOKUP_PATHS.join("|")
        ))),
    }
}
