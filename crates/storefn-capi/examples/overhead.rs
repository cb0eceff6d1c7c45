//! What the C API adds to `read_xrp`: the same BPF-KV get chain (bpfkv_get, one key, 512 B
//! nodes, a 2-level store whose blocks are in the page cache) through
//! `storefn_io::Engine::read_xrp` from Rust, through `storefn_read_xrp_file` (a registered
//! file) and through `storefn_read_xrp` (a descriptor, checked with fstat on every call).
//! Each round runs the three (in a rotating order); each figure is the median over rounds of
//! ns per call, the added cost the median of the per-round differences.
//!
//!   cargo run --release -p storefn-capi --features bench --example overhead [-- ROUNDS CALLS]
//!
//! Prints one JSON object.

use std::os::fd::AsRawFd;
use std::time::Instant;

use storefn::{
    storefn_engine_free, storefn_engine_new, storefn_engine_register, storefn_prog_free,
    storefn_prog_load, storefn_read_xrp, storefn_read_xrp_file, Status,
};

const SG_BYTES: usize = 2368;
const KEY: u64 = 123;

fn query(s: &mut [u8; SG_BYTES]) {
    s[..40].fill(0);
    s[24..28].copy_from_slice(&1i32.to_le_bytes());
    s[32..40].copy_from_slice(&KEY.to_le_bytes());
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(calls: u32, mut f: impl FnMut()) -> f64 {
    let t0 = Instant::now();
    for _ in 0..calls {
        f();
    }
    t0.elapsed().as_nanos() as f64 / f64::from(calls)
}

fn main() {
    let args: Vec<u32> =
        std::env::args().skip(1).map(|a| a.parse().expect("ROUNDS CALLS")).collect();
    let rounds = args.first().copied().unwrap_or(21);
    let calls = args.get(1).copied().unwrap_or(20_000);
    let dir = std::env::temp_dir().join(format!("storefn-capi-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("db");
    storefn_kv::create_bpfkv(&db, storefn_kv::NodeSize::B512, 2, &mut |_, _| {}).unwrap();
    let file = std::fs::File::open(&db).unwrap();
    let elf = storefn_progs::must("bpfkv_get");

    // Rust: the io engine and an instance of the same program.
    let mut eng = storefn_io::Engine::new(storefn_io::EngineConfig::default()).unwrap();
    let id = eng.open(&db, storefn_io::IoMode::Buffered).unwrap();
    let verified = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Xrp).unwrap();
    let mut inst = storefn_vm::Instance::new(verified.clone(), storefn_vm::Engine::Jit).unwrap();
    // A second Rust engine: the control (two rings doing the same work differ by this much).
    let mut eng2 = storefn_io::Engine::new(storefn_io::EngineConfig::default()).unwrap();
    let id2 = eng2.open(&db, storefn_io::IoMode::Buffered).unwrap();
    let mut inst2 = storefn_vm::Instance::new(verified, storefn_vm::Engine::Jit).unwrap();

    // C: the same through the exported functions.
    let (mut prog, mut ceng, mut reg) = (std::ptr::null_mut(), std::ptr::null_mut(), 0u32);
    let fd = file.as_raw_fd();
    // SAFETY: valid out-pointers; the handles are freed at the end.
    unsafe {
        assert_eq!(
            storefn_prog_load(elf.as_ptr(), elf.len(), std::ptr::null(), 0, &raw mut prog),
            Status::Ok
        );
        assert_eq!(storefn_engine_new(std::ptr::null(), &raw mut ceng), Status::Ok);
        assert_eq!(storefn_engine_register(ceng, fd, &raw mut reg), Status::Ok);
    }
    let mut s = [0u8; SG_BYTES];
    let mut rust = || {
        query(&mut s);
        eng.read_xrp(id, 0, 512, &mut inst, &mut s).unwrap();
        assert_eq!(s[288], 1);
    };
    let mut s4 = [0u8; SG_BYTES];
    let mut rust2 = || {
        query(&mut s4);
        eng2.read_xrp(id2, 0, 512, &mut inst2, &mut s4).unwrap();
        assert_eq!(s4[288], 1);
    };
    let mut s2 = [0u8; SG_BYTES];
    let mut c_file = || {
        query(&mut s2);
        // SAFETY: live handles, a scratch of SG_BYTES.
        let r = unsafe {
            storefn_read_xrp_file(
                ceng,
                reg,
                std::ptr::null_mut(),
                512,
                0,
                prog,
                s2.as_mut_ptr(),
                SG_BYTES,
                std::ptr::null_mut(),
            )
        };
        assert!(r == Status::Ok && s2[288] == 1);
    };
    let mut s3 = [0u8; SG_BYTES];
    let mut c_fd = || {
        query(&mut s3);
        // SAFETY: as above.
        let r = unsafe {
            storefn_read_xrp(
                ceng,
                fd,
                std::ptr::null_mut(),
                512,
                0,
                prog,
                s3.as_mut_ptr(),
                SG_BYTES,
                std::ptr::null_mut(),
            )
        };
        assert!(r == Status::Ok && s3[288] == 1);
    };
    // Warm: blocks cached, code compiled, paths hot.
    time(2_000, &mut rust);
    time(2_000, &mut c_file);
    time(2_000, &mut c_fd);
    time(2_000, &mut rust2);
    let (mut r, mut cf, mut cd, mut df, mut dd) = (vec![], vec![], vec![], vec![], vec![]);
    let mut dc = vec![];
    for round in 0..rounds {
        // The order rotates so that drift within a round favours no variant.
        let (mut a, mut b, mut c, mut d) = (0.0, 0.0, 0.0, 0.0);
        for k in 0..4 {
            match (round + k) % 4 {
                0 => a = time(calls, &mut rust),
                1 => b = time(calls, &mut c_file),
                2 => c = time(calls, &mut c_fd),
                _ => d = time(calls, &mut rust2),
            }
        }
        dc.push(d - a);
        r.push(a);
        cf.push(b);
        cd.push(c);
        df.push(b - a);
        dd.push(c - a);
    }
    // SAFETY: handles from above, freed once.
    unsafe {
        storefn_engine_free(ceng);
        storefn_prog_free(prog);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{{\"bench\":\"capi_read_xrp_overhead\",\"chain\":\"bpfkv_get key {KEY}, 2 levels, 512 B nodes, 3 hops, page-cached file\",\"rounds\":{rounds},\"calls_per_round\":{calls},\"rust_ns\":{:.1},\"c_file_ns\":{:.1},\"c_fd_ns\":{:.1},\"added_file_ns\":{:.1},\"added_fd_ns\":{:.1},\"control_rust_vs_rust_ns\":{:.1}}}",
        median(&mut r),
        median(&mut cf),
        median(&mut cd),
        median(&mut df),
        median(&mut dd),
        median(&mut dc)
    );
}
