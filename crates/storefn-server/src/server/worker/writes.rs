//! WRITE and LAMBDA_WRITE off the event loop: the worker opens the file (confined beneath the
//! root) and, for LAMBDA_WRITE, runs the program; the write, its `fdatasync` and the version
//! read after it run on the thread's writer thread, which answers through a channel and an
//! eventfd in the worker's poll set. A sync therefore no longer stalls the thread's other
//! connections for its length, and an answer is still sent only after the data is durable.
//!
//! Group commit: the writer takes every write queued when it wakes, writes them all, then
//! syncs each; the first sync of a file flushes the others' data of that file too, so the
//! later ones find nothing dirty. Requests of one connection are answered by id: a WRITE's
//! answer may come after the answers of requests sent after it (a client that reads what it
//! wrote waits for the WRITE's answer first, as with any pipelined request).

use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use super::job::Job;
use super::side::{Side, Wake};
use super::{Worker, MAX_PENDING_WRITE_BYTES};
use crate::access::Intent;
use crate::server::files::FileFail;
use storefn_wire::{op, FileVersion, Response, StatusCode};

/// A file of WRITE or LAMBDA_WRITE: a regular file (never a device or FIFO) opened beneath the
/// tenant's scope directory (confined; it must exist: the server never creates files), then
/// handed to the configured storage for the writes. The second descriptor reads the size
/// before and the version after the write.
pub(super) struct WriteTarget {
    storage_file: Box<dyn storefn_io::StorageFile>,
    file: std::fs::File,
}

pub(super) fn open_for_write(
    shared: &crate::server::Shared,
    scope: u32,
    path: &[u8],
) -> Result<WriteTarget, FileFail> {
    use std::os::unix::ffi::OsStrExt;
    let at = shared.policy.resolve(&shared.root, scope, path, Intent::Write)?;
    let f = at.dir.open_regular(at.rest, true).map_err(|e| (e.status(), e.to_string()))?;
    let file = f.try_clone().map_err(|e| (StatusCode::Io, format!("dup: {e}")))?;
    let name = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let storage_file =
        shared.cfg.storage.adopt(f, name).map_err(|e| (StatusCode::Io, format!("open: {e}")))?;
    Ok(WriteTarget { storage_file, file })
}

/// A write's charge to its tenant's quotas, given back if the write fails.
#[derive(Debug, Clone, Copy)]
pub(super) struct Charge {
    scope: u32,
    bytes: u64,
    growth: u64,
}

/// Charges `bytes` at `offset` of `t`'s file to the tenant's quotas (the bytes, and the growth
/// past the file's current end) before anything is written: nothing is written over quota.
pub(super) fn charge_write(
    shared: &crate::server::Shared,
    scope: u32,
    t: &WriteTarget,
    offset: u64,
    bytes: u64,
) -> Result<Charge, FileFail> {
    let (_, _, _, size) =
        crate::confine::identity(&t.file).map_err(|e| (StatusCode::Io, e.to_string()))?;
    let growth = shared.policy.charge(scope, offset, bytes, size)?;
    Ok(Charge { scope, bytes, growth })
}

/// A write in flight (a [`Job`] of its own kind, in the worker's table while the writer thread
/// writes and syncs it): what its answer and its accounting need.
#[derive(Debug)]
pub(super) struct WriteJob {
    tenant: u32,
    pub(super) conn: u32,
    pub(super) conn_gen: u32,
    pub(super) req_id: u64,
    /// WRITE or LAMBDA_WRITE.
    pub(super) op: u8,
    charge: Charge,
    /// What the answer reports as written (LAMBDA_WRITE: the program's return value).
    written: u64,
    /// When the worker began handling its request (the answer's latency).
    started: std::time::Instant,
}

/// What the writer thread is handed for job `job`: the file, where, and the bytes.
struct WriteOrder {
    job: u32,
    target: WriteTarget,
    offset: u64,
    data: Vec<u8>,
}

/// Job `job`'s write done: its result, and its data buffer back for reuse.
struct WriteDone {
    job: u32,
    /// The writer's time for it (its write and its sync), charged to its tenant.
    ns: u64,
    result: Result<FileVersion, FileFail>,
    data: Vec<u8>,
}

/// The worker's side of its writer thread.
pub(super) struct Writes {
    side: Side<Sender<WriteOrder>>,
    rx: Receiver<WriteDone>,
    /// Raised when answers are ready (once per batch).
    wake: Arc<Wake>,
    /// Writes handed over and not answered, and their bytes.
    pub(super) pending: usize,
    pub(super) pending_bytes: usize,
    /// Data buffers of answered writes (at most `SPARE_WRITE_BUFS`).
    spare: Vec<Vec<u8>>,
}

/// Data buffers kept for reuse, and the largest kept (a LAMBDA_WRITE's output may be 4 MiB).
const SPARE_WRITE_BUFS: usize = 16;
const SPARE_WRITE_CAP: usize = 256 * 1024;

impl std::fmt::Debug for Writes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writes").field("pending", &self.pending).finish_non_exhaustive()
    }
}

impl Writes {
    /// Starts the writer thread of server thread `id`.
    pub(super) fn start(id: usize) -> std::io::Result<Self> {
        let wake = Wake::new()?;
        let (tx, jobs) = std::sync::mpsc::channel::<WriteOrder>();
        let (done_tx, rx) = std::sync::mpsc::channel::<WriteDone>();
        let w = Arc::clone(&wake);
        let side = Side::spawn(format!("storefn-write-{id}"), tx, move || {
            writer(&jobs, &done_tx, &w);
        })?;
        Ok(Self { side, rx, wake, pending: 0, pending_bytes: 0, spare: Vec::new() })
    }

