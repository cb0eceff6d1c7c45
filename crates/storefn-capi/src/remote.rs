//! The remote client: a connection to a storefn server (HELLO, AUTH with a token file),
//! programs pushed down once (LOAD_PROG) and run next to the data (XRP, LAMBDA), plain READ,
//! and many requests pipelined in one frame.

use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

// The wire: the only place this crate names the client and the protocol.
use storefn_vm::VerifiedProgram;
use storefn_wire::{
    ClientConfig, ClientError, ProgHash, Request, StatusCode, PROG_TYPE_LAMBDA, PROG_TYPE_XRP,
};

use crate::prog::{Prog, ProgType};
use crate::ptr;
use crate::status::{guard, Fail, Res, Status};

pub(crate) use storefn_kv::{RemoteKv, RemotePath};
pub(crate) use storefn_wire::Client as WireClient;

/// A connection to a storefn server (opaque). Owned by one thread at a time.
pub struct Client {
    pub(crate) wire: WireClient,
    /// Programs pushed on this connection, by identity (the client re-pushes them itself
    /// when the server forgets one).
    progs: Vec<(Arc<VerifiedProgram>, ProgHash)>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("progs", &self.progs.len()).finish_non_exhaustive()
    }
}

pub(crate) fn client_err(e: &ClientError) -> Fail {
    let status = match e {
        ClientError::Status { status, .. } if *status == StatusCode::ProgRejected as u16 => {
            Status::Verify
        }
        ClientError::Status { .. } => Status::Remote,
        _ => Status::Conn,
    };
    Fail::new(status, e.to_string())
}

/// Connects to `addr` with the token file's first `TENANT SECRET` line (or none).
pub(crate) fn connect(addr: &str, token_file: Option<&str>, timeout_ms: u32) -> Res<WireClient> {
    let mut cfg = match token_file {
        Some(t) => storefn_server::client_config(std::path::Path::new(t))
            .map_err(|e| Fail::arg(format!("token file {t}: {e}")))?,
        None => ClientConfig::default(),
    };
    if timeout_ms > 0 {
        cfg.timeout = Duration::from_millis(u64::from(timeout_ms));
    }
    WireClient::connect(addr, cfg).map_err(|e| client_err(&e))
}

impl Client {
    fn hash(&mut self, prog: &Prog) -> Res<ProgHash> {
        let key = Arc::as_ptr(&prog.verified);
        if let Some((_, h)) = self.progs.iter().find(|(p, _)| Arc::as_ptr(p) == key) {
            return Ok(*h);
        }
        let ty = match prog.ty {
            ProgType::Xrp => PROG_TYPE_XRP,
            ProgType::Lambda => PROG_TYPE_LAMBDA,
        };
        let h = self
            .wire
            .load_prog(ty, prog.section.as_bytes(), &prog.elf)
            .map_err(|e| client_err(&e))?;
        self.progs.push((Arc::clone(&prog.verified), h));
        Ok(h)
    }
}

fn u32_len(v: usize, what: &str) -> Res<u32> {
    u32::try_from(v).map_err(|_| Fail::arg(format!("{what} = {v} does not fit 32 bits")))
}

/// Kinds of pipelined request (`storefn_remote_req.kind`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReqKind {
    /// READ `count` bytes at `offset` into `buf` (`buf_len` >= `count`).
    Read = 0,
    /// XRP: run `prog`'s chain from `[offset, +count)` on the server; `buf[0..buf_len)` is the
    /// scratch, sent and overwritten with the final scratch.
    Xrp = 1,
    /// LAMBDA: run `prog` over `[offset, +count)` on the server; its output goes to
    /// `buf[0..buf_len)`.
    Lambda = 2,
}

/// One request of `storefn_client_call`. The caller fills the inputs; the call fills
/// `status`, `result_len` and `hops`.
#[repr(C)]
#[derive(Debug)]
pub struct RemoteReq {
    /// A `storefn_req_kind` value.
    pub kind: i32,
    /// File path relative to the server's served directory (NUL-terminated).
    pub path: *const c_char,
    pub offset: u64,
    pub count: u32,
    /// The program (XRP and LAMBDA; ignored for READ; pushed on first use).
    pub prog: *const Prog,
    /// READ data / XRP scratch (in and out) / LAMBDA output.
    pub buf: *mut u8,
    pub buf_len: usize,
    /// Out: this request's outcome, a `storefn_status` value (the call returns OK when every
    /// reply arrived). An int, not the enum, so the caller may leave it uninitialised.
    pub status: i32,
    /// Out: bytes written into `buf`.
    pub result_len: usize,
    /// Out: blocks an XRP chain read.
    pub hops: u32,
}

