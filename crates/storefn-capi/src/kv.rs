//! BPF-KV convenience calls: `get` and `multiget` on a store, local (XRP chains through an
//! engine, logged puts laid over the tree as `storefn kv get` does) or on a server (pushdown).

use std::ffi::c_char;
use std::sync::Arc;

use storefn_kv::Memtable;
use storefn_kv::{open_path, PathOptions};
use storefn_kv::{Abi, LookupPath};

use crate::limits::VALUE_BYTES;
use crate::ptr;
use crate::remote::{connect, RemoteKv, RemotePath};
use crate::status::{guard, Fail, Res, Status};

/// A BPF-KV store (opaque), local or remote. Used only by the thread that opened it.
pub struct Kv {
    inner: Inner,
}

enum Inner {
    Local { mem: Memtable, path: Box<dyn LookupPath> },
    Remote(Box<RemoteKv>),
}

impl std::fmt::Debug for Kv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.inner {
            Inner::Local { .. } => "local",
            Inner::Remote(_) => "remote",
        };
        f.debug_struct("Kv").field("kind", &kind).finish_non_exhaustive()
    }
}

fn kv_err(e: impl std::fmt::Display) -> Fail {
    Fail::new(Status::Kv, e.to_string())
}

fn remote_err(e: &storefn_kv::RemoteKvError) -> Fail {
    match e {
        storefn_kv::RemoteKvError::Client(c) => crate::remote::client_err(c),
        other => kv_err(other),
    }
}

impl Kv {
    fn open_local(db: &str, cache_levels: u32) -> Res<Self> {
        let view = storefn_kv::open_read(std::path::Path::new(db), cache_levels, None)
            .map_err(|e| kv_err(format!("{db}: {e}")))?;
        let store = Arc::new(view.store);
        let opts = PathOptions {
            batch: 32,
            abi: Abi::default(),
            keys_per_chain: Abi::default().max_keys_per_chain(),
            ..PathOptions::default()
        };
        let path = open_path("xrp", &store, &opts).map_err(|e| kv_err(format!("{db}: {e}")))?;
        Ok(Self { inner: Inner::Local { mem: view.mem, path } })
    }

    fn multiget(&mut self, keys: &[u64]) -> Res<Vec<Option<[u8; VALUE_BYTES]>>> {
        match &mut self.inner {
            Inner::Local { mem, path } => {
                storefn_kv::multiget(path.as_mut(), mem, keys).map_err(kv_err)
            }
            Inner::Remote(r) => r.get_many(keys, RemotePath::Pushdown).map_err(|e| remote_err(&e)),
        }
    }
}

/// Opens the BPF-KV store `db` (its tree file; the log beside it is read too) for lookups on
/// this machine, through XRP chains on an engine of its own. `cache_levels` top levels are
/// kept in memory. Read-only: nothing is written, locked against writers or repaired.
///
/// Ownership: `db` is read during the call; `*out` receives a store owned by the caller,
/// released with `storefn_kv_free`. Threads: use it only on the thread that opened it (a
/// local store drives an io_uring engine of that thread); open one per thread.
///
/// Errors: STOREFN_STATUS_KV (missing, damaged or not a BPF-KV store; the message names the
/// file).
///
/// # Safety
/// `db` NUL-terminated; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_kv_open(
    db: *const c_char,
    cache_levels: u32,
    out: *mut *mut Kv,
) -> Status {
    guard("storefn_kv_open", || {
        // SAFETY: the caller's contract.
        let (db, out) = unsafe { (ptr::string(db, "db")?, ptr::obj(out, "out")?) };
        *out = Box::into_raw(Box::new(Kv::open_local(db, cache_levels)?));
        Ok(())
    })
}

