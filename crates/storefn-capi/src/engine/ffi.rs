//! The engine's exported functions.

use super::{Completion, Engine};
use crate::prog::Prog;
use crate::ptr;
use crate::status::{guard, Fail, Status};

/// How to build an engine. Zero in a field means that field's default
/// (`storefn_engine_config_default` fills in the defaults explicitly).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineConfig {
    /// io_uring submission-queue entries (default 256, at most 16384); must be >= `buffers`.
    pub ring_depth: u32,
    /// Registered block buffers = most block reads in flight (default 256).
    pub buffers: u32,
    /// Chain slots = most chains submitted and not yet reaped (default 1024).
    pub chains: u32,
    /// Reads one chain may issue, the first included (default 64).
    pub max_hops: u32,
}

impl EngineConfig {
    fn io(self) -> storefn_io::EngineConfig {
        let d = storefn_io::EngineConfig::default();
        let pick = |v: u32, d: u32| if v == 0 { d } else { v };
        storefn_io::EngineConfig {
            ring_depth: pick(self.ring_depth, d.ring_depth),
            buffers: if self.buffers == 0 { d.buffers } else { self.buffers as usize },
            chains: if self.chains == 0 { d.chains } else { self.chains as usize },
            max_hops: pick(self.max_hops, d.max_hops),
            ..d
        }
    }
}

/// Fills `*out` with the default engine configuration.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_engine_config_default(out: *mut EngineConfig) -> Status {
    guard("storefn_engine_config_default", || {
        // SAFETY: the caller's contract.
        let out = unsafe { ptr::obj(out, "out")? };
        let d = storefn_io::EngineConfig::default();
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        *out = EngineConfig {
            ring_depth: d.ring_depth,
            buffers: n(d.buffers),
            chains: n(d.chains),
            max_hops: d.max_hops,
        };
        Ok(())
    })
}

/// Creates an engine: one io_uring ring with its registered buffers and chain slots.
///
/// Threads: use an engine only on the thread that created it (its ring and registered
/// buffers are that thread's); create one per thread.
/// Ownership: `cfg` (NULL: defaults) is read during the call. `*out` receives an engine owned
/// by the caller; release it with `storefn_engine_free`.
///
/// Errors: STOREFN_STATUS_ARG (a field out of range: the message names it and its bounds),
/// STOREFN_STATUS_IO (the kernel refused the ring or the buffer registration).
///
/// # Safety
/// `cfg` is NULL or readable; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_engine_new(
    cfg: *const EngineConfig,
    out: *mut *mut Engine,
) -> Status {
    guard("storefn_engine_new", || {
        // SAFETY: the caller's contract.
        let (cfg, out) =
            unsafe { (cfg.as_ref().copied().unwrap_or_default(), ptr::obj(out, "out")?) };
        *out = Box::into_raw(Box::new(Engine::new(cfg.io())?));
        Ok(())
    })
}

/// Releases an engine: waits for its reads in flight, closes its own references to the files
/// (the caller's descriptors stay open). Chains not reaped are dropped (their scratch is not
/// written back). NULL is a no-op.
///
/// # Safety
/// `engine` is NULL or came from `storefn_engine_new` and was not freed before.
#[no_mangle]
pub unsafe extern "C" fn storefn_engine_free(engine: *mut Engine) {
    // SAFETY: the caller's contract is free_handle's.
    unsafe { ptr::free_handle("storefn_engine_free", engine) };
}

