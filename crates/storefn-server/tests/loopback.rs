//! The server over loopback: READ/STAT/WRITE/LAMBDA; confinement; auth; program registry.

mod common;

use common::{client, serve, TempDir};
use storefn_server::{Server, ServerConfig};
use storefn_wire::StatusCode;
use storefn_wire::{Client, ClientConfig, Request};
use storefn_wire::{PROG_TYPE_LAMBDA, PROG_TYPE_XRP};

#[test]
fn read_stat_write_and_versions() {
    let dir = TempDir::new("rsw");
    std::fs::write(dir.join("f"), vec![7u8; 10_000]).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    let st = c.one(&Request::Stat { path: b"f" }).unwrap();
    assert_eq!(st.value, 10_000);
    let r = c.one(&Request::Read { path: b"f", offset: 9_000, len: 1000 }).unwrap();
    assert_eq!(r.data, vec![7u8; 1000]);
    assert_eq!(r.version, st.version);
    let w = c.one(&Request::Write { path: b"f", offset: 9_500, data: &[1, 2, 3] }).unwrap();
    assert_eq!(w.value, 3);
    let r = c.one(&Request::Read { path: b"f", offset: 9_499, len: 5 }).unwrap();
    assert_eq!(r.data, vec![7, 1, 2, 3, 7]);
    assert_eq!((r.version.dev, r.version.ino), (st.version.dev, st.version.ino));
    // A new file renamed over the old one: a new identity.
    std::fs::write(dir.join("g"), vec![9u8; 100]).unwrap();
    std::fs::rename(dir.join("g"), dir.join("f")).unwrap();
    let r = c.one(&Request::Read { path: b"f", offset: 0, len: 100 }).unwrap();
    assert_eq!(r.data, vec![9u8; 100]);
    assert_ne!(r.version.ino, st.version.ino);
    let e = c.one(&Request::Read { path: b"f", offset: 50, len: 100 }).unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::OutOfRange as u16), "{e}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn paths_outside_the_served_directory_are_refused() {
    let outer = TempDir::new("confine");
    let dir = outer.join("served");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(outer.join("secret"), b"do not serve").unwrap();
    std::fs::write(dir.join("ok"), b"fine").unwrap();
    std::os::unix::fs::symlink(outer.join("secret"), dir.join("link_out")).unwrap();
    std::os::unix::fs::symlink("ok", dir.join("link_in")).unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let server = serve(&dir, 1);
    let mut c = client(&server);
    for bad in ["../secret", "/etc/passwd", "link_out", "sub/../../secret"] {
        let e = c.one(&Request::Read { path: bad.as_bytes(), offset: 0, len: 4 }).unwrap_err();
        assert_eq!(e.status(), Some(StatusCode::OutsideRoot as u16), "{bad}: {e}");
        let e = c.one(&Request::Write { path: bad.as_bytes(), offset: 0, data: b"x" }).unwrap_err();
        assert_eq!(e.status(), Some(StatusCode::OutsideRoot as u16), "{bad}: {e}");
    }
    assert_eq!(std::fs::read(outer.join("secret")).unwrap(), b"do not serve");
    for good in ["ok", "link_in", "sub/../ok"] {
        assert_eq!(
            c.one(&Request::Read { path: good.as_bytes(), offset: 0, len: 4 }).unwrap().data,
            b"fine"
        );
    }
    let e = c.one(&Request::Read { path: b"missing", offset: 0, len: 4 }).unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::NotFound as u16), "{e}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn token_auth_accepts_the_secret_and_refuses_anything_else() {
    let dir = TempDir::new("auth");
    std::fs::write(dir.join("f"), b"data").unwrap();
    let tok = dir.join("tokens");
    std::fs::write(&tok, "alice 0123456789abcdef0123\nbob fedcba9876543210fedc\n").unwrap();
    let mut cfg = ServerConfig::new(dir.path());
    cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let addr = server.local_addr().to_string();
    let mut ok = Client::connect(&addr, storefn_server::client_config(&tok).unwrap()).unwrap();
    assert_eq!(ok.one(&Request::Read { path: b"f", offset: 0, len: 4 }).unwrap().data, b"data");
    let wrong = ClientConfig {
        tenant: "alice".into(),
        secret: Some(b"0123456789abcdef0124".to_vec()),
        ..ClientConfig::default()
    };
    let e = Client::connect(&addr, wrong).unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::AuthFailed as u16), "{e}");
    let unknown = ClientConfig {
        tenant: "mallory".into(),
        secret: Some(b"0123456789abcdef0123".to_vec()),
        ..ClientConfig::default()
    };
    assert!(Client::connect(&addr, unknown).is_err());
    let none = ClientConfig::default();
    assert!(matches!(Client::connect(&addr, none), Err(storefn_wire::ClientError::AuthRequired)));
    assert_eq!(server.stats().auth_failures.load(std::sync::atomic::Ordering::Relaxed), 2);
    server.stop();
    server.join().unwrap();
}

