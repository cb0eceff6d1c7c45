//! The BPF-KV on-disk format (docs/FORMAT.md, "BPF-KV") and storefn's sidecar ("sidecar").
//!
//! Every offset here is a named constant; `tests/format_doc.rs` checks them against the tables
//! in docs/FORMAT.md.

use std::path::{Path, PathBuf};

use crate::limits::SCRATCH_BYTES;
use crate::KvError;

/// Bit 63 of a pointer stored on disk: "this is a file offset" (BPF-KV's `FILE_MASK`). The cache
/// of top levels rewrites cached children to memory indices with this bit clear.
pub const FILE_MASK: u64 = 1 << 63;
/// `type` of an internal node.
pub const NODE_TYPE_INTERNAL: u64 = 0;
/// `type` of a leaf node.
pub const NODE_TYPE_LEAF: u64 = 1;
/// Byte offset of `u64 next` in a node: offset of the next node on the same level, 0 at level end.
pub const NODE_OFF_NEXT: usize = 0;
/// Byte offset of `u64 type` in a node.
pub const NODE_OFF_TYPE: usize = 8;
/// Byte offset of `u64 key[F]` in a node (F = fan-out).
pub const NODE_OFF_KEYS: usize = 16;
/// Bytes of a key and of a pointer.
pub const KEY_BYTES: usize = 8;
pub const PTR_BYTES: usize = 8;
/// Bytes of one value in the value log (BPF-KV's `val__t`).
pub const VALUE_BYTES: usize = 64;
/// Key stored in unused slots of a partial node: keeps the lookup rule correct (docs/FORMAT.md).
pub const UNUSED_KEY: u64 = u64::MAX;
/// Pointer stored in unused leaf slots: bit 63 clear, so a slot is a hit only if its pointer is
/// a file pointer.
pub const UNUSED_LEAF_PTR: u64 = 0;

/// Node size variants: BPF-KV's 512 B nodes, and 4096 B nodes for 4 KiB-block devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeSize {
    B512,
    B4096,
}

impl NodeSize {
    /// Node bytes.
    #[must_use]
    pub const fn bytes(self) -> usize {
        match self {
            NodeSize::B512 => 512,
            NodeSize::B4096 => 4096,
        }
    }

    /// Keys (and pointers) per node: (bytes - 16) / 16 = 31 or 255.
    #[must_use]
    pub const fn fanout(self) -> usize {
        (self.bytes() - NODE_OFF_KEYS) / (KEY_BYTES + PTR_BYTES)
    }

    /// Byte offset of `u64 ptr[F]`.
    #[must_use]
    pub const fn off_ptrs(self) -> usize {
        NODE_OFF_KEYS + self.fanout() * KEY_BYTES
    }

    /// The variant for a node size in bytes, if it is one.
    #[must_use]
    pub fn from_bytes(bytes: u64) -> Option<NodeSize> {
        match bytes {
            512 => Some(NodeSize::B512),
            4096 => Some(NodeSize::B4096),
            _ => None,
        }
    }
}

const _: () = {
    assert!(NodeSize::B512.fanout() == 31);
    assert!(NodeSize::B512.off_ptrs() + 31 * PTR_BYTES == 512);
    assert!(NodeSize::B4096.fanout() == 255);
    assert!(NodeSize::B4096.off_ptrs() + 255 * PTR_BYTES == 4096);
};

/// Read-only view of one node's bytes.
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub bytes: &'a [u8],
    pub size: NodeSize,
}

fn rd(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8-byte slice"))
}

