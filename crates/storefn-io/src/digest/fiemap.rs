//! FS_IOC_FIEMAP: read a file's extents in batches and check each is safe to read raw.
//! Layouts and flag values from linux/fiemap.h (uapi); the ioctl number is
//! `_IOWR('f', 11, struct fiemap)`.

use std::fs::File;
use std::os::fd::AsRawFd;

use super::{DigestError, Extent, MAX_DIGEST_EXTENTS};

/// Extents fetched per FIEMAP call (56 B each: a 28 KiB buffer). Large enough that a typical
/// file needs one or two calls; the loop handles any count up to `MAX_DIGEST_EXTENTS`.
const FIEMAP_BATCH: usize = 512;

/// `_IOWR('f', 11, struct fiemap)` with `sizeof(struct fiemap) == 32`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// Flush dirty (delayed-allocation) data before mapping.
const FIEMAP_FLAG_SYNC: u32 = 0x1;

const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_EXTENT_UNKNOWN: u32 = 0x2;
const FIEMAP_EXTENT_DELALLOC: u32 = 0x4;
const FIEMAP_EXTENT_ENCODED: u32 = 0x8;
const FIEMAP_EXTENT_DATA_ENCRYPTED: u32 = 0x80;
const FIEMAP_EXTENT_NOT_ALIGNED: u32 = 0x100;
const FIEMAP_EXTENT_DATA_INLINE: u32 = 0x200;
const FIEMAP_EXTENT_DATA_TAIL: u32 = 0x400;
const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
const FIEMAP_EXTENT_MERGED: u32 = 0x1000;
const FIEMAP_EXTENT_SHARED: u32 = 0x2000;
/// Flags that do not affect whether the bytes can be read at `fe_physical`.
const HARMLESS_FLAGS: u32 = FIEMAP_EXTENT_LAST | FIEMAP_EXTENT_MERGED;

/// Why an extent cannot be served through the block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExtentProblem {
    /// Allocated but never written (fallocate): the device holds garbage, the file reads zeros.
    Unwritten,
    /// Not yet allocated (should not survive FIEMAP_FLAG_SYNC).
    Delalloc,
    /// Data stored inside the inode (ext4 `inline_data`).
    Inline,
    /// Data packed in a tail block shared with other files.
    Tail,
    /// Not block-aligned on the device, or not aligned to the file system block size.
    NotAligned,
    /// Compressed or otherwise encoded.
    Encoded,
    /// Encrypted (fscrypt): the device holds ciphertext.
    Encrypted,
    /// Shared with another file (reflink): a copy-on-write would move it without touching this
    /// file's write state.
    Shared,
    /// The file system does not know where the data is.
    UnknownLocation,
    /// A flag this code does not know.
    UnknownFlags,
}

impl std::fmt::Display for ExtentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Unwritten => "unwritten (preallocated, never written)",
            Self::Delalloc => "delayed-allocation (no blocks yet)",
            Self::Inline => "inline data (stored in the inode)",
            Self::Tail => "a packed tail",
            Self::NotAligned => "not block-aligned",
            Self::Encoded => "encoded (compressed)",
            Self::Encrypted => "encrypted",
            Self::Shared => "shared with another file (reflink)",
            Self::UnknownLocation => "at an unknown location",
            Self::UnknownFlags => "flagged with flags this code does not know",
        })
    }
}

