//! rbpf (crates.io), the bench's peer VM: its x86 JIT and its interpreter run the same
//! instructions our loader linked, over one buffer laid out as `[context | data | scratch]`
//! (rbpf's "raw" VM grants r1's buffer, so the context's `data`/`scratch` pointers must land
//! inside it). rbpf's JIT checks no memory access and no termination; its interpreter checks
//! accesses, and runs first, so a wild access is an error before the JIT runs.

use std::time::Instant;

use super::workloads::{Block, BLOCK_BYTES};
use super::{median, COMPILE_SAMPLES};
use crate::xrp::{XRP_OFF_DATA, XRP_OFF_SCRATCH, XRP_SCRATCH_BYTES};

/// Bytes before the data block: the context, padded so the data stays 8-byte aligned.
const CTX_AREA: usize = 512;
const MEM_WORDS: usize = (CTX_AREA + BLOCK_BYTES + XRP_SCRATCH_BYTES) / 8;
const SCRATCH_WORD: usize = (CTX_AREA + BLOCK_BYTES) / 8;

pub(super) struct Peer<'a> {
    vm: rbpf::EbpfVmRaw<'a>,
    mem: Box<[u64]>,
    /// Median JIT compile time, or why rbpf's JIT cannot take the program (it emits into
    /// one 4 KiB page and panics past it).
    pub(super) compile_us: Result<f64, String>,
    pub(super) verify_us: f64,
}

impl<'a> Peer<'a> {
    /// Verifies (rbpf's own checks, timed as its verify figure) and JIT-compiles `code`.
    pub(super) fn new(code: &'a [u8], block: &Block) -> Result<Self, String> {
        let t = Instant::now();
        let mut vm = rbpf::EbpfVmRaw::new(Some(code)).map_err(|e| format!("rbpf: {e}"))?;
        let verify_us = t.elapsed().as_nanos() as f64 / 1000.0;
        let compile_us = compile(&mut vm);
        let mut mem = vec![0u64; MEM_WORDS].into_boxed_slice();
        mem[CTX_AREA / 8..SCRATCH_WORD].copy_from_slice(block);
        let base = mem.as_ptr() as u64;
        mem[XRP_OFF_DATA / 8] = base + CTX_AREA as u64;
        mem[XRP_OFF_SCRATCH / 8] = base + (SCRATCH_WORD * 8) as u64;
        Ok(Self { vm, mem, compile_us, verify_us })
    }

    pub(super) fn has_jit(&self) -> bool {
        self.compile_us.is_ok()
    }

    /// One call with `arg` in scratch[0]; the value left in scratch[1].
    #[inline]
    pub(super) fn call(&mut self, jit: bool, arg: u64) -> Result<u64, String> {
        self.mem[SCRATCH_WORD] = arg;
        let (ptr, len) = (self.mem.as_mut_ptr().cast::<u8>(), self.mem.len() * 8);
        // SAFETY: `mem` is a live boxed buffer of `len` bytes that nothing else borrows while
        // this call runs; rbpf wants it for its VM's lifetime parameter, which only
        // constrains the borrow checker: the VM keeps no pointer to it after the call.
        let mem: &'a mut [u8] = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        let r = if jit && self.has_jit() {
            // SAFETY: rbpf's JIT does not check accesses; the program's accesses stay inside
            // `mem` (its interpreter, which checks them, ran the same arguments first and the
            // answers were compared with the native twin's).
            unsafe { self.vm.execute_program_jit(mem) }
        } else if jit {
            return Err("rbpf: no JIT code".into());
        } else {
            self.vm.execute_program(mem)
        };
        r.map_err(|e| format!("rbpf: {e}"))?;
        Ok(self.mem[SCRATCH_WORD + 1])
    }

    /// Sets scratch[1] (before a checked call).
    pub(super) fn set_answer(&mut self, v: u64) {
        self.mem[SCRATCH_WORD + 1] = v;
    }
}

/// Compiles `COMPILE_SAMPLES` times; the median time, or the panic's message when rbpf's JIT
/// runs out of its fixed code page (caught: it is rbpf's limit, reported, not our failure).
fn compile(vm: &mut rbpf::EbpfVmRaw<'_>) -> Result<f64, String> {
    let mut samples = Vec::with_capacity(COMPILE_SAMPLES);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut out = Ok(());
    for _ in 0..COMPILE_SAMPLES {
        let t = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| vm.jit_compile()));
        match r {
            Ok(Ok(())) => samples.push(t.elapsed().as_nanos() as f64 / 1000.0),
            Ok(Err(e)) => out = Err(format!("rbpf jit: {e}")),
            Err(_) => out = Err("rbpf jit: machine code larger than its 4 KiB page".into()),
        }
        if out.is_err() {
            break;
        }
    }
    std::panic::set_hook(hook);
    out.map(|()| median(&mut samples))
}