    /// The eventfd the worker polls while writes are pending.
    pub(super) fn fd(&self) -> std::os::fd::RawFd {
        self.wake.fd()
    }
}

/// The writer thread: a batch of queued writes, written, then synced, then answered.
fn writer(jobs: &Receiver<WriteOrder>, done: &Sender<WriteDone>, wake: &Wake) {
    let mut batch: Vec<(WriteOrder, Result<(), FileFail>, u64)> = Vec::new();
    let since = |t0: std::time::Instant| u64::try_from(t0.elapsed().as_nanos()).unwrap_or(0);
    while let Ok(first) = jobs.recv() {
        batch.push((first, Ok(()), 0));
        while let Ok(more) = jobs.try_recv() {
            batch.push((more, Ok(()), 0));
        }
        for (j, r, ns) in &mut batch {
            let t0 = std::time::Instant::now();
            *r = j
                .target
                .storage_file
                .write_at(&j.data, j.offset)
                .map_err(|e| (StatusCode::Io, format!("write: {e}")));
            *ns = since(t0);
        }
        for (j, r, ns) in batch.drain(..) {
            let t0 = std::time::Instant::now();
            let result = r.and_then(|()| {
                let t = &j.target;
                t.storage_file.sync().map_err(|e| (StatusCode::Io, format!("fdatasync: {e}")))?;
                let (dev, ino, change, _) = crate::confine::identity(&t.file)
                    .map_err(|e| (StatusCode::Io, e.to_string()))?;
                Ok(FileVersion { dev, ino, change })
            });
            let d = WriteDone { job: j.job, ns: ns + since(t0), result, data: j.data };
            if done.send(d).is_err() {
                return;
            }
        }
        wake.raise();
    }
}

impl Worker<'_> {
    /// Room for `bytes` more of pending writes: always when none is pending (one write of any
    /// allowed size goes), else while the thread's pending bytes stay within
    /// `MAX_PENDING_WRITE_BYTES`.
    pub(super) fn write_room(&self, bytes: usize) -> bool {
        self.writes.pending == 0 || self.writes.pending_bytes + bytes <= MAX_PENDING_WRITE_BYTES
    }

    /// Hands a write to the writer thread; the connection's in-flight count holds until the
    /// answer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit_write(
        &mut self,
        ci: u32,
        req_id: u64,
        code: u8,
        target: WriteTarget,
        charge: Charge,
        offset: u64,
        bytes: &[u8],
        written: u64,
    ) {
        let mut data = self.writes.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        let c = self.conn(ci);
        c.in_flight += 1;
        let (conn_gen, tenant) = (c.gen, c.tenant.expect("authenticated"));
        self.tenants.hold(tenant);
        let started = self.req_started;
        let w = WriteJob { tenant, conn: ci, conn_gen, req_id, op: code, charge, written, started };
        let job = self.add_job(Job::Write(w));
        let order = WriteOrder { job, target, offset, data };
        let tx = self.writes.side.tx();
        if tx.send(order).is_err() {
            self.take_job(job);
            self.shared.policy.refund(charge.scope, charge.bytes, charge.growth);
            self.tenants.release(tenant);
            self.conn(ci).in_flight -= 1;
            let m = "the writer thread stopped";
            return self.respond_err(ci, req_id, code, StatusCode::Io, m);
        }
        self.writes.pending += 1;
        self.writes.pending_bytes += bytes.len();
    }

    /// Answers the writes the writer finished.
    pub(super) fn poll_writes(&mut self) {
        if self.writes.pending == 0 {
            return;
        }
        self.writes.wake.clear();
        while let Ok(d) = self.writes.rx.try_recv() {
            self.writes.pending -= 1;
            self.writes.pending_bytes -= d.data.len();
            let Job::Write(w) = self.take_job(d.job) else { unreachable!("a write's job") };
            self.answer_write(&w, d.ns, d.result);
            if self.writes.spare.len() < SPARE_WRITE_BUFS && d.data.capacity() <= SPARE_WRITE_CAP {
                self.writes.spare.push(d.data);
            }
        }
    }

    /// Accounts for a synced (or failed) write and answers it if its connection is open.
    fn answer_write(&mut self, w: &WriteJob, ns: u64, result: Result<FileVersion, FileFail>) {
        self.sched.charge(w.tenant, ns);
        self.meter_write(w.tenant, w.op, w.started, ns, result.is_ok().then_some(w.written));
        self.tenants.release(w.tenant);
        if result.is_err() {
            let c = w.charge;
            self.shared.policy.refund(c.scope, c.bytes, c.growth);
        }
        if self.conns[w.conn as usize].as_ref().is_none_or(|c| c.gen != w.conn_gen) {
            return;
        }
        self.conn(w.conn).in_flight -= 1;
        match result {
            Ok(version) => {
                let r = if w.op == op::WRITE {
                    let written = u32::try_from(w.written).expect("<= MAX_WRITE_BYTES");
                    Response::Write { version, written }
                } else {
                    Response::LambdaWrite { version, written: w.written }
                };
                self.respond(w.conn, w.req_id, w.op, &r);
            }
            Err((st, m)) => self.respond_err(w.conn, w.req_id, w.op, st, &m),
        }
    }
}
