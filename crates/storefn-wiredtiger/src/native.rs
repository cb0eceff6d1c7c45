//! WiredTiger's own C API (libwiredtiger) through `csrc/shim.c`: the fallback for what the
//! Rust reader does not read, the writer tests use to build databases, and the baseline.

use crate::error::WtError;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::path::Path;

extern "C" {
    fn sfwt_open(home: *const c_char, config: *const c_char, conn: *mut *mut c_void) -> c_int;
    fn sfwt_close(conn: *mut c_void) -> c_int;
    fn sfwt_strerror(code: c_int) -> *const c_char;
    fn sfwt_version(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) -> *const c_char;
    fn sfwt_session(conn: *mut c_void, session: *mut *mut c_void) -> c_int;
    fn sfwt_create(s: *mut c_void, uri: *const c_char, config: *const c_char) -> c_int;
    fn sfwt_checkpoint(s: *mut c_void) -> c_int;
    fn sfwt_cursor(s: *mut c_void, uri: *const c_char, c: *mut *mut c_void) -> c_int;
    fn sfwt_cursor_close(c: *mut c_void) -> c_int;
    fn sfwt_search(
        c: *mut c_void,
        key: *const u8,
        klen: usize,
        val: *mut *const u8,
        vlen: *mut usize,
    ) -> c_int;
    fn sfwt_next(
        c: *mut c_void,
        key: *mut *const u8,
        klen: *mut usize,
        val: *mut *const u8,
        vlen: *mut usize,
    ) -> c_int;
    fn sfwt_insert(
        c: *mut c_void,
        key: *const u8,
        klen: usize,
        val: *const u8,
        vlen: usize,
    ) -> c_int;
    fn sfwt_remove(c: *mut c_void, key: *const u8, klen: usize) -> c_int;
    fn sfwt_notfound() -> c_int;
    fn sfwt_cursor_config(
        s: *mut c_void,
        uri: *const c_char,
        config: *const c_char,
        c: *mut *mut c_void,
    ) -> c_int;
    fn sfwt_search_near(c: *mut c_void, key: *const u8, klen: usize, exact: *mut c_int) -> c_int;
    fn sfwt_current(
        c: *mut c_void,
        key: *mut *const u8,
        klen: *mut usize,
        val: *mut *const u8,
        vlen: *mut usize,
    ) -> c_int;
    fn sfwt_reset(c: *mut c_void) -> c_int;
    fn sfwt_session_close(s: *mut c_void) -> c_int;
}

fn check(op: &'static str, code: c_int) -> Result<(), WtError> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: wiredtiger_strerror returns a static NUL-terminated string for any code.
    let message = unsafe { CStr::from_ptr(sfwt_strerror(code)) }.to_string_lossy().into_owned();
    Err(WtError::Native { op, code, message })
}

fn cstring(s: &str) -> Result<CString, WtError> {
    CString::new(s).map_err(|_| WtError::Invalid(format!("{s:?} contains a NUL byte")))
}

fn not_found() -> c_int {
    // SAFETY: returns a constant.
    unsafe { sfwt_notfound() }
}

/// The linked library's `(major, minor, patch)`.
#[must_use]
pub fn library_version() -> (i32, i32, i32) {
    let (mut a, mut b, mut c) = (0, 0, 0);
    // SAFETY: the out-pointers are valid locals; the returned string is static and unused.
    unsafe { sfwt_version(&mut a, &mut b, &mut c) };
    (a, b, c)
}

/// A connection with one session (WiredTiger sessions are single-threaded; so is this).
#[derive(Debug)]
pub struct Native {
    /// Held for its drop, which closes the session too.
    _conn: Connection,
    session: *mut c_void,
}

impl Native {
    /// `wiredtiger_open(dir, config)`: `readonly=true` for readers, `create` for writers.
    ///
    /// # Errors
    /// WiredTiger's error (a locked or missing database, a bad configuration).
    pub fn open(dir: &Path, config: &str) -> Result<Self, WtError> {
        let conn = Connection::open(dir, config)?;
        let mut session = std::ptr::null_mut();
        // SAFETY: conn is the open connection just returned; session is an out-pointer.
        check("open_session", unsafe { sfwt_session(conn.conn, &mut session) })?;
        Ok(Native { _conn: conn, session })
    }