/// Registers the file behind `fd` with the engine now (it is otherwise registered on first
/// use) and gives its engine-local number in `*file` (NULL: not wanted), for
/// `storefn_read_xrp_file`. The engine keeps its own reference: closing `fd` afterwards does
/// not unregister it (call `storefn_engine_forget`).
///
/// Errors: STOREFN_STATUS_BAD_FD (not open), STOREFN_STATUS_FULL (64 files registered),
/// STOREFN_STATUS_IO (open, O_DIRECT refused, probe read).
///
/// # Safety
/// `engine` is a live engine; `file` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_engine_register(
    engine: *mut Engine,
    fd: i32,
    file: *mut u32,
) -> Status {
    guard("storefn_engine_register", || {
        // SAFETY: the caller's contract.
        let e = unsafe { ptr::obj(engine, "engine")? };
        let i = e.file_for_fd(fd)?;
        // SAFETY: the caller's contract.
        unsafe { ptr::put(file, e.files[i].id.index()) };
        Ok(())
    })
}

/// Drops the engine's registration of `fd` (its reference to the file is closed).
///
/// Errors: STOREFN_STATUS_ARG (not registered), STOREFN_STATUS_FULL (chains in flight).
///
/// # Safety
/// `engine` is a live engine.
#[no_mangle]
pub unsafe extern "C" fn storefn_engine_forget(engine: *mut Engine, fd: i32) -> Status {
    guard("storefn_engine_forget", || {
        // SAFETY: the caller's contract.
        unsafe { ptr::obj(engine, "engine")? }.forget_fd(fd)
    })
}

/// XRP's `read_xrp(fd, buf, count, offset, prog, scratch)`: reads `count` bytes at `offset`
/// of the file behind `fd`, runs `prog` on the block, follows the reads it asks for
/// (`next_addr[]`/`size[]`) until it sets `done`, and returns. The chain's scratch starts as
/// `scratch[0..scratch_len)` (the rest of its 4096 bytes zero) and is copied back into
/// `scratch` at the end: results come back there.
///
/// `fd` is checked on every call (fstat): a closed descriptor fails; a number that now names
/// another file is registered anew. `prog` must be an XRP program.
///
/// Ownership: every pointer is borrowed for the call only. `buf` (NULL, or `count` writable
/// bytes) receives the last block the chain read (its first `count` bytes). `scratch` (NULL
/// only with `scratch_len` 0) is read and written. `hops` (NULL: not wanted) receives the
/// blocks read.
///
/// Errors: STOREFN_STATUS_BAD_FD, STOREFN_STATUS_SCRATCH_TOO_LARGE (over 4096 bytes),
/// STOREFN_STATUS_CHAIN (program fault, budget, a request outside the file, hop limit; the
/// message says which hop and offset), STOREFN_STATUS_IO, STOREFN_STATUS_ARG (wrong program
/// type, NULL), STOREFN_STATUS_FULL (batched chains are in flight on this engine).
///
/// # Safety
/// `engine` and `prog` are live handles; the buffers are as stated above.
#[no_mangle]
pub unsafe extern "C" fn storefn_read_xrp(
    engine: *mut Engine,
    fd: i32,
    buf: *mut u8,
    count: usize,
    offset: u64,
    prog: *const Prog,
    scratch: *mut u8,
    scratch_len: usize,
    hops: *mut u32,
) -> Status {
    guard("storefn_read_xrp", || {
        // SAFETY: the caller's contract.
        let (e, prog) = unsafe { (ptr::obj(engine, "engine")?, ptr::shared(prog, "prog")?) };
        let i = e.file_for_fd(fd)?;
        let id = e.files[i].id;
        // SAFETY: the caller's contract.
        unsafe { read_xrp_on(e, id, buf, count, offset, prog, scratch, scratch_len, hops) }
    })
}

/// `storefn_read_xrp` on a file registered with `storefn_engine_register` (its `*file`),
/// without the per-call descriptor check: the engine reads through its own reference.
///
/// # Safety
/// As `storefn_read_xrp`.
#[no_mangle]
pub unsafe extern "C" fn storefn_read_xrp_file(
    engine: *mut Engine,
    file: u32,
    buf: *mut u8,
    count: usize,
    offset: u64,
    prog: *const Prog,
    scratch: *mut u8,
    scratch_len: usize,
    hops: *mut u32,
) -> Status {
    guard("storefn_read_xrp_file", || {
        // SAFETY: the caller's contract.
        let (e, prog) = unsafe { (ptr::obj(engine, "engine")?, ptr::shared(prog, "prog")?) };
        let id = e.file_id(file)?;
        // SAFETY: the caller's contract.
        unsafe { read_xrp_on(e, id, buf, count, offset, prog, scratch, scratch_len, hops) }
    })
}

