//! Turning C pointer arguments into Rust references, each check naming the argument.

use std::ffi::{c_char, CStr};

use crate::status::{Fail, Res};

/// `len` bytes at `p`; NULL is accepted only with `len == 0`.
///
/// # Safety
/// A non-NULL `p` points at `len` readable bytes that stay valid and unwritten for `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Res<&'a [u8]> {
    if p.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(Fail::arg(format!("{what} is NULL"))) };
    }
    // SAFETY: non-NULL, and the caller promises `len` readable bytes for 'a.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// `len` writable bytes at `p`; NULL is accepted only with `len == 0`.
///
/// # Safety
/// A non-NULL `p` points at `len` writable bytes no one else touches for `'a`.
pub(crate) unsafe fn bytes_mut<'a>(p: *mut u8, len: usize, what: &str) -> Res<&'a mut [u8]> {
    if p.is_null() {
        return if len == 0 { Ok(&mut []) } else { Err(Fail::arg(format!("{what} is NULL"))) };
    }
    // SAFETY: non-NULL, and the caller promises `len` exclusive writable bytes for 'a.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A NUL-terminated UTF-8 string.
///
/// # Safety
/// A non-NULL `p` points at a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn string<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(Fail::arg(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's promise).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|_| Fail::arg(format!("{what} is not UTF-8")))
}

/// Like [`string`], NULL giving `None`.
///
/// # Safety
/// As [`string`].
pub(crate) unsafe fn opt_string<'a>(p: *const c_char, what: &str) -> Res<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    unsafe { string(p, what) }.map(Some)
}

/// The object a handle or out-pointer points at.
///
/// # Safety
/// A non-NULL `p` points at a valid `T` no one else touches for `'a`.
pub(crate) unsafe fn obj<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    // SAFETY: the caller's promise for non-NULL `p`.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::arg(format!("{what} is NULL")))
}

/// A shared view of the object a handle points at.
///
/// # Safety
/// A non-NULL `p` points at a valid `T` not mutated for `'a`.
pub(crate) unsafe fn shared<'a, T>(p: *const T, what: &str) -> Res<&'a T> {
    // SAFETY: the caller's promise for non-NULL `p`.
    unsafe { p.as_ref() }.ok_or_else(|| Fail::arg(format!("{what} is NULL")))
}

/// Stores `v` through an optional out-pointer (NULL: the caller does not want it).
///
/// # Safety
/// A non-NULL `p` points at writable memory for a `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller's promise; `write` drops nothing that was there (plain data).
        unsafe { p.write(v) };
    }
}

/// Releases a handle `storefn_*_free` was given: NULL is a no-op, anything else is dropped
/// inside the boundary guard (a panic in a destructor becomes the thread's last error instead of
/// crossing into C; the free functions return no status).
///
/// # Safety
/// `p` is NULL or came from `Box::into_raw` of a `T` handed to C, and was not freed before.
pub(crate) unsafe fn free_handle<T>(function: &'static str, p: *mut T) {
    let _ = crate::status::guard(function, || {
        if !p.is_null() {
            // SAFETY: the caller's contract: from Box::into_raw, not freed before.
            drop(unsafe { Box::from_raw(p) });
        }
        Ok(())
    });
}
