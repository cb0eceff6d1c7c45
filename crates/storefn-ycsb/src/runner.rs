//! The run phase: `threads` threads, each with its own store session and generators, a
//! warm-up that is not measured, then `operations` operations timed one by one.

use crate::error::YcsbError;
use crate::generator::InsertCounter;
use crate::limits::{MAX_OPERATIONS, MAX_READ_BATCH, MAX_RECORD_BYTES, MAX_THREADS};
use crate::store::Store;
use crate::workload::{Key, KeyChooser, OpKind, RecordShape, Workload};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::{Duration, Instant};
use storefn_stats::Tail;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    pub workload: Workload,
    /// Records loaded (key numbers `0..records`).
    pub records: u64,
    /// Measured operations, over all threads.
    pub operations: u64,
    pub threads: usize,
    pub seed: u64,
    /// Unmeasured operations before the measurement, over all threads.
    pub warmup: u64,
    pub shape: RecordShape,
    /// Reads in a row are handed to the store up to this many at a time
    /// ([`Session::get_batch`](crate::store::Session::get_batch)): a store with batched chains
    /// keeps them in flight together. Each read of a batch is timed as the whole batch. 1 runs
    /// YCSB's one operation at a time.
    pub read_batch: usize,
    /// With `read_batch` > 1 and a store that overlaps updates
    /// ([`Session::overlaps_updates`](crate::store::Session::overlaps_updates)): updates join
    /// the batch too (in flight with its reads, no order among them), each timed as the whole
    /// batch; otherwise an update waits for the reads queued before it and runs alone.
    pub batch_updates: bool,
}

impl RunConfig {
    fn check(&self) -> Result<(), YcsbError> {
        let bad = |s: String| Err(YcsbError::Invalid(s));
        if self.threads == 0 || self.threads > MAX_THREADS {
            return bad(format!("--threads {}: 1..={MAX_THREADS}", self.threads));
        }
        if self.operations == 0 || self.operations > MAX_OPERATIONS {
            return bad(format!("--operations {}: 1..={MAX_OPERATIONS}", self.operations));
        }
        if self.records == 0 {
            return bad("--records 0: the run reads loaded records".into());
        }
        if self.read_batch == 0 || self.read_batch > MAX_READ_BATCH {
            return bad(format!("--batch {}: 1..={MAX_READ_BATCH}", self.read_batch));
        }
        if self.shape.bytes() == 0 || self.shape.bytes() > MAX_RECORD_BYTES {
            return bad(format!("record of {} bytes: 1..={MAX_RECORD_BYTES}", self.shape.bytes()));
        }
        Ok(())
    }
}

/// Latency tail and count of one operation kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpStats {
    pub count: u64,
    pub tail: Tail,
    pub mean_us: f64,
}

/// A run's results.
#[derive(Debug, Clone)]
pub struct Report {
    pub store: String,
    pub store_spec: String,
    pub workload: char,
    pub threads: usize,
    /// Reads handed to the store together (`--batch`; 1: one at a time).
    pub read_batch: usize,
    pub records: u64,
    pub operations: u64,
    pub elapsed: Duration,
    pub ops_per_sec: f64,
    /// Process CPU time (user + system, every thread) per measured operation.
    pub cpu_us_per_op: f64,
    pub memory_limit_bytes: Option<u64>,
    /// The memory group's peak charge (page cache included), when a budget was set.
    pub memory_peak_bytes: Option<u64>,
    pub ops: BTreeMap<OpKind, OpStats>,
    /// Reads (and read-modify-writes) whose key was absent: 0 unless a store lost a record.
    pub read_misses: u64,
    pub counters: Vec<(&'static str, u64)>,
    pub seed: u64,
    /// The run's `batch_updates`.
    pub batch_updates: bool,
}

/// Samples of one thread, per operation kind.
#[derive(Default)]
struct Samples {
    ns: BTreeMap<OpKind, Vec<u64>>,
    misses: u64,
}

impl Samples {
    /// One sample; `expect` sizes a kind's first vector.
    fn push(&mut self, kind: OpKind, ns: u64, expect: u64) {
        self.ns.entry(kind).or_insert_with(|| Vec::with_capacity(expect as usize)).push(ns);
    }
}

fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid out-parameter for getrusage.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid, writable rusage for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// One thread's generators and buffers.
struct Worker<'a> {
    cfg: &'a RunConfig,
    inserts: &'a InsertCounter,
    rng: SmallRng,
    chooser: KeyChooser,
    key: Key,
    record: Vec<u8>,
    read: Vec<u8>,
    /// Reads queued for the next [`Worker::flush`] (the first `queued` entries).
    batch_keys: Vec<Key>,
    batch_out: Vec<Vec<u8>>,
    batch_found: Vec<bool>,
    queued: usize,
    /// Updates queued for the next [`Worker::flush`] (`batch_updates`): keys and new records.
    upd_keys: Vec<Key>,
    upd_records: Vec<Vec<u8>>,
    upd_queued: usize,
}