/// Opens the BPF-KV store `db` (relative to the server's served directory) on the server at
/// `addr`, authenticating with `token_file` (NULL: none); lookups are pushed down (one XRP
/// request per lookup, a multiget's in one frame).
///
/// Ownership: as `storefn_kv_open`.
///
/// Errors: STOREFN_STATUS_CONN, STOREFN_STATUS_REMOTE, STOREFN_STATUS_KV, STOREFN_STATUS_ARG.
///
/// # Safety
/// `addr`, `db` NUL-terminated; `token_file` NULL or NUL-terminated; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_kv_open_remote(
    addr: *const c_char,
    token_file: *const c_char,
    db: *const c_char,
    cache_levels: u32,
    out: *mut *mut Kv,
) -> Status {
    guard("storefn_kv_open_remote", || {
        // SAFETY: the caller's contract.
        let (addr, tf, db, out) = unsafe {
            (
                ptr::string(addr, "addr")?,
                ptr::opt_string(token_file, "token_file")?,
                ptr::string(db, "db")?,
                ptr::obj(out, "out")?,
            )
        };
        let client = connect(addr, tf, 0)?;
        let r = RemoteKv::open(client, db, cache_levels).map_err(|e| remote_err(&e))?;
        *out = Box::into_raw(Box::new(Kv { inner: Inner::Remote(Box::new(r)) }));
        Ok(())
    })
}

/// BPF-KV's `get`: looks `key` up; `*found` receives 1 and `value[0..64)` the value (a
/// NUL-terminated decimal string in a store `storefn kv create` built), or 0 (value
/// untouched) for a miss.
///
/// Ownership: `value` (64 writable bytes) and `found` are written during the call.
///
/// Errors: STOREFN_STATUS_KV (damaged node), STOREFN_STATUS_IO, STOREFN_STATUS_CONN, ...
///
/// # Safety
/// `kv` a live store; `value` 64 writable bytes; `found` writable.
#[no_mangle]
pub unsafe extern "C" fn storefn_kv_get(
    kv: *mut Kv,
    key: u64,
    value: *mut u8,
    found: *mut i32,
) -> Status {
    guard("storefn_kv_get", || {
        // SAFETY: the caller's contract.
        let (kv, v, f) = unsafe {
            (
                ptr::obj(kv, "kv")?,
                ptr::bytes_mut(value, VALUE_BYTES, "value")?,
                ptr::obj(found, "found")?,
            )
        };
        match kv.multiget(&[key])?.remove(0) {
            Some(x) => {
                v.copy_from_slice(&x);
                *f = 1;
            }
            None => *f = 0,
        }
        Ok(())
    })
}

/// BPF-KV's multiget: looks `keys[0..n)` up together (chains in flight together locally, one
/// frame remotely); for key i, `found[i]` is 1 and `values[64*i .. 64*i+64)` its value, or
/// `found[i]` is 0.
///
/// Ownership: `keys` is read and `values` (64*n bytes), `found` (n bytes) written during the
/// call (NULL only with n 0).
///
/// # Safety
/// `kv` a live store; the arrays as stated above.
#[no_mangle]
pub unsafe extern "C" fn storefn_kv_multiget(
    kv: *mut Kv,
    keys: *const u64,
    n: usize,
    values: *mut u8,
    found: *mut u8,
) -> Status {
    guard("storefn_kv_multiget", || {
        // SAFETY: the caller's contract.
        let kv = unsafe { ptr::obj(kv, "kv")? };
        let bytes =
            n.checked_mul(VALUE_BYTES).ok_or_else(|| Fail::arg(format!("n = {n} is too large")))?;
        if keys.is_null() && n > 0 {
            return Err(Fail::arg("keys is NULL"));
        }
        let keys: &[u64] = if n == 0 {
            &[]
        } else {
            // SAFETY: `n` readable keys (the caller's contract).
            unsafe { std::slice::from_raw_parts(keys, n) }
        };
        // SAFETY: the caller's contract.
        let (vals, fnd) = unsafe {
            (ptr::bytes_mut(values, bytes, "values")?, ptr::bytes_mut(found, n, "found")?)
        };
        let got = kv.multiget(keys)?;
        for (i, g) in got.iter().enumerate() {
            match g {
                Some(x) => {
                    vals[i * VALUE_BYTES..(i + 1) * VALUE_BYTES].copy_from_slice(x);
                    fnd[i] = 1;
                }
                None => fnd[i] = 0,
            }
        }
        Ok(())
    })
}

/// Releases a store (and its engine or connection). NULL is a no-op.
///
/// # Safety
/// `kv` is NULL or came from `storefn_kv_open*` and was not freed before.
#[no_mangle]
pub unsafe extern "C" fn storefn_kv_free(kv: *mut Kv) {
    // SAFETY: the caller's contract is free_handle's.
    unsafe { ptr::free_handle("storefn_kv_free", kv) };
}