    /// `session->create(uri, config)`.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn create(&self, uri: &str, config: &str) -> Result<(), WtError> {
        let (u, c) = (cstring(uri)?, cstring(config)?);
        // SAFETY: the session is open; the strings are NUL-terminated and outlive the call.
        check("create", unsafe { sfwt_create(self.session, u.as_ptr(), c.as_ptr()) })
    }

    /// `session->checkpoint()`.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn checkpoint(&self) -> Result<(), WtError> {
        // SAFETY: the session is open and has no cursor mid-operation (cursors borrow `self`).
        check("checkpoint", unsafe { sfwt_checkpoint(self.session) })
    }

    /// A cursor on `uri` (`table:NAME`).
    ///
    /// # Errors
    /// WiredTiger's error (no such table).
    pub fn cursor(&self, uri: &str) -> Result<Cursor<'_>, WtError> {
        let u = cstring(uri)?;
        let mut c = std::ptr::null_mut();
        // SAFETY: the session is open; `u` outlives the call; `c` is an out-pointer.
        check("open_cursor", unsafe { sfwt_cursor(self.session, u.as_ptr(), &mut c) })?;
        Ok(Cursor { c, _session: PhantomData })
    }
}

/// A connection shared by threads, each with its own [`Session`] (WiredTiger's connection
/// handle is thread-safe; its sessions and cursors are not).
#[derive(Debug)]
pub struct Connection {
    conn: *mut c_void,
}

// SAFETY: WT_CONNECTION's methods may be called from any thread concurrently (WiredTiger's
// documented threading model); sessions, which are single-threaded, are separate values.
unsafe impl Send for Connection {}
// SAFETY: as above: the only shared use is `open_session`, which WiredTiger makes thread-safe.
unsafe impl Sync for Connection {}

impl Connection {
    /// `wiredtiger_open(dir, config)`, without a session.
    ///
    /// # Errors
    /// WiredTiger's error (a locked or missing database, a bad configuration).
    pub fn open(dir: &Path, config: &str) -> Result<Self, WtError> {
        let home = cstring(&dir.to_string_lossy())?;
        let cfg = cstring(config)?;
        let mut conn = std::ptr::null_mut();
        // SAFETY: both strings are NUL-terminated and live across the call; conn is an out-pointer.
        check("wiredtiger_open", unsafe { sfwt_open(home.as_ptr(), cfg.as_ptr(), &mut conn) })?;
        Ok(Connection { conn })
    }

    /// A new session of this connection, for one thread at a time.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn session(&self) -> Result<Session<'_>, WtError> {
        let mut session = std::ptr::null_mut();
        // SAFETY: the connection is open; open_session is thread-safe; session is an out-pointer.
        check("open_session", unsafe { sfwt_session(self.conn, &mut session) })?;
        Ok(Session { s: session, _conn: PhantomData })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: every Session borrows self, so none outlives this; close frees what is left.
        unsafe { sfwt_close(self.conn) };
    }
}

/// One session of a [`Connection`]: movable to another thread, never shared.
#[derive(Debug)]
pub struct Session<'c> {
    s: *mut c_void,
    _conn: PhantomData<&'c Connection>,
}

// SAFETY: a WiredTiger session may be used by one thread at a time, whichever thread that is;
// `Session` is not Sync, so two threads never use it at once.
unsafe impl Send for Session<'_> {}

impl Session<'_> {
    /// `session->create(uri, config)`.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn create(&self, uri: &str, config: &str) -> Result<(), WtError> {
        let (u, c) = (cstring(uri)?, cstring(config)?);
        // SAFETY: the session is open; the strings are NUL-terminated and outlive the call.
        check("create", unsafe { sfwt_create(self.s, u.as_ptr(), c.as_ptr()) })
    }

    /// `session->checkpoint()`.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn checkpoint(&self) -> Result<(), WtError> {
        // SAFETY: the session is open; its cursors borrow it, so none is mid-operation here.
        check("checkpoint", unsafe { sfwt_checkpoint(self.s) })
    }

    /// A cursor on `uri` opened with `config` (e.g. `bulk` for a sorted load into a new table).
    ///
    /// # Errors
    /// WiredTiger's error (no such table, a bulk cursor on a table that is not empty).
    pub fn cursor(&self, uri: &str, config: &str) -> Result<Cursor<'_>, WtError> {
        let (u, cfg) = (cstring(uri)?, cstring(config)?);
        let mut c = std::ptr::null_mut();
        // SAFETY: the session is open; both strings outlive the call; `c` is an out-pointer.
        check("open_cursor", unsafe {
            sfwt_cursor_config(self.s, u.as_ptr(), cfg.as_ptr(), &mut c)
        })?;
        Ok(Cursor { c, _session: PhantomData })
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // SAFETY: every Cursor borrows the session, so none outlives it; closed once.
        unsafe { sfwt_session_close(self.s) };
    }
}