impl Client {
    /// The hash of `r`'s program, pushed on first use (`None` for READ).
    ///
    /// # Safety
    /// `r`'s pointers as `storefn_client_call` states.
    unsafe fn prog_hash(&mut self, r: &RemoteReq) -> Res<Option<ProgHash>> {
        match r.kind {
            0 => Ok(None),
            1 | 2 => {
                // SAFETY: the caller's contract.
                let p = unsafe { ptr::shared(r.prog, "prog")? };
                self.hash(p).map(Some)
            }
            k => Err(Fail::arg(format!("request kind {k} is not READ (0), XRP (1) or LAMBDA (2)"))),
        }
    }
}

/// The wire request for `r`, borrowing the caller's path and scratch for the call.
///
/// # Safety
/// `r`'s pointers as `storefn_client_call` states, valid for `'a`.
unsafe fn wire_req<'a>(r: &RemoteReq, hash: Option<&'a ProgHash>) -> Res<Request<'a>> {
    // SAFETY: the caller's contract.
    let path = unsafe { ptr::string(r.path, "path")? }.as_bytes();
    let (offset, len) = (r.offset, r.count);
    let hash = || hash.ok_or_else(|| Fail::arg("prog is required for XRP and LAMBDA"));
    Ok(match r.kind {
        0 => Request::Read { path, offset, len },
        1 => {
            crate::engine::check_scratch(r.buf_len)?;
            // SAFETY: the caller's contract.
            let scratch = unsafe { ptr::bytes(r.buf, r.buf_len, "buf")? };
            let out_len = u32_len(r.buf_len, "buf_len")?;
            Request::Xrp { path, offset, len, hash: hash()?, scratch, out_len }
        }
        2 => Request::Lambda {
            path,
            offset,
            len,
            hash: hash()?,
            out_cap: u32_len(r.buf_len, "buf_len")?,
        },
        k => {
            return Err(Fail::arg(format!(
                "request kind {k} is not READ (0), XRP (1) or LAMBDA (2)"
            )))
        }
    })
}

/// Connects to a storefn server at `addr` ("HOST:PORT"), authenticating with the first
/// `TENANT SECRET` line of `token_file` (NULL: no authentication). `timeout_ms` bounds
/// connect, send and receive (0: 10 s). A connection that breaks is re-made on the next call.
///
/// Threads: a client belongs to one thread at a time.
/// Ownership: `addr` and `token_file` are read during the call. `*out` receives a client
/// owned by the caller; release it with `storefn_client_free`.
///
/// Errors: STOREFN_STATUS_CONN (connect, HELLO or AUTH failed), STOREFN_STATUS_ARG (bad token
/// file).
///
/// # Safety
/// `addr` is a NUL-terminated string, `token_file` NULL or one; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_client_connect(
    addr: *const c_char,
    token_file: *const c_char,
    timeout_ms: u32,
    out: *mut *mut Client,
) -> Status {
    guard("storefn_client_connect", || {
        // SAFETY: the caller's contract.
        let (addr, tf, out) = unsafe {
            (
                ptr::string(addr, "addr")?,
                ptr::opt_string(token_file, "token_file")?,
                ptr::obj(out, "out")?,
            )
        };
        let wire = connect(addr, tf, timeout_ms)?;
        *out = Box::into_raw(Box::new(Client { wire, progs: Vec::new() }));
        Ok(())
    })
}

/// Closes the connection and releases the client. NULL is a no-op.
///
/// # Safety
/// `client` is NULL or came from `storefn_client_connect` and was not freed before.
#[no_mangle]
pub unsafe extern "C" fn storefn_client_free(client: *mut Client) {
    // SAFETY: the caller's contract is free_handle's.
    unsafe { ptr::free_handle("storefn_client_free", client) };
}

