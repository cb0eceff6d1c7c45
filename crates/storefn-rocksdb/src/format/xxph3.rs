//! The 64-bit hash RocksDB's full filters are built with: XXH3 as it stood in xxHash 0.7.2 (a
//! preview RocksDB keeps for on-disk compatibility, which differs from the final XXH3), seed 0,
//! with RocksDB's own answer for the empty key. Written here from the algorithm's description
//! for keys up to 240 bytes; longer keys have no hash here, and a filter then answers "may
//! contain" (the Get reads the file).

const P32_1: u64 = 0x9E37_79B1;
const P64_1: u64 = 0x9E37_79B1_85EB_CA87;
const P64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P64_3: u64 = 0x1656_67B1_9E37_79F9;

/// Longest key hashed here (the preview's "mid-size" bound).
pub const MAX_HASHED_KEY_BYTES: usize = 240;
/// The secret's minimum size, which places the 129..=240 case's last read.
const SECRET_SIZE_MIN: usize = 136;

/// The algorithm's default secret (192 bytes).
#[rustfmt::skip]
const SECRET: [u8; 192] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
];

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn le32(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}

fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    // The product's halves, xor-folded.
    (p as u64) ^ ((p >> 64) as u64)
}

fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 37;
    h = h.wrapping_mul(P64_3);
    h ^ (h >> 32)
}

fn mix16(input: &[u8], at: usize, secret_at: usize) -> u64 {
    fold(
        input_word(input, at) ^ le64(&SECRET, secret_at),
        input_word(input, at + 8) ^ le64(&SECRET, secret_at + 8),
    )
}

fn input_word(input: &[u8], at: usize) -> u64 {
    le64(input, at)
}

/// The hash of `key`, or `None` past [`MAX_HASHED_KEY_BYTES`].
pub fn xxph3_64(key: &[u8]) -> Option<u64> {
    let len = key.len();
    let l = len as u64;
    Some(match len {
        0 => fold(le64(&SECRET, 0), P64_2),
        1..=3 => {
            let c = u64::from(key[0])
                | u64::from(key[len >> 1]) << 8
                | u64::from(key[len - 1]) << 16
                | l << 24;
            avalanche((c ^ le32(&SECRET, 0)).wrapping_mul(P64_1))
        }
        4..=8 => {
            let v = le32(key, 0) | le32(key, len - 4) << 32;
            let keyed = v ^ le64(&SECRET, 0);
            let mix = l.wrapping_add((keyed ^ (keyed >> 51)).wrapping_mul(P32_1));
            avalanche((mix ^ (mix >> 47)).wrapping_mul(P64_2))
        }
        9..=16 => {
            let lo = le64(key, 0) ^ le64(&SECRET, 0);
            let hi = le64(key, len - 8) ^ le64(&SECRET, 8);
            avalanche(l.wrapping_add(lo.wrapping_add(hi)).wrapping_add(fold(lo, hi)))
        }
        17..=128 => {
            let mut acc = l.wrapping_mul(P64_1);
            let pairs = (len - 1) / 32; // 0..=3 extra pairs inward
            for i in (0..=pairs).rev() {
                acc = acc.wrapping_add(mix16(key, 16 * i, 32 * i));
                acc = acc.wrapping_add(mix16(key, len - 16 * (i + 1), 32 * i + 16));
            }
            avalanche(acc)
        }
        129..=MAX_HASHED_KEY_BYTES => {
            let mut acc = l.wrapping_mul(P64_1);
            for i in 0..8 {
                acc = acc.wrapping_add(mix16(key, 16 * i, 16 * i));
            }
            acc = avalanche(acc);
            for i in 8..len / 16 {
                acc = acc.wrapping_add(mix16(key, 16 * i, 16 * (i - 8) + 3));
            }
            acc = acc.wrapping_add(mix16(key, len - 16, SECRET_SIZE_MIN - 17));
            avalanche(acc)
        }
        _ => return None,
    })
}