/// A cursor; items cross as stored bytes (`S` with its NUL).
#[derive(Debug)]
pub struct Cursor<'s> {
    c: *mut c_void,
    /// A [`Native`] or a [`Session`]: the cursor must not outlive it.
    _session: PhantomData<&'s ()>,
}

/// Copies WiredTiger's item out before the cursor moves on.
///
/// # Safety
/// `p` points at `n` readable bytes (or `n` is 0).
unsafe fn copy(p: *const u8, n: usize, out: &mut Vec<u8>) {
    out.clear();
    if n > 0 {
        // SAFETY: the caller's contract.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
    }
}

impl Cursor<'_> {
    /// Searches a stored-form key, copying the stored value into `value`; `false` if absent.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn search(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool, WtError> {
        let (mut v, mut n) = (std::ptr::null(), 0);
        // SAFETY: the cursor is open; `key` lives across the call (WiredTiger copies it on
        // search); v/n are out-pointers.
        let r = unsafe { sfwt_search(self.c, key.as_ptr(), key.len(), &mut v, &mut n) };
        if r == not_found() {
            return Ok(false);
        }
        check("search", r)?;
        // SAFETY: WiredTiger's value stays valid until the cursor's next operation.
        unsafe { copy(v, n, value) };
        Ok(true)
    }

    /// The next item in key order; `false` at the end.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn next(&mut self, key: &mut Vec<u8>, value: &mut Vec<u8>) -> Result<bool, WtError> {
        let (mut k, mut kn, mut v, mut vn) = (std::ptr::null(), 0, std::ptr::null(), 0);
        // SAFETY: the cursor is open; all four are out-pointers.
        let r = unsafe { sfwt_next(self.c, &mut k, &mut kn, &mut v, &mut vn) };
        if r == not_found() {
            return Ok(false);
        }
        check("next", r)?;
        // SAFETY: the items stay valid until the cursor's next operation.
        unsafe {
            copy(k, kn, key);
            copy(v, vn, value);
        }
        Ok(true)
    }

    /// Inserts (or overwrites) a stored-form pair.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), WtError> {
        // SAFETY: the cursor is open; both slices outlive the call (WiredTiger copies them).
        check("insert", unsafe {
            sfwt_insert(self.c, key.as_ptr(), key.len(), value.as_ptr(), value.len())
        })
    }

    /// Positions on the first key `>= key` (WiredTiger's `search_near`, then a step forward
    /// when it landed below), copying that item out; `false` when no key is `>= key`.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn seek_ge(
        &mut self,
        key: &[u8],
        out_key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<bool, WtError> {
        let mut exact: c_int = 0;
        // SAFETY: the cursor is open; `key` outlives the call; `exact` is an out-pointer.
        let r = unsafe { sfwt_search_near(self.c, key.as_ptr(), key.len(), &mut exact) };
        if r == not_found() {
            return Ok(false);
        }
        check("search_near", r)?;
        if exact < 0 {
            return self.next(out_key, value);
        }
        let (mut k, mut kn, mut v, mut vn) = (std::ptr::null(), 0, std::ptr::null(), 0);
        // SAFETY: the cursor is positioned; all four are out-pointers.
        check("get_key/get_value", unsafe {
            sfwt_current(self.c, &mut k, &mut kn, &mut v, &mut vn)
        })?;
        // SAFETY: the items stay valid until the cursor's next operation.
        unsafe {
            copy(k, kn, out_key);
            copy(v, vn, value);
        }
        Ok(true)
    }

    /// Releases the cursor's position (and the pages it pins).
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn reset(&mut self) -> Result<(), WtError> {
        // SAFETY: the cursor is open.
        check("reset", unsafe { sfwt_reset(self.c) })
    }

    /// Removes a stored-form key; `false` if it was absent.
    ///
    /// # Errors
    /// WiredTiger's error.
    pub fn remove(&mut self, key: &[u8]) -> Result<bool, WtError> {
        // SAFETY: the cursor is open; `key` outlives the call.
        let r = unsafe { sfwt_remove(self.c, key.as_ptr(), key.len()) };
        if r == not_found() {
            return Ok(false);
        }
        check("remove", r).map(|()| true)
    }
}

impl Drop for Cursor<'_> {
    fn drop(&mut self) {
        // SAFETY: the cursor is open and closed once, before its connection (it borrows it).
        unsafe { sfwt_cursor_close(self.c) };
    }
}
