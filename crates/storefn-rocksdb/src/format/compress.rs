//! Compressed blocks (docs/FORMAT.md, "RocksDB: compressed blocks"): the trailer's compression
//! byte names the codec; with format_version >= 2 every codec but Snappy prefixes its output
//! with the uncompressed size as a varint32. Decompression uses maintained crates; the size is
//! bounded before anything is allocated.

use std::io::Read;

use super::{Cursor, Malformed, Parsed};
use crate::limits::MAX_BLOCK_BYTES;

pub const SNAPPY: u8 = 1;
pub const ZLIB: u8 = 2;
pub const BZIP2: u8 = 3;
pub const LZ4: u8 = 4;
pub const LZ4HC: u8 = 5;
pub const XPRESS: u8 = 6;
pub const ZSTD: u8 = 7;

/// A codec's name, for messages.
pub fn codec_name(kind: u8) -> &'static str {
    match kind {
        0 => "none",
        SNAPPY => "snappy",
        ZLIB => "zlib",
        BZIP2 => "bzip2",
        LZ4 => "lz4",
        LZ4HC => "lz4hc",
        XPRESS => "xpress",
        ZSTD => "zstd",
        _ => "unknown",
    }
}

/// The block's contents decompressed; `Ok(None)` for a codec this reader does not decode.
pub(crate) fn decompress(kind: u8, data: &[u8]) -> Parsed<Option<Vec<u8>>> {
    let bad = |what| Malformed { at: 0, what };
    if kind == SNAPPY {
        let n = snap::raw::decompress_len(data).map_err(|_| bad("snappy length"))?;
        check_size(n as u64)?;
        let out = snap::raw::Decoder::new().decompress_vec(data).map_err(|_| bad("snappy data"))?;
        return Ok(Some(out));
    }
    if !matches!(kind, ZLIB | LZ4 | LZ4HC | ZSTD) {
        return Ok(None);
    }
    let mut c = Cursor::new(data);
    let n = c.varint32("uncompressed size")? as usize;
    check_size(n as u64)?;
    let body = &data[c.pos()..];
    let out = match kind {
        ZLIB => miniz_oxide::inflate::decompress_to_vec_with_limit(body, n)
            .map_err(|_| bad("zlib data"))?,
        LZ4 | LZ4HC => lz4_flex::block::decompress(body, n).map_err(|_| bad("lz4 data"))?,
        _ => {
            let mut d =
                ruzstd::decoding::StreamingDecoder::new(body).map_err(|_| bad("zstd frame"))?;
            let mut out = Vec::with_capacity(n);
            (&mut d).take(n as u64 + 1).read_to_end(&mut out).map_err(|_| bad("zstd data"))?;
            out
        }
    };
    if out.len() != n {
        return Err(bad("decompressed size differs from the stored size"));
    }
    Ok(Some(out))
}

fn check_size(n: u64) -> Parsed<()> {
    if n > MAX_BLOCK_BYTES {
        return Err(Malformed { at: 0, what: "uncompressed size past the block limit" });
    }
    Ok(())
}