fn wr(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

impl<'a> NodeView<'a> {
    /// # Panics
    /// If `bytes` is not exactly one node (a caller bug, not bad input).
    #[must_use]
    pub fn new(bytes: &'a [u8], size: NodeSize) -> Self {
        assert_eq!(bytes.len(), size.bytes(), "node view of the wrong length");
        Self { bytes, size }
    }
    #[must_use]
    pub fn next(&self) -> u64 {
        rd(self.bytes, NODE_OFF_NEXT)
    }
    #[must_use]
    pub fn node_type(&self) -> u64 {
        rd(self.bytes, NODE_OFF_TYPE)
    }
    #[must_use]
    pub fn key(&self, i: usize) -> u64 {
        rd(self.bytes, NODE_OFF_KEYS + i * KEY_BYTES)
    }
    #[must_use]
    pub fn ptr(&self, i: usize) -> u64 {
        rd(self.bytes, self.size.off_ptrs() + i * PTR_BYTES)
    }

    /// BPF-KV's child rule: `ptr[i-1]` for the first `i >= 1` with `key < key[i]`, else the last.
    #[must_use]
    pub fn child_ptr(&self, key: u64) -> u64 {
        let f = self.size.fanout();
        (1..f).find(|&i| key < self.key(i)).map_or_else(|| self.ptr(f - 1), |i| self.ptr(i - 1))
    }

    /// The value pointer of `key` in a leaf: the first slot whose key matches, if its pointer is a
    /// file pointer (unused slots hold `UNUSED_LEAF_PTR`).
    #[must_use]
    pub fn leaf_value_ptr(&self, key: u64) -> Option<u64> {
        let i = (0..self.size.fanout()).find(|&i| self.key(i) == key)?;
        let p = self.ptr(i);
        (p & FILE_MASK != 0).then_some(p)
    }
}

/// Writes node fields into a node-sized buffer.
pub fn put_node_header(buf: &mut [u8], next: u64, node_type: u64) {
    wr(buf, NODE_OFF_NEXT, next);
    wr(buf, NODE_OFF_TYPE, node_type);
}

/// Writes slot `i`'s key and pointer.
pub fn put_slot(buf: &mut [u8], size: NodeSize, i: usize, key: u64, ptr: u64) {
    debug_assert!(i < size.fanout());
    wr(buf, NODE_OFF_KEYS + i * KEY_BYTES, key);
    wr(buf, size.off_ptrs() + i * PTR_BYTES, ptr);
}

/// Overwrites slot `i`'s pointer (used when the cache rewrites pointers to memory indices).
pub fn put_ptr(buf: &mut [u8], size: NodeSize, i: usize, ptr: u64) {
    wr(buf, size.off_ptrs() + i * PTR_BYTES, ptr);
}

/// BPF-KV's value for `key`: `sprintf("%63lu", key)`, right-aligned decimal then a NUL.
#[must_use]
pub fn bpfkv_value(key: u64) -> [u8; VALUE_BYTES] {
    let mut v = [b' '; VALUE_BYTES];
    v[VALUE_BYTES - 1] = 0;
    let mut n = key;
    let mut i = VALUE_BYTES - 1;
    loop {
        i -= 1;
        v[i] = b'0' + u8::try_from(n % 10).expect("digit");
        n /= 10;
        if n == 0 {
            break;
        }
    }
    v
}

/// The value as text: bytes up to the first NUL (BPF-KV values are C strings).
#[must_use]
pub fn value_text(v: &[u8; VALUE_BYTES]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(VALUE_BYTES);
    String::from_utf8_lossy(&v[..end]).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Sidecar

/// First bytes of every sidecar.
pub const META_MAGIC: [u8; 8] = *b"SFKVMETA";
/// Sidecar format version this code writes and reads.
pub const META_VERSION: u32 = 1;
/// Total sidecar bytes.
pub const META_BYTES: usize = 64;
pub const META_OFF_MAGIC: usize = 0;
pub const META_OFF_VERSION: usize = 8;
pub const META_OFF_NODE_SIZE: usize = 12;
pub const META_OFF_LAYERS: usize = 16;
pub const META_OFF_FANOUT: usize = 20;
pub const META_OFF_KEY_COUNT: usize = 24;
pub const META_OFF_TOTAL_NODES: usize = 32;
pub const META_OFF_VALUE_LOG: usize = 40;
pub const META_OFF_FILE_BYTES: usize = 48;
/// FNV-1a 64 over bytes 0..56.
pub const META_OFF_CHECKSUM: usize = 56;
/// Suffix appended to the database path to name its sidecar (`DB` -> `DB.meta`).
pub const META_SUFFIX: &str = ".meta";

/// The sidecar path of a database file.
#[must_use]
pub fn meta_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(META_SUFFIX);
    PathBuf::from(s)
}

/// FNV-1a, 64 bit: enough to catch torn or edited sidecars (not an integrity MAC).
#[must_use]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A database's shape: everything needed to find any node or value without a header in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub node_size: NodeSize,
    pub layers: u32,
    pub key_count: u64,
    pub total_nodes: u64,
    pub value_log_offset: u64,
    pub file_bytes: u64,
}

