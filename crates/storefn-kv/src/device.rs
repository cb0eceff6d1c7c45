//! `--path device`: random single-block reads of the database file, `batch` in flight per
//! thread through io_uring. No tree, no values: the physical reference the lookup paths are
//! compared with (one "lookup" = one block read).

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use io_uring::{opcode, types, IoUring};

use crate::aligned::AlignedBuf;
use crate::format::VALUE_BYTES;
use crate::path::{nanos_since, Lookup, LookupPath, PathStats};
use crate::store::Store;
use crate::KvError;

/// Most reads in flight per thread (the virtio disk has 128 tags in all).
pub const DEVICE_MAX_BATCH: usize = 128;

/// Random block reads; the key picks the block (`key % blocks`).
pub struct DevicePath {
    store: Arc<Store>,
    ring: IoUring,
    bufs: Vec<AlignedBuf>,
    blocks: u64,
    stats: PathStats,
}

impl std::fmt::Debug for DevicePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevicePath")
            .field("batch", &self.bufs.len())
            .field("blocks", &self.blocks)
            .finish_non_exhaustive()
    }
}

impl DevicePath {
    /// # Errors
    /// `Invalid` for a batch outside 1..=128; `Io` if the ring cannot be set up.
    pub fn new(store: Arc<Store>, batch: usize) -> Result<Self, KvError> {
        if !(1..=DEVICE_MAX_BATCH).contains(&batch) {
            return Err(KvError::Invalid(format!("--batch {batch}: 1..={DEVICE_MAX_BATCH}")));
        }
        let nb = store.node_size().bytes();
        let ring = IoUring::new(u32::try_from(batch.next_power_of_two()).expect("small"))
            .map_err(|e| KvError::io(store.path(), "io_uring_setup", e))?;
        let blocks = store.meta().file_bytes / nb as u64;
        let bufs = (0..batch).map(|_| AlignedBuf::new(nb)).collect();
        Ok(Self { store, ring, bufs, blocks, stats: PathStats::default() })
    }

    fn submit(&mut self, slot: usize, key: u64) -> Result<(), KvError> {
        let nb = self.store.node_size().bytes();
        let off = (key % self.blocks) * nb as u64;
        let fd = types::Fd(self.store.file().as_raw_fd());
        let len = u32::try_from(nb).expect("node fits u32");
        let sqe = opcode::Read::new(fd, self.bufs[slot].as_mut_ptr(), len)
            .offset(off)
            .build()
            .user_data(slot as u64);
        // SAFETY: the buffer lives in self.bufs until its completion is reaped (get_many waits
        // for every submitted slot before returning), and the slot is not reused before then.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| KvError::Invalid("submission queue full".into()))?;
        self.stats.ios += 1;
        Ok(())
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
        let mut next = 0;
        let mut slot_key = vec![usize::MAX; self.bufs.len()];
        let mut in_flight = 0;
        let mut error = None;
        while next < keys.len() || in_flight > 0 {
            while error.is_none() && next < keys.len() && in_flight < self.bufs.len() {
                let slot = slot_key.iter().position(|&k| k == usize::MAX).expect("free slot");
                self.submit(slot, keys[next])?;
                // Submission time (ns since t0) until completion.
                out[base + next].latency_ns = nanos_since(t0);
                slot_key[slot] = next;
                next += 1;
                in_flight += 1;
            }
            if in_flight == 0 {
                break;
            }
            self.ring
                .submit_and_wait(1)
                .map_err(|e| KvError::io(self.store.path(), "io_uring_enter", e))?;
            let done: Vec<(u64, i32)> =
                self.ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (slot, res) in done {
                let slot = usize::try_from(slot).expect("slot index");
                let i = std::mem::replace(&mut slot_key[slot], usize::MAX);
                in_flight -= 1;
                if res < 0 {
                    error.get_or_insert(std::io::Error::from_raw_os_error(-res));
                }
                out[base + i].latency_ns = nanos_since(t0) - out[base + i].latency_ns;
                self.stats.lookups += 1;
            }
        }
        match error {
            Some(e) => Err(KvError::io(self.store.path(), "read", e)),
            None => Ok(()),
        }
    }

    fn stats(&self) -> PathStats {
        self.stats
    }
}
