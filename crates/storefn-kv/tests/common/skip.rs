//! The one way a test skips (shared by every test-support module of this crate).

/// The variable CI sets (`.ci/run`, as root): every privilege, device and tool a test needs is
/// there, so a test that would skip fails instead.
pub const REQUIRE_PRIVILEGED: &str = "STOREFN_REQUIRE_PRIVILEGED";

/// Prints `skipped: <why>`; panics instead when `STOREFN_REQUIRE_PRIVILEGED=1`. For skips for
/// lack of root, a loop device, zram, /dev/shm or a tool; not for facts of the machine a test
/// only adapts to (e.g. a device that opens where it could have refused).
pub fn skip(why: &str) {
    if std::env::var_os(REQUIRE_PRIVILEGED).is_some_and(|v| v == "1") {
        panic!("{REQUIRE_PRIVILEGED}=1, but this test would skip: {why}");
    }
    println!("skipped: {why}");
}