/// # Safety
/// The buffers as `storefn_read_xrp` states.
#[allow(clippy::too_many_arguments)]
unsafe fn read_xrp_on(
    e: &mut Engine,
    id: storefn_io::FileId,
    buf: *mut u8,
    count: usize,
    offset: u64,
    prog: &Prog,
    scratch: *mut u8,
    scratch_len: usize,
    hops: *mut u32,
) -> crate::status::Res {
    let blen = if buf.is_null() { 0 } else { count };
    // SAFETY: the caller's contract for `buf`, `scratch`.
    let (b, s) = unsafe {
        (ptr::bytes_mut(buf, blen, "buf")?, ptr::bytes_mut(scratch, scratch_len, "scratch")?)
    };
    let st = e.read_xrp(id, b, count as u64, offset, prog, s)?;
    // SAFETY: the caller's contract.
    unsafe { ptr::put(hops, st.hops) };
    Ok(())
}

/// Submits one chain without waiting (the batched form of `storefn_read_xrp`): `count`
/// bytes at `offset` of the file behind `fd`, then `prog`'s reads. Reap it with
/// `storefn_reap`, which reports `token`. Chains of different programs may be in flight
/// together.
///
/// Ownership: `scratch` (NULL only with `scratch_len` 0) is read now, and the chain's final
/// scratch is written back into it when the chain is reaped: it must stay valid, and the
/// caller must not use it, until `storefn_reap` reports `token` (or the engine is freed).
///
/// Errors: as `storefn_read_xrp`; STOREFN_STATUS_FULL when every chain slot is taken.
///
/// # Safety
/// `engine` and `prog` are live handles; `scratch` as stated above.
#[no_mangle]
pub unsafe extern "C" fn storefn_submit_xrp(
    engine: *mut Engine,
    fd: i32,
    count: usize,
    offset: u64,
    prog: *const Prog,
    scratch: *mut u8,
    scratch_len: usize,
    token: u64,
) -> Status {
    guard("storefn_submit_xrp", || {
        // SAFETY: the caller's contract.
        let (e, prog) = unsafe { (ptr::obj(engine, "engine")?, ptr::shared(prog, "prog")?) };
        let i = e.file_for_fd(fd)?;
        let id = e.files[i].id;
        // SAFETY: forwarded contract for `scratch`.
        unsafe { e.submit_xrp(id, offset, count as u64, prog, scratch, scratch_len, token) }
    })
}

/// Reaps finished chains into `out[0..cap)`, blocking until at least `min` were reported or
/// none is in flight (`min` 0: never blocks). `*n` receives how many entries were written.
/// A failed chain has a non-OK `status` (the last error holds the last failure's message);
/// the call itself still returns STOREFN_STATUS_OK.
///
/// Ownership: `out` (NULL only with `cap` 0) and `n` are written during the call.
///
/// # Safety
/// `engine` is a live engine; `out` holds `cap` writable entries; `n` is writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_reap(
    engine: *mut Engine,
    min: usize,
    out: *mut Completion,
    cap: usize,
    n: *mut usize,
) -> Status {
    guard("storefn_reap", || {
        // SAFETY: the caller's contract.
        let (e, n) = unsafe { (ptr::obj(engine, "engine")?, ptr::obj(n, "n")?) };
        if out.is_null() && cap > 0 {
            return Err(Fail::arg("out is NULL"));
        }
        let out: &mut [Completion] = if cap == 0 {
            &mut []
        } else {
            // SAFETY: non-NULL with `cap` writable entries (the caller's contract); every
            // entry the engine reports is written before it is read.
            unsafe { std::slice::from_raw_parts_mut(out, cap) }
        };
        *n = e.reap(min, out)?;
        Ok(())
    })
}

