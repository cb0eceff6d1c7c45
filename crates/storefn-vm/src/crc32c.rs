//! CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for the `storefn_crc32c` helper: the
//! checksum engines' block formats store (WiredTiger's block headers, RocksDB's block trailers),
//! which a function checking blocks itself would otherwise compute a table step per byte.

const POLY: u32 = 0x82F6_3B78;

const TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// Extends the finished CRC-32C `crc` (0 for none) over `data`, zlib's `crc32` convention:
/// `extend(extend(0, a), b) == extend(0, a ++ b)`.
#[must_use]
pub fn extend(crc: u32, data: &[u8]) -> u32 {
    !raw(!crc, data)
}

fn raw(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU supports SSE4.2, checked just above.
        return unsafe { raw_sse42(crc, data) };
    }
    raw_table(crc, data)
}

fn raw_table(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// # Safety
/// The CPU must support SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn raw_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(crc);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut c = c as u32;
    for &b in words.remainder() {
        c = _mm_crc32_u8(c, b);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_chaining() {
        // RFC 3720's CRC-32C check value.
        assert_eq!(extend(0, b"123456789"), 0xE306_9283);
        assert_eq!(extend(0, &[0u8; 32]), 0x8A91_36AA);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for cut in [0, 1, 7, 8, 9, 500, 1000] {
            assert_eq!(extend(extend(0, &data[..cut]), &data[cut..]), extend(0, &data));
        }
        assert_eq!(raw_table(!0, &data), raw(!0, &data));
    }
}