impl Worker<'_> {
    /// Runs `n` operations, reads in a row batched up to `read_batch`, into `out`.
    fn run(
        &mut self,
        s: &mut dyn crate::store::Session,
        n: u64,
        out: &mut Samples,
    ) -> Result<(), YcsbError> {
        let batch_updates = self.cfg.batch_updates && s.overlaps_updates();
        for _ in 0..n {
            let kind = self.cfg.workload.choose(&mut self.rng);
            let batched = match kind {
                OpKind::Read => self.cfg.read_batch > 1,
                OpKind::Update => self.cfg.read_batch > 1 && batch_updates,
                _ => false,
            };
            if batched {
                let num = self.chooser.next(&mut self.rng, self.inserts);
                if kind == OpKind::Read {
                    self.batch_keys[self.queued].set(num);
                    self.queued += 1;
                } else {
                    let u = self.upd_queued;
                    self.upd_keys[u].set(num);
                    self.cfg.shape.fill(num, self.rng.gen(), &mut self.upd_records[u]);
                    self.upd_queued += 1;
                }
                if self.queued + self.upd_queued == self.cfg.read_batch {
                    self.flush(s, out)?;
                }
                continue;
            }
            // Reads queued before a write are answered before it, as one at a time would be.
            self.flush(s, out)?;
            let t0 = Instant::now();
            let ok = self.op(s, kind)?;
            out.push(kind, t0.elapsed().as_nanos() as u64, n);
            out.misses += u64::from(!ok && matches!(kind, OpKind::Read | OpKind::ReadModifyWrite));
        }
        self.flush(s, out)
    }

    /// Answers the queued reads in one [`Session::get_batch`](crate::store::Session::get_batch).
    fn flush(
        &mut self,
        s: &mut dyn crate::store::Session,
        out: &mut Samples,
    ) -> Result<(), YcsbError> {
        let q = std::mem::take(&mut self.queued);
        let u = std::mem::take(&mut self.upd_queued);
        if q == 0 && u == 0 {
            return Ok(());
        }
        let t0 = Instant::now();
        let (keys, found) = (&self.batch_keys[..q], &mut self.batch_found[..q]);
        if u == 0 {
            s.get_batch(keys, &mut self.batch_out[..q], found)?;
        } else {
            let (uk, ur) = (&self.upd_keys[..u], &self.upd_records[..u]);
            s.run_batch(keys, &mut self.batch_out[..q], found, uk, ur)?;
        }
        let ns = t0.elapsed().as_nanos() as u64;
        for &f in &self.batch_found[..q] {
            out.push(OpKind::Read, ns, 0);
            out.misses += u64::from(!f);
        }
        for _ in 0..u {
            out.push(OpKind::Update, ns, 0);
        }
        Ok(())
    }

    /// Runs one operation; `Ok(false)` for a read whose key was absent.
    fn op(&mut self, s: &mut dyn crate::store::Session, kind: OpKind) -> Result<bool, YcsbError> {
        let w = &self.cfg.workload;
        match kind {
            OpKind::Read => {
                self.key.set(self.chooser.next(&mut self.rng, self.inserts));
                s.get(&self.key, &mut self.read)
            }
            OpKind::Update => {
                self.key.set(self.chooser.next(&mut self.rng, self.inserts));
                self.cfg.shape.fill(self.key.num, self.rng.gen(), &mut self.record);
                s.update(&self.key, &self.record).map(|()| true)
            }
            OpKind::Insert => {
                let n = self.inserts.next();
                self.key.set(n);
                self.cfg.shape.fill(n, 0, &mut self.record);
                s.insert(&self.key, &self.record)?;
                self.inserts.acknowledge(n);
                Ok(true)
            }
            OpKind::Scan => {
                self.key.set(self.chooser.next(&mut self.rng, self.inserts));
                let len = self.rng.gen_range(1..=w.max_scan_length) as usize;
                s.scan(&self.key, len).map(|n| n > 0)
            }
            OpKind::ReadModifyWrite => {
                self.key.set(self.chooser.next(&mut self.rng, self.inserts));
                let found = s.get(&self.key, &mut self.read)?;
                self.cfg.shape.fill(self.key.num, self.rng.gen(), &mut self.record);
                s.update(&self.key, &self.record)?;
                Ok(found)
            }
        }
    }
}

