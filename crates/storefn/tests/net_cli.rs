//! `storefn net delay`: starts, forwards through the added delay, stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn net_delay_forwards_with_delay_and_stops_on_sigterm() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = l.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        s.write_all(&b).unwrap();
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .args(["net", "delay", "--listen", "127.0.0.1:0", "--to", &target.to_string()])
        .args(["--rtt-us", "3000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    // "net delay: listening on 127.0.0.1:PORT -> ..."
    let addr = line.split_whitespace().nth(4).unwrap().parse().unwrap();
    assert!(line.contains("rtt 3000 us"), "{line}");
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    s.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hello");
    assert!(t.elapsed() >= Duration::from_micros(3000), "{:?}", t.elapsed());
    echo.join().unwrap();
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("net delay: stopped; connections 1"), "{rest}");
}