impl Meta {
    /// The tree shape for `key_count` sorted entries: level counts are `ceil(n / F^h)` from the
    /// leaves (height 1) up to a single root; the value log is padded to a whole node.
    ///
    /// # Errors
    /// If the file would exceed u64 offsets.
    pub fn plan(node_size: NodeSize, key_count: u64) -> Result<Meta, KvError> {
        let counts = level_counts(node_size, key_count);
        let total_nodes: u64 = counts.iter().sum();
        let nb = node_size.bytes() as u64;
        let too_large =
            || KvError::TooLarge { what: "key count", value: key_count, limit: u64::MAX / 128 };
        let value_log_offset = total_nodes.checked_mul(nb).ok_or_else(too_large)?;
        let log_bytes = key_count
            .checked_mul(VALUE_BYTES as u64)
            .and_then(|b| b.checked_next_multiple_of(nb))
            .ok_or_else(too_large)?;
        let file_bytes = value_log_offset.checked_add(log_bytes).ok_or_else(too_large)?;
        if file_bytes & FILE_MASK != 0 {
            return Err(too_large());
        }
        Ok(Meta {
            node_size,
            layers: u32::try_from(counts.len()).expect("few levels"),
            key_count,
            total_nodes,
            value_log_offset,
            file_bytes,
        })
    }

    /// Nodes per level, root first.
    #[must_use]
    pub fn level_counts(&self) -> Vec<u64> {
        level_counts(self.node_size, self.key_count)
    }

    /// Node index of each level's first node, root first (multiply by node bytes for offsets).
    #[must_use]
    pub fn level_starts(&self) -> Vec<u64> {
        let mut acc = 0;
        self.level_counts()
            .iter()
            .map(|c| {
                let s = acc;
                acc += c;
                s
            })
            .collect()
    }

    /// Value-log slots including padding.
    #[must_use]
    pub fn value_slots(&self) -> u64 {
        (self.file_bytes - self.value_log_offset) / VALUE_BYTES as u64
    }

    /// The sidecar bytes.
    #[must_use]
    pub fn encode(&self) -> [u8; META_BYTES] {
        let mut b = [0u8; META_BYTES];
        b[META_OFF_MAGIC..META_OFF_MAGIC + 8].copy_from_slice(&META_MAGIC);
        b[META_OFF_VERSION..META_OFF_VERSION + 4].copy_from_slice(&META_VERSION.to_le_bytes());
        let ns = u32::try_from(self.node_size.bytes()).expect("node size fits");
        b[META_OFF_NODE_SIZE..META_OFF_NODE_SIZE + 4].copy_from_slice(&ns.to_le_bytes());
        b[META_OFF_LAYERS..META_OFF_LAYERS + 4].copy_from_slice(&self.layers.to_le_bytes());
        let f = u32::try_from(self.node_size.fanout()).expect("fanout fits");
        b[META_OFF_FANOUT..META_OFF_FANOUT + 4].copy_from_slice(&f.to_le_bytes());
        wr(&mut b, META_OFF_KEY_COUNT, self.key_count);
        wr(&mut b, META_OFF_TOTAL_NODES, self.total_nodes);
        wr(&mut b, META_OFF_VALUE_LOG, self.value_log_offset);
        wr(&mut b, META_OFF_FILE_BYTES, self.file_bytes);
        let sum = fnv1a64(&b[..META_OFF_CHECKSUM]);
        wr(&mut b, META_OFF_CHECKSUM, sum);
        b
    }

    /// Parses and cross-checks sidecar bytes; `path` names the sidecar in errors.
    ///
    /// # Errors
    /// `MetaCorrupt` naming the first field that is wrong.
    pub fn decode(b: &[u8], path: &Path) -> Result<Meta, KvError> {
        let bad = |reason: String| KvError::MetaCorrupt { path: path.to_path_buf(), reason };
        if b.len() != META_BYTES {
            return Err(bad(format!("{} bytes, expected {META_BYTES}", b.len())));
        }
        if b[..8] != META_MAGIC {
            return Err(bad(format!("bad magic {:02x?} at offset 0", &b[..8])));
        }
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let sum = fnv1a64(&b[..META_OFF_CHECKSUM]);
        if rd(b, META_OFF_CHECKSUM) != sum {
            return Err(bad(format!(
                "checksum at offset {META_OFF_CHECKSUM} is {:#x}, bytes hash to {sum:#x}",
                rd(b, META_OFF_CHECKSUM)
            )));
        }
        let version = u32at(META_OFF_VERSION);
        if version != META_VERSION {
            return Err(bad(format!("version {version}, this build reads {META_VERSION}")));
        }
        let ns = u32at(META_OFF_NODE_SIZE);
        let node_size = NodeSize::from_bytes(u64::from(ns))
            .ok_or_else(|| bad(format!("node size {ns} at offset 12 (512 or 4096)")))?;
        let key_count = rd(b, META_OFF_KEY_COUNT);
        let want = Meta::plan(node_size, key_count).map_err(|e| bad(e.to_string()))?;
        let got = Meta {
            node_size,
            layers: u32at(META_OFF_LAYERS),
            key_count,
            total_nodes: rd(b, META_OFF_TOTAL_NODES),
            value_log_offset: rd(b, META_OFF_VALUE_LOG),
            file_bytes: rd(b, META_OFF_FILE_BYTES),
        };
        if u32at(META_OFF_FANOUT) as usize != node_size.fanout() {
            return Err(bad(format!("fan-out {} for {ns} B nodes", u32at(META_OFF_FANOUT))));
        }
        if got != want {
            return Err(bad(format!("fields {got:?} disagree with the shape of {key_count} keys")));
        }
        Ok(got)
    }
}

