//! No allocation per call in the steady state of `storefn_read_xrp` (and `_file`), measured
//! through the C entry points with a counting global allocator.

mod common;

use std::os::fd::AsRawFd;

use storefn::{
    storefn_engine_free, storefn_engine_new, storefn_engine_register, storefn_prog_free,
    storefn_prog_load, storefn_read_xrp, storefn_read_xrp_file, Status,
};
use storefn_testkit::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const SG_BYTES: usize = 2368;
const SG_OFF_VALUES: usize = 288;

fn query(s: &mut [u8; SG_BYTES], key: u64) {
    s.fill(0);
    s[24..28].copy_from_slice(&1i32.to_le_bytes());
    s[32..40].copy_from_slice(&key.to_le_bytes());
}

#[test]
fn read_xrp_allocates_nothing_per_call() {
    let t = common::TempDir::new("alloc");
    let db = t.join("db");
    common::kv_db(&db);
    let file = std::fs::File::open(&db).unwrap();
    let fd = file.as_raw_fd();
    let elf = storefn_progs::must("bpfkv_get");
    let (mut prog, mut eng) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid pointers for every argument; the handles are freed below.
    unsafe {
        assert_eq!(
            storefn_prog_load(elf.as_ptr(), elf.len(), std::ptr::null(), 0, &raw mut prog),
            Status::Ok
        );
        assert_eq!(storefn_engine_new(std::ptr::null(), &raw mut eng), Status::Ok);
    }
    let mut scratch = [0u8; SG_BYTES];
    let mut buf = [0u8; 512];
    let mut reg = 0u32;
    // SAFETY: as above.
    assert_eq!(unsafe { storefn_engine_register(eng, fd, &raw mut reg) }, Status::Ok);
    let mut call = |key: u64, by_fd: bool| {
        query(&mut scratch, key);
        // SAFETY: live handles, buffers of the stated lengths.
        let s = unsafe {
            if by_fd {
                storefn_read_xrp(
                    eng,
                    fd,
                    buf.as_mut_ptr(),
                    512,
                    0,
                    prog,
                    scratch.as_mut_ptr(),
                    SG_BYTES,
                    std::ptr::null_mut(),
                )
            } else {
                storefn_read_xrp_file(
                    eng,
                    reg,
                    buf.as_mut_ptr(),
                    512,
                    0,
                    prog,
                    scratch.as_mut_ptr(),
                    SG_BYTES,
                    std::ptr::null_mut(),
                )
            }
        };
        assert_eq!(s, Status::Ok);
        assert_eq!(scratch[SG_OFF_VALUES], 1, "key {key} found");
    };
    // Warm-up: the program is compiled for the engine, the file registered.
    for k in 0..16 {
        call(k, true);
        call(k, false);
    }
    let before = CountingAlloc::thread_allocs();
    for k in 0..500 {
        call(k, true);
        call(k, false);
    }
    let allocs = CountingAlloc::thread_allocs() - before;
    // SAFETY: handles from above, freed once.
    unsafe {
        storefn_engine_free(eng);
        storefn_prog_free(prog);
    }
    assert_eq!(allocs, 0, "{allocs} allocations over 1000 calls");
}