fn share(total: u64, threads: usize, t: usize) -> u64 {
    let n = threads as u64;
    total / n + u64::from((t as u64) < total % n)
}

fn thread_body(
    store: &dyn Store,
    cfg: &RunConfig,
    inserts: &InsertCounter,
    barrier: &Barrier,
    t: usize,
) -> Result<Samples, YcsbError> {
    let mut session = match store.session() {
        Ok(s) => s,
        Err(e) => {
            barrier.wait();
            return Err(e);
        }
    };
    let seed = cfg.seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut w = Worker {
        cfg,
        inserts,
        rng: SmallRng::seed_from_u64(seed),
        chooser: KeyChooser::new(&cfg.workload, cfg.records, cfg.operations),
        key: Key::new(0),
        record: Vec::with_capacity(cfg.shape.bytes()),
        read: Vec::with_capacity(cfg.shape.bytes()),
        batch_keys: (0..cfg.read_batch).map(|_| Key::new(0)).collect(),
        batch_out: (0..cfg.read_batch).map(|_| Vec::with_capacity(cfg.shape.bytes())).collect(),
        batch_found: vec![false; cfg.read_batch],
        queued: 0,
        upd_keys: (0..cfg.read_batch).map(|_| Key::new(0)).collect(),
        upd_records: (0..cfg.read_batch).map(|_| Vec::with_capacity(cfg.shape.bytes())).collect(),
        upd_queued: 0,
    };
    let warm = w.run(session.as_mut(), share(cfg.warmup, cfg.threads, t), &mut Samples::default());
    barrier.wait();
    warm?;
    let n = share(cfg.operations, cfg.threads, t);
    let mut out = Samples::default();
    w.run(session.as_mut(), n, &mut out)?;
    Ok(out)
}

