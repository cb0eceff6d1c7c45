//! Storage-function chains driven by pread: the portable driver behind `kv get --prog` (and the
//! tests), for when no io_uring engine is in use. Same contract as an engine chain: the function
//! sees each block, its requests are validated against the file and read next, in slot order,
//! until it sets `done`; a hop limit bounds every chain.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use storefn_vm::{Instance, ProgType, XrpCtx};

use crate::aligned::AlignedBuf;
use crate::format::{NodeSize, SCRATCH_BYTES};
use crate::store::Store;
use crate::KvError;

/// Most block reads per chain (XRP had no limit; a B+-tree walk needs layers + 1).
pub const MAX_CHAIN_HOPS: u32 = 64;
/// Largest request a function may make (XRP's 4 KiB data window).
pub const MAX_REQUEST_BYTES: u64 = 4096;

/// Which VM engine the last [`instance`] call chose: 0 none yet, 1 JIT, 2 interpreter.
/// Relaxed: a reporting hint, not synchronisation.
static LAST_ENGINE: AtomicU8 = AtomicU8::new(0);

/// Prepares the program for runs: the JIT if it compiles the program, else the interpreter
/// (not silent: [`engine_used`] says which, and `kv bench`/`demo` print it).
///
/// # Errors
/// `Program` with the loader's or verifier's message.
pub fn instance(elf: &[u8], section: Option<&str>) -> Result<Instance, KvError> {
    let prog = storefn_vm::load_verified(elf, section, ProgType::Xrp)
        .map_err(|e| KvError::Program(e.to_string()))?;
    if let Ok(i) = Instance::new(Arc::clone(&prog), storefn_vm::Engine::Jit) {
        LAST_ENGINE.store(1, Ordering::Relaxed);
        return Ok(i);
    }
    LAST_ENGINE.store(2, Ordering::Relaxed);
    Instance::new(prog, storefn_vm::Engine::Interp).map_err(|e| KvError::Program(e.to_string()))
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

/// The built-in lookup program's ELF for a node size.
#[must_use]
pub fn builtin_lookup_elf(node_size: NodeSize) -> &'static [u8] {
    storefn_progs::must(match node_size {
        NodeSize::B512 => "kv_lookup",
        NodeSize::B4096 => "kv_lookup_4k",
    })
}

/// Runs one chain from `[start, start + len)` with pread; returns the hops.
///
/// # Errors
/// `Program` naming the hop and the fault, a request outside the file, an oversized request,
/// or the hop limit; I/O errors.
pub fn run_pread(
    store: &Store,
    inst: &mut Instance,
    start: u64,
    len: u64,
    scratch: &mut [u8],
) -> Result<u32, KvError> {
    assert_eq!(scratch.len(), SCRATCH_BYTES, "scratch is one 4 KiB page");
    let file_bytes = store.meta().file_bytes;
    let align = store.node_size().bytes() as u64;
    let mut buf = AlignedBuf::new(usize::try_from(MAX_REQUEST_BYTES + align).expect("small"));
    let mut queue = vec![(0u32, start, len)];
    let mut hops = 0;
    while let Some((slot, addr, size)) = queue.pop() {
        hops += 1;
        if hops > MAX_CHAIN_HOPS {
            return Err(KvError::Program(format!("chain exceeded {MAX_CHAIN_HOPS} hops")));
        }
        let bad =
            |why: String| KvError::Program(format!("hop {hops}: request {addr}+{size}: {why}"));
        if size == 0 || size > MAX_REQUEST_BYTES {
            return Err(bad(format!("size must be 1..={MAX_REQUEST_BYTES}")));
        }
        if addr.checked_add(size).is_none_or(|e| e > file_bytes) {
            return Err(bad(format!("outside the file ({file_bytes} bytes)")));
        }
        // Widen to the node alignment (O_DIRECT), then hand the function the exact range.
        let lo = addr / align * align;
        let hi = (addr + size).div_ceil(align) * align;
        let span = usize::try_from(hi - lo).expect("small");
        store.read_block(&mut buf[..span], lo)?;
        let skip = usize::try_from(addr - lo).expect("small");
        let data = &buf[skip..skip + usize::try_from(size).expect("small")];
        let mut ctx = XrpCtx { slot, ..XrpCtx::default() };
        inst.run_xrp(&mut ctx, data, scratch)
            .map_err(|e| KvError::Program(format!("hop {hops}: {e}")))?;
        if ctx.done != 0 {
            return Ok(hops);
        }
        let reqs: Vec<_> = ctx.requests().collect();
        if reqs.is_empty() {
            return Err(KvError::Program(format!("hop {hops}: not done and no request")));
        }
        // Slot order: pop() takes the last pushed, so push in reverse.
        for (s, a, z) in reqs.into_iter().rev() {
            queue.push((u32::try_from(s).expect("slot < 16"), a, z));
        }
    }
    Err(KvError::Program(format!("hop {hops}: requests ran out before done")))
}