#[test]
fn programs_are_verified_once_and_unknown_hashes_are_named() {
    let dir = TempDir::new("progs");
    std::fs::write(dir.join("f"), (0..=255u8).cycle().take(4096).collect::<Vec<u8>>()).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    // A verifier rejection comes back with the verifier's message.
    let bad = storefn_progs::must("test/reject_helper");
    let e = c.load_prog(PROG_TYPE_XRP, b"", bad).unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::ProgRejected as u16), "{e}");
    assert!(e.to_string().contains("insn #"), "{e}");
    // An unknown hash: UNKNOWN_PROG.
    let r = c
        .call(&[Request::Xrp {
            path: b"f",
            offset: 0,
            len: 512,
            hash: &[1; 32],
            scratch: &[],
            out_len: 8,
        }])
        .unwrap();
    assert_eq!(r[0].status, StatusCode::UnknownProg as u16);
    // λ: sum of the bytes read, through LAMBDA.
    let elf = storefn_progs::must("test/lambda_sum");
    let h = c.load_prog(PROG_TYPE_LAMBDA, b"", elf).unwrap();
    assert_eq!(c.load_prog(PROG_TYPE_LAMBDA, b"", elf).unwrap(), h, "same bytes, same hash");
    assert_eq!(server.registry_len(), 1);
    let r =
        c.one(&Request::Lambda { path: b"f", offset: 0, len: 256, hash: &h, out_cap: 64 }).unwrap();
    let mut local = storefn_vm::Instance::new(
        storefn_vm::load_verified(elf, None, storefn_vm::ProgType::Lambda).unwrap(),
        storefn_vm::Engine::Interp,
    )
    .unwrap();
    let input: Vec<u8> = (0..=255u8).collect();
    let mut out = vec![0u8; 64];
    let ret = local.run_lambda(&input, &mut out).unwrap();
    assert_eq!(r.value, ret);
    assert_eq!(r.data, out[..usize::try_from(ret.min(64)).unwrap()]);
    // An xrp program used on LAMBDA is refused by type.
    let kv = storefn_progs::must("kv_lookup");
    let hx = c.load_prog(PROG_TYPE_XRP, b"", kv).unwrap();
    let e = c
        .one(&Request::Lambda { path: b"f", offset: 0, len: 256, hash: &hx, out_cap: 8 })
        .unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::BadRequest as u16), "{e}");
    server.stop();
    server.join().unwrap();
}

/// OFFLOAD on a server that runs no offload engine is a clear BAD_REQUEST, and the connection
/// stays usable.
#[test]
fn offload_without_an_engine_is_a_bad_request() {
    let dir = TempDir::new("nooffload");
    std::fs::write(dir.join("f"), vec![7u8; 100]).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    let r = c.call(&[Request::Offload { msg: &[1; 16] }]).unwrap().remove(0);
    assert_eq!(r.status, storefn_wire::StatusCode::BadRequest as u16, "{r:?}");
    assert!(r.message.contains("no offload engine"), "{}", r.message);
    assert_eq!(c.one(&Request::Stat { path: b"f" }).unwrap().value, 100);
    server.stop();
    server.join().unwrap();
}

/// Regression: a frame with more READs than one tenant's share of the engine (224 of 256
/// slots) left the rest queued until the worker's poll timed out: every 1 MiB range fetched
/// over READ frames took POLL_INTERVAL (50 ms) instead of a few device reads.
#[test]
fn reads_beyond_one_tenants_share_are_admitted_without_waiting_for_the_poll() {
    use std::time::{Duration, Instant};
    use storefn_server::limits::{ENGINE_CHAINS, POLL_INTERVAL};
    // BPF-KV's remote reads: 4 KiB blocks.
    const BLOCK: u32 = 4096;
    let dir = TempDir::new("share");
    let block = BLOCK as usize;
    let data: Vec<u8> = (0..ENGINE_CHAINS * block).map(|i| (i / block) as u8).collect();
    std::fs::write(dir.join("f"), &data).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    assert!(c.max_in_flight() >= ENGINE_CHAINS, "one frame carries every read");
    let reqs: Vec<Request<'_>> = (0..ENGINE_CHAINS)
        .map(|b| Request::Read { path: b"f", offset: (b * block) as u64, len: BLOCK })
        .collect();
    // The bug cost at least POLL_INTERVAL on every call; the fastest of a few calls shows it
    // whatever else the machine runs.
    let mut fastest = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let replies = c.call(&reqs).unwrap();
        fastest = fastest.min(t.elapsed());
        assert_eq!(replies.len(), ENGINE_CHAINS);
        for (b, r) in replies.into_iter().enumerate() {
            assert_eq!(r.ok("READ").unwrap().data, data[b * block..(b + 1) * block]);
        }
    }
    assert!(fastest < POLL_INTERVAL / 2, "256 READs in one frame took {fastest:?} at best");
    server.stop();
    server.join().unwrap();
}
