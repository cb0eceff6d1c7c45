//! `storefn serve --token-file` with tenant scopes: a bad scope stops the start naming the file
//! and line; a scoped tenant reaches only its directory, read-only. Loopback only.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use storefn_wire::StatusCode;
use storefn_wire::{Client, Request};

mod common;
use common::storefn;

#[test]
fn a_bad_scope_stops_serve_naming_the_file_and_line() {
    let d = common::temp_dir("storefn-scopes", "bad");
    let tok = d.0.join("tokens");
    std::fs::write(&tok, "a 0123456789abcdef0123\nb 0123456789abcdef0123 rw size=1\n").unwrap();
    let (code, _, err) = storefn(&[
        "serve",
        "--dir",
        d.0.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        tok.to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("tokens") && err.contains("line 2") && err.contains("size=1"), "{err}");
}

/// Kills the server on drop, so a failed assertion leaves no process behind.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_read_only_tenant_reaches_only_its_directory() {
    let d = common::temp_dir("storefn-scopes", "ro");
    std::fs::create_dir(d.0.join("mine")).unwrap();
    std::fs::write(d.0.join("mine/f"), b"mine").unwrap();
    std::fs::write(d.0.join("other"), b"else").unwrap();
    let tok = d.0.join("tokens");
    std::fs::write(&tok, "reader 0123456789abcdef0123 ro dir=mine\n").unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .args(["serve", "--dir", d.0.to_str().unwrap(), "--listen", &addr])
        .args(["--token-file", tok.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut child = Killed(child);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        match lines.next() {
            Some(Ok(l)) if l.contains("listening on") => break,
            Some(Ok(_)) => {}
            _ => break,
        }
    }
    let cfg = storefn_server::client_config(&tok).unwrap();
    let mut c = Client::connect(&addr, cfg).unwrap();
    let st = |c: &mut Client, r: Request<'_>| c.call(&[r]).unwrap()[0].status;
    let read = |p: &'static str| Request::Read { path: p.as_bytes(), offset: 0, len: 4 };
    let ok = c.call(&[read("mine/f")]).unwrap().remove(0);
    assert_eq!((ok.status, ok.data.as_slice()), (0, &b"mine"[..]));
    let forbidden = StatusCode::Forbidden as u16;
    assert_eq!(st(&mut c, read("other")), forbidden);
    let w = Request::Write { path: b"mine/f", offset: 0, data: b"x" };
    assert_eq!(st(&mut c, w), forbidden);
    assert_eq!(std::fs::read(d.0.join("mine/f")).unwrap(), b"mine");
    // SAFETY: plain kill(2) of the child we spawned.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    while child.0.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
}
