//! RocksDB itself, through its C API (Debian's librocksdb, `rocksdb/c.h`; the few functions
//! used are declared here): the baseline the benchmarks compare with, the writer of the YCSB
//! stores, and the answer to what this reader hands back as a fallback. Unlike the rest of
//! this crate, a [`Native`] database opened for writes writes and locks its directory:
//! it *is* RocksDB.

use crate::error::RocksError;
use std::ffi::{c_char, c_int, c_uchar, c_void, CStr, CString};
use std::path::{Path, PathBuf};

type Opaque = c_void;

#[link(name = "rocksdb")]
extern "C" {
    fn rocksdb_options_create() -> *mut Opaque;
    fn rocksdb_options_destroy(o: *mut Opaque);
    fn rocksdb_options_set_create_if_missing(o: *mut Opaque, v: c_uchar);
    fn rocksdb_options_set_compression(o: *mut Opaque, v: c_int);
    fn rocksdb_options_set_write_buffer_size(o: *mut Opaque, v: usize);
    fn rocksdb_options_set_block_based_table_factory(o: *mut Opaque, t: *mut Opaque);
    fn rocksdb_block_based_options_create() -> *mut Opaque;
    fn rocksdb_block_based_options_destroy(t: *mut Opaque);
    fn rocksdb_block_based_options_set_block_size(t: *mut Opaque, v: usize);
    fn rocksdb_block_based_options_set_filter_policy(t: *mut Opaque, p: *mut Opaque);
    fn rocksdb_block_based_options_set_block_cache(t: *mut Opaque, c: *mut Opaque);
    fn rocksdb_block_based_options_set_cache_index_and_filter_blocks(t: *mut Opaque, v: c_uchar);
    fn rocksdb_filterpolicy_create_bloom_full(bits_per_key: f64) -> *mut Opaque;
    fn rocksdb_cache_create_lru(capacity: usize) -> *mut Opaque;
    fn rocksdb_cache_destroy(c: *mut Opaque);
    fn rocksdb_cache_get_usage(c: *mut Opaque) -> usize;
    fn rocksdb_open_column_families(
        o: *const Opaque,
        name: *const c_char,
        n: c_int,
        names: *const *const c_char,
        opts: *const *const Opaque,
        handles: *mut *mut Opaque,
        err: *mut *mut c_char,
    ) -> *mut Opaque;
    fn rocksdb_open_for_read_only_column_families(
        o: *const Opaque,
        name: *const c_char,
        n: c_int,
        names: *const *const c_char,
        opts: *const *const Opaque,
        handles: *mut *mut Opaque,
        error_if_wal_file_exists: c_uchar,
        err: *mut *mut c_char,
    ) -> *mut Opaque;
    fn rocksdb_column_family_handle_destroy(h: *mut Opaque);
    fn rocksdb_close(db: *mut Opaque);
    fn rocksdb_readoptions_create() -> *mut Opaque;
    fn rocksdb_readoptions_destroy(r: *mut Opaque);
    fn rocksdb_writeoptions_create() -> *mut Opaque;
    fn rocksdb_writeoptions_destroy(w: *mut Opaque);
    fn rocksdb_writeoptions_set_sync(w: *mut Opaque, v: c_uchar);
    fn rocksdb_writeoptions_disable_WAL(w: *mut Opaque, v: c_int);
    fn rocksdb_flushoptions_create() -> *mut Opaque;
    fn rocksdb_flushoptions_destroy(f: *mut Opaque);
    fn rocksdb_flushoptions_set_wait(f: *mut Opaque, v: c_uchar);
    fn rocksdb_flush(db: *mut Opaque, f: *const Opaque, err: *mut *mut c_char);
    fn rocksdb_compact_range(
        db: *mut Opaque,
        start: *const c_char,
        start_len: usize,
        limit: *const c_char,
        limit_len: usize,
    );
    fn rocksdb_put(
        db: *mut Opaque,
        w: *const Opaque,
        key: *const c_char,
        klen: usize,
        val: *const c_char,
        vlen: usize,
        err: *mut *mut c_char,
    );
    fn rocksdb_delete(
        db: *mut Opaque,
        w: *const Opaque,
        key: *const c_char,
        klen: usize,
        err: *mut *mut c_char,
    );
    fn rocksdb_writebatch_create() -> *mut Opaque;
    fn rocksdb_writebatch_destroy(b: *mut Opaque);
    fn rocksdb_writebatch_clear(b: *mut Opaque);
    fn rocksdb_writebatch_put(
        b: *mut Opaque,
        key: *const c_char,
        klen: usize,
        val: *const c_char,
        vlen: usize,
    );
    fn rocksdb_write(db: *mut Opaque, w: *const Opaque, b: *mut Opaque, err: *mut *mut c_char);
    fn rocksdb_get_pinned(
        db: *mut Opaque,
        r: *const Opaque,
        key: *const c_char,
        klen: usize,
        err: *mut *mut c_char,
    ) -> *mut Opaque;
    fn rocksdb_pinnableslice_value(p: *const Opaque, vlen: *mut usize) -> *const c_char;
    fn rocksdb_pinnableslice_destroy(p: *mut Opaque);
    fn rocksdb_batched_multi_get_cf(
        db: *mut Opaque,
        r: *const Opaque,
        cf: *mut Opaque,
        n: usize,
        keys: *const *const c_char,
        key_lens: *const usize,
        values: *mut *mut Opaque,
        errs: *mut *mut c_char,
        sorted_input: bool,
    );
    fn rocksdb_create_iterator(db: *mut Opaque, r: *const Opaque) -> *mut Opaque;
    fn rocksdb_iter_destroy(it: *mut Opaque);
    fn rocksdb_iter_seek(it: *mut Opaque, key: *const c_char, klen: usize);
    fn rocksdb_iter_valid(it: *const Opaque) -> c_uchar;
    fn rocksdb_iter_next(it: *mut Opaque);
    fn rocksdb_iter_get_error(it: *const Opaque, err: *mut *mut c_char);
    fn rocksdb_free(p: *mut c_void);
}

