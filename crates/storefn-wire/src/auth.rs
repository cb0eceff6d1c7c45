//! Token auth: HMAC-SHA256 challenge-response. The server sends a fresh random challenge in
//! its HELLO response; the client answers HMAC-SHA256(secret, challenge || tenant). The secret
//! never crosses the wire.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::frame::HASH_BYTES;

/// HMAC-SHA256(secret, challenge || tenant).
#[must_use]
pub fn mac(secret: &[u8], challenge: &[u8; HASH_BYTES], tenant: &[u8]) -> [u8; HASH_BYTES] {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(challenge);
    m.update(tenant);
    m.finalize().into_bytes().into()
}

/// Checks a client's MAC in constant time.
#[must_use]
pub fn verify(secret: &[u8], challenge: &[u8; HASH_BYTES], tenant: &[u8], tag: &[u8]) -> bool {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(challenge);
    m.update(tenant);
    m.verify_slice(tag).is_ok()
}

/// A fresh random challenge from the kernel (`getrandom`).
///
/// # Panics
/// If the kernel's random source fails (it does not once the system has booted).
#[must_use]
pub fn challenge() -> [u8; HASH_BYTES] {
    let mut c = [0u8; HASH_BYTES];
    let mut got = 0;
    while got < c.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `c`.
        let n = unsafe { libc::getrandom(c[got..].as_mut_ptr().cast(), c.len() - got, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            assert!(e.kind() == std::io::ErrorKind::Interrupted, "getrandom: {e}");
            continue;
        }
        got += usize::try_from(n).expect("non-negative");
    }
    c
}
