//! Arbitrary bytes -> ELF loader -> verifier: never a panic, only errors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_vm::{elf, verifier, ProgType};

fuzz_target!(|data: &[u8]| {
    for t in [ProgType::Xrp, ProgType::Lambda] {
        if let Ok(prog) = elf::load(data, None, t) {
            let _ = verifier::verify(&prog);
        }
    }
});