/// Pushes `prog` to the server (LOAD_PROG: the server verifies it again). Calls that run a
/// program push it themselves on first use; this reports a refusal early.
///
/// Errors: STOREFN_STATUS_VERIFY (the server's verifier refused it: its message),
/// STOREFN_STATUS_REMOTE, STOREFN_STATUS_CONN.
///
/// # Safety
/// `client` and `prog` are live handles.
#[no_mangle]
pub unsafe extern "C" fn storefn_client_push(client: *mut Client, prog: *const Prog) -> Status {
    guard("storefn_client_push", || {
        // SAFETY: the caller's contract.
        let (c, p) = unsafe { (ptr::obj(client, "client")?, ptr::shared(prog, "prog")?) };
        c.hash(p).map(|_| ())
    })
}

/// Pipelined calls: sends `reqs[0..n)` in one frame, waits for every reply and fills each
/// request's `status`, `result_len` and `hops` (and its `buf`). Returns OK when every reply
/// arrived, whatever each request's own status.
///
/// Ownership: `reqs` and everything its entries point at are borrowed for the call only.
///
/// Errors: STOREFN_STATUS_CONN (no reply: the connection failed; the requests' statuses are
/// not set), STOREFN_STATUS_ARG (a bad request; nothing was sent), STOREFN_STATUS_VERIFY.
///
/// # Safety
/// `client` is a live client; `reqs` holds `n` entries whose pointers are valid as
/// `storefn_remote_req` describes.
#[no_mangle]
pub unsafe extern "C" fn storefn_client_call(
    client: *mut Client,
    reqs: *mut RemoteReq,
    n: usize,
) -> Status {
    guard("storefn_client_call", || {
        // SAFETY: the caller's contract.
        let c = unsafe { ptr::obj(client, "client")? };
        if reqs.is_null() && n > 0 {
            return Err(Fail::arg("reqs is NULL"));
        }
        let reqs: &mut [RemoteReq] = if n == 0 {
            &mut []
        } else {
            // SAFETY: `n` entries, the caller's contract.
            unsafe { std::slice::from_raw_parts_mut(reqs, n) }
        };
        let at =
            |i: usize| move |f: Fail| Fail::new(f.status, format!("request {i}: {}", f.message));
        let mut hashes = Vec::with_capacity(n);
        for (i, r) in reqs.iter().enumerate() {
            // SAFETY: the caller's contract.
            hashes.push(unsafe { c.prog_hash(r) }.map_err(at(i))?);
        }
        let mut wire = Vec::with_capacity(n);
        for (i, (r, h)) in reqs.iter().zip(&hashes).enumerate() {
            // SAFETY: the caller's contract; the requests are used before this call returns.
            wire.push(unsafe { wire_req(r, h.as_ref()) }.map_err(at(i))?);
        }
        let ops: Vec<&'static str> = wire.iter().map(op_name).collect();
        let replies = c.wire.call(&wire).map_err(|e| client_err(&e))?;
        drop(wire);
        for ((r, reply), op) in reqs.iter_mut().zip(replies).zip(ops) {
            fill(r, reply, op);
        }
        Ok(())
    })
}

