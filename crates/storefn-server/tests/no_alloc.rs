//! AIOS: a server thread allocates nothing per request in steady state. The client side of
//! this test writes pre-encoded frames and reads replies into a fixed buffer (no allocation),
//! so every allocation counted while requests flow is the server's.

mod common;

use std::io::Write;
use std::net::TcpStream;

use common::{make_db, serve, TempDir};
use storefn_testkit::CountingAlloc;
use storefn_wire::read_response_frame;
use storefn_wire::{put_request, FrameBuf, Request, KIND_REQUEST};
use storefn_wire::{PROG_TYPE_LAMBDA, PROG_TYPE_XRP};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Sends `frame` (of `n` requests) and reads response frames into `rx` until all `n`
/// replies are in (no allocation).
fn round_trip(s: &mut TcpStream, frame: &[u8], n: u32, rx: &mut Vec<u8>) {
    s.write_all(frame).unwrap();
    let mut got = 0;
    while got < n {
        for m in read_response_frame(s, 0, rx).unwrap() {
            assert_eq!(m.unwrap().status, 0, "status OK");
            got += 1;
        }
    }
}

#[test]
fn steady_state_requests_allocate_nothing_on_the_server() {
    let dir = TempDir::new("noalloc");
    make_db(&dir, 3);
    let server = serve(dir.path(), 1);
    let mut c = common::client(&server);
    let elf = storefn_progs::must("kv_lookup");
    let hash = c.load_prog(PROG_TYPE_XRP, b"", elf).unwrap();
    let lambda = c.load_prog(PROG_TYPE_LAMBDA, b"", storefn_progs::must("lambda/stats64")).unwrap();
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_nodelay(true).unwrap();
    let mut f = FrameBuf::default();
    let mut rx = vec![0u8; 1 << 20];
    f.begin(KIND_REQUEST);
    put_request(&mut f, 1, &Request::Hello { tenant: b"t" });
    let hello = f.finish().to_vec();
    round_trip(&mut s, &hello, 1, &mut rx);
    // A frame of 8 pushed-down lookups, 8 reads and 2 λ requests over 40 KiB ranges (each
    // staged in ten engine reads).
    f.begin(KIND_REQUEST);
    for i in 0..8u64 {
        let key = (i * 3001).to_le_bytes();
        put_request(
            &mut f,
            10 + i,
            &Request::Xrp {
                path: b"db",
                offset: 0,
                len: 512,
                hash: &hash,
                scratch: &key,
                out_len: 160,
            },
        );
        put_request(&mut f, 20 + i, &Request::Read { path: b"db", offset: i * 512, len: 512 });
    }
    for i in 0..2u64 {
        let r = Request::Lambda {
            path: b"db",
            offset: i * 8,
            len: 40 << 10,
            hash: &lambda,
            out_cap: 32,
        };
        put_request(&mut f, 30 + i, &r);
    }
    let frame = f.finish().to_vec();
    for _ in 0..200 {
        round_trip(&mut s, &frame, 18, &mut rx);
    }
    let before = CountingAlloc::process_allocs();
    for _ in 0..500 {
        round_trip(&mut s, &frame, 18, &mut rx);
    }
    let per_request = (CountingAlloc::process_allocs() - before) as f64 / (500.0 * 18.0);
    assert_eq!(
        CountingAlloc::process_allocs() - before,
        0,
        "{per_request} allocations per request"
    );
    drop(s);
    drop(c);
    server.stop();
    server.join().unwrap();
}
