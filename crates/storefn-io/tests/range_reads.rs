//! Range reads into caller-owned buffers, differential against `pread`: lengths from 1 B to the
//! 1 MiB limit at aligned and unaligned offsets, spans cut into several reads, registered and
//! unregistered buffers, O_DIRECT and buffered files, many reads in flight reaped in batches,
//! and every refusal as a typed error.

mod common;

use std::os::unix::fs::FileExt;

use common::*;
use rand::{Rng, SeedableRng};
use storefn_io::limits::{range_buf_bytes, MAX_RANGE_BYTES};
use storefn_io::{
    ChainError, Engine, EngineConfig, EngineError, FileId, IoMode, NoFunction, RangeBuf,
    SubmitError,
};

const FILE_BYTES: usize = 3 * MAX_RANGE_BYTES + 12_345;

fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

fn pread(f: &TmpFile, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    std::fs::File::open(&f.path).unwrap().read_exact_at(&mut v, off).unwrap();
    v
}

fn cases() -> Vec<(u64, usize)> {
    let lens = [1, 511, 512, 4095, 4096, 4097, 65_539, MAX_RANGE_BYTES - 1, MAX_RANGE_BYTES];
    let mut v = Vec::new();
    for len in lens {
        for off in [0u64, 1, 511, 4095, 4096, 12_345, (FILE_BYTES - len) as u64] {
            v.push((off, len));
        }
    }
    v
}

fn open(f: &TmpFile, mode: IoMode) -> (Engine, FileId) {
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let id = e.open(&f.path, mode).unwrap();
    (e, id)
}

#[test]
fn read_range_matches_pread_at_every_length_and_offset() {
    let f = tmp_file("range-diff", &random_bytes(1, FILE_BYTES));
    for mode in [IoMode::Direct, IoMode::Buffered] {
        for register in [true, false] {
            let (mut e, id) = open(&f, mode);
            let mut buf = RangeBuf::new(range_buf_bytes(MAX_RANGE_BYTES)).unwrap();
            if register {
                assert!(e.register_range_buf(&buf).unwrap(), "sparse buffer tables exist on 6.x");
            }
            assert_eq!(e.range_buf_registered(&buf), register);
            for (off, len) in cases() {
                let r = e.read_range(id, off, len as u64, &mut buf).unwrap();
                assert_eq!(r.start, (off % 4096) as usize);
                let got = &buf.as_slice()[r];
                assert!(got == pread(&f, off, len), "{mode:?} reg {register} {off}+{len}");
            }
        }
    }
}

