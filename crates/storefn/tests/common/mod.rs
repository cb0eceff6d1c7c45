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

/// Stdout of a command that must succeed (its stderr in the failure message).
pub fn ok(o: &std::process::Output) -> String {
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr of a command that must fail (its stdout in the failure message).
pub fn err(o: &std::process::Output) -> String {
    assert!(!o.status.success(), "stdout: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stderr).into_owned()
}