/// The problem with an extent's flags, if any. Inline data also sets NOT_ALIGNED; it is named
/// as inline because that is the cause.
fn flag_problem(flags: u32) -> Option<ExtentProblem> {
    let checks = [
        (FIEMAP_EXTENT_UNKNOWN, ExtentProblem::UnknownLocation),
        (FIEMAP_EXTENT_DELALLOC, ExtentProblem::Delalloc),
        (FIEMAP_EXTENT_DATA_INLINE, ExtentProblem::Inline),
        (FIEMAP_EXTENT_DATA_TAIL, ExtentProblem::Tail),
        (FIEMAP_EXTENT_ENCODED, ExtentProblem::Encoded),
        (FIEMAP_EXTENT_DATA_ENCRYPTED, ExtentProblem::Encrypted),
        (FIEMAP_EXTENT_NOT_ALIGNED, ExtentProblem::NotAligned),
        (FIEMAP_EXTENT_UNWRITTEN, ExtentProblem::Unwritten),
        (FIEMAP_EXTENT_SHARED, ExtentProblem::Shared),
    ];
    let known = checks.iter().fold(HARMLESS_FLAGS, |acc, (bit, _)| acc | bit);
    checks
        .iter()
        .find(|(bit, _)| flags & bit != 0)
        .map(|&(_, p)| p)
        .or((flags & !known != 0).then_some(ExtentProblem::UnknownFlags))
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct FiemapExtentC {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
#[derive(Debug)]
struct FiemapRequest {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtentC; FIEMAP_BATCH],
}

const _: () = assert!(std::mem::size_of::<FiemapExtentC>() == 56);
const _: () = assert!(std::mem::size_of::<FiemapRequest>() == 32 + 56 * FIEMAP_BATCH);

/// One extent as FIEMAP reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawExtent {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
    pub flags: u32,
}

/// All extents overlapping `[0, size)`, in the order FIEMAP returns them (ascending).
pub(crate) fn read_extents(file: &File, size: u64) -> Result<Vec<RawExtent>, DigestError> {
    let mut out = Vec::new();
    let mut req = Box::new(FiemapRequest {
        fm_start: 0,
        fm_length: 0,
        fm_flags: 0,
        fm_mapped_extents: 0,
        fm_extent_count: 0,
        fm_reserved: 0,
        fm_extents: [FiemapExtentC::default(); FIEMAP_BATCH],
    });
    let mut start = 0u64;
    let mut first = true;
    while start < size {
        req.fm_start = start;
        req.fm_length = size - start;
        // Flushing once is enough: later batches see the same, already written-back file.
        req.fm_flags = if first { FIEMAP_FLAG_SYNC } else { 0 };
        req.fm_extent_count = u32::try_from(FIEMAP_BATCH).expect("batch fits u32");
        req.fm_mapped_extents = 0;
        first = false;
        // SAFETY: `req` is a live, correctly laid out `struct fiemap` with room for
        // `fm_extent_count` extents; the kernel writes at most that many.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &raw mut *req) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EBADR) => {
                    DigestError::FiemapUnsupported { err }
                }
                _ => DigestError::Io { op: "FS_IOC_FIEMAP", err },
            });
        }
        let mapped = usize::try_from(req.fm_mapped_extents).unwrap_or(usize::MAX);
        if mapped == 0 {
            break; // the rest of the range is a hole; check_and_merge reports it
        }
        if mapped > FIEMAP_BATCH {
            return Err(DigestError::InconsistentExtents {
                offset: start,
                what: "FIEMAP reported more extents than the buffer holds",
            });
        }
        let mut last = false;
        for e in &req.fm_extents[..mapped] {
            out.push(RawExtent {
                logical: e.fe_logical,
                physical: e.fe_physical,
                len: e.fe_length,
                flags: e.fe_flags,
            });
            last |= e.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        if out.len() > MAX_DIGEST_EXTENTS {
            return Err(DigestError::TooManyExtents { limit: MAX_DIGEST_EXTENTS });
        }
        let tail = out.last().expect("mapped > 0");
        let next = tail.logical.saturating_add(tail.len);
        if last {
            break;
        }
        if next <= start {
            return Err(DigestError::InconsistentExtents {
                offset: start,
                what: "FIEMAP made no progress",
            });
        }
        start = next;
    }
    Ok(out)
}

