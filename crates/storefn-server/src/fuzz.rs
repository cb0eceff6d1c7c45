//! The server's fuzz property past authentication, shared by the cargo-fuzz target
//! `server_authed` (fuzz/) and the bounded proptest in `tests/fuzz_authed.rs`, so the property
//! the fuzzer checks is compiled and run in CI.
//!
//! A live server on loopback (a token file with one tenant, a small served file): each case
//! authenticates a fresh connection with HELLO and AUTH, then sends frames built from the
//! input — well-formed frame headers around messages of every op (the op byte, the request
//! id and the payload bytes all chosen by the input, so every request parser and handler is
//! reached with arbitrary fields), or raw bytes. The property: that connection gets answers
//! or is closed within a bound (never a hang), and another authenticated client is still
//! served correctly afterwards (a bad client hurts only its own connection; a panicking
//! worker thread would stop answering it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use storefn_wire::layout::{FRAME_OFF_BODY_BYTES, FRAME_OFF_COUNT};
use storefn_wire::{put_request, read_response_frame, Client, ClientConfig, FrameBuf, Request};
use storefn_wire::{Response, KIND_REQUEST};

use crate::{Server, ServerConfig};

const TENANT: &str = "fuzz";
const SECRET: &str = "fuzz-secret-0123456789abcdef";
/// Bytes of the served file `f` (its content is `FILE_BYTE`).
const FILE_BYTES: usize = 64 * 1024;
const FILE_BYTE: u8 = 0x5a;
/// How long one case waits for the server's answers or its close.
const CASE_TIMEOUT: Duration = Duration::from_secs(5);
/// Frames one case sends at most (the rest of the input is ignored).
const MAX_FRAMES: usize = 16;
/// Bytes of one message payload at most (a frame header may still announce more).
const MAX_PAYLOAD: usize = 4096;

/// A server to fuzz, and the directory it serves (removed by [`AuthedTarget::stop`]).
#[derive(Debug)]
pub struct AuthedTarget {
    server: Server,
    dir: PathBuf,
}

impl AuthedTarget {
    /// Starts a server on loopback serving a fresh directory under the system's temp dir.
    ///
    /// # Panics
    /// The directory or the server cannot be set up.
    #[must_use]
    pub fn start(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("storefn-fuzz-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("f"), vec![FILE_BYTE; FILE_BYTES]).expect("served file");
        std::fs::write(dir.join("tokens"), format!("{TENANT} {SECRET}\n")).expect("token file");
        let mut cfg = ServerConfig::new(&dir);
        cfg.tokens = Some(crate::auth::load_tokens(&dir.join("tokens")).expect("tokens"));
        cfg.slow_client_timeout = Duration::from_secs(2);
        let server = Server::start("127.0.0.1:0", cfg).expect("server");
        Self { server, dir }
    }

    /// Stops the server and removes its directory.
    ///
    /// # Panics
    /// A server thread failed (a panic in a worker is a finding).
    pub fn stop(self) {
        self.server.stop();
        let r = self.server.join();
        let _ = std::fs::remove_dir_all(&self.dir);
        r.expect("server threads ended cleanly");
    }

    /// The property for one input (see the module's note).
    ///
    /// # Panics
    /// When it does not hold (the fuzzer's finding).
    pub fn check(&self, data: &[u8]) {
        let addr = self.server.local_addr();
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(CASE_TIMEOUT)).expect("timeout");
        s.set_write_timeout(Some(CASE_TIMEOUT)).expect("timeout");
        authenticate(&mut s);
        let mut sent = 0;
        for f in Frames(data).take(MAX_FRAMES) {
            if s.write_all(&f).is_err() {
                break; // closed by the server: allowed
            }
            sent += 1;
        }
        if sent > 0 {
            drain(&mut s);
        }
        drop(s);
        let cfg = ClientConfig::with_secret(TENANT, SECRET);
        let mut c = Client::connect(&addr.to_string(), cfg).expect("another client connects");
        let r = c.one(&Request::Read { path: b"f", offset: 4096, len: 512 });
        let r = r.expect("another client is served");
        assert_eq!(r.data, [FILE_BYTE; 512], "another client reads the right bytes");
    }
}

