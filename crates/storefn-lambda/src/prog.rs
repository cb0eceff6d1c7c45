//! The function object a λ request carries: its name and ELF bytes. The local side builds an
//! [`Instance`] from the bytes; a remote side sends the same bytes to the server (LOAD_PROG), so
//! both sides run the same verified program.

use std::sync::Arc;

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

/// Runs `prog` over `input` into `out`; returns the output bytes (checked against `out`). The
/// invocation's instruction budget is the instance's plus what storefn-vm adds per input and
/// output byte (`storefn_vm::limits::LAMBDA_INSNS_PER_INPUT_BYTE` / `_OUTPUT_BYTE`): a λ
/// function loops over its whole range, so its work grows with it.
///
/// # Errors
/// [`LambdaError::Fault`], [`LambdaError::OutputOverflow`].
pub fn run_lambda(
    prog: &mut Instance,
    off: u64,
    input: &[u8],
    out: &mut [u8],
) -> Result<usize, LambdaError> {
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
