//! The function store's writer threads (`--batch-updates`): a batch's updates commit on them
//! while the batch's reads run as chains on the session's thread.

use super::{tagged_write, FnStore, Handle, Shared};
use crate::error::YcsbError;
use crate::limits::BATCH_WRITERS;
use crate::workload::Key;
use std::sync::{Arc, Condvar, Mutex};
use storefn_wiredtiger::native::Connection;

/// One writer thread's hand-off: the session fills `work` and sets `state` to `Run`; the
/// writer runs the updates and sets `Done`.
#[derive(Default)]
struct WriterJob {
    /// (key number, new record); the first `n` are this batch's.
    work: Vec<(u64, Vec<u8>)>,
    n: usize,
    state: JobState,
}

#[derive(Default)]
enum JobState {
    #[default]
    Idle,
    Run,
    Done(Result<(), YcsbError>),
    Quit,
}

struct WriterSlot {
    job: Mutex<WriterJob>,
    cv: Condvar,
}

/// A session's writer threads (`--batch-updates`, [`BATCH_WRITERS`]): each has its own
/// WiredTiger session and commits the updates it is given one by one while the batch's reads
/// run on the session's thread.
pub(super) struct Writers {
    slots: Vec<Arc<WriterSlot>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

fn lock_job(s: &WriterSlot) -> std::sync::MutexGuard<'_, WriterJob> {
    s.job.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Writers {
    pub(super) fn start(store: &FnStore) -> Result<Self, YcsbError> {
        let mut w = Writers { slots: Vec::new(), threads: Vec::new() };
        for _ in 0..BATCH_WRITERS {
            let slot = Arc::new(WriterSlot { job: Mutex::default(), cv: Condvar::new() });
            let (conn, shared, uri) =
                (Arc::clone(&store.conn), Arc::clone(&store.shared), store.uri.clone());
            // The session opens on the writer's own thread (WiredTiger sessions are not shared
            // between threads); its failure is the first job's answer.
            let s2 = Arc::clone(&slot);
            let t = std::thread::Builder::new()
                .name("ycsb-wt-writer".into())
                .spawn(move || writer_loop(&conn, &shared, &uri, &s2))
                .map_err(|e| YcsbError::Invalid(format!("starting a writer thread: {e}")))?;
            w.slots.push(slot);
            w.threads.push(t);
        }
        Ok(w)
    }

    /// Runs `updates` spread over the writers while `reads` runs here; both finish first.
    pub(super) fn run(
        &mut self,
        updates: &[Key],
        records: &[Vec<u8>],
        reads: impl FnOnce() -> Result<(), YcsbError>,
    ) -> Result<(), YcsbError> {
        let n = self.slots.len();
        for (w, slot) in self.slots.iter().enumerate() {
            let mut j = lock_job(slot);
            j.n = 0;
            for (k, r) in updates.iter().zip(records).skip(w).step_by(n) {
                if j.work.len() == j.n {
                    j.work.push((0, Vec::new()));
                }
                let at = j.n;
                j.work[at].0 = k.num;
                j.work[at].1.clear();
                j.work[at].1.extend_from_slice(r);
                j.n += 1;
            }
            if j.n > 0 {
                j.state = JobState::Run;
                slot.cv.notify_one();
            }
        }
        let read = reads();
        let mut first = read.err();
        for slot in &self.slots {
            let mut j = lock_job(slot);
            if j.n == 0 {
                continue;
            }
            while matches!(j.state, JobState::Run) {
                j = slot.cv.wait(j).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if let JobState::Done(Err(e)) = std::mem::take(&mut j.state) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        for slot in &self.slots {
            lock_job(slot).state = JobState::Quit;
            slot.cv.notify_one();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn writer_loop(conn: &Connection, shared: &Shared, uri: &str, slot: &WriterSlot) {
    let mut h = Handle::open(conn, uri);
    let mut key = Key::new(0);
    let mut j = lock_job(slot);
    loop {
        match j.state {
            JobState::Quit => return,
            JobState::Run => {}
            _ => {
                j = slot.cv.wait(j).unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
        }
        let r = match &mut h {
            Err(e) => Err(YcsbError::Invalid(format!("a writer's WiredTiger session: {e}"))),
            Ok(h) => (0..j.n).try_for_each(|i| {
                key.set(j.work[i].0);
                tagged_write(shared, h, &key, &j.work[i].1)
            }),
        };
        j.state = JobState::Done(r);
        slot.cv.notify_one();
    }
}
