//! Shared helpers for the CLI's integration tests.
#![allow(dead_code)]

mod skip;
#[allow(unused_imports)] // not every test binary skips
pub use skip::skip;

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
