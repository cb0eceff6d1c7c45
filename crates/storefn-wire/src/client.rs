//! The client: one TCP connection, HELLO/AUTH on connect, many requests per frame (pipelined:
//! a batch goes out in one frame and its replies are matched by id in any order), and a
//! reconnect on the next call after the connection broke. Programs loaded through the client
//! are remembered, so an `UNKNOWN_PROG` (registry eviction, server restart) re-sends LOAD_PROG
//! and retries once.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::auth;
use crate::frame::{
    decode_header, FrameBuf, Messages, ProtoError, FRAME_HEADER_BYTES, HASH_BYTES, KIND_REQUEST,
    KIND_RESPONSE,
};
use crate::hash::{prog_hash, ProgHash};
use crate::limits::DEFAULT_TIMEOUT;
use crate::limits::{MAX_FRAME_BYTES, MAX_MSGS_PER_FRAME};
use crate::msg::{
    put_request, FileVersion, Request, Response, StatusCode, HELLO_FLAG_AUTH_REQUIRED,
};

/// How to connect.
#[derive(Clone)]
pub struct ClientConfig {
    pub tenant: String,
    /// `None`: no auth (the server must not require it).
    pub secret: Option<Vec<u8>>,
    /// Connect, send and receive timeout.
    pub timeout: Duration,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("tenant", &self.tenant)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self { tenant: "default".into(), secret: None, timeout: DEFAULT_TIMEOUT }
    }
}

impl ClientConfig {
    /// A tenant that authenticates with `secret` (a server's token file names both).
    #[must_use]
    pub fn with_secret(tenant: impl Into<String>, secret: impl Into<Vec<u8>>) -> Self {
        Self { tenant: tenant.into(), secret: Some(secret.into()), ..Self::default() }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("connect {addr}: {source}")]
    Connect { addr: String, source: std::io::Error },
    #[error("connection lost: {0}")]
    Io(#[source] std::io::Error),
    #[error("bad response: {0}")]
    Protocol(#[from] ProtoError),
    #[error("{op}: {name} ({status}): {message}")]
    Status { op: &'static str, status: u16, name: &'static str, message: String },
    #[error("server requires AUTH and no token was given")]
    AuthRequired,
    #[error("response for unknown request id {0}")]
    UnknownId(u64),
}

impl ClientError {
    /// The status code, if the server answered with one.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Reads response frame number `frame` from `r`: the header, then the body into `body`,
/// resized to it (so no allocation once `body` has held a frame this large: a client that
/// keeps one buffer per connection reads every reply without allocating). Returns the body's
/// messages, each checked as it is taken.
///
/// # Errors
/// [`ClientError::Io`] reading; [`ClientError::Protocol`] for a bad header (naming `frame`).
pub fn read_response_frame<'b, R: Read>(
    r: &mut R,
    frame: u64,
    body: &'b mut Vec<u8>,
) -> Result<Messages<'b>, ClientError> {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    r.read_exact(&mut h).map_err(ClientError::Io)?;
    let hd = decode_header(&h, frame, KIND_RESPONSE)?;
    body.resize(hd.body_bytes as usize, 0);
    r.read_exact(body).map_err(ClientError::Io)?;
    Ok(Messages::new(body, hd.count, frame))
}

/// One reply, owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// 0 = OK.
    pub status: u16,
    pub message: String,
    pub version: FileVersion,
    /// READ data, XRP final scratch, LAMBDA output.
    pub data: Vec<u8>,
    pub hops: u32,
    /// LAMBDA r0; STAT size; WRITE bytes written.
    pub value: u64,
    pub hash: ProgHash,
}