/// Chains submitted and not yet reported by `storefn_reap`, into `*n`.
///
/// # Safety
/// `engine` is a live engine; `n` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_in_flight(engine: *const Engine, n: *mut usize) -> Status {
    guard("storefn_in_flight", || {
        // SAFETY: the caller's contract.
        let (e, n) = unsafe { (ptr::shared(engine, "engine")?, ptr::obj(n, "n")?) };
        *n = e.in_flight();
        Ok(())
    })
}

/// λ-IO's `pread_λ(fd, buf, count, off, λ)`: reads `count` bytes at `offset` of the file
/// behind `fd` (through the engine's ring, O_DIRECT if `fd` is), runs the λ program `prog`
/// once over them into `out[0..out_cap)`, and stores the output bytes (the program's return
/// value, checked against `out_cap`) in `*out_len`.
///
/// Ownership: `out` (NULL only with `out_cap` 0) and `out_len` are written during the call.
///
/// Errors: STOREFN_STATUS_BAD_FD, STOREFN_STATUS_ARG (range outside the file or over 64 MiB,
/// wrong program type), STOREFN_STATUS_CHAIN (program fault, output over `out_cap`),
/// STOREFN_STATUS_IO.
///
/// # Safety
/// `engine` and `prog` are live handles; the buffers as stated above.
#[no_mangle]
pub unsafe extern "C" fn storefn_pread_lambda(
    engine: *mut Engine,
    fd: i32,
    out: *mut u8,
    out_cap: usize,
    count: usize,
    offset: u64,
    prog: *const Prog,
    out_len: *mut usize,
) -> Status {
    guard("storefn_pread_lambda", || {
        // SAFETY: the caller's contract.
        let (e, prog, o, ol) = unsafe {
            (
                ptr::obj(engine, "engine")?,
                ptr::shared(prog, "prog")?,
                ptr::bytes_mut(out, out_cap, "out")?,
                ptr::obj(out_len, "out_len")?,
            )
        };
        let i = e.file_for_fd(fd)?;
        *ol = e.pread_lambda(i, offset, count as u64, prog, o)?;
        Ok(())
    })
}

/// λ-IO's `pwrite_λ`: runs the λ program `prog` over `input[0..input_len)` into
/// `staging[0..staging_cap)`, writes its output at `offset` through `fd` and makes it durable
/// (fdatasync) before returning; `*written` receives the bytes written.
///
/// Ownership: `input` is read and `staging` written during the call only (NULL only with a
/// zero length); `fd` stays the caller's.
///
/// Errors: STOREFN_STATUS_BAD_FD, STOREFN_STATUS_CHAIN (fault, output over `staging_cap`),
/// STOREFN_STATUS_IO (write or sync; e.g. `fd` not open for writing), STOREFN_STATUS_ARG.
///
/// # Safety
/// `engine` and `prog` are live handles; the buffers as stated above.
#[no_mangle]
pub unsafe extern "C" fn storefn_pwrite_lambda(
    engine: *mut Engine,
    fd: i32,
    input: *const u8,
    input_len: usize,
    offset: u64,
    prog: *const Prog,
    staging: *mut u8,
    staging_cap: usize,
    written: *mut usize,
) -> Status {
    guard("storefn_pwrite_lambda", || {
        // SAFETY: the caller's contract.
        let (e, prog, i, s, w) = unsafe {
            (
                ptr::obj(engine, "engine")?,
                ptr::shared(prog, "prog")?,
                ptr::bytes(input, input_len, "input")?,
                ptr::bytes_mut(staging, staging_cap, "staging")?,
                ptr::obj(written, "written")?,
            )
        };
        *w = e.pwrite_lambda(fd, offset, i, prog, s)?;
        Ok(())
    })
}