/// `rocksdb_no_compression` in c.h.
const NO_COMPRESSION: c_int = 0;

/// How a [`Native`] database is opened: the benchmarks' options (the tests' rocks_tool.c and
/// `rocks_tool load` use the same ones).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NativeOptions {
    /// Create the database when the directory holds none (read-write opens only).
    pub create: bool,
    /// Open read-only: nothing in the directory is written or locked.
    pub read_only: bool,
    /// RocksDB's block cache (LRU); index and filter blocks are charged to it too, so the
    /// whole read path's memory is this one budget.
    pub block_cache_bytes: usize,
    /// The data block target size of files written from now on.
    pub block_size: usize,
    /// Bloom filter bits per key (full filters); 0 for none.
    pub bloom_bits: f64,
    /// The memtable's size before a flush; 0 keeps RocksDB's default (64 MiB).
    pub write_buffer_bytes: usize,
}

impl Default for NativeOptions {
    fn default() -> Self {
        NativeOptions {
            create: false,
            read_only: true,
            block_cache_bytes: 8 << 20,
            block_size: 4096,
            bloom_bits: 10.0,
            write_buffer_bytes: 0,
        }
    }
}

/// One open RocksDB database (its default column family).
pub struct Native {
    dir: PathBuf,
    db: *mut Opaque,
    cf: *mut Opaque,
    cache: *mut Opaque,
    read: *mut Opaque,
    write_sync: *mut Opaque,
    write_bulk: *mut Opaque,
}

// SAFETY: RocksDB's DB, column family handle, cache and option objects are safe to use from
// many threads at once (RocksDB's documented thread-safety of `DB` and const options); this
// type hands out no interior pointer that outlives a call.
unsafe impl Send for Native {}
// SAFETY: as above; every method takes `&self` and RocksDB synchronises internally.
unsafe impl Sync for Native {}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// Takes RocksDB's error string (malloc'ed) if set.
fn take_err(dir: &Path, op: &'static str, err: *mut c_char) -> Result<(), RocksError> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: RocksDB sets `err` to a malloc'ed NUL-terminated string, freed once here.
    let what = unsafe {
        let s = CStr::from_ptr(err).to_string_lossy().into_owned();
        rocksdb_free(err.cast());
        s
    };
    Err(RocksError::Native { file: dir.to_path_buf(), op, what })
}