/// Check every extent overlapping `[0, size)` and merge physically adjacent ones into runs.
/// Extents wholly at or past `size` (post-EOF preallocation) are ignored: `map` never reaches
/// them.
pub(crate) fn check_and_merge(
    raw: &[RawExtent],
    size: u64,
    fs_block_size: u64,
) -> Result<Vec<Extent>, DigestError> {
    assert!(fs_block_size > 0, "fs block size is positive");
    let mut runs: Vec<Extent> = Vec::new();
    let mut cursor = 0u64; // every byte below `cursor` is covered by `runs`
    for e in raw {
        if cursor >= size || e.logical >= size {
            break;
        }
        let refuse = |problem| DigestError::RefusedExtent {
            logical: e.logical,
            physical: e.physical,
            len: e.len,
            flags: e.flags,
            problem,
        };
        if let Some(problem) = flag_problem(e.flags) {
            return Err(refuse(problem));
        }
        if e.len == 0 || e.logical.checked_add(e.len).is_none() {
            return Err(DigestError::InconsistentExtents { offset: e.logical, what: "bad length" });
        }
        if e.physical.checked_add(e.len).is_none() {
            return Err(DigestError::InconsistentExtents {
                offset: e.logical,
                what: "device range overflows",
            });
        }
        if e.logical < cursor {
            return Err(DigestError::InconsistentExtents {
                offset: e.logical,
                what: "extents overlap or are out of order",
            });
        }
        if e.logical > cursor {
            return Err(DigestError::Hole { offset: cursor, len: e.logical - cursor });
        }
        // Aligned ends on both sides keep any device window rounded to a divisor of the block
        // size inside this file's own blocks.
        if !(e.logical | e.physical | e.len).is_multiple_of(fs_block_size) {
            return Err(refuse(ExtentProblem::NotAligned));
        }
        match runs.last_mut() {
            Some(r) if r.physical + r.len == e.physical => r.len += e.len,
            _ => runs.push(Extent { logical: e.logical, physical: e.physical, len: e.len }),
        }
        cursor = e.logical + e.len;
    }
    if cursor < size {
        return Err(DigestError::Hole { offset: cursor, len: size - cursor });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(logical: u64, physical: u64, len: u64, flags: u32) -> RawExtent {
        RawExtent { logical, physical, len, flags }
    }

    #[test]
    fn merges_physically_adjacent_extents_only() {
        let runs = check_and_merge(
            &[x(0, 40960, 4096, 0), x(4096, 45056, 8192, 0), x(12288, 4096, 4096, 1)],
            16000,
            4096,
        )
        .unwrap();
        assert_eq!(
            runs,
            vec![
                Extent { logical: 0, physical: 40960, len: 12288 },
                Extent { logical: 12288, physical: 4096, len: 4096 }
            ]
        );
    }

    #[test]
    fn refuses_holes_flags_overlap_and_misalignment() {
        let e = check_and_merge(&[x(0, 0, 4096, 0), x(8192, 8192, 4096, 1)], 12288, 4096);
        assert!(matches!(e, Err(DigestError::Hole { offset: 4096, len: 4096 })), "{e:?}");
        let e = check_and_merge(&[x(0, 0, 4096, 0)], 12288, 4096);
        assert!(matches!(e, Err(DigestError::Hole { offset: 4096, len: 8192 })), "{e:?}");
        let e = check_and_merge(&[x(0, 0, 4096, FIEMAP_EXTENT_UNWRITTEN | 1)], 100, 4096);
        assert!(matches!(
            e,
            Err(DigestError::RefusedExtent { problem: ExtentProblem::Unwritten, .. })
        ));
        let e = check_and_merge(
            &[x(0, 0, 60, FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_NOT_ALIGNED | 1)],
            60,
            4096,
        );
        assert!(matches!(
            e,
            Err(DigestError::RefusedExtent { problem: ExtentProblem::Inline, .. })
        ));
        let e = check_and_merge(&[x(0, 0, 4096, 0x8000_0000)], 100, 4096);
        assert!(matches!(
            e,
            Err(DigestError::RefusedExtent { problem: ExtentProblem::UnknownFlags, .. })
        ));
        let e = check_and_merge(&[x(0, 0, 8192, 0), x(4096, 0, 4096, 0)], 12288, 4096);
        assert!(matches!(e, Err(DigestError::InconsistentExtents { offset: 4096, .. })));
        let e = check_and_merge(&[x(0, 512, 4096, 0)], 100, 4096);
        assert!(matches!(
            e,
            Err(DigestError::RefusedExtent { problem: ExtentProblem::NotAligned, .. })
        ));
        // A refused extent wholly past EOF (post-EOF preallocation) is ignored.
        let runs = check_and_merge(
            &[x(0, 0, 4096, 0), x(4096, 0, 4096, FIEMAP_EXTENT_UNWRITTEN)],
            10,
            4096,
        )
        .unwrap();
        assert_eq!(runs.len(), 1);
    }
}