/// HELLO and AUTH on a raw connection, as a client would.
fn authenticate(s: &mut TcpStream) {
    let mut f = FrameBuf::default();
    f.begin(KIND_REQUEST);
    put_request(&mut f, 1, &Request::Hello { tenant: TENANT.as_bytes() });
    s.write_all(f.finish()).expect("HELLO");
    let mut body = Vec::new();
    let mut msgs = read_response_frame(s, 0, &mut body).expect("HELLO answered");
    let m = msgs.next().expect("one answer").expect("well-formed");
    let Ok(Response::Hello { challenge, .. }) = Response::parse(&m) else {
        panic!("HELLO refused: status {}", m.status)
    };
    let mac = storefn_wire::mac(SECRET.as_bytes(), challenge, TENANT.as_bytes());
    f.begin(KIND_REQUEST);
    put_request(&mut f, 2, &Request::Auth { mac: &mac });
    s.write_all(f.finish()).expect("AUTH");
    let mut msgs = read_response_frame(s, 1, &mut body).expect("AUTH answered");
    let m = msgs.next().expect("one answer").expect("well-formed");
    assert_eq!(m.status, 0, "AUTH accepted");
}

/// Reads until the server closes the connection or stays quiet; bounded by `CASE_TIMEOUT`
/// per read and twice that in all (a server that neither answers nor closes within it hangs).
fn drain(s: &mut TcpStream) {
    let t0 = Instant::now();
    let mut buf = [0u8; 16 * 1024];
    s.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    let mut quiet = 0;
    while t0.elapsed() < CASE_TIMEOUT * 2 {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => quiet = 0,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                quiet += 1;
                // Answers came (or none were due) and the connection stays usable.
                if quiet >= 2 {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return,
            Err(_) => return, // reset by the server: closed
        }
    }
    panic!("the connection neither went quiet nor closed within {:?}", CASE_TIMEOUT * 2);
}

/// The frames an input describes. Each starts with a control byte: `0` = raw bytes (the next
/// byte says how many, up to 255, sent as they are); otherwise a request frame of
/// `1 + ctl % 4` messages, each `op u8 | req_id u8 | len u16 | payload`, with a correct header
/// (magic, version, kind, lengths) — unless `ctl & 0x80`, when the header's body length is
/// the input's next u16 instead (frames that lie about their size).
struct Frames<'a>(&'a [u8]);

impl Iterator for Frames<'_> {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let (&ctl, rest) = self.0.split_first()?;
        self.0 = rest;
        if ctl == 0 {
            let (&n, rest) = self.0.split_first()?;
            let n = usize::from(n).min(rest.len());
            self.0 = &rest[n..];
            return Some(rest[..n].to_vec());
        }
        let mut f = FrameBuf::default();
        f.begin(KIND_REQUEST);
        let mut count = 0u32;
        for _ in 0..=(ctl % 4) {
            let [op, id, l0, l1, ..] = *self.0 else { break };
            let len = usize::from(u16::from_le_bytes([l0, l1])).min(MAX_PAYLOAD);
            let body = &self.0[4..];
            let len = len.min(body.len());
            // Every op code the protocol has (and one past them).
            let start = f.begin_msg(u64::from(id), op % 12, 0);
            f.buf.extend_from_slice(&body[..len]);
            f.end_msg(start);
            self.0 = &body[len..];
            count += 1;
        }
        if count == 0 {
            return None;
        }
        let mut bytes = f.finish().to_vec();
        if ctl & 0x80 != 0 {
            if let [a, b, ..] = *self.0 {
                self.0 = &self.0[2..];
                let lie = u32::from(u16::from_le_bytes([a, b]));
                bytes[FRAME_OFF_BODY_BYTES..FRAME_OFF_BODY_BYTES + 4]
                    .copy_from_slice(&lie.to_le_bytes());
            }
        }
        bytes[FRAME_OFF_COUNT..FRAME_OFF_COUNT + 4].copy_from_slice(&count.to_le_bytes());
        Some(bytes)
    }
}
