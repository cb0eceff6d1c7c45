//! The metrics endpoint: a small HTTP/1.x responder on its own thread answering `GET /metrics`
//! (anything else: 404 or 405). Bounded like every other network part: one connection served
//! at a time, at most [`MAX_METRICS_CONNS`] waiting in the kernel's backlog are taken per pass
//! and the rest wait there, a request head of at most [`MAX_METRICS_REQUEST_BYTES`], and
//! [`METRICS_IO_TIMEOUT`] for each read and write, so a slow or silent scraper costs the
//! endpoint that long and never the server's worker threads.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::server::Shared;

/// Connections the endpoint takes from its listener per pass (then it checks for stop).
pub const MAX_METRICS_CONNS: usize = 8;
/// Bytes of a scrape's request head (request line and headers); a longer one is answered 431.
pub const MAX_METRICS_REQUEST_BYTES: usize = 4096;
/// Per read and per write of one scrape.
pub const METRICS_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the endpoint sleeps when no scraper is waiting (it checks for stop in between).
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// Serves scrapes until the server stops.
pub(crate) fn serve(listener: &TcpListener, shared: &Arc<Shared>) {
    // Acquire: pairs with Server::stop's Release, like the worker threads.
    while !shared.stop.load(Ordering::Acquire) {
        let mut served = 0;
        while served < MAX_METRICS_CONNS {
            match listener.accept() {
                Ok((s, _)) => {
                    served += 1;
                    let _ = answer(s, shared);
                }
                Err(_) => break,
            }
        }
        if served == 0 {
            std::thread::sleep(ACCEPT_POLL);
        }
    }
}

/// Reads one request head and answers it; the connection closes after.
fn answer(mut s: TcpStream, shared: &Shared) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(METRICS_IO_TIMEOUT))?;
    s.set_write_timeout(Some(METRICS_IO_TIMEOUT))?;
    let mut head = [0u8; MAX_METRICS_REQUEST_BYTES];
    let mut n = 0;
    let start = std::time::Instant::now();
    let complete = loop {
        // The whole head within the timeout, not each byte of it.
        if start.elapsed() > METRICS_IO_TIMEOUT {
            return Ok(());
        }
        if head[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        if n == head.len() {
            break false;
        }
        match s.read(&mut head[n..])? {
            0 => return Ok(()),
            k => n += k,
        }
    };
    if !complete {
        return reply(&mut s, "431 Request Header Fields Too Large", "request head too large\n");
    }
    let line = head[..n].split(|&b| b == b'\r').next().unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or(&[]), parts.next().unwrap_or(&[]));
    if path != b"/metrics" {
        return reply(&mut s, "404 Not Found", "only /metrics is served\n");
    }
    if method != b"GET" {
        return reply(&mut s, "405 Method Not Allowed", "GET /metrics\n");
    }
    let body = shared.metrics_text();
    reply(&mut s, "200 OK", &body)
}

fn reply(s: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}
