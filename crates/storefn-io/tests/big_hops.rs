//! Hops larger than XRP's 4 KiB window (an engine built with `hop_bytes` up to
//! `MAX_HOP_BYTES`): the function sees the hop's length in `data_len`, reads its last byte,
//! and nothing past it; the 4 KiB default refuses such hops with a typed error.

mod common;

use common::*;
use storefn_io::limits::{DEFAULT_HOP_BYTES, MAX_HOP_BYTES};
use storefn_io::{ChainError, Engine, EngineConfig, IoMode};
use storefn_vm::{load_verified, Engine as VmEngine, Instance, ProgType, VmError};

fn instances() -> Vec<Instance> {
    let prog = load_verified(storefn_progs::must("test/big_hops"), None, ProgType::Xrp).unwrap();
    [VmEngine::Interp, VmEngine::Jit]
        .into_iter()
        .map(|vm| Instance::new(prog.clone(), vm).unwrap())
        .collect()
}

/// Pages `(offset, size)`: 32 and 64 KiB, some at offsets that are not 4 KiB aligned. Each
/// links to the next; its last u64 is its offset + 1 (the marker the program sums).
fn pages() -> (Vec<u8>, Vec<(u64, u64)>) {
    let sizes = [32u64 << 10, 64 << 10, 64 << 10, 32 << 10, 64 << 10, 32 << 10];
    let mut at = 4096u64;
    let mut pages = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        pages.push((at, size));
        // Odd pages start 512 B past a 4 KiB boundary (the engine widens the read).
        at += size + if i % 2 == 0 { 512 + 4096 } else { 4096 - 512 };
    }
    let mut bytes = vec![0xeeu8; (at + 4096) as usize];
    for (i, &(off, size)) in pages.iter().enumerate() {
        let (next, next_size) = pages.get(i + 1).copied().unwrap_or((0, 0));
        let o = off as usize;
        put_u64(&mut bytes, o, next);
        put_u64(&mut bytes, o + 8, next_size);
        put_u64(&mut bytes, o + size as usize - 8, off + 1);
    }
    (bytes, pages)
}

fn big_engine(f: &TmpFile) -> (Engine, storefn_io::FileId) {
    engine_with(EngineConfig { hop_bytes: MAX_HOP_BYTES, ..EngineConfig::default() }, f)
}

#[test]
fn hops_of_32_and_64_kib_see_their_length_and_last_byte() {
    let (bytes, pages) = pages();
    let f = tmp_file("big-hops", &bytes);
    let (mut e, id) = big_engine(&f);
    let want: u64 = pages.iter().map(|p| p.0 + 1).sum();
    for mut inst in instances() {
        let mut s = [0u8; 48];
        put_u64(&mut s, 0, pages[0].1);
        let stats = e.read_xrp(id, pages[0].0, pages[0].1, &mut inst, &mut s).unwrap();
        assert_eq!(get_u64(&s, 24), 0, "length mismatch: saw {}", get_u64(&s, 32));
        assert_eq!(get_u64(&s, 16), pages.len() as u64);
        assert_eq!(get_u64(&s, 8), want);
        assert_eq!(stats.hops as usize, pages.len());
    }
}

#[test]
fn a_read_past_the_hop_faults_instead_of_reading_stale_bytes() {
    let (bytes, pages) = pages();
    let f = tmp_file("big-hops-past", &bytes);
    let (mut e, id) = big_engine(&f);
    for mut inst in instances() {
        let mut s = [0u8; 48];
        put_u64(&mut s, 0, pages[1].1);
        put_u64(&mut s, 40, 1);
        let err = e.read_xrp(id, pages[1].0, pages[1].1, &mut inst, &mut s).unwrap_err();
        let ChainError::Fault { at, fault } = err else { panic!("want a fault, got {err}") };
        assert_eq!((at.hop, at.addr), (1, pages[1].0));
        assert!(matches!(fault, VmError::BadRead { len: 8, .. }), "{fault}");
    }
}

#[test]
fn the_default_engine_refuses_hops_above_4_kib() {
    let (bytes, pages) = pages();
    let f = tmp_file("big-hops-default", &bytes);
    let (mut e, id) = engine(&f);
    let mut inst = instances().remove(0);
    let mut s = [0u8; 48];
    put_u64(&mut s, 0, pages[0].1);
    let err = e.read_xrp(id, pages[0].0, pages[0].1, &mut inst, &mut s).unwrap_err();
    assert!(
        matches!(err, ChainError::RequestTooLarge { size, max: DEFAULT_HOP_BYTES, .. } if size == pages[0].1),
        "{err}"
    );
    // A hop size the engine cannot be built for is a config error naming the field.
    for hop_bytes in [MAX_HOP_BYTES + 4096, 6000, 0] {
        let bad = Engine::new(EngineConfig { hop_bytes, ..EngineConfig::default() }).unwrap_err();
        assert!(bad.to_string().contains("hop_bytes"), "{bad}");
    }
}

#[test]
fn small_hops_keep_xrps_4_kib_window_on_a_big_hop_engine() {
    // A 512 B request still shows what the engine always showed: the bytes read after the
    // requested byte up to XRP's 4 KiB window (O_DIRECT reads whole blocks of the file's
    // alignment; a buffered read only the request); data_len says how many.
    let bytes: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
    let f = tmp_file("big-hops-window", &bytes);
    for (hop_bytes, mode) in
        [(MAX_HOP_BYTES, IoMode::Direct), (DEFAULT_HOP_BYTES, IoMode::Buffered)]
    {
        let mut e = Engine::new(EngineConfig { hop_bytes, ..EngineConfig::default() }).unwrap();
        let id = e.open(&f.path, mode).unwrap();
        let align = e.file_align(id).unwrap();
        for addr in [0u64, 512, 700, 16384 - 512, 16384 - 4096] {
            let want = ((addr + 512).next_multiple_of(align) - addr).min(4096);
            let mut seen = 0u64;
            let mut func = storefn_io::func(|ctx, data, _s| {
                seen = ctx.data_len;
                assert_eq!(data.len() as u64, ctx.data_len);
                ctx.done = 1;
                Ok(0)
            });
            let mut s = [0u8; 8];
            e.read_xrp(id, addr, 512, &mut func, &mut s).unwrap();
            assert_eq!(seen, want, "{mode:?} align {align} addr {addr}");
        }
    }
}
