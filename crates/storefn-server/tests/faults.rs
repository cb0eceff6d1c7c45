//! A bad client hurts only its own connection: malformed, truncated and oversized frames,
//! slow and idle clients, clients killed mid-request, 1,000 concurrent connections, requests
//! over the in-flight limit, and programs that run past the server's hop and instruction
//! budgets. Loopback only; every loop is bounded.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{client, make_db, TempDir};
use storefn_server::{Server, ServerConfig};
use storefn_wire::layout::*;
use storefn_wire::limits::*;
use storefn_wire::Request;
use storefn_wire::*;

fn start(dir: &TempDir, tweak: impl FnOnce(&mut ServerConfig)) -> Server {
    let mut cfg = ServerConfig::new(dir.path());
    tweak(&mut cfg);
    Server::start("127.0.0.1:0", cfg).unwrap()
}

/// Reads until the server closes the connection (EOF or reset); panics after `limit`.
fn wait_closed(s: &mut TcpStream, limit: Duration) {
    s.set_read_timeout(Some(limit)).unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("connection not closed after {:?}: {e}", t0.elapsed()),
        }
        assert!(t0.elapsed() < limit, "connection not closed");
    }
}

fn frame_of(reqs: &[Request<'_>]) -> Vec<u8> {
    let mut f = FrameBuf::default();
    f.begin(KIND_REQUEST);
    for (i, r) in reqs.iter().enumerate() {
        put_request(&mut f, i as u64, r);
    }
    f.finish().to_vec()
}

fn read_ok(c: &mut storefn_wire::Client) {
    let r = c.one(&Request::Read { path: b"f", offset: 0, len: 4 }).unwrap();
    assert_eq!(r.data, b"data");
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let dir = TempDir::new("malformed");
    std::fs::write(dir.join("f"), b"data").unwrap();
    let server = start(&dir, |_| {});
    let mut good = client(&server);
    let hello = frame_of(&[Request::Hello { tenant: b"x" }]);
    let mut oversized = hello.clone();
    oversized[FRAME_OFF_BODY_BYTES..FRAME_OFF_BODY_BYTES + 4]
        .copy_from_slice(&(2u32 << 20).to_le_bytes());
    let mut bad_version = hello.clone();
    bad_version[FRAME_OFF_VERSION] = 9;
    let mut count_mismatch = hello.clone();
    count_mismatch[FRAME_OFF_COUNT] = 2;
    let mut unknown_op = hello.clone();
    unknown_op[FRAME_HEADER_BYTES + MSG_OFF_OP] = 200;
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("oversized", oversized),
        ("bad version", bad_version),
        ("count mismatch", count_mismatch),
        ("unknown op", unknown_op),
        ("response kind", {
            let mut b = hello.clone();
            b[FRAME_OFF_KIND] = KIND_RESPONSE;
            b
        }),
    ];
    for (what, bytes) in &bad {
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        s.write_all(bytes).unwrap();
        wait_closed(&mut s, Duration::from_secs(5));
        read_ok(&mut good); // the other connection is untouched
        let _ = what;
    }
    assert_eq!(server.stats().protocol_errors.load(Ordering::Relaxed), bad.len() as u64);
    // Truncated frames, then the client goes away: nothing to answer, nothing leaks.
    for cut in [3, FRAME_HEADER_BYTES, hello.len() - 1] {
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        s.write_all(&hello[..cut]).unwrap();
        drop(s);
        read_ok(&mut good);
    }
    server.stop();
    server.join().unwrap();
}

#[test]
fn slow_and_idle_clients_are_closed() {
    let dir = TempDir::new("slow");
    std::fs::write(dir.join("f"), b"data").unwrap();
    let server = start(&dir, |c| {
        c.idle_timeout = Duration::from_millis(300);
        c.slow_client_timeout = Duration::from_millis(300);
    });
    let hello = frame_of(&[Request::Hello { tenant: b"x" }]);
    // Slow loris: half a frame, then nothing.
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.write_all(&hello[..10]).unwrap();
    wait_closed(&mut s, Duration::from_secs(5));
    // Idle after HELLO.
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.write_all(&hello).unwrap();
    wait_closed(&mut s, Duration::from_secs(5));
    assert!(server.stats().closed_slow.load(Ordering::Relaxed) >= 1);
    assert!(server.stats().closed_idle.load(Ordering::Relaxed) >= 1);
    // A client whose connection was closed for idleness reconnects on its next call.
    let mut c = client(&server);
    std::thread::sleep(Duration::from_millis(700));
    assert!(c.one(&Request::Stat { path: b"f" }).is_err(), "the idle connection was closed");
    read_ok(&mut c);
    assert_eq!(c.connects, 2);
    server.stop();
    server.join().unwrap();
}

#[test]
fn a_thousand_concurrent_connections() {
    let dir = TempDir::new("thousand");
    std::fs::write(dir.join("f"), b"data").unwrap();
    let server = start(&dir, |c| c.threads = 2);
    let mut clients: Vec<_> = (0..1000).map(|_| client(&server)).collect();
    for c in &mut clients {
        read_ok(c);
    }
    assert_eq!(server.stats().connections.load(Ordering::Relaxed), 1000);
    drop(clients);
    server.stop();
    server.join().unwrap();
}

