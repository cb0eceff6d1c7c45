//! READ and LAMBDA served by the engine's range reads: any length up to the wire's limit, at
//! any offset, equal to the file's bytes (READ answers are sent from the buffer the data was
//! read into; a λ runs over its range in place).

mod common;

use common::{client, serve, TempDir};
use storefn_wire::limits::{MAX_LAMBDA_IN_BYTES, MAX_READ_BYTES};
use storefn_wire::{Request, StatusCode, PROG_TYPE_LAMBDA};

/// A file whose every byte differs from its neighbours' (an off-by-some lands elsewhere).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i >> 12) as u8).collect()
}

/// Odd-sized: the last block is partial.
const FILE_BYTES: usize = 3 * (1 << 20) + 12_345;

#[test]
fn a_read_of_the_wire_limit_is_one_answer_equal_to_the_file() {
    // Regression: READ was capped at 4 KiB, one engine read into an engine slot.
    const { assert!(MAX_READ_BYTES >= 1 << 20) };
    let dir = TempDir::new("read-1m");
    let data = pattern(FILE_BYTES);
    std::fs::write(dir.join("f"), &data).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    let n = MAX_READ_BYTES as usize;
    for offset in [0usize, 4096, 1 << 20, FILE_BYTES - n] {
        let len = MAX_READ_BYTES;
        let r = c.one(&Request::Read { path: b"f", offset: offset as u64, len }).unwrap();
        assert!(r.data == data[offset..offset + n], "READ of {n} bytes at {offset}");
    }
    // One byte more is refused by the wire.
    let e = c.one(&Request::Read { path: b"f", offset: 0, len: MAX_READ_BYTES + 1 });
    assert!(e.is_err());
    server.stop();
    server.join().unwrap();
}

#[test]
fn reads_past_the_connections_answer_budget_wait_and_are_all_answered() {
    // Regression: a connection's READs in flight were bounded only by their count (256), so a
    // client that sent 256 whole READs and did not read yet made the server hold 256 MiB of
    // answers for it (the per-connection memory bound was 533 MiB).
    let dir = TempDir::new("read-budget");
    let data = pattern(FILE_BYTES);
    std::fs::write(dir.join("f"), &data).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    let n = MAX_READ_BYTES as usize;
    let at = |i: usize| (i * 12_288) % (FILE_BYTES - n);
    let reqs: Vec<Request<'_>> = (0..storefn_server::limits::MAX_IN_FLIGHT_PER_CONN as usize)
        .map(|i| Request::Read { path: b"f", offset: at(i) as u64, len: MAX_READ_BYTES })
        .collect();
    let first = c.send(&reqs).unwrap();
    // Not read for a while: the server answers until the connection's budget is full.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let budget = storefn_server::limits::MAX_CONN_READ_BYTES;
    let held = server.stats().peak_conn_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(held >= n as u64, "answers were queued ({held} bytes)");
    assert!(held <= (budget + (1 << 20)) as u64, "connection held {held} bytes");
    // Every READ is answered (the ones past the budget waited, none was refused).
    let mut got = 0;
    while got < reqs.len() {
        c.recv(|id, r| {
            let i = usize::try_from(id - first).unwrap();
            let r = r.ok("READ").unwrap();
            assert!(r.data == data[at(i)..at(i) + n], "READ {i}");
            got += 1;
        })
        .unwrap();
    }
    let held = server.stats().peak_conn_bytes.load(std::sync::atomic::Ordering::Relaxed);
    assert!(held <= storefn_server::limits::CONN_MEMORY_BOUND as u64, "{held} bytes");
    server.stop();
    server.join().unwrap();
}

#[test]
fn reads_not_aligned_to_4_kib_equal_the_files_bytes() {
    let dir = TempDir::new("read-unaligned");
    let data = pattern(FILE_BYTES);
    std::fs::write(dir.join("f"), &data).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    let cases: &[(usize, usize)] = &[
        (1, 1),
        (4095, 2),
        (4000, 200),
        (55, 4096),
        (56, 4096),
        (123_457, 70_001),
        (1, MAX_READ_BYTES as usize),
        (4095, MAX_READ_BYTES as usize),
        (FILE_BYTES - 1, 1),
        (FILE_BYTES - 70_000, 70_000),
        (FILE_BYTES - MAX_READ_BYTES as usize, MAX_READ_BYTES as usize),
    ];
    // One at a time, then all in one frame (answers sent back to back).
    for &(off, len) in cases {
        let len32 = u32::try_from(len).unwrap();
        let r = c.one(&Request::Read { path: b"f", offset: off as u64, len: len32 }).unwrap();
        assert!(r.data == data[off..off + len], "READ [{off}, +{len})");
    }
    let reqs: Vec<Request<'_>> = cases
        .iter()
        .map(|&(off, len)| Request::Read {
            path: b"f",
            offset: off as u64,
            len: u32::try_from(len).unwrap(),
        })
        .collect();
    for round in 0..3 {
        let replies = c.call(&reqs).unwrap();
        for (&(off, len), r) in cases.iter().zip(replies) {
            let r = r.ok("READ").unwrap();
            assert!(r.data == data[off..off + len], "round {round}: READ [{off}, +{len})");
        }
    }
    // Past the end: refused, naming the file's size.
    let e = c.one(&Request::Read { path: b"f", offset: FILE_BYTES as u64 - 10, len: 11 });
    assert_eq!(e.unwrap_err().status(), Some(StatusCode::OutOfRange as u16));
    server.stop();
    server.join().unwrap();
}

/// stats64's result over `data`, by the same program on the local interpreter.
fn local_stats(elf: &[u8], data: &[u8]) -> (u64, Vec<u8>) {
    let v = storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Lambda).unwrap();
    let mut inst = storefn_vm::Instance::new(v, storefn_vm::Engine::Interp).unwrap();
    let mut out = vec![0u8; 64];
    let ret = inst.run_lambda(data, &mut out).unwrap();
    out.truncate(usize::try_from(ret).unwrap());
    (ret, out)
}

#[test]
fn lambdas_over_unaligned_ranges_equal_the_local_run() {
    let dir = TempDir::new("lambda-unaligned");
    let data = pattern(FILE_BYTES);
    std::fs::write(dir.join("f"), &data).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    let elf = storefn_progs::must("lambda/stats64");
    let h = c.load_prog(PROG_TYPE_LAMBDA, b"", elf).unwrap();
    let whole = MAX_LAMBDA_IN_BYTES as usize;
    let cases: &[(usize, usize)] =
        &[(0, 8), (8, whole), (65_528, 16), (4096 * 3 + 8, 200_000), (FILE_BYTES - whole, whole)];
    let reqs: Vec<Request<'_>> = cases
        .iter()
        .map(|&(off, len)| Request::Lambda {
            path: b"f",
            offset: off as u64,
            len: u32::try_from(len).unwrap(),
            hash: &h,
            out_cap: 64,
        })
        .collect();
    // Several λ ranges in flight at once share the engine's slots.
    let replies = c.call(&reqs).unwrap();
    for (&(off, len), r) in cases.iter().zip(replies) {
        let r = r.ok("LAMBDA").unwrap();
        assert_eq!((r.value, r.data), local_stats(elf, &data[off..off + len]), "[{off}, +{len})");
    }
    server.stop();
    server.join().unwrap();
}
