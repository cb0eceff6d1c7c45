//! BPF-KV's files as untrusted input (storefn_kv::fuzz::check_files, also run by the proptests
//! in crates/storefn-kv/tests/fuzz_files.rs): a small valid database mutated byte by byte (tree,
//! sidecar, WAL; truncation) opens read-only and answers lookups and range scans, or fails with
//! a typed error; never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| storefn_kv::fuzz::check_files(data));