fn level_counts(node_size: NodeSize, key_count: u64) -> Vec<u64> {
    let f = node_size.fanout() as u64;
    let mut counts = vec![key_count.div_ceil(f).max(1)];
    while *counts.last().expect("non-empty") > 1 {
        let c = counts.last().expect("non-empty").div_ceil(f);
        counts.push(c);
    }
    counts.reverse();
    counts
}

// ---------------------------------------------------------------------------------------------
// Scratch ABIs of the storage functions (docs/FORMAT.md; progs/include/bpfkv.h mirrors them).

/// Lookup scratch: u64 key (set by the application).
pub const LOOKUP_OFF_KEY: usize = 0;
/// Lookup scratch: u8 found (set by the program).
pub const LOOKUP_OFF_FOUND: usize = 8;
/// Lookup scratch: the 64-byte value (set by the program).
pub const LOOKUP_OFF_VALUE: usize = 9;
/// Lookup scratch: program-private state, zeroed before each call.
pub const LOOKUP_OFF_STATE: usize = 128;

/// Range scratch fields (512 B nodes).
pub const RANGE_OFF_BEGIN: usize = 0;
pub const RANGE_OFF_END: usize = 8;
pub const RANGE_OFF_AGG: usize = 16;
pub const RANGE_OFF_FLAGS: usize = 20;
pub const RANGE_OFF_LEAF: usize = 24;
pub const RANGE_OFF_INDEX: usize = 32;
pub const RANGE_OFF_COUNT: usize = 36;
pub const RANGE_OFF_AGG_VALUE: usize = 40;
pub const RANGE_OFF_AGG_N: usize = 48;
pub const RANGE_OFF_RESULTS: usize = 64;
/// One range result: u64 key then the value.
pub const RANGE_RESULT_BYTES: usize = 8 + VALUE_BYTES;
pub const RANGE_OFF_LEAF_COPY: usize = RANGE_OFF_RESULTS + 32 * RANGE_RESULT_BYTES;
pub const RANGE_OFF_PHASE: usize = RANGE_OFF_LEAF_COPY + 512;
/// `flags` bit: the range is exhausted.
pub const RANGE_FLAG_DONE: u32 = 1;
/// `flags` bit: `leaf`/`index` hold a valid resume point.
pub const RANGE_FLAG_RESUME: u32 = 2;

const _: () = {
    assert!(LOOKUP_OFF_VALUE + VALUE_BYTES <= LOOKUP_OFF_STATE);
    assert!(RANGE_OFF_LEAF_COPY == 2368);
    assert!(RANGE_OFF_PHASE + 4 <= SCRATCH_BYTES);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpfkv_shapes_match_the_brief() {
        for layers in 1..=6u32 {
            let m = Meta::plan(NodeSize::B512, 31u64.pow(layers)).unwrap();
            assert_eq!(m.layers, layers);
            let counts = m.level_counts();
            for (i, c) in counts.iter().enumerate() {
                assert_eq!(*c, 31u64.pow(u32::try_from(i).unwrap()));
            }
        }
        // 3 layers: 993 nodes, 29791 values padded to 29792 (whole 512 B blocks).
        let m = Meta::plan(NodeSize::B512, 29791).unwrap();
        assert_eq!(m.total_nodes, 993);
        assert_eq!(m.file_bytes, 993 * 512 + 29792 * 64);
    }

    #[test]
    fn value_is_sprintf_63lu() {
        let v = bpfkv_value(1234);
        assert_eq!(&v[59..64], b"1234\0");
        assert!(v[..59].iter().all(|&b| b == b' '));
        assert_eq!(value_text(&bpfkv_value(u64::MAX)).trim_start(), u64::MAX.to_string());
    }

    #[test]
    fn meta_round_trips_and_rejects_each_corruption() {
        let m = Meta::plan(NodeSize::B4096, 1000).unwrap();
        let b = m.encode();
        let p = Path::new("x.meta");
        assert_eq!(Meta::decode(&b, p).unwrap(), m);
        for i in 0..META_BYTES {
            let mut c = b;
            c[i] ^= 0x40;
            assert!(Meta::decode(&c, p).is_err(), "flip at byte {i} accepted");
        }
        assert!(Meta::decode(&b[..60], p).is_err());
    }
}
