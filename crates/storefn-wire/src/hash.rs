//! Program names: a program is named by the SHA-256 of `prog_type || section || elf`, so a
//! client names a program without loading it first and the server keys its registry by it.

use sha2::{Digest, Sha256};

use crate::frame::HASH_BYTES;

/// A program's content hash.
pub type ProgHash = [u8; HASH_BYTES];

/// The hash a client computes to name a program without loading it first.
#[must_use]
pub fn prog_hash(prog_type: u8, section: &[u8], elf: &[u8]) -> ProgHash {
    let mut h = Sha256::new();
    h.update([prog_type]);
    h.update(section);
    h.update(elf);
    h.finalize().into()
}
