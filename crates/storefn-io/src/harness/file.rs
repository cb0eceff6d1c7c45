//! The bench's pointer file: node i's first u64 is the offset of a random node, its second i.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// splitmix64: the bench's deterministic generator (no dependency, identical across runs).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Bytes written per `write` while generating the file.
const WRITE_CHUNK_BYTES: u64 = 1 << 20;

/// Writes `size_bytes` of `node`-byte nodes and syncs them.
pub(super) fn make_file(path: &Path, size_bytes: u64, node: u64, seed: u64) -> std::io::Result<()> {
    let nodes = size_bytes / node;
    let mut rng = Rng(seed);
    let mut f = File::create(path)?;
    let chunk_nodes = WRITE_CHUNK_BYTES / node;
    let mut buf = vec![0u8; usize::try_from(chunk_nodes * node).expect("1 MiB fits")];
    let mut i = 0;
    while i < nodes {
        let n = chunk_nodes.min(nodes - i);
        for k in 0..n {
            let at = usize::try_from(k * node).expect("inside the 1 MiB buffer");
            buf[at..at + 8].copy_from_slice(&(rng.below(nodes) * node).to_le_bytes());
            buf[at + 8..at + 16].copy_from_slice(&(i + k).to_le_bytes());
        }
        f.write_all(&buf[..usize::try_from(n * node).expect("inside the 1 MiB buffer")])?;
        i += n;
    }
    f.sync_all()
}

/// The block device holding `path`, from /sys (e.g. "/dev/vda (virtio_blk)"), or "unknown".
#[must_use]
pub fn device_of(path: &Path) -> String {
    let Ok(meta) = std::fs::metadata(path) else { return "unknown".into() };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"));
    let name = uevent
        .ok()
        .and_then(|u| u.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_owned)))
        .unwrap_or_else(|| format!("{major}:{minor}"));
    let driver = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}/device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    match driver {
        Some(d) => format!("/dev/{name} ({d})"),
        None => format!("/dev/{name}"),
    }
}