impl Native {
    /// Opens (or, with `create`, creates) the database in `dir`.
    ///
    /// # Errors
    /// RocksDB's error (no database, a lock held by another process, a bad path).
    pub fn open(dir: &Path, o: &NativeOptions) -> Result<Self, RocksError> {
        let name = dir
            .to_str()
            .and_then(|s| CString::new(s).ok())
            .ok_or_else(|| RocksError::unsupported(dir, "the path must be UTF-8 without NUL"))?;
        // SAFETY: every object is created here and either handed to RocksDB (which copies the
        // options it keeps) or destroyed before return; the cache is kept for the db's life.
        unsafe {
            let opts = rocksdb_options_create();
            rocksdb_options_set_create_if_missing(opts, u8::from(o.create && !o.read_only));
            rocksdb_options_set_compression(opts, NO_COMPRESSION);
            if o.write_buffer_bytes > 0 {
                rocksdb_options_set_write_buffer_size(opts, o.write_buffer_bytes);
            }
            let t = rocksdb_block_based_options_create();
            rocksdb_block_based_options_set_block_size(t, o.block_size);
            if o.bloom_bits > 0.0 {
                let p = rocksdb_filterpolicy_create_bloom_full(o.bloom_bits);
                rocksdb_block_based_options_set_filter_policy(t, p);
            }
            let cache = rocksdb_cache_create_lru(o.block_cache_bytes.max(1));
            rocksdb_block_based_options_set_block_cache(t, cache);
            rocksdb_block_based_options_set_cache_index_and_filter_blocks(t, 1);
            rocksdb_options_set_block_based_table_factory(opts, t);
            rocksdb_block_based_options_destroy(t);
            let cf_name = c"default".as_ptr();
            let cf_opts: *const Opaque = opts;
            let mut cf: *mut Opaque = std::ptr::null_mut();
            let mut err: *mut c_char = std::ptr::null_mut();
            let db = if o.read_only {
                rocksdb_open_for_read_only_column_families(
                    opts,
                    name.as_ptr(),
                    1,
                    &cf_name,
                    &cf_opts,
                    &mut cf,
                    0,
                    &mut err,
                )
            } else {
                rocksdb_open_column_families(
                    opts,
                    name.as_ptr(),
                    1,
                    &cf_name,
                    &cf_opts,
                    &mut cf,
                    &mut err,
                )
            };
            rocksdb_options_destroy(opts);
            if let Err(e) = take_err(dir, "open", err) {
                rocksdb_cache_destroy(cache);
                return Err(e);
            }
            let write_sync = rocksdb_writeoptions_create();
            rocksdb_writeoptions_set_sync(write_sync, 1);
            let write_bulk = rocksdb_writeoptions_create();
            rocksdb_writeoptions_disable_WAL(write_bulk, 1);
            Ok(Native {
                dir: dir.to_path_buf(),
                db,
                cf,
                cache,
                read: rocksdb_readoptions_create(),
                write_sync,
                write_bulk,
            })
        }
    }

    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes the block cache holds now (data, index and filter blocks).
    #[must_use]
    pub fn cache_usage(&self) -> usize {
        // SAFETY: the cache lives as long as `self`.
        unsafe { rocksdb_cache_get_usage(self.cache) }
    }

    /// RocksDB's Get: the value of `key` into `out`, `false` when absent or deleted.
    ///
    /// # Errors
    /// RocksDB's error (I/O, corruption it detected).
    pub fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, RocksError> {
        let mut err = std::ptr::null_mut();
        // SAFETY: db and read options live as long as `self`; the key is valid for the call;
        // the pinnable slice is destroyed after its bytes are copied.
        unsafe {
            let p =
                rocksdb_get_pinned(self.db, self.read, key.as_ptr().cast(), key.len(), &mut err);
            take_err(&self.dir, "get", err)?;
            Ok(copy_pinned(p, out))
        }
    }

    /// RocksDB's batched MultiGet (one column family, keys unsorted): `found[i]` and `out[i]`
    /// for `keys[i]`.
    ///
    /// # Errors
    /// The first key's error RocksDB reports.
    pub fn multi_get(
        &self,
        keys: &[&[u8]],
        out: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<(), RocksError> {
        let n = keys.len();
        assert!(out.len() >= n && found.len() >= n, "an answer slot per key");
        let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr().cast()).collect();
        let lens: Vec<usize> = keys.iter().map(|k| k.len()).collect();
        let mut vals: Vec<*mut Opaque> = vec![std::ptr::null_mut(); n];
        let mut errs: Vec<*mut c_char> = vec![std::ptr::null_mut(); n];
        // SAFETY: every array holds `n` entries for the call; RocksDB fills `vals` and `errs`,
        // each freed below exactly once.
        unsafe {
            rocksdb_batched_multi_get_cf(
                self.db,
                self.read,
                self.cf,
                n,
                ptrs.as_ptr(),
                lens.as_ptr(),
                vals.as_mut_ptr(),
                errs.as_mut_ptr(),
                false,
            );
            let mut first = Ok(());
            for i in 0..n {
                let e = take_err(&self.dir, "multi_get", errs[i]);
                if first.is_ok() {
                    first = e;
                }
                found[i] = copy_pinned(vals[i], &mut out[i]);
            }
            first
        }
    }

