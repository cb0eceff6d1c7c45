//! `storefn_read_xrp` through its C entry point: XRP's `buf` holds the last block read, and a
//! descriptor number closed and reused for another file reads the new file, not the old one.

mod common;

use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::FileExt;

use storefn::{
    storefn_engine_free, storefn_engine_new, storefn_prog_free, storefn_prog_load,
    storefn_read_xrp, Status,
};

const SG_BYTES: usize = 2368;
const SG_OFF_VALUES: usize = 288;

struct Handles {
    prog: *mut storefn::Prog,
    eng: *mut storefn::Engine,
}

impl Handles {
    fn new() -> Self {
        let elf = storefn_progs::must("bpfkv_get");
        let (mut prog, mut eng) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers; freed in Drop.
        unsafe {
            assert_eq!(
                storefn_prog_load(elf.as_ptr(), elf.len(), std::ptr::null(), 0, &raw mut prog),
                Status::Ok
            );
            assert_eq!(storefn_engine_new(std::ptr::null(), &raw mut eng), Status::Ok);
        }
        Self { prog, eng }
    }

    /// One get of `key` on `fd`: (found, the value bytes, buf after the call).
    fn get(&self, fd: i32, key: u64) -> (bool, Vec<u8>, [u8; 512]) {
        let mut s = [0u8; SG_BYTES];
        s[24..28].copy_from_slice(&1i32.to_le_bytes());
        s[32..40].copy_from_slice(&key.to_le_bytes());
        let mut buf = [0u8; 512];
        // SAFETY: live handles; buffers of the stated lengths.
        let st = unsafe {
            storefn_read_xrp(
                self.eng,
                fd,
                buf.as_mut_ptr(),
                512,
                0,
                self.prog,
                s.as_mut_ptr(),
                SG_BYTES,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(st, Status::Ok);
        (s[SG_OFF_VALUES] == 1, s[SG_OFF_VALUES + 1..SG_OFF_VALUES + 65].to_vec(), buf)
    }
}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: from new(), freed once.
        unsafe {
            storefn_engine_free(self.eng);
            storefn_prog_free(self.prog);
        }
    }
}

#[test]
fn buf_holds_the_last_block_read() {
    let t = common::TempDir::new("lastblock");
    let db = t.join("db");
    common::kv_db(&db);
    let f = std::fs::File::open(&db).unwrap();
    let h = Handles::new();
    for key in [0u64, 77, 960] {
        let (found, value, buf) = h.get(f.as_raw_fd(), key);
        assert!(found);
        assert_eq!(value, format!("{key:>63}\0").into_bytes());
        // The last hop read the 512 B block holding the value: the value is in it, and the
        // block is the file's bytes there.
        let at = buf.windows(64).position(|w| w == value.as_slice()).expect("value in buf");
        let mut want = [0u8; 512];
        let total_nodes = 1 + 31;
        let value_off = total_nodes * 512 + key * 64;
        f.read_exact_at(&mut want, value_off & !511).unwrap();
        assert_eq!(buf, want, "key {key}");
        assert_eq!(at as u64, value_off & 511);
    }
}

#[test]
fn a_reused_descriptor_number_reads_the_new_file() {
    // Regression guard: an engine that kept the registration of a closed descriptor would
    // answer from the old file when the number is reused.
    let t = common::TempDir::new("fdreuse");
    let (big, small) = (t.join("big"), t.join("small"));
    common::kv_db(&big); // keys 0..961
    storefn_kv::create_bpfkv(&small, storefn_kv::NodeSize::B512, 1, &mut |_, _| {}).unwrap(); // keys 0..31
    let h = Handles::new();
    let fd = std::fs::File::open(&big).unwrap().into_raw_fd();
    assert!(h.get(fd, 500).0, "key 500 is in the 2-level store");
    let f2 = std::fs::File::open(&small).unwrap();
    // The number now names the small file: dup2 closes the big one and reuses its number in
    // one step (closing it and opening again relied on getting the lowest free number back,
    // which another test thread closing its own file could take first).
    // SAFETY: `fd` is ours (into_raw_fd); dup2 replaces it atomically, and the new
    // descriptor at `fd` is closed once below.
    assert_eq!(unsafe { libc::dup2(f2.as_raw_fd(), fd) }, fd, "dup2");
    assert!(!h.get(fd, 500).0, "key 500 is not in the 1-level store");
    assert!(h.get(fd, 30).0);
    // SAFETY: the descriptor dup2 made, ours, closed once.
    unsafe { libc::close(fd) };
}
