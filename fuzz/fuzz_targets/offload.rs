//! DDS's OFFLOAD message parsing (storefn_wire): any bytes, as an OFFLOAD request
//! payload and as an OFFLOAD response payload, parse to a value that re-encodes to the same
//! bytes or to a typed error naming an offset inside the payload, never a panic
//! (`storefn_wire::fuzz::check_offload`, also run by the proptest
//! `offload_fuzz_property_holds` in crates/storefn-server/tests/proto.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| storefn_wire::fuzz::check_offload(data));
