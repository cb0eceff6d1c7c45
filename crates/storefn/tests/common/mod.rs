//! Shared helpers for the CLI's integration tests.
#![allow(dead_code)]

#[allow(unused_imports)] // not every test binary skips
pub use storefn_testkit::skip;

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

/// A scratch directory under the temp dir, removed when dropped.
pub struct Dir(pub std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh `Dir` named `{prefix}-{tag}-{pid}` (anything left by an earlier run is removed).
pub fn temp_dir(prefix: &str, tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

/// Runs the `storefn` binary: (exit code, stdout, stderr).
pub fn storefn(args: &[&str]) -> (i32, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_storefn")).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