#[test]
fn clients_killed_mid_request_do_not_disturb_others() {
    let dir = TempDir::new("killed");
    make_db(&dir, 3);
    std::fs::write(dir.join("f"), b"data").unwrap();
    let server = start(&dir, |_| {});
    let mut good = client(&server);
    let hash = good.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("kv_lookup")).unwrap();
    for round in 0..20u64 {
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        let key = round.to_le_bytes();
        let mut reqs = vec![Request::Hello { tenant: b"k" }];
        for _ in 0..64 {
            reqs.push(Request::Xrp {
                path: b"db",
                offset: 0,
                len: 512,
                hash: &hash,
                scratch: &key,
                out_len: 160,
            });
        }
        s.write_all(&frame_of(&reqs)).unwrap();
        // Reset instead of a clean close: in-flight chains complete for a dead connection.
        let l = libc::linger { l_onoff: 1, l_linger: 0 };
        // SAFETY: a valid linger for SO_LINGER on an open socket.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                std::ptr::from_ref(&l).cast(),
                std::mem::size_of::<libc::linger>() as u32,
            );
        }
        drop(s);
        read_ok(&mut good);
    }
    server.stop();
    server.join().unwrap();
}

#[test]
fn in_flight_limit_and_budgets_are_enforced_by_the_server() {
    let dir = TempDir::new("limits");
    std::fs::write(dir.join("f"), b"data").unwrap();
    // Block 1 points at itself: a chain that never ends on its own.
    common::loop_file(dir.path());
    let server = start(&dir, |_| {});
    let mut c = client(&server);
    let follow = c.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("xrp_follow")).unwrap();
    let e = c
        .one(&Request::Xrp {
            path: b"loop",
            offset: 512,
            len: 512,
            hash: &follow,
            scratch: &[],
            out_len: 16,
        })
        .unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::ChainFailed as u16), "{e}");
    assert!(e.to_string().contains("64"), "names the hop limit: {e}");
    let spin = c.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("test/spin")).unwrap();
    let e = c.one(&common::spin_request(&spin)).unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::ChainFailed as u16), "{e}");
    assert!(e.to_string().contains("budget"), "names the budget: {e}");
    // One frame with more requests than a connection may have in flight.
    let n = server::MAX_IN_FLIGHT_PER_CONN as usize + 44;
    let mut reqs = vec![Request::Hello { tenant: b"x" }];
    reqs.extend((0..n).map(|_| Request::Read { path: b"f", offset: 0, len: 4 }));
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&frame_of(&reqs)).unwrap();
    let (mut ok, mut limit, mut got, mut frames) = (0, 0, 0, 0);
    let mut body = vec![0u8; MAX_FRAME_BYTES];
    while got < reqs.len() {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        s.read_exact(&mut h).unwrap();
        let hd = decode_header(&h, frames, KIND_RESPONSE).unwrap();
        frames += 1;
        s.read_exact(&mut body[..hd.body_bytes as usize]).unwrap();
        for m in Messages::new(&body[..hd.body_bytes as usize], hd.count, 0) {
            let m = m.unwrap();
            got += 1;
            match m.status {
                0 => ok += 1,
                x if x == StatusCode::Limit as u16 => limit += 1,
                x => panic!("status {x}"),
            }
        }
    }
    assert_eq!((ok, limit), (1 + server::MAX_IN_FLIGHT_PER_CONN as usize, 44));
    // Regression: 256 replies of 4 KiB in one pass once made a response frame over the 1 MiB
    // limit (the client refused it). Responses roll over into new frames.
    std::fs::write(dir.join("big"), vec![5u8; 4096 * 4]).unwrap();
    let reqs: Vec<Request<'_>> = (0..256)
        .map(|i| Request::Read { path: b"big", offset: (i % 4) * 4096, len: 4096 })
        .collect();
    for r in c.call(&reqs).unwrap() {
        assert_eq!(r.ok("READ").unwrap().data, vec![5u8; 4096]);
    }
    read_ok(&mut c);
    server.stop();
    server.join().unwrap();
}

use storefn_server::limits as server;
use storefn_wire::PROG_TYPE_XRP;

#[test]
fn stop_answers_every_request_then_closes() {
    let dir = TempDir::new("stop");
    storefn_server::fairness::write_chain_file(&dir.join("chain"), 64).unwrap();
    // IPv6 loopback too.
    let server = Server::start("[::1]:0", ServerConfig::new(dir.path())).unwrap();
    let mut c = storefn_wire::Client::connect(&server.local_addr().to_string(), Default::default())
        .unwrap();
    let h = c.load_prog(PROG_TYPE_XRP, b"", storefn_progs::must("xrp_follow")).unwrap();
    let chain = |_| Request::Xrp {
        path: b"chain",
        offset: 0,
        len: 512,
        hash: &h,
        scratch: &[],
        out_len: 16,
    };
    // More 64-hop chains than the engine admits at once: some are still queued at stop.
    let n = server::MAX_IN_FLIGHT_PER_CONN as usize;
    let mut reqs = vec![Request::Hello { tenant: b"s" }];
    reqs.extend((0..n).map(chain));
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&frame_of(&reqs)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    server.stop();
    let (mut ok, mut down, mut got, mut frames) = (0, 0, 0, 0);
    let mut body = vec![0u8; MAX_FRAME_BYTES];
    while got < reqs.len() {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        s.read_exact(&mut h).unwrap();
        let hd = decode_header(&h, frames, KIND_RESPONSE).unwrap();
        frames += 1;
        s.read_exact(&mut body[..hd.body_bytes as usize]).unwrap();
        for m in Messages::new(&body[..hd.body_bytes as usize], hd.count, 0) {
            got += 1;
            match m.unwrap().status {
                0 => ok += 1,
                x if x == StatusCode::ShuttingDown as u16 => down += 1,
                x => panic!("status {x}"),
            }
        }
    }
    assert_eq!(ok + down, reqs.len(), "every request answered");
    assert!(down > 0 && ok > 1, "ok {ok}, shutting down {down}");
    wait_closed(&mut s, Duration::from_secs(10));
    server.join().unwrap();
}