    /// Writes `key` = `value`, synced to the WAL before it returns.
    ///
    /// # Errors
    /// RocksDB's error.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<(), RocksError> {
        let mut err = std::ptr::null_mut();
        // SAFETY: valid handles and buffers for the call.
        unsafe {
            rocksdb_put(
                self.db,
                self.write_sync,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            );
        }
        take_err(&self.dir, "put", err)
    }

    /// Deletes `key` (a tombstone), synced before it returns.
    ///
    /// # Errors
    /// RocksDB's error.
    pub fn delete(&self, key: &[u8]) -> Result<(), RocksError> {
        let mut err = std::ptr::null_mut();
        // SAFETY: valid handles and buffers for the call.
        unsafe {
            rocksdb_delete(self.db, self.write_sync, key.as_ptr().cast(), key.len(), &mut err);
        };
        take_err(&self.dir, "delete", err)
    }

    /// Writes many pairs without the WAL (a load: [`Native::flush`] makes them durable).
    ///
    /// # Errors
    /// RocksDB's error.
    pub fn put_unlogged<'a>(
        &self,
        pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<(), RocksError> {
        let mut err = std::ptr::null_mut();
        // SAFETY: the batch is created, filled with buffers valid for each call, written and
        // destroyed here.
        unsafe {
            let b = rocksdb_writebatch_create();
            for (k, v) in pairs {
                rocksdb_writebatch_put(b, k.as_ptr().cast(), k.len(), v.as_ptr().cast(), v.len());
            }
            rocksdb_write(self.db, self.write_bulk, b, &mut err);
            rocksdb_writebatch_clear(b);
            rocksdb_writebatch_destroy(b);
        }
        take_err(&self.dir, "write", err)
    }

    /// Flushes the memtable to an L0 file and waits for it.
    ///
    /// # Errors
    /// RocksDB's error.
    pub fn flush(&self) -> Result<(), RocksError> {
        let mut err = std::ptr::null_mut();
        // SAFETY: the flush options are created and destroyed here.
        unsafe {
            let f = rocksdb_flushoptions_create();
            rocksdb_flushoptions_set_wait(f, 1);
            rocksdb_flush(self.db, f, &mut err);
            rocksdb_flushoptions_destroy(f);
        }
        take_err(&self.dir, "flush", err)
    }

    /// Compacts the whole key range (waits).
    pub fn compact_all(&self) {
        // SAFETY: null bounds mean the whole range.
        unsafe { rocksdb_compact_range(self.db, std::ptr::null(), 0, std::ptr::null(), 0) };
    }

    /// Up to `count` entries from the first key >= `start`, in key order; returns how many.
    ///
    /// # Errors
    /// RocksDB's iterator error.
    pub fn scan(&self, start: &[u8], count: usize) -> Result<usize, RocksError> {
        let mut n = 0;
        let mut err = std::ptr::null_mut();
        // SAFETY: the iterator is created and destroyed here, used only between.
        unsafe {
            let it = rocksdb_create_iterator(self.db, self.read);
            rocksdb_iter_seek(it, start.as_ptr().cast(), start.len());
            while n < count && rocksdb_iter_valid(it) != 0 {
                n += 1;
                rocksdb_iter_next(it);
            }
            rocksdb_iter_get_error(it, &mut err);
            rocksdb_iter_destroy(it);
        }
        take_err(&self.dir, "scan", err)?;
        Ok(n)
    }
}

/// Copies a pinned value (null: absent) into `out` and releases it.
///
/// # Safety
/// `p` is null or a pinnable slice RocksDB returned and nothing else releases.
unsafe fn copy_pinned(p: *mut Opaque, out: &mut Vec<u8>) -> bool {
    out.clear();
    if p.is_null() {
        return false;
    }
    let mut len = 0usize;
    // SAFETY: `p` is live (the contract); the value bytes stay valid until it is destroyed.
    unsafe {
        let v = rocksdb_pinnableslice_value(p, &mut len);
        if !v.is_null() {
            out.extend_from_slice(std::slice::from_raw_parts(v.cast::<u8>(), len));
        }
        rocksdb_pinnableslice_destroy(p);
    }
    true
}

impl Drop for Native {
    fn drop(&mut self) {
        // SAFETY: each object is owned by `self` and released once; the column family handle
        // goes before the database, the cache after it (the db holds its own reference).
        unsafe {
            rocksdb_column_family_handle_destroy(self.cf);
            rocksdb_close(self.db);
            rocksdb_readoptions_destroy(self.read);
            rocksdb_writeoptions_destroy(self.write_sync);
            rocksdb_writeoptions_destroy(self.write_bulk);
            rocksdb_cache_destroy(self.cache);
        }
    }
}