impl Reply {
    fn from_response(r: &Response<'_>) -> Self {
        let mut o = Self::default();
        match *r {
            Response::Hello { .. } | Response::Auth => {}
            Response::LoadProg { hash, insns } => {
                o.hash = *hash;
                o.value = u64::from(insns);
            }
            Response::Read { version, data } => {
                o.version = version;
                o.data = data.to_vec();
            }
            Response::Xrp { version, hops, scratch } => {
                o.version = version;
                o.hops = hops;
                o.data = scratch.to_vec();
            }
            Response::Lambda { version, ret, out } => {
                o.version = version;
                o.value = ret;
                o.data = out.to_vec();
            }
            Response::Write { version, written } => {
                o.version = version;
                o.value = u64::from(written);
            }
            Response::Stat { version, size } => {
                o.version = version;
                o.value = size;
            }
            Response::Offload { served_by, data } => {
                o.value = u64::from(served_by);
                o.data = data.to_vec();
            }
            Response::LambdaWrite { version, written } => {
                o.version = version;
                o.value = written;
            }
            Response::Error { status, message, .. } => {
                o.status = status;
                o.message = String::from_utf8_lossy(message).into_owned();
            }
        }
        o
    }

    /// `Ok(self)` for status OK, else the typed error.
    ///
    /// # Errors
    /// [`ClientError::Status`].
    pub fn ok(self, op: &'static str) -> Result<Self, ClientError> {
        if self.status == 0 {
            return Ok(self);
        }
        let name = StatusCode::from_u16(self.status).map_or("UNKNOWN", StatusCode::name);
        Err(ClientError::Status { op, status: self.status, name, message: self.message })
    }
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    frames_in: u64,
    max_in_flight: usize,
}

/// A pipelined, reconnecting client.
#[derive(Debug)]
pub struct Client {
    addr: String,
    cfg: ClientConfig,
    conn: Option<Conn>,
    next_id: u64,
    frame: FrameBuf,
    rx: Vec<u8>,
    progs: HashMap<ProgHash, (u8, Vec<u8>, Vec<u8>)>,
    /// Connections made (1 + reconnects).
    pub connects: u64,
    /// Request frames sent (each a round trip when the caller waits for it).
    pub round_trips: u64,
}

impl Client {
    /// Connects (HELLO, and AUTH when the server asks).
    ///
    /// # Errors
    /// Connect/auth failures.
    pub fn connect(addr: &str, cfg: ClientConfig) -> Result<Self, ClientError> {
        let mut c = Self {
            addr: addr.to_string(),
            cfg,
            conn: None,
            next_id: 1,
            frame: FrameBuf::with_capacity(64 * 1024),
            rx: Vec::new(),
            progs: HashMap::new(),
            connects: 0,
            round_trips: 0,
        };
        c.ensure()?;
        Ok(c)
    }

    /// Names `fence` (a cluster's placement version) in every request sent from now on, so a
    /// server that is no longer a replica at that version refuses it (`STALE_PLACEMENT`);
    /// `None` sends plain requests.
    pub fn set_fence(&mut self, fence: Option<u64>) {
        self.frame.set_fence(fence);
    }

    /// The server this client talks to.
    #[must_use]
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Drops the connection (the next call reconnects).
    pub fn disconnect(&mut self) {
        self.conn = None;
    }

