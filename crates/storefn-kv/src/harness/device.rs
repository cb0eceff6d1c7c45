//! `--path device`: random single-block reads of the database file, `batch` in flight per
//! thread. No tree, no values: the physical reference the lookup paths are compared with (one
//! "lookup" = one block read).
//!
//! The reads go through a storefn-io [`Engine`] built exactly as the engine paths build theirs
//! (`READ_FIXED` into registered buffers on the registered file, O_DIRECT or buffered as the
//! store is, raw mode with `--io raw`), so the reference pays what they pay per read. The
//! engine retries `io_uring_enter` on EINTR, and a failed read stops new submissions while
//! every read already in flight is still reaped before the error is returned: no buffer is
//! written by the kernel after this path has given it up.

use std::sync::Arc;
use std::time::Instant;

use storefn_io::{ChainError, Engine, FileId, NoFunction};

use crate::format::VALUE_BYTES;
use crate::limits::DEVICE_MAX_BATCH;
use crate::path::{nanos_since, Lookup, LookupPath, PathStats};
use crate::store::Store;
use crate::xrp_paths::{chain_failed, engine_failed, engine_for, switch_to_raw};
use crate::KvError;

/// Random block reads; the key picks the block (`key % blocks`).
pub struct DevicePath {
    store: Arc<Store>,
    engine: Engine,
    file: FileId,
    batch: usize,
    blocks: u64,
    stats: PathStats,
}

impl std::fmt::Debug for DevicePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePath")
            .field("batch", &self.batch)
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}

impl DevicePath {
    /// # Errors
    /// `Invalid` for a batch outside 1..=128; `Engine` if the engine cannot be set up.
    pub fn new(store: Arc<Store>, batch: usize) -> Result<Self, KvError> {
        if !(1..=DEVICE_MAX_BATCH).contains(&batch) {
            return Err(KvError::Invalid(format!("--batch {batch}: 1..={DEVICE_MAX_BATCH}")));
        }
        let nb = store.node_size().bytes() as u64;
        let (engine, file) = engine_for(&store, batch, None)?;
        let blocks = store.meta().file_bytes / nb;
        Ok(Self { store, engine, file, batch, blocks, stats: PathStats::default() })
    }

    /// `--io raw`: the reads go to the block device, as the engine paths' do.
    ///
    /// # Errors
    /// Engine failures other than "raw mode unavailable".
    pub fn with_io(mut self, raw: bool) -> Result<Self, KvError> {
        if raw {
            switch_to_raw(&self.store, &mut self.engine, &mut self.file)?;
        }
        Ok(self)
    }
}

impl LookupPath for DevicePath {
    fn name(&self) -> &'static str {
        "device"
    }

    fn get(&mut self, key: u64) -> Result<Option<[u8; VALUE_BYTES]>, KvError> {
        let mut out = Vec::with_capacity(1);
        self.get_many(&[key], &mut out)?;
        Ok(None)
    }

    fn get_many(&mut self, keys: &[u64], out: &mut Vec<Lookup>) -> Result<(), KvError> {
        let t0 = Instant::now();
        let base = out.len();
        out.extend(keys.iter().map(|_| Lookup { value: None, latency_ns: 0 }));
        let nb = self.store.node_size().bytes() as u64;
        let mut next = 0;
        let mut live = 0usize;
        let mut error: Option<ChainError> = None;
        // Stop submitting at the first error, but reap every read in flight before returning.
        while (error.is_none() && next < keys.len()) || live > 0 {
            while error.is_none() && next < keys.len() && self.engine.free_slots() > 0 {
                let off = (keys[next] % self.blocks) * nb;
                self.engine.submit_read(self.file, off, nb, next as u64).map_err(|source| {
                    KvError::Submit { path: self.store.path().to_path_buf(), source }
                })?;
                // Submission time (ns since t0) until completion.
                out[base + next].latency_ns = nanos_since(t0);
                next += 1;
                live += 1;
                self.stats.ios += 1;
            }
            if live == 0 {
                break;
            }
            let (stats, store) = (&mut self.stats, &self.store);
            let got = self
                .engine
                .wait(1, &mut NoFunction, |c| {
                    let i = usize::try_from(c.token).expect("token is an index");
                    out[base + i].latency_ns = nanos_since(t0) - out[base + i].latency_ns;
                    stats.lookups += 1;
                    match c.result {
                        Ok(st) => stats.device_ios += u64::from(st.device_hops),
                        Err(e) => {
                            error.get_or_insert(e);
                        }
                    }
                })
                .map_err(|e| engine_failed(store, e))?;
            live -= got;
        }
        debug_assert_eq!(self.engine.live(), 0, "every read reaped");
        match error {
            Some(e) => Err(chain_failed(&self.store, e)),
            None => Ok(()),
        }
    }

    fn stats(&self) -> PathStats {
        self.stats
    }
}
