//! tests/c/every_function.c under AddressSanitizer: every function of storefn.h, its success
//! and its error paths (bad ELF, refused program, closed descriptor, oversized scratch, server
//! gone, ...), from C, with ASan watching the C side's buffers and handles.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::{cc, crate_dir, kv_db, prog_file, TempDir, TestServer};

#[test]
fn every_function_under_asan() {
    let t = TempDir::new("asan");
    let served = t.join("served");
    std::fs::create_dir(&served).unwrap();
    let db = served.join("db");
    kv_db(&db);
    let data = served.join("data");
    std::fs::write(&data, (0..65_536u32).map(|i| (i * 7) as u8).collect::<Vec<_>>()).unwrap();
    let xrp = prog_file(&t, "bpfkv_get");
    let lambda = prog_file(&t, "lambda/stats64");
    let refused = prog_file(&t, "test/reject_helper");
    // A port nothing listens on: bind one, note it, close it.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut srv = TestServer::start(&served, &t.join("token"));
    let exe = cc(
        &crate_dir().join("tests/c/every_function.c"),
        &t.join("every_function"),
        &["-fsanitize=address", "-fno-omit-frame-pointer"],
    );
    let mut child = Command::new(&exe)
        .arg(&db)
        .arg(&xrp)
        .arg(&lambda)
        .arg(&refused)
        .arg(&data)
        .arg(t.join("written"))
        .arg(&srv.addr)
        .arg(&srv.token)
        .arg(dead.to_string())
        // Leaks are the C side's to answer for too: libstorefn frees what it hands out.
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        seen.push(l.clone());
        if l == "STOP" {
            srv.stop();
            child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
            break;
        }
    }
    seen.extend(lines.map(Result::unwrap));
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\nstdout: {seen:?}\nstderr: {err}", out.status);
    assert!(seen.last().is_some_and(|l| l.starts_with("ALL OK")), "{seen:?} {err}");
    assert!(!err.contains("AddressSanitizer"), "{err}");
    println!("{}", seen.last().unwrap());
}
