//! WiredTiger's packed unsigned integers (intpack.i): the first byte's top bits say how the value
//! is stored, so small values take one byte and order is kept bytewise.
//!
//! ```text
//! 10xxxxxx              0 ..= 63                 value = x
//! 110xxxxx yyyyyyyy     64 ..= 8255              value = (x << 8 | y) + 64
//! 1110llll b1..bl       8256 ..                  value = big-endian(b1..bl) + 8256, l <= 8
//! 0xxxxxxx / 1111xxxx   negative markers, not valid for an unsigned field
//! ```

use super::Malformed;

/// Values up to this fit the 1-byte form.
pub(crate) const POS_1BYTE_MAX: u64 = (1 << 6) - 1;
/// Values up to this fit the 2-byte form.
pub(crate) const POS_2BYTE_MAX: u64 = (1 << 13) + POS_1BYTE_MAX;

/// Unpacks one unsigned integer at `*pos` in `buf`, advancing `*pos` past it.
///
/// # Errors
/// A marker that is not an unsigned form, a length over 8 bytes, or bytes past `buf`'s end.
pub fn unpack_uint(buf: &[u8], pos: &mut usize) -> Result<u64, Malformed> {
    let at = *pos;
    let first = *buf.get(at).ok_or_else(|| Malformed::new(at, "packed integer past the end"))?;
    match first & 0xf0 {
        0x80 | 0x90 | 0xa0 | 0xb0 => {
            *pos = at + 1;
            Ok(u64::from(first & 0x3f))
        }
        0xc0 | 0xd0 => {
            let low = *buf
                .get(at + 1)
                .ok_or_else(|| Malformed::new(at, "2-byte packed integer past the end"))?;
            *pos = at + 2;
            Ok(((u64::from(first & 0x1f) << 8) | u64::from(low)) + POS_1BYTE_MAX + 1)
        }
        0xe0 => {
            let len = usize::from(first & 0x0f);
            if len > 8 {
                return Err(Malformed::new(at, format!("packed integer of {len} bytes (max 8)")));
            }
            let bytes = super::take(buf, at + 1, len, "packed integer")?;
            let v = bytes.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b));
            *pos = at + 1 + len;
            v.checked_add(POS_2BYTE_MAX + 1)
                .ok_or_else(|| Malformed::new(at, "packed integer overflows 64 bits"))
        }
        _ => {
            Err(Malformed::new(at, format!("byte {first:#04x} is not an unsigned packed integer")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WiredTiger's packer, re-derived from the format table above, for round trips.
    fn pack(v: u64) -> Vec<u8> {
        if v <= POS_1BYTE_MAX {
            vec![0x80 | v as u8]
        } else if v <= POS_2BYTE_MAX {
            let w = v - POS_1BYTE_MAX - 1;
            vec![0xc0 | (w >> 8) as u8, w as u8]
        } else {
            let w = v - POS_2BYTE_MAX - 1;
            let len = 8 - (w.leading_zeros() / 8) as usize;
            let mut out = vec![0xe0 | len as u8];
            out.extend_from_slice(&w.to_be_bytes()[8 - len..]);
            out
        }
    }

    #[test]
    fn round_trips_across_forms() {
        for v in [0, 1, 63, 64, 65, 8255, 8256, 8257, 1 << 20, u64::MAX - 8256, u64::MAX - 8257] {
            let b = pack(v);
            let mut pos = 0;
            assert_eq!(unpack_uint(&b, &mut pos), Ok(v), "{v}");
            assert_eq!(pos, b.len());
        }
    }

    #[test]
    fn rejects_truncation_and_negative_markers() {
        assert!(unpack_uint(&[0xc1], &mut 0).is_err());
        assert!(unpack_uint(&[0xe3, 1, 2], &mut 0).is_err());
        assert!(unpack_uint(&[0x40], &mut 0).is_err());
        assert!(unpack_uint(&[0xe9, 0, 0, 0, 0, 0, 0, 0, 0, 0], &mut 0).is_err());
        assert!(
            unpack_uint(&[0xe8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], &mut 0).is_err()
        );
        assert!(unpack_uint(&[], &mut 0).is_err());
    }
}
