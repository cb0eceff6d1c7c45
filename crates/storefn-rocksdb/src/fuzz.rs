//! The fuzz entry point for every parser of RocksDB's bytes (fuzz/fuzz_targets/rocksdb_files.rs
//! and the bounded mutation test below): any bytes, read as a block of either value kind (and
//! searched with and without its restart prefixes), a
//! table footer, a compressed block of every codec, a log, version edits and write batches,
//! give values or a [`Malformed`](crate::Malformed), never a panic or a hang.

use crate::format::block::{Block, Keys, Values};
use crate::format::compress::decompress;
use crate::format::edit::{for_each_op, VersionEdit};
use crate::format::log::LogReader;
use crate::format::table::{Footer, FOOTER_BYTES};
use crate::format::{cmp_internal, seek_key};

/// Runs every parser over `data`.
pub fn check_bytes(data: &[u8]) {
    let mut key = Vec::new();
    let mut target = Vec::new();
    for values in [Values::Plain, Values::DeltaHandles] {
        if let Ok(b) = Block::parse(data, values) {
            let user = b.restart_prefixes(Keys::User);
            let internal = b.restart_prefixes(Keys::Internal);
            for t in [&b""[..], b"key", b"\xff\xff"] {
                let _ = b.seek(t, <[u8]>::cmp, &mut key);
                seek_key(t, &mut target);
                let _ = b.seek(&target, cmp_internal, &mut key);
                if let Ok(p) = &user {
                    let _ = b.seek_by_prefix(t, <[u8]>::cmp, &mut key, p);
                }
                if let Ok(p) = &internal {
                    let _ = b.seek_by_prefix(&target, cmp_internal, &mut key, p);
                }
            }
        }
    }
    if data.len() >= FOOTER_BYTES {
        let _ = Footer::parse(&data[data.len() - FOOTER_BYTES..]);
    }
    for codec in 1..=7 {
        let _ = decompress(codec, data);
    }
    let mut log = LogReader::new(data, Some(7));
    // Each record consumes at least a header's bytes, so this ends.
    while let Ok((_, rec)) = log.next_record() {
        let _ = VersionEdit::decode(rec);
        let _ = for_each_op(rec, |_| {});
    }
    let _ = VersionEdit::decode(data);
    let _ = for_each_op(data, |_| {});
}

#[cfg(test)]
mod tests {
    use super::check_bytes;
    use crate::format::table::mask_crc;

    fn seeds() -> Vec<Vec<u8>> {
        // A block: two entries, one restart.
        let mut block = vec![0, 9, 1];
        block.extend_from_slice(b"a\x01\0\0\0\0\0\0\0v");
        block.extend_from_slice(&[0u8, 0, 0, 0, 1, 0, 0, 0]);
        // A log record holding a version edit with a new file.
        let mut edit = vec![103u8, 1, 18, 0x83, 0x08, 9];
        edit.extend_from_slice(b"k\x01\0\0\0\0\0\0\0");
        edit.push(9);
        edit.extend_from_slice(b"z\x01\0\0\0\0\0\0\0");
        edit.extend_from_slice(&[0, 0, 1]);
        let mut covered = vec![1u8];
        covered.extend_from_slice(&edit);
        let mut log = mask_crc(crc32c::crc32c(&covered)).to_le_bytes().to_vec();
        log.extend_from_slice(&(edit.len() as u16).to_le_bytes());
        log.extend_from_slice(&covered);
        // A write batch.
        let mut batch = 5u64.to_le_bytes().to_vec();
        batch.extend_from_slice(&2u32.to_le_bytes());
        batch.extend_from_slice(&[1, 1, b'k', 1, b'v', 0, 1, b'j']);
        vec![block, log, batch]
    }

    #[test]
    fn mutated_rocksdb_bytes_never_panic() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for seed in seeds() {
            check_bytes(&seed);
            for _ in 0..5_000 {
                let mut m = seed.clone();
                for _ in 0..=next() % 4 {
                    let i = (next() as usize) % m.len();
                    m[i] = next() as u8;
                }
                let cut = (next() as usize) % (m.len() + 1);
                check_bytes(&m[..cut]);
                check_bytes(&m);
            }
        }
    }
}
