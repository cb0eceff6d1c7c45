//! The function object a λ request carries: its name and ELF bytes. The local side builds an
//! [`Instance`] from the bytes; a remote side sends the same bytes to the server (LOAD_PROG), so
//! both sides run the same verified program.

use std::sync::Arc;

use storefn_vm::program::DEFAULT_INSN_BUDGET;
use storefn_vm::{load_verified, Engine, Instance, ProgType};

use crate::error::LambdaError;

/// A λ program: name (for messages) and the clang `-target bpf` object it comes from.
#[derive(Debug, Clone)]
pub struct LambdaProg {
    name: String,
    elf: Arc<[u8]>,
    select: Option<String>,
}

impl LambdaProg {
    /// A program from ELF bytes; `select` picks a section or function when the object has
    /// several programs.
    #[must_use]
    pub fn from_elf(name: &str, elf: &[u8], select: Option<&str>) -> Self {
        Self { name: name.to_string(), elf: elf.into(), select: select.map(str::to_string) }
    }

    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The object's bytes (what a remote side sends to the server).
    #[must_use]
    pub fn elf(&self) -> &[u8] {
        &self.elf
    }

    /// The section or function picked from the object (`None`: the loader's default).
    #[must_use]
    pub fn select(&self) -> Option<&str> {
        self.select.as_deref()
    }

    /// Loads, verifies (as program type `lambda`) and prepares the program for `engine`.
    ///
    /// # Errors
    /// [`LambdaError::Prog`] naming the program.
    pub fn instance(&self, engine: Engine) -> Result<Instance, LambdaError> {
        let err = |source| LambdaError::Prog { name: self.name.clone(), source };
        let verified =
            load_verified(&self.elf, self.select.as_deref(), ProgType::Lambda).map_err(err)?;
        Instance::new(verified, engine).map_err(err)
    }
}

/// Instructions a λ function may execute per input byte, on top of the VM's default budget: a
/// λ function loops over its range, so a fixed budget would refuse long ranges (a 200 KiB knn
/// range needs ~6 per byte); the bound still stops a runaway loop.
pub const INSNS_PER_INPUT_BYTE: u64 = 64;
/// Instructions per output buffer byte: an expanding function (bitmap's run-length decode,
/// ~32x) does its work per output byte, not per input byte.
pub const INSNS_PER_OUTPUT_BYTE: u64 = 8;

/// Runs `prog` over `input` into `out`; returns the output bytes (checked against `out`). The
/// instruction budget is the VM's default plus [`INSNS_PER_INPUT_BYTE`] per input byte and
/// [`INSNS_PER_OUTPUT_BYTE`] per output buffer byte.
///
/// # Errors
/// [`LambdaError::Fault`], [`LambdaError::OutputOverflow`].
pub fn run_lambda(
    prog: &mut Instance,
    off: u64,
    input: &[u8],
    out: &mut [u8],
) -> Result<usize, LambdaError> {
    let budget = DEFAULT_INSN_BUDGET
        .saturating_add(INSNS_PER_INPUT_BYTE.saturating_mul(input.len() as u64))
        .saturating_add(INSNS_PER_OUTPUT_BYTE.saturating_mul(out.len() as u64));
    prog.set_insn_budget(budget);
    let r = prog.run_lambda(input, out);
    let name = || prog_name(prog);
    let n = r.map_err(|source| LambdaError::Fault {
        name: name(),
        off,
        len: input.len() as u64,
        source,
    })?;
    match usize::try_from(n) {
        Ok(n) if n <= out.len() => Ok(n),
        _ => Err(LambdaError::OutputOverflow { name: name(), returned: n, cap: out.len() }),
    }
}

fn prog_name(prog: &Instance) -> String {
    prog.program().name.clone()
}
