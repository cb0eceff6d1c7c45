//! Errors of λ requests: one enum for both the local path and the dispatcher, each variant
//! naming the file, range or program it is about and keeping the typed cause.

use std::path::PathBuf;

use storefn_io::{ChainError, EngineError, SubmitError};
use storefn_vm::VmError;

/// Why a λ request (or preparing one) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LambdaError {
    /// The program could not be loaded, verified or compiled.
    #[error("program {name}: {source}")]
    Prog {
        name: String,
        #[source]
        source: storefn_vm::Error,
    },
    /// The program faulted (bad access, budget) while running over the range.
    #[error("program {name} over [{off}, +{len}): {source}")]
    Fault {
        name: String,
        off: u64,
        len: u64,
        #[source]
        source: VmError,
    },
    /// The program returned more output bytes than the output buffer holds.
    #[error("program {name} returned {returned} output bytes but the output buffer holds {cap}")]
    OutputOverflow { name: String, returned: u64, cap: usize },
    /// The range does not lie inside the file.
    #[error("{}: range [{off}, +{len}) is outside the file ({size} bytes)", path.display())]
    OutsideFile { path: PathBuf, off: u64, len: u64, size: u64 },
    /// The range is longer than one request may be.
    #[error("{}: range of {len} bytes is above the limit of {max} bytes", path.display())]
    RangeTooLarge { path: PathBuf, len: u64, max: u64 },
    /// The engine could not be built or the file opened.
    #[error("{}: {source}", path.display())]
    Engine {
        path: PathBuf,
        #[source]
        source: EngineError,
    },
    /// A read could not be submitted.
    #[error("{}: submitting the read at {off}: {source}", path.display())]
    Submit {
        path: PathBuf,
        off: u64,
        #[source]
        source: SubmitError,
    },
    /// A read failed.
    #[error("{}: read at {off}: {source}", path.display())]
    Read {
        path: PathBuf,
        off: u64,
        #[source]
        source: ChainError,
    },
    /// The storage server refused a request or could not be reached.
    #[error("{server}: {file}: {source}")]
    Remote {
        server: String,
        file: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A plain file operation (open, write, sync, cache probe) failed.
    #[error("{}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}
