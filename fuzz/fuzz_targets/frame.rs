//! The wire-protocol frame decoder (storefn_wire): any bytes, as a request frame and
//! as a response frame, must decode to messages or a typed error, never panic; every request
//! that parses re-encodes to the same bytes (`storefn_wire::fuzz::check_frame`, also
//! run by the proptests in crates/storefn-server/tests/proto.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| storefn_wire::fuzz::check_frame(data));
