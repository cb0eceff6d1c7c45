//! Remote `pwrite_λ` (LAMBDA_WRITE) on a real storefn-server on loopback: the same function
//! object writes the same bytes locally and on the server (bitmap's run-length decoding, ~32x
//! expansion), as its native baseline says; the server confines paths, needs auth when it has
//! tokens, bounds sizes, and writes nothing when the function fails.

use std::path::PathBuf;

use storefn_lambda::limits::{MAX_REMOTE_WRITE_IN_BYTES, MAX_REMOTE_WRITE_OUT_BYTES};
use storefn_lambda::{
    pwrite_lambda, LambdaError, LambdaProg, RemoteWriter, ServerTransport, Workload,
};
use storefn_server::{Server, ServerConfig};
use storefn_vm::Engine;
use storefn_wire::ClientConfig;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("storefn-lambda-rw-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

fn bitmap() -> LambdaProg {
    let w = Workload::Bitmap;
    LambdaProg::from_elf(w.prog_name(), storefn_progs::must(w.prog_name()), None)
}

/// `bytes` of bitmap runs from the workload's generator.
fn runs(bytes: u64, seed: u64) -> Vec<u8> {
    let mut v = Vec::new();
    Workload::Bitmap.generate(&mut v, bytes, seed).unwrap();
    v
}

fn writer(server: &Server, file: &str, prog: &LambdaProg) -> RemoteWriter {
    let t = ServerTransport::connect(&server.local_addr().to_string(), ClientConfig::default());
    RemoteWriter::new(t.unwrap(), file, prog).unwrap()
}

fn status(e: &LambdaError) -> String {
    format!("{e}")
}

#[test]
fn local_and_remote_lambda_writes_write_the_same_bytes() {
    let d = dir("same");
    let server = Server::start("127.0.0.1:0", ServerConfig::new(&d.0)).unwrap();
    let prog = bitmap();
    let (local_path, remote_path) = (d.0.join("local.out"), d.0.join("remote.out"));
    std::fs::write(&remote_path, b"").unwrap();
    let local = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&local_path)
        .unwrap();
    let mut inst = prog.instance(Engine::Jit).unwrap();
    let mut w = writer(&server, "remote.out", &prog);
    let mut off = 0u64;
    let mut expect = Vec::new();
    for (i, size) in [2u64, 64, 4096, 64 << 10].into_iter().enumerate() {
        let input = runs(size, 11 + i as u64);
        let mut want = vec![0u8; Workload::Bitmap.out_cap(input.len())];
        let n = Workload::Bitmap.native(&input, &mut want);
        assert!(n > 0 && n <= MAX_REMOTE_WRITE_OUT_BYTES, "{size}: {n}");
        let cap = n.next_power_of_two().min(MAX_REMOTE_WRITE_OUT_BYTES);
        let mut staging = vec![0u8; cap];
        let nl = pwrite_lambda(&local, &local_path, off, &input, &mut inst, &mut staging).unwrap();
        let nr = w.pwrite_lambda(off, &input, cap).unwrap();
        assert_eq!((nl, nr), (n, n), "input {size} bytes");
        expect.resize(off as usize, 0);
        expect.extend_from_slice(&want[..n]);
        off += n as u64 + 17; // a gap: writes land at their offsets, not appended
    }
    let (l, r) = (std::fs::read(&local_path).unwrap(), std::fs::read(&remote_path).unwrap());
    assert_eq!(l.len(), expect.len());
    assert!(l == expect, "local output differs from the native baseline");
    assert!(r == expect, "remote output differs from the native baseline");
    server.stop();
    server.join().unwrap();
}

#[test]
fn bad_lambda_writes_are_refused_and_write_nothing() {
    let d = dir("bad");
    std::fs::write(d.0.join("f.out"), b"keep").unwrap();
    let server = Server::start("127.0.0.1:0", ServerConfig::new(&d.0)).unwrap();
    let prog = bitmap();
    let input = runs(4096, 3);
    // Outside the served directory, and a file that does not exist (never created).
    for (file, st) in [("../escape.out", "OUTSIDE_ROOT"), ("missing.out", "NOT_FOUND")] {
        let e = writer(&server, file, &prog).pwrite_lambda(0, &input, 1 << 20).unwrap_err();
        assert!(status(&e).contains(st), "{file}: {e}");
    }
    assert!(!d.0.join("missing.out").exists());
    let mut w = writer(&server, "f.out", &prog);
    // The function's output (~32x the input) does not fit out_cap: it faults on the server,
    // and the file is unchanged.
    let e = w.pwrite_lambda(0, &input, 4096).unwrap_err();
    assert!(status(&e).contains("CHAIN_FAILED"), "{e}");
    assert_eq!(std::fs::read(d.0.join("f.out")).unwrap(), b"keep");
    // Sizes are bounded before anything is sent.
    let big = vec![0u8; MAX_REMOTE_WRITE_IN_BYTES + 2];
    let e = w.pwrite_lambda(0, &big, 1 << 20).unwrap_err();
    assert!(
        matches!(e, LambdaError::RangeTooLarge { max, .. } if max == MAX_REMOTE_WRITE_IN_BYTES as u64),
        "{e}"
    );
    let e = w.pwrite_lambda(0, &input, MAX_REMOTE_WRITE_OUT_BYTES + 1).unwrap_err();
    assert!(matches!(e, LambdaError::RangeTooLarge { .. }), "{e}");
    // The connection is still good.
    assert!(w.pwrite_lambda(0, &input, MAX_REMOTE_WRITE_OUT_BYTES).unwrap() > 4096);
    server.stop();
    server.join().unwrap();
}

#[test]
fn a_server_with_tokens_refuses_unauthenticated_lambda_writes() {
    let d = dir("auth");
    std::fs::write(d.0.join("f.out"), b"keep").unwrap();
    let tok = d.0.join("tokens");
    std::fs::write(&tok, "alice 0123456789abcdef0123\n").unwrap();
    let mut cfg = ServerConfig::new(&d.0);
    cfg.tokens = Some(storefn_server::load_tokens(&tok).unwrap());
    let server = Server::start("127.0.0.1:0", cfg).unwrap();
    let addr = server.local_addr().to_string();
    let prog = bitmap();
    let input = runs(64, 5);
    let refused = ServerTransport::connect(&addr, ClientConfig::default())
        .and_then(|t| RemoteWriter::new(t, "f.out", &prog))
        .and_then(|mut w| w.pwrite_lambda(0, &input, 1 << 20));
    let e = refused.unwrap_err();
    assert!(status(&e).contains("AUTH"), "{e}");
    assert_eq!(std::fs::read(d.0.join("f.out")).unwrap(), b"keep");
    let t = ServerTransport::connect(&addr, storefn_server::client_config(&tok).unwrap()).unwrap();
    let n =
        RemoteWriter::new(t, "f.out", &prog).unwrap().pwrite_lambda(0, &input, 1 << 20).unwrap();
    assert_eq!(std::fs::metadata(d.0.join("f.out")).unwrap().len(), n.max(4) as u64);
    server.stop();
    server.join().unwrap();
}
