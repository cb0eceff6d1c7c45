//! Storage functions for the KV paths: which built-in program serves a node size and scratch
//! ABI, a user's program (`--prog`), and loading either for a chain on the io engine. Every
//! `--prog` runs as an engine chain (docs/design/io.md, "Chains"): there is no second driver.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use storefn_vm::{Instance, ProgType};

use crate::abi::Abi;
use crate::format::NodeSize;
use crate::KvError;

/// Which program a chain runs.
#[derive(Debug, Clone, Default)]
pub enum ProgSource {
    /// Ours for the node size and ABI: `kv_lookup` / `kv_lookup_4k` / `kv_range` (storefn ABI),
    /// `bpfkv_get` / `bpfkv_range` (BPF-KV's layouts).
    #[default]
    BuiltIn,
    /// A user's ELF object and optional section; failures are errors, not fallbacks.
    User { elf: Vec<u8>, section: Option<String> },
}

impl ProgSource {
    /// Whether this is one of our programs (their failures fall back to plain reads).
    #[must_use]
    pub fn is_builtin(&self) -> bool {
        matches!(self, ProgSource::BuiltIn)
    }
}

/// Which VM engine the last [`instance`] call chose: 0 none yet, 1 JIT, 2 interpreter.
/// Relaxed: a reporting hint, not synchronisation.
static LAST_ENGINE: AtomicU8 = AtomicU8::new(0);

/// Prepares the program for runs: the JIT if it compiles the program, else the interpreter
/// (not silent: [`engine_used`] says which, and `kv bench`/`demo` print it).
///
/// # Errors
/// `Program` with the loader's or verifier's error.
pub fn instance(elf: &[u8], section: Option<&str>) -> Result<Instance, KvError> {
    let prog = storefn_vm::load_verified(elf, section, ProgType::Xrp)?;
    if let Ok(i) = Instance::new(Arc::clone(&prog), storefn_vm::Engine::Jit) {
        LAST_ENGINE.store(1, Ordering::Relaxed);
        return Ok(i);
    }
    LAST_ENGINE.store(2, Ordering::Relaxed);
    Ok(Instance::new(prog, storefn_vm::Engine::Interp)?)
}

/// `"jit"` or `"interp"`: the engine the last prepared program runs on (`None` before any).
#[must_use]
pub fn engine_used() -> Option<&'static str> {
    match LAST_ENGINE.load(Ordering::Relaxed) {
        1 => Some("jit"),
        2 => Some("interp"),
        _ => None,
    }
}

/// BPF-KV's layouts describe 512 B nodes only (`BLK_SIZE` 512).
fn check_abi(node_size: NodeSize, abi: Abi) -> Result<(), KvError> {
    if abi == Abi::BpfKv && node_size != NodeSize::B512 {
        return Err(KvError::Invalid(
            "--abi bpfkv: BPF-KV's scratch layouts describe 512 B nodes; this database has \
             4096 B nodes (use --abi storefn)"
                .into(),
        ));
    }
    Ok(())
}

/// The built-in lookup program's ELF for a node size and ABI.
///
/// # Errors
/// `Invalid` for the BPF-KV ABI on 4096 B nodes.
pub fn builtin_lookup_elf(node_size: NodeSize, abi: Abi) -> Result<&'static [u8], KvError> {
    check_abi(node_size, abi)?;
    Ok(storefn_progs::must(match (abi, node_size) {
        (Abi::BpfKv, _) => "bpfkv_get",
        (Abi::Storefn, NodeSize::B512) => "kv_lookup",
        (Abi::Storefn, NodeSize::B4096) => "kv_lookup_4k",
    }))
}

/// The built-in range program's ELF for an ABI (both read 512 B nodes).
#[must_use]
pub fn builtin_range_elf(abi: Abi) -> &'static [u8] {
    storefn_progs::must(match abi {
        Abi::Storefn => "kv_range",
        Abi::BpfKv => "bpfkv_range",
    })
}

/// Loads, verifies and JIT-compiles the lookup program for `node_size` and `abi`.
///
/// # Errors
/// `Program` naming the load/verify/JIT failure; `Invalid` for an ABI the node size lacks.
pub fn load_lookup(src: &ProgSource, node_size: NodeSize, abi: Abi) -> Result<Instance, KvError> {
    check_abi(node_size, abi)?;
    match src {
        ProgSource::BuiltIn => instance(builtin_lookup_elf(node_size, abi)?, None),
        ProgSource::User { elf, section } => instance(elf, section.as_deref()),
    }
}

/// Loads the range program (`src` or the built-in one for `abi`).
///
/// # Errors
/// As [`load_lookup`].
pub fn load_range(src: &ProgSource, abi: Abi) -> Result<Instance, KvError> {
    match src {
        ProgSource::BuiltIn => instance(builtin_range_elf(abi), None),
        ProgSource::User { elf, section } => instance(elf, section.as_deref()),
    }
}