#[test]
fn spans_longer_than_one_read_are_cut_and_land_contiguously() {
    let f = tmp_file("range-span", &random_bytes(2, FILE_BYTES));
    let (mut e, id) = open(&f, IoMode::Direct);
    let len = 2 * MAX_RANGE_BYTES + MAX_RANGE_BYTES / 2 + 7;
    let mut buf = RangeBuf::new(range_buf_bytes(len)).unwrap();
    e.register_range_buf(&buf).unwrap();
    for off in [0u64, 333, 4096, (FILE_BYTES - len) as u64] {
        let r = e.read_range(id, off, len as u64, &mut buf).unwrap();
        assert!(buf.as_slice()[r] == pread(&f, off, len), "span at {off}");
    }
    // The whole file through a config with a single range read in flight.
    let cfg = EngineConfig { range_reads: 1, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let mut all = RangeBuf::new(range_buf_bytes(FILE_BYTES)).unwrap();
    let r = e.read_range(id, 0, FILE_BYTES as u64, &mut all).unwrap();
    assert!(all.as_slice()[r] == pread(&f, 0, FILE_BYTES));
}

#[test]
fn many_range_reads_in_flight_land_where_asked() {
    let f = tmp_file("range-batch", &random_bytes(3, FILE_BYTES));
    let (mut e, id) = open(&f, IoMode::Direct);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(4);
    let slot = range_buf_bytes(64 << 10);
    let n = 48usize;
    let mut buf = RangeBuf::new(n * slot).unwrap();
    e.register_range_buf(&buf).unwrap();
    let reqs: Vec<(u64, usize)> = (0..n)
        .map(|_| {
            let len = rng.gen_range(1..=64 << 10);
            (rng.gen_range(0..(FILE_BYTES - len) as u64), len)
        })
        .collect();
    for (i, &(off, len)) in reqs.iter().enumerate() {
        let at = i * slot + (off % 4096) as usize;
        // `buf` is neither dropped nor touched until every completion below arrived.
        submit(&mut e, id, off, len as u64, &mut buf, at, i as u64).unwrap();
    }
    let mut seen = vec![None; n];
    while e.live() > 0 {
        e.wait(1, &mut NoFunction, |c| {
            let i = c.token as usize;
            assert!(c.result.is_ok(), "{:?}", c.result);
            seen[i] = Some((c.data.as_ptr() as usize, c.data.to_vec()));
        })
        .unwrap();
    }
    let base = buf.as_slice().as_ptr() as usize;
    for (i, &(off, len)) in reqs.iter().enumerate() {
        let (ptr, data) = seen[i].take().expect("every read completes");
        assert_eq!(ptr - base, i * slot + (off % 4096) as usize, "read {i} lands at `at`");
        assert!(data == pread(&f, off, len), "read {i}: {off}+{len}");
    }
}

/// `submit_range` for these tests: each reaps every read it submitted before it reads or
/// drops the buffer.
fn submit(
    e: &mut Engine,
    id: FileId,
    off: u64,
    len: u64,
    buf: &mut RangeBuf,
    at: usize,
    token: u64,
) -> Result<(), SubmitError> {
    // SAFETY: every caller reaps each accepted read before touching or dropping `buf`.
    unsafe { e.submit_range(id, off, len, buf, at, token) }
}

#[test]
fn refusals_are_typed_errors_and_past_eof_names_the_offset() {
    let f = tmp_file("range-refuse", &random_bytes(5, FILE_BYTES));
    let cfg = EngineConfig { range_reads: 2, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let mut buf = RangeBuf::new(range_buf_bytes(2 * MAX_RANGE_BYTES)).unwrap();
    let too_long = (MAX_RANGE_BYTES + 1) as u64;
    let r = submit(&mut e, id, 0, too_long, &mut buf, 0, 0);
    assert_eq!(r, Err(SubmitError::RangeTooLong { len: too_long, max: MAX_RANGE_BYTES }));
    let r = submit(&mut e, id, 100, 10, &mut buf, 0, 0);
    assert!(matches!(r, Err(SubmitError::BadRange { at: 0, .. })), "{r:?}");
    let r = submit(&mut e, id, 0, 0, &mut buf, 0, 0);
    assert!(matches!(r, Err(SubmitError::BadRange { .. })), "{r:?}");
    let cap = buf.capacity();
    let r = submit(&mut e, id, 0, 4096, &mut buf, cap - 2048 - 4096, 0);
    assert!(matches!(r, Err(SubmitError::BadRange { .. })), "misaligned at: {r:?}");
    let r = submit(&mut e, id, 0, 8192, &mut buf, cap - 4096, 0);
    assert!(matches!(r, Err(SubmitError::BadRange { .. })), "does not fit: {r:?}");
    assert_eq!(e.live(), 0);
    // The in-flight bound.
    for t in 0..2 {
        submit(&mut e, id, 0, 4096, &mut buf, t * 8192, t as u64).unwrap();
    }
    assert_eq!(e.free_range_reads(), 0);
    let r = submit(&mut e, id, 0, 4096, &mut buf, 3 * 8192, 9);
    assert_eq!(r, Err(SubmitError::RangeReadsFull { max: 2 }));
    e.wait(2, &mut NoFunction, |c| assert!(c.result.is_ok())).unwrap();
    // Past the end of the file: the read fails and names where.
    let past = (FILE_BYTES - 100) as u64;
    let err = e.read_range(id, past, 200, &mut buf).unwrap_err();
    assert!(
        matches!(err, ChainError::OutOfRange { at, size: 200, .. } if at.addr == past),
        "{err}"
    );
    // A span whose second read is past the end fails the same way, after reaping the first.
    let err =
        e.read_range(id, past - MAX_RANGE_BYTES as u64, MAX_RANGE_BYTES as u64 + 200, &mut buf);
    assert!(matches!(err, Err(ChainError::OutOfRange { .. })), "{err:?}");
    assert_eq!(e.live(), 0);
    // A buffer too small for the span, and an empty range.
    let mut small = RangeBuf::new(4096).unwrap();
    let err = e.read_range(id, 1, 4096, &mut small).unwrap_err();
    assert!(matches!(err, ChainError::Submit(SubmitError::BadRange { .. })), "{err}");
    let err = e.read_range(id, 0, 0, &mut small).unwrap_err();
    assert!(matches!(err, ChainError::Submit(SubmitError::BadRange { .. })), "{err}");
    // Buffers of no bytes or above the limit are refused.
    assert!(matches!(RangeBuf::new(0), Err(EngineError::RangeBufSize { .. })));
    assert!(matches!(RangeBuf::new((1 << 30) + 1), Err(EngineError::RangeBufSize { .. })));
}

#[test]
fn registration_slots_are_bounded_and_reusable() {
    let f = tmp_file("range-reg", &random_bytes(6, 64 << 10));
    let cfg = EngineConfig { range_buf_slots: 1, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    let a = RangeBuf::new(8192).unwrap();
    let mut b = RangeBuf::new(8192).unwrap();
    assert!(e.register_range_buf(&a).unwrap());
    assert!(e.register_range_buf(&a).unwrap(), "again: a no-op");
    let full = e.register_range_buf(&b).unwrap_err();
    assert!(matches!(full, EngineError::RangeBufSlotsFull { slots: 1 }), "{full}");
    e.unregister_range_buf(&a).unwrap();
    assert!(!e.range_buf_registered(&a));
    assert!(e.register_range_buf(&b).unwrap());
    let r = e.read_range(id, 4000, 100, &mut b).unwrap();
    assert!(b.as_slice()[r] == pread(&f, 4000, 100));
    // A buffer dropped while registered never has its slot used for another buffer.
    drop(b);
    let mut c = RangeBuf::new(8192).unwrap();
    assert!(!e.range_buf_registered(&c));
    let r = e.read_range(id, 0, 8192, &mut c).unwrap();
    assert!(c.as_slice()[r] == pread(&f, 0, 8192));
    // No slots at all: reads still work, unregistered.
    let cfg = EngineConfig { range_buf_slots: 0, ..EngineConfig::default() };
    let (mut e, id) = engine_with(cfg, &f);
    assert!(!e.register_range_buf(&c).unwrap());
    let r = e.read_range(id, 1, 5000, &mut c).unwrap();
    assert!(c.as_slice()[r] == pread(&f, 1, 5000));
}

#[test]
fn range_reads_and_chains_share_one_reap() {
    let lists = random_lists(7, 2000, 50, 512);
    let f = tmp_file("range-mixed", &lists.bytes);
    let (mut e, id) = engine(&f);
    let mut walker = list_walker();
    let mut buf = RangeBuf::new(range_buf_bytes(256 << 10)).unwrap();
    for (i, &head) in lists.heads.iter().enumerate() {
        e.submit_chain(id, head, 16, i as u64, |_| {}).unwrap();
    }
    // `buf` is untouched until the range read's completion arrives below.
    submit(&mut e, id, 1000, 200_000, &mut buf, 1000, 1 << 40).unwrap();
    let (mut chains, mut range) = (0, None);
    while e.live() > 0 {
        e.wait(1, &mut walker, |c| {
            if c.token == 1 << 40 {
                range = Some(c.data.to_vec());
            } else {
                let (sum, _) = walk_list(&lists.bytes, lists.heads[c.token as usize]);
                assert_eq!(get_u64(c.scratch, 0), sum);
                chains += 1;
            }
        })
        .unwrap();
    }
    assert_eq!(chains, lists.heads.len());
    assert!(range.unwrap() == lists.bytes[1000..201_000]);
}