    fn ensure(&mut self) -> Result<(), ClientError> {
        if self.conn.is_some() {
            return Ok(());
        }
        let to = self.cfg.timeout;
        let cerr = |source| ClientError::Connect { addr: self.addr.clone(), source };
        let sa = self
            .addr
            .to_socket_addrs()
            .map_err(cerr)?
            .next()
            .ok_or_else(|| cerr(std::io::Error::other("address resolves to nothing")))?;
        let stream = TcpStream::connect_timeout(&sa, to).map_err(cerr)?;
        stream.set_nodelay(true).map_err(cerr)?;
        stream.set_read_timeout(Some(to)).map_err(cerr)?;
        stream.set_write_timeout(Some(to)).map_err(cerr)?;
        self.conn = Some(Conn { stream, frames_in: 0, max_in_flight: 1 });
        self.connects += 1;
        let tenant = self.cfg.tenant.clone().into_bytes();
        let r = self.exchange(&[Request::Hello { tenant: &tenant }]);
        let hello = match r {
            Ok(mut v) => v.remove(0),
            Err(e) => {
                self.conn = None;
                return Err(e);
            }
        };
        let Some((challenge, flags, max_in_flight)) = hello else {
            self.conn = None;
            return Err(ClientError::Protocol(ProtoError::Empty { frame: 0 }));
        };
        if let Some(c) = self.conn.as_mut() {
            c.max_in_flight = max_in_flight.max(1) as usize;
        }
        if flags & HELLO_FLAG_AUTH_REQUIRED != 0 {
            let Some(secret) = self.cfg.secret.clone() else {
                self.conn = None;
                return Err(ClientError::AuthRequired);
            };
            let mac = auth::mac(&secret, &challenge, &tenant);
            let replies = self.send_recv(&[Request::Auth { mac: &mac }]);
            match replies.and_then(|mut v| v.remove(0).ok("AUTH")) {
                Ok(_) => {}
                Err(e) => {
                    self.conn = None;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// HELLO exchange: returns the challenge, flags and in-flight limit.
    #[allow(clippy::type_complexity)]
    fn exchange(
        &mut self,
        reqs: &[Request<'_>],
    ) -> Result<Vec<Option<([u8; HASH_BYTES], u32, u32)>>, ClientError> {
        let mut out = vec![None; reqs.len()];
        self.roundtrip(reqs, |i, r| {
            if let Response::Hello { challenge, flags, max_in_flight, .. } = r {
                out[i] = Some((**challenge, *flags, *max_in_flight));
            }
        })?;
        Ok(out)
    }

    fn send_recv(&mut self, reqs: &[Request<'_>]) -> Result<Vec<Reply>, ClientError> {
        let mut out = vec![Reply::default(); reqs.len()];
        self.roundtrip(reqs, |i, r| out[i] = Reply::from_response(r))?;
        Ok(out)
    }

    /// Sends `reqs` (in frames of at most `MAX_MSGS_PER_FRAME` messages and the connection's
    /// in-flight limit) and hands each reply to `f` with its request index.
    fn roundtrip(
        &mut self,
        reqs: &[Request<'_>],
        mut f: impl FnMut(usize, &Response<'_>),
    ) -> Result<(), ClientError> {
        let res = self.roundtrip_inner(reqs, &mut f);
        if matches!(
            res,
            Err(ClientError::Io(_) | ClientError::Protocol(_) | ClientError::UnknownId(_))
        ) {
            // Whatever was in flight is lost with the connection; the next call reconnects.
            self.conn = None;
        }
        res
    }

    fn roundtrip_inner(
        &mut self,
        reqs: &[Request<'_>],
        f: &mut impl FnMut(usize, &Response<'_>),
    ) -> Result<(), ClientError> {
        let limit =
            self.conn.as_ref().map_or(1, |c| c.max_in_flight).min(MAX_MSGS_PER_FRAME as usize);
        let mut done = 0;
        while done < reqs.len() {
            let base_id = self.next_id;
            self.frame.begin(KIND_REQUEST);
            let mut n = 0;
            while done + n < reqs.len() && n < limit && self.frame.len() < MAX_FRAME_BYTES / 2 {
                put_request(&mut self.frame, base_id + n as u64, &reqs[done + n]);
                n += 1;
            }
            self.next_id += n as u64;
            let conn = self
                .conn
                .as_mut()
                .ok_or_else(|| ClientError::Io(std::io::Error::other("not connected")))?;
            conn.stream.write_all(self.frame.finish()).map_err(ClientError::Io)?;
            self.round_trips += 1;
            let mut got = 0;
            while got < n {
                let msgs = read_response_frame(&mut conn.stream, conn.frames_in, &mut self.rx)?;
                conn.frames_in += 1;
                for m in msgs {
                    let m = m?;
                    let idx = m.req_id.wrapping_sub(base_id);
                    if idx >= n as u64 {
                        return Err(ClientError::UnknownId(m.req_id));
                    }
                    let r = Response::parse(&m)?;
                    f(done + usize::try_from(idx).expect("< n"), &r);
                    got += 1;
                }
            }
            done += n;
        }
        Ok(())
    }

    /// The most requests the server lets this connection have outstanding.
    #[must_use]
    pub fn max_in_flight(&self) -> usize {
        self.conn.as_ref().map_or(1, |c| c.max_in_flight)
    }

    /// Streaming: sends `reqs` as one frame without waiting and returns the first id (the
    /// ids are consecutive). Replies come from [`Client::recv`]. The caller keeps at most
    /// [`Client::max_in_flight`] outstanding and receives every reply before using
    /// [`Client::call`] again.
    ///
    /// # Errors
    /// Connection errors (the connection is dropped; outstanding requests are lost).
    pub fn send(&mut self, reqs: &[Request<'_>]) -> Result<u64, ClientError> {
        self.ensure()?;
        let first = self.next_id;
        self.frame.begin(KIND_REQUEST);
        for (i, r) in reqs.iter().enumerate() {
            put_request(&mut self.frame, first + i as u64, r);
        }
        self.next_id += reqs.len() as u64;
        let conn = self.conn.as_mut().expect("ensured");
        if let Err(e) = conn.stream.write_all(self.frame.finish()) {
            self.conn = None;
            return Err(ClientError::Io(e));
        }
        self.round_trips += 1;
        Ok(first)
    }

    /// Streaming: receives one response frame and hands each reply to `f` with its id;
    /// returns how many.
    ///
    /// # Errors
    /// Connection and protocol errors (the connection is dropped).
    pub fn recv(&mut self, mut f: impl FnMut(u64, Reply)) -> Result<usize, ClientError> {
        let r = self.recv_inner(&mut f);
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    fn recv_inner(&mut self, f: &mut impl FnMut(u64, Reply)) -> Result<usize, ClientError> {
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| ClientError::Io(std::io::Error::other("not connected")))?;
        let msgs = read_response_frame(&mut conn.stream, conn.frames_in, &mut self.rx)?;
        conn.frames_in += 1;
        let mut n = 0;
        for m in msgs {
            let m = m?;
            f(m.req_id, Reply::from_response(&Response::parse(&m)?));
            n += 1;
        }
        Ok(n)
    }

    /// Sends requests, pipelined, and returns one reply per request (in order). A broken
    /// connection is reconnected once before sending.
    ///
    /// # Errors
    /// Connection and protocol errors; a status is carried in the [`Reply`].
    pub fn call(&mut self, reqs: &[Request<'_>]) -> Result<Vec<Reply>, ClientError> {
        self.ensure()?;
        let mut replies = self.send_recv(reqs)?;
        // Programs the server does not know (evicted, restarted): load them and retry once.
        let unknown: Vec<usize> = (0..reqs.len())
            .filter(|&i| replies[i].status == StatusCode::UnknownProg as u16)
            .collect();
        if unknown.is_empty() {
            return Ok(replies);
        }
        let mut reloaded: Vec<ProgHash> = Vec::new();
        for &i in &unknown {
            let h = match reqs[i] {
                Request::Xrp { hash, .. }
                | Request::Lambda { hash, .. }
                | Request::LambdaWrite { hash, .. } => *hash,
                _ => continue,
            };
            if reloaded.contains(&h) {
                continue;
            }
            let Some((ty, section, elf)) = self.progs.get(&h).cloned() else { continue };
            self.load_prog(ty, &section, &elf)?;
            reloaded.push(h);
        }
        let retry: Vec<Request<'_>> = unknown.iter().map(|&i| reqs[i]).collect();
        let again = self.send_recv(&retry)?;
        for (k, &i) in unknown.iter().enumerate() {
            replies[i] = again[k].clone();
        }
        Ok(replies)
    }

    /// LOAD_PROG: verifies the program on the server; returns its hash (also remembered, so
    /// it is re-sent when the server forgets it).
    ///
    /// # Errors
    /// `PROG_REJECTED` with the verifier's message; connection errors.
    pub fn load_prog(
        &mut self,
        prog_type: u8,
        section: &[u8],
        elf: &[u8],
    ) -> Result<ProgHash, ClientError> {
        self.ensure()?;
        let r = self
            .send_recv(&[Request::LoadProg { prog_type, section, elf }])?
            .remove(0)
            .ok("LOAD_PROG")?;
        debug_assert_eq!(r.hash, prog_hash(prog_type, section, elf), "server hashes as we do");
        self.progs.insert(r.hash, (prog_type, section.to_vec(), elf.to_vec()));
        Ok(r.hash)
    }

    /// One request, its reply checked for OK.
    ///
    /// # Errors
    /// Connection errors and non-OK statuses.
    pub fn one(&mut self, req: &Request<'_>) -> Result<Reply, ClientError> {
        let op = req.op_name();
        self.call(std::slice::from_ref(req))?.remove(0).ok(op)
    }
}