fn op_name(w: &Request<'_>) -> &'static str {
    match w {
        Request::Read { .. } => "READ",
        Request::Xrp { .. } => "XRP",
        _ => "LAMBDA",
    }
}

/// Copies one reply into its request.
fn fill(r: &mut RemoteReq, reply: storefn_wire::Reply, op: &'static str) {
    match reply.ok(op) {
        Ok(reply) => {
            let n = reply.data.len().min(r.buf_len);
            if n > 0 {
                // SAFETY: `buf` holds `buf_len` writable bytes (storefn_client_call's contract).
                unsafe { std::ptr::copy_nonoverlapping(reply.data.as_ptr(), r.buf, n) };
            }
            r.status = Status::Ok as i32;
            r.result_len = n;
            r.hops = reply.hops;
        }
        Err(e) => {
            let f = client_err(&e);
            crate::status::set_last(&format!("storefn_client_call: {}", f.message));
            r.status = f.status as i32;
            r.result_len = 0;
            r.hops = 0;
        }
    }
}

/// One request through `storefn_client_call`, its status returned.
///
/// # Safety
/// As `storefn_client_call` with one request.
unsafe fn one(client: *mut Client, mut r: RemoteReq) -> Res<RemoteReq> {
    // SAFETY: forwarded.
    let s = unsafe { storefn_client_call(client, &raw mut r, 1) };
    if s != Status::Ok {
        return Err(Fail::new(s, last()));
    }
    if r.status != Status::Ok as i32 {
        return Err(Fail::new(crate::status::Status::from_i32(r.status), last()));
    }
    Ok(r)
}

/// The last error's text without the name of the function that set it.
fn last() -> String {
    // SAFETY: storefn_last_error returns a valid NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(crate::status::storefn_last_error()) };
    let s = s.to_string_lossy();
    s.split_once(": ").map_or_else(|| s.to_string(), |(_, m)| m.to_string())
}

fn req(
    kind: ReqKind,
    path: *const c_char,
    offset: u64,
    count: u32,
    prog: *const Prog,
    buf: *mut u8,
    buf_len: usize,
) -> RemoteReq {
    RemoteReq {
        kind: kind as i32,
        path,
        offset,
        count,
        prog,
        buf,
        buf_len,
        status: 0,
        result_len: 0,
        hops: 0,
    }
}

/// XRP pushed down: the server reads `count` bytes at `offset` of `path` (relative to its
/// served directory), runs `prog`'s chain next to the data and returns the final scratch into
/// `scratch[0..scratch_len)` (sent as the chain's initial scratch). `hops` (NULL: not wanted)
/// receives the blocks the server read. One round trip per call.
///
/// Errors: STOREFN_STATUS_REMOTE (the server's status and message: a fault, a path outside
/// the served directory), STOREFN_STATUS_CONN, STOREFN_STATUS_SCRATCH_TOO_LARGE,
/// STOREFN_STATUS_VERIFY.
///
/// # Safety
/// `client`, `prog` live handles; `path` NUL-terminated; `scratch` holds `scratch_len`
/// bytes (NULL only with 0); `hops` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_client_read_xrp(
    client: *mut Client,
    path: *const c_char,
    count: u32,
    offset: u64,
    prog: *const Prog,
    scratch: *mut u8,
    scratch_len: usize,
    hops: *mut u32,
) -> Status {
    guard("storefn_client_read_xrp", || {
        // SAFETY: forwarded contract.
        let r = unsafe {
            one(client, req(ReqKind::Xrp, path, offset, count, prog, scratch, scratch_len))?
        };
        // SAFETY: the caller's contract.
        unsafe { ptr::put(hops, r.hops) };
        Ok(())
    })
}

/// LAMBDA on the server: `prog` runs over `[offset, +count)` of `path` there and only its
/// output crosses the network, into `out[0..out_cap)`; `*out_len` receives its length.
///
/// Errors: as `storefn_client_read_xrp`.
///
/// # Safety
/// `client`, `prog` live handles; `path` NUL-terminated; `out` holds `out_cap` bytes (NULL
/// only with 0); `out_len` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_client_lambda(
    client: *mut Client,
    path: *const c_char,
    count: u32,
    offset: u64,
    prog: *const Prog,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
) -> Status {
    guard("storefn_client_lambda", || {
        // SAFETY: the caller's contract.
        let ol = unsafe { ptr::obj(out_len, "out_len")? };
        // SAFETY: forwarded contract.
        let r =
            unsafe { one(client, req(ReqKind::Lambda, path, offset, count, prog, out, out_cap))? };
        *ol = r.result_len;
        Ok(())
    })
}

/// READ: `count` bytes at `offset` of `path` on the server into `buf` (which holds
/// `count` bytes); `*got` receives the bytes read (fewer at the end of the file).
///
/// Errors: STOREFN_STATUS_REMOTE, STOREFN_STATUS_CONN.
///
/// # Safety
/// `client` live; `path` NUL-terminated; `buf` holds `count` writable bytes; `got` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_client_read(
    client: *mut Client,
    path: *const c_char,
    buf: *mut u8,
    count: u32,
    offset: u64,
    got: *mut usize,
) -> Status {
    guard("storefn_client_read", || {
        // SAFETY: the caller's contract.
        let g = unsafe { ptr::obj(got, "got")? };
        if buf.is_null() && count > 0 {
            return Err(Fail::arg("buf is NULL"));
        }
        // SAFETY: forwarded contract.
        let r = unsafe {
            one(
                client,
                req(ReqKind::Read, path, offset, count, std::ptr::null(), buf, count as usize),
            )?
        };
        *g = r.result_len;
        Ok(())
    })
}
