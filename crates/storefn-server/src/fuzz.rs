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
/// The other client: read-only over the whole directory (the fuzzed tenant may write only
/// beneath `w/`, so it cannot change what the victim checks).
const VICTIM: &str = "victim";
const VICTIM_SECRET: &str = "victim-secret-0123456789abc";
/// Paths a structured message names: the fuzzed tenant's file, files outside its scope, a
/// missing one, escapes.
const PATHS: [&[u8]; 8] =
    [b"w/f", b"w/f", b"f", b"w/missing", b"../f", b"/etc/passwd", b"w/../f", b""];
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
        std::fs::create_dir_all(dir.join("w")).expect("tenant dir");
        std::fs::write(dir.join("w/f"), vec![1u8; FILE_BYTES]).expect("tenant file");
        let tokens = format!("{TENANT} {SECRET} rw dir=w\n{VICTIM} {VICTIM_SECRET} ro\n");
        std::fs::write(dir.join("tokens"), tokens).expect("token file");
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

    /// The property for one input (see the module's note); returns what the fuzzed
    /// connection got.
    ///
    /// # Panics
    /// When it does not hold (the fuzzer's finding).
    pub fn check(&self, data: &[u8]) -> Outcome {
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
        let outcome = if sent > 0 { drain(&mut s) } else { Outcome::default() };
        drop(s);
        let cfg = ClientConfig::with_secret(VICTIM, VICTIM_SECRET);
        let mut c = Client::connect(&addr.to_string(), cfg).expect("another client connects");
        let r = c.one(&Request::Read { path: b"f", offset: 4096, len: 512 });
        let r = r.expect("another client is served");
        assert_eq!(r.data, [FILE_BYTE; 512], "another client reads the right bytes");
        outcome
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

/// What the fuzzed connection got after its frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Response bytes received.
    pub answered_bytes: usize,
    /// The server closed the connection.
    pub closed: bool,
}

/// Reads until the server closes the connection or stays quiet; bounded by `CASE_TIMEOUT`
/// per read and twice that in all (a server that neither answers nor closes within it hangs).
fn drain(s: &mut TcpStream) -> Outcome {
    let t0 = Instant::now();
    let mut buf = [0u8; 16 * 1024];
    s.set_read_timeout(Some(Duration::from_millis(300))).expect("timeout");
    let mut quiet = 0;
    let mut o = Outcome::default();
    while t0.elapsed() < CASE_TIMEOUT * 2 {
        match s.read(&mut buf) {
            Ok(0) => return Outcome { closed: true, ..o },
            Ok(n) => {
                o.answered_bytes += n;
                quiet = 0;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                quiet += 1;
                // Answers came (or none were due) and the connection stays usable.
                if quiet >= 2 {
                    return o;
                }
            }
            Err(_) => return Outcome { closed: true, ..o }, // reset by the server
        }
    }
    panic!("the connection neither went quiet nor closed within {:?}", CASE_TIMEOUT * 2);
}

/// The frames an input describes. Each starts with a control byte: `0` = raw bytes (the next
/// byte says how many, up to 255, sent as they are); `1..=63` = a frame of `1 + ctl % 4`
/// structured requests (every op, well-formed, with fields from the input: see
/// [`structured`]); otherwise a request frame of
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
        if ctl < 64 {
            for i in 0..=(ctl % 4) {
                let Some(rest) = structured(self.0, |r| put_request(&mut f, u64::from(i), r))
                else {
                    break;
                };
                self.0 = rest;
            }
            return (!f.is_empty()).then(|| f.finish().to_vec());
        }
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

/// One well-formed request of any op, its fields taken from `d`: `op u8 | path u8 | a u64 |
/// b u32 | n u8 | bytes[n % 64]` (`a`: offset; `b`: length, out_len or out_cap; the bytes:
/// scratch, data, ELF, message, tenant or hash seed). Hands it to `put` and returns the rest
/// of the input; `None` when too little is left.
fn structured(d: &[u8], put: impl FnOnce(&Request<'_>)) -> Option<&[u8]> {
    const HEAD: usize = 1 + 1 + 8 + 4 + 1;
    if d.len() < HEAD {
        return None;
    }
    let (op, path) = (d[0], PATHS[usize::from(d[1]) % PATHS.len()]);
    let a = u64::from_le_bytes(d[2..10].try_into().expect("8"));
    let b = u32::from_le_bytes(d[10..14].try_into().expect("4"));
    let n = (usize::from(d[14]) % 64).min(d.len() - HEAD);
    let bytes = &d[HEAD..HEAD + n];
    let mut hash = [0u8; storefn_wire::HASH_BYTES];
    for (h, x) in hash.iter_mut().zip(bytes) {
        *h = *x;
    }
    // Offsets mostly inside the files, sometimes anywhere; lengths up to the wire's bounds.
    let offset = if a & 1 == 0 { (a >> 1) % (2 * FILE_BYTES as u64) } else { a };
    let len = b % (storefn_wire::limits::MAX_READ_BYTES + 1);
    let small = b % (storefn_wire::limits::SCRATCH_BYTES as u32 + 1);
    let r = match op % 10 {
        0 => Request::Hello { tenant: &bytes[..n.min(storefn_wire::limits::MAX_TENANT_BYTES)] },
        1 => Request::Auth { mac: &hash },
        2 => Request::LoadProg { prog_type: 1 + (op >> 7), section: &[], elf: bytes },
        3 => Request::Read { path, offset, len },
        4 => Request::Xrp { path, offset, len, hash: &hash, scratch: bytes, out_len: small },
        5 => Request::Lambda { path, offset, len: b, hash: &hash, out_cap: small },
        6 => Request::Write { path, offset, data: bytes },
        7 => Request::Stat { path },
        8 => Request::Offload { msg: bytes },
        _ => Request::LambdaWrite { path, offset, hash: &hash, input: bytes, out_cap: small },
    };
    put(&r);
    Some(&d[HEAD + n..])
}

// The cargo-fuzz target keeps one target in a `static OnceLock` (fuzz/ is built apart from
// the workspace): checked here, where CI compiles it.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<AuthedTarget>();
};
