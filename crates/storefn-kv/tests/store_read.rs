//! `Store::read_block` on an O_DIRECT file: reads the device cannot take as asked (unaligned
//! offsets and lengths, unaligned buffers) are widened to its logical block and return exactly
//! the requested bytes; a range past the end of the file is an error naming the offset.
// Regression: `kv bench --path read` failed with EINVAL on 512 B-node databases on devices with
// 4 KiB logical blocks (zram), because O_DIRECT refused the 512 B reads.

mod common;

use common::TempDir;
use storefn_kv::{create_bpfkv, NodeSize, Store};

#[test]
fn unaligned_reads_are_widened_and_exact() {
    let dir = TempDir::new("store-read");
    let db = dir.join("db");
    create_bpfkv(&db, NodeSize::B512, 2, &mut common::noop()).unwrap();
    let want = common::file_bytes(&db);
    let store = Store::open(&db, 0).unwrap();
    if !store.is_direct() {
        println!("skipped: the temp dir's file system refuses O_DIRECT");
        return;
    }
    assert!(store.dio_align().is_power_of_two(), "{}", store.dio_align());
    let end = want.len() as u64;
    let mut big = vec![0u8; 9000];
    for (offset, len) in [(0u64, 512usize), (100, 64), (4096 - 8, 16), (512, 4096), (end - 64, 64)]
    {
        // An unaligned destination too: a slice one byte into a Vec.
        let buf = &mut big[1..=len];
        store.read_block(buf, offset).unwrap();
        let o = usize::try_from(offset).unwrap();
        assert_eq!(buf, &want[o..o + len], "offset {offset} len {len}");
    }
    let e = store.read_block(&mut big[..64], end - 32).unwrap_err().to_string();
    assert!(e.contains(&format!("offset {}", end - 32)), "{e}");
}
