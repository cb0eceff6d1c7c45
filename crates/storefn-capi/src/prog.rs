//! Programs: loaded from ELF bytes or a file and verified once; shared by any number of
//! engines and clients (each engine prepares its own instance of it).

use std::ffi::c_char;
use std::sync::Arc;

use storefn_vm::VerifiedProgram;

use crate::ptr;
use crate::status::{guard, Fail, Res, Status};

/// What a program is for: the context it is verified against.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgType {
    /// XRP's `struct bpf_xrp`: runs on every block a chain reads (`storefn_read_xrp`).
    Xrp = 0,
    /// λ-IO's `struct context`: runs over a byte range into an output (`storefn_pread_lambda`).
    Lambda = 1,
}

impl ProgType {
    fn from_int(v: i32) -> Res<Self> {
        match v {
            0 => Ok(Self::Xrp),
            1 => Ok(Self::Lambda),
            _ => Err(Fail::arg(format!("program type {v} is neither STOREFN_PROG_TYPE_XRP (0) nor STOREFN_PROG_TYPE_LAMBDA (1)"))),
        }
    }

    fn vm(self) -> storefn_vm::ProgType {
        match self {
            Self::Xrp => storefn_vm::ProgType::Xrp,
            Self::Lambda => storefn_vm::ProgType::Lambda,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Xrp => "xrp",
            Self::Lambda => "lambda",
        }
    }
}

/// A verified program (opaque). Immutable once loaded: it may be shared between threads.
#[derive(Debug)]
pub struct Prog {
    pub(crate) verified: Arc<VerifiedProgram>,
    pub(crate) ty: ProgType,
    /// The object and the selected section, for pushing the program to a server.
    pub(crate) elf: Vec<u8>,
    pub(crate) section: String,
}

// The header promises a program may be shared by threads.
const _: fn() = || {
    fn shareable<T: Send + Sync>() {}
    shareable::<Prog>();
};

impl Prog {
    pub(crate) fn expect(&self, ty: ProgType) -> Res {
        if self.ty == ty {
            return Ok(());
        }
        Err(Fail::arg(format!(
            "program {} is of type {}, this call runs {} programs",
            self.verified.program().name,
            self.ty.name(),
            ty.name()
        )))
    }

    /// A fresh instance on the JIT.
    pub(crate) fn instance(&self) -> Res<storefn_vm::Instance> {
        storefn_vm::Instance::new(Arc::clone(&self.verified), storefn_vm::Engine::Jit)
            .map_err(|e| Fail::new(Status::Load, format!("preparing program: {e}")))
    }
}

fn load(elf: &[u8], section: Option<&str>, ty: ProgType) -> Res<Box<Prog>> {
    let verified = storefn_vm::load_verified(elf, section, ty.vm()).map_err(|e| match e {
        storefn_vm::Error::Verify(v) => Fail::new(Status::Verify, format!("verifier: {v}")),
        other => Fail::new(Status::Load, other.to_string()),
    })?;
    Ok(Box::new(Prog { verified, ty, elf: elf.to_vec(), section: section.unwrap_or("").into() }))
}

/// Loads the program `section` (NULL: the object's only program) of the BPF ELF object
/// `elf[0..len)` as a program of type `prog_type` (a `storefn_prog_type`) and verifies it.
///
/// Ownership: `elf` and `section` are borrowed for the call only (the bytes are copied). On
/// success `*out` receives a new program owned by the caller: release it with
/// `storefn_prog_free`. On failure `*out` is untouched.
///
/// Errors: STOREFN_STATUS_LOAD (not an ELF BPF object, no such section, bad relocation),
/// STOREFN_STATUS_VERIFY (the verifier's message names the instruction), STOREFN_STATUS_ARG.
///
/// # Safety
/// `elf` points at `len` readable bytes; `section` is NULL or a NUL-terminated string; `out`
/// is writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_prog_load(
    elf: *const u8,
    len: usize,
    section: *const c_char,
    prog_type: i32,
    out: *mut *mut Prog,
) -> Status {
    guard("storefn_prog_load", || {
        // SAFETY: the caller's contract above.
        let (elf, section, out) = unsafe {
            (
                ptr::bytes(elf, len, "elf")?,
                ptr::opt_string(section, "section")?,
                ptr::obj(out, "out")?,
            )
        };
        let ty = ProgType::from_int(prog_type)?;
        if elf.is_empty() {
            return Err(Fail::new(Status::Load, "elf: 0 bytes"));
        }
        *out = Box::into_raw(load(elf, section, ty)?);
        Ok(())
    })
}

/// `storefn_prog_load` on the contents of the file at `path` (a clang `-target bpf` object).
///
/// Ownership: as `storefn_prog_load`; `path` is borrowed for the call.
///
/// Errors: STOREFN_STATUS_IO (the file cannot be read; the message names it), and as
/// `storefn_prog_load` (messages prefixed with the path).
///
/// # Safety
/// `path` is a NUL-terminated string; `section` NULL or one; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_prog_load_path(
    path: *const c_char,
    section: *const c_char,
    prog_type: i32,
    out: *mut *mut Prog,
) -> Status {
    guard("storefn_prog_load_path", || {
        // SAFETY: the caller's contract above.
        let (path, section, out) = unsafe {
            (
                ptr::string(path, "path")?,
                ptr::opt_string(section, "section")?,
                ptr::obj(out, "out")?,
            )
        };
        let ty = ProgType::from_int(prog_type)?;
        let elf = std::fs::read(path).map_err(|e| Fail::new(Status::Io, format!("{path}: {e}")))?;
        let p = load(&elf, section, ty)
            .map_err(|f| Fail::new(f.status, format!("{path}: {}", f.message)))?;
        *out = Box::into_raw(p);
        Ok(())
    })
}

/// The program's type (`STOREFN_PROG_TYPE_XRP` or `STOREFN_PROG_TYPE_LAMBDA`) into `*out`.
///
/// # Safety
/// `prog` is NULL or a live program; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_prog_get_type(prog: *const Prog, out: *mut ProgType) -> Status {
    guard("storefn_prog_get_type", || {
        // SAFETY: the caller's contract above.
        let (prog, out) = unsafe { (ptr::shared(prog, "prog")?, ptr::obj(out, "out")?) };
        *out = prog.ty;
        Ok(())
    })
}

/// Instructions of the verified program (after linking subprograms) into `*out`.
///
/// # Safety
/// `prog` is NULL or a live program; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_prog_insns(prog: *const Prog, out: *mut usize) -> Status {
    guard("storefn_prog_insns", || {
        // SAFETY: the caller's contract above.
        let (prog, out) = unsafe { (ptr::shared(prog, "prog")?, ptr::obj(out, "out")?) };
        *out = prog.verified.program().insns.len();
        Ok(())
    })
}

/// Releases a program. NULL is a no-op. Engines and clients that ran it keep their own
/// prepared copy, so it may be freed while they live; the pointer is invalid afterwards.
///
/// # Safety
/// `prog` is NULL or came from `storefn_prog_load*` and was not freed before.
#[no_mangle]
pub unsafe extern "C" fn storefn_prog_free(prog: *mut Prog) {
    // SAFETY: the caller's contract is free_handle's.
    unsafe { ptr::free_handle("storefn_prog_free", prog) };
}