/// Runs `cfg` against `store`.
///
/// # Errors
/// A bad configuration, or the first store error of any thread.
pub fn run(store: &dyn Store, kind: &str, cfg: &RunConfig) -> Result<Report, YcsbError> {
    cfg.check()?;
    let inserts = InsertCounter::new(cfg.records);
    let barrier = Barrier::new(cfg.threads + 1);
    let (results, elapsed, cpu) = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (inserts, barrier) = (&inserts, &barrier);
                sc.spawn(move || thread_body(store, cfg, inserts, barrier, t))
            })
            .collect();
        barrier.wait();
        let (t0, c0) = (Instant::now(), cpu_time());
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (results, t0.elapsed(), cpu_time().saturating_sub(c0))
    });
    let mut merged: BTreeMap<OpKind, Vec<u64>> = BTreeMap::new();
    let mut misses = 0;
    for r in results {
        let s = r?;
        misses += s.misses;
        for (k, v) in s.ns {
            merged.entry(k).or_default().extend(v);
        }
    }
    let ops = merged
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            let mean_us = v.iter().sum::<u64>() as f64 / v.len() as f64 / 1000.0;
            (k, OpStats { count: v.len() as u64, tail: Tail::of(&v), mean_us })
        })
        .collect();
    let secs = elapsed.as_secs_f64().max(1e-9);
    Ok(Report {
        store: kind.into(),
        store_spec: store.spec(),
        workload: cfg.workload.name,
        threads: cfg.threads,
        read_batch: cfg.read_batch,
        records: cfg.records,
        operations: cfg.operations,
        elapsed,
        ops_per_sec: cfg.operations as f64 / secs,
        cpu_us_per_op: cpu.as_secs_f64() * 1e6 / cfg.operations as f64,
        memory_limit_bytes: None,
        memory_peak_bytes: None,
        ops,
        read_misses: misses,
        counters: store.counters(),
        seed: cfg.seed,
        batch_updates: cfg.batch_updates,
    })
}

impl Report {
    /// The one summary line.
    #[must_use]
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut s = format!(
            "ycsb-{} {} threads={}: {:.0} ops/s, cpu {:.1} us/op",
            self.workload, self.store, self.threads, self.ops_per_sec, self.cpu_us_per_op
        );
        if self.read_batch > 1 {
            let _ = write!(s, ", read batch {}", self.read_batch);
        }
        for (k, o) in &self.ops {
            let _ = write!(
                s,
                ", {} p50/p99/p99.9 {:.1}/{:.1}/{:.1} us",
                k.name(),
                o.tail.p50_us,
                o.tail.p99_us,
                o.tail.p999_us
            );
        }
        if let Some(m) = self.memory_limit_bytes {
            let _ = write!(s, ", budget {} MiB", m >> 20);
        }
        if self.read_misses > 0 {
            let _ = write!(s, ", {} reads found no record", self.read_misses);
        }
        for (k, v) in &self.counters {
            let _ = write!(s, ", {k} {v}");
        }
        s
    }

    /// The JSON object (`--json`): YCSB's units, ops/s and µs per operation kind.
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: serde_json::Value| {
            m.insert(k.to_string(), v);
        };
        put("store", self.store.clone().into());
        put("store_spec", self.store_spec.clone().into());
        put("workload", self.workload.to_string().into());
        put("threads", self.threads.into());
        put("read_batch", self.read_batch.into());
        put("records", self.records.into());
        put("operations", self.operations.into());
        put("elapsed_s", self.elapsed.as_secs_f64().into());
        put("ops_per_sec", self.ops_per_sec.into());
        put("cpu_us_per_op", self.cpu_us_per_op.into());
        put("memory_limit_bytes", self.memory_limit_bytes.into());
        put("memory_peak_bytes", self.memory_peak_bytes.into());
        put("read_misses", self.read_misses.into());
        put("seed", self.seed.into());
        // `batch` is `read_batch` under the name bench/wiredtiger_ycsb.sh reads.
        put("batch", self.read_batch.into());
        put("batch_updates", self.batch_updates.into());
        for k in OpKind::ALL {
            let o = self.ops.get(&k);
            let n = k.name();
            put(&format!("{n}_count"), o.map_or(0, |o| o.count).into());
            put(&format!("{n}_mean_us"), o.map_or(0.0, |o| o.mean_us).into());
            put(&format!("{n}_p50_us"), o.map_or(0.0, |o| o.tail.p50_us).into());
            put(&format!("{n}_p99_us"), o.map_or(0.0, |o| o.tail.p99_us).into());
            put(&format!("{n}_p999_us"), o.map_or(0.0, |o| o.tail.p999_us).into());
        }
        for (k, v) in &self.counters {
            put(k, (*v).into());
        }
        serde_json::Value::Object(m)
    }
}
