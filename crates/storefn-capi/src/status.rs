//! Status codes, the thread-local last error, and the guard every exported function runs its
//! body in: a Rust panic is caught there and becomes [`Status::Panic`], so none crosses into C.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call did. `STOREFN_STATUS_OK` is 0; every other value names a class of failure, and
/// `storefn_last_error()` on the same thread says what exactly was wrong.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A bad argument: a NULL pointer where one is required, a length out of range, a
    /// string that is not UTF-8, a program of the wrong type for the call.
    Arg = 1,
    /// The ELF object could not be loaded (not ELF, not BPF, no such section, bad relocation).
    Load = 2,
    /// The verifier refused the program; the message is the verifier's.
    Verify = 3,
    /// The file descriptor is not open (closed, or never was).
    BadFd = 4,
    /// The scratch buffer is larger than the 4096 bytes a chain carries.
    ScratchTooLarge = 5,
    /// An operating-system error (open, read, write, ring setup); the message names it.
    Io = 6,
    /// The chain failed: the program faulted or ran past its budget, a request left the file,
    /// the hop limit was reached, a read failed.
    Chain = 7,
    /// Every chain slot of the engine is taken (reap first), or its file table is full.
    Full = 8,
    /// The server answered with an error status (its name and message are in the last error).
    Remote = 9,
    /// The connection to the server failed or broke (the next call reconnects).
    Conn = 10,
    /// The KV store could not be opened or read (corrupt node, bad shape).
    Kv = 11,
    /// A bug inside libstorefn (a Rust panic, caught at the boundary). Please report it.
    Panic = 12,
}

impl Status {
    /// The status with value `v` (one this crate stored); [`Status::Panic`] for any other.
    pub(crate) fn from_i32(v: i32) -> Self {
        const ALL: [Status; 13] = [
            Status::Ok,
            Status::Arg,
            Status::Load,
            Status::Verify,
            Status::BadFd,
            Status::ScratchTooLarge,
            Status::Io,
            Status::Chain,
            Status::Full,
            Status::Remote,
            Status::Conn,
            Status::Kv,
            Status::Panic,
        ];
        ALL.into_iter().find(|s| *s as i32 == v).unwrap_or(Status::Panic)
    }
}

thread_local! {
    /// The message of the last failed call on this thread. Kept (and its buffer reused) until
    /// the next failure on the thread; successful calls do not touch it, so the steady state
    /// of a successful call allocates nothing here.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure: its class and a message naming what was wrong.
#[derive(Debug)]
pub(crate) struct Fail {
    pub status: Status,
    pub message: String,
}

impl Fail {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    pub(crate) fn arg(message: impl Into<String>) -> Self {
        Self::new(Status::Arg, message)
    }
}

pub(crate) type Res<T = ()> = Result<T, Fail>;

pub(crate) fn set_last(message: &str) {
    // Interior NULs would cut the C string short: show them instead.
    let bytes: Vec<u8> = message.bytes().map(|b| if b == 0 { b'?' } else { b }).collect();
    let c = CString::new(bytes).expect("NULs were replaced");
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `f` for an exported function called `name`: its error becomes the status and the last
/// error; a panic becomes [`Status::Panic`] with the panic's message.
pub(crate) fn guard(name: &str, f: impl FnOnce() -> Res) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(fail)) => {
            set_last(&format!("{name}: {}", fail.message));
            fail.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            set_last(&format!("{name}: internal error (panic caught at the C boundary): {what}"));
            Status::Panic
        }
    }
}

/// The message of the last failed call made on the calling thread, as a NUL-terminated UTF-8
/// string; "" before any failure.
///
/// Ownership: the string belongs to libstorefn. It stays valid and unchanged until the next
/// failing storefn call on the same thread; copy it to keep it longer. Never free it.
#[no_mangle]
pub extern "C" fn storefn_last_error() -> *const c_char {
    // Only reads a thread-local: cannot panic short of the thread being torn down, where
    // `try_with` gives "" instead.
    LAST.try_with(|l| l.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// The enumerator's name for a status value (`"STOREFN_STATUS_VERIFY"`, ...), or
/// `"STOREFN_STATUS_UNKNOWN"` for a value that is none; never NULL, static storage.
#[no_mangle]
pub extern "C" fn storefn_status_name(status: i32) -> *const c_char {
    // An int, not the enum: C may pass any value, and a Rust enum must hold a valid one.
    let s: &'static std::ffi::CStr = match status {
        0 => c"STOREFN_STATUS_OK",
        1 => c"STOREFN_STATUS_ARG",
        2 => c"STOREFN_STATUS_LOAD",
        3 => c"STOREFN_STATUS_VERIFY",
        4 => c"STOREFN_STATUS_BAD_FD",
        5 => c"STOREFN_STATUS_SCRATCH_TOO_LARGE",
        6 => c"STOREFN_STATUS_IO",
        7 => c"STOREFN_STATUS_CHAIN",
        8 => c"STOREFN_STATUS_FULL",
        9 => c"STOREFN_STATUS_REMOTE",
        10 => c"STOREFN_STATUS_CONN",
        11 => c"STOREFN_STATUS_KV",
        12 => c"STOREFN_STATUS_PANIC",
        _ => c"STOREFN_STATUS_UNKNOWN",
    };
    s.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: storefn_last_error returns a valid NUL-terminated string.
        unsafe { std::ffi::CStr::from_ptr(storefn_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let s = guard("storefn_test", || panic!("index 9 out of range"));
        assert_eq!(s, Status::Panic);
        let m = last();
        assert!(m.contains("storefn_test") && m.contains("index 9 out of range"), "{m}");
        // A formatted panic message (a String payload) is kept too.
        let n = 7;
        assert_eq!(guard("storefn_test", || panic!("slot {n}")), Status::Panic);
        assert!(last().contains("slot 7"));
    }

    #[test]
    fn a_failure_names_the_function_and_success_keeps_the_message() {
        assert_eq!(guard("storefn_x", || Err(Fail::arg("buf is NULL"))), Status::Arg);
        assert_eq!(last(), "storefn_x: buf is NULL");
        assert_eq!(guard("storefn_y", || Ok(())), Status::Ok);
        assert_eq!(last(), "storefn_x: buf is NULL");
    }

    #[test]
    fn interior_nuls_do_not_cut_the_message() {
        let _ = guard("f", || Err(Fail::arg("a\0b")));
        assert_eq!(last(), "f: a?b");
    }

    #[test]
    fn the_last_error_is_per_thread() {
        let _ = guard("main", || Err(Fail::arg("here")));
        std::thread::spawn(|| assert_eq!(last(), "")).join().unwrap();
        assert_eq!(last(), "main: here");
    }

    #[test]
    fn every_status_has_its_enumerator_name() {
        // SAFETY: static NUL-terminated strings.
        let name = |v: i32| unsafe { std::ffi::CStr::from_ptr(storefn_status_name(v)) };
        assert_eq!(name(Status::Ok as i32), c"STOREFN_STATUS_OK");
        assert_eq!(name(Status::Panic as i32), c"STOREFN_STATUS_PANIC");
        assert_eq!(name(-1), c"STOREFN_STATUS_UNKNOWN");
        let header =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/storefn.h"))
                .unwrap();
        for v in 0..=12 {
            let n = name(v).to_str().unwrap();
            assert!(header.contains(&format!("{n} = {v},")), "{n} = {v}");
        }
    }
}
