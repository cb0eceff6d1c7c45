//! Frames of every op sent to a live server on loopback after a successful HELLO and AUTH:
//! the connection gets answers or is closed, and another client is still served
//! (storefn_server::fuzz; the same property runs bounded in the server's tests).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use storefn_server::fuzz::AuthedTarget;

/// One server for the whole fuzzing process (its directory is under the temp dir, named by
/// the process id; the fuzzer's process exit leaves it, like any crash artifact).
static TARGET: OnceLock<AuthedTarget> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.get_or_init(|| AuthedTarget::start("cargo-fuzz")).check(data);
});
