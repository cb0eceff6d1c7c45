//! The worker's λ path (LAMBDA): a job's range is staged in 4 KiB chunk reads, up to
//! [`LAMBDA_READS_PER_JOB`] in flight, each landing at its place in the job's staging buffer;
//! once the whole range landed the program runs once over it, its output written straight
//! into the response frame.

use storefn_io::Engine;

use super::{open_frame, Job, Worker};
use storefn_wire::limits::{MAX_LAMBDA_IN_BYTES, MAX_READ_BYTES};
use storefn_wire::{op, put_status, StatusCode};

/// Chunk reads one λ job keeps in flight: a 1 MiB range is 256 device reads, which in series
/// cost 256 device latencies; 16 at a time overlap them while one job holds at most 1/16 of the
/// engine's `ENGINE_CHAINS` slots (the scheduler counts the job once).
pub(crate) const LAMBDA_READS_PER_JOB: u32 = 16;

/// Bits of an engine token that carry the job index; a λ chunk read's chunk index sits above.
const TOKEN_JOB_BITS: u32 = 32;

/// The job a completion's token names (any kind).
pub(super) fn token_job(token: u64) -> u32 {
    u32::try_from(token & ((1 << TOKEN_JOB_BITS) - 1)).expect("masked to 32 bits")
}

/// The token of chunk `chunk` of job `ji`'s range.
fn chunk_token(ji: u32, chunk: u64) -> u64 {
    debug_assert!(chunk < u64::from(MAX_LAMBDA_IN_BYTES / MAX_READ_BYTES));
    u64::from(ji) | (chunk << TOKEN_JOB_BITS)
}

/// The chunk index a λ chunk read's token carries.
pub(super) fn token_chunk(token: u64) -> u32 {
    u32::try_from(token >> TOKEN_JOB_BITS).expect("chunk index below 2^32")
}

/// Submits reads of a λ job's next chunks (at most `MAX_READ_BYTES` each, the engine's plain-read
/// limit) while the job has fewer than [`LAMBDA_READS_PER_JOB`] in flight and the engine has a
/// free slot; each chunk lands at its place in the input, in whatever order they complete.
pub(super) fn submit_lambda_chunks(
    engine: &mut Engine,
    j: &mut Job,
    ji: u32,
) -> Result<(), storefn_io::SubmitError> {
    while j.submitted < j.len && j.reads_in_flight < LAMBDA_READS_PER_JOB && engine.free_slots() > 0
    {
        let done = u64::from(j.submitted);
        let n = (u64::from(j.len) - done).min(u64::from(MAX_READ_BYTES));
        let chunk = done / u64::from(MAX_READ_BYTES);
        let token = chunk_token(ji, chunk);
        engine.submit_read(j.file, j.offset + done, n, token)?;
        j.submitted += u32::try_from(n).expect("<= MAX_READ_BYTES");
        j.reads_in_flight += 1;
    }
    Ok(())
}

impl Worker<'_> {
    /// A λ job's chunk read could not be submitted: answer the error once; the job is released
    /// now if none of its reads is in flight, else when the last one completes.
    pub(super) fn lambda_submit_failed(&mut self, ji: u32, e: &storefn_io::SubmitError) {
        let j = self.jobs[ji as usize].as_mut().expect("job");
        if j.reads_in_flight == 0 {
            return self.finish_job(ji, Err((StatusCode::Io, format!("submit: {e}"))));
        }
        j.failed = true;
        let (conn, gen, req_id) = (j.conn, j.conn_gen, j.req_id);
        if self.conns[conn as usize].as_ref().is_some_and(|c| c.gen == gen) {
            self.respond_err(conn, req_id, op::LAMBDA, StatusCode::Io, &format!("submit: {e}"));
        }
    }

    /// Submits the next chunk reads of the λ jobs waiting for them, oldest first, while the
    /// engine has free slots; returns how many reads went out. A job stays queued until it has
    /// a read in flight (its completion asks again) or nothing left to submit; a job whose
    /// connection went away leaves, released once none of its reads is in flight.
    pub(super) fn resume_lambdas(&mut self) -> usize {
        let mut sent = 0;
        while self.engine.free_slots() > 0 {
            let Some(&ji) = self.lambda_more.front() else { break };
            let Some(j) = self.jobs[ji as usize].as_mut().filter(|j| j.more_queued) else {
                self.lambda_more.pop_front(); // stale: the job was answered meanwhile
                continue;
            };
            let live = self.conns[j.conn as usize].as_ref().is_some_and(|c| c.gen == j.conn_gen);
            if !live || j.failed {
                j.more_queued = false;
                self.lambda_more.pop_front();
                if j.reads_in_flight == 0 {
                    self.release_job(ji);
                }
                continue;
            }
            let before = j.reads_in_flight;
            if let Err(e) = submit_lambda_chunks(&mut self.engine, j, ji) {
                j.more_queued = false;
                self.lambda_more.pop_front();
                self.lambda_submit_failed(ji, &e);
                continue;
            }
            sent += (j.reads_in_flight - before) as usize;
            if j.reads_in_flight == 0 {
                break; // the engine is full: it waits at the front
            }
            j.more_queued = false;
            self.lambda_more.pop_front();
        }
        sent
    }

    /// Runs a λ job's program over its input, writing the output straight into the response.
    pub(super) fn run_lambda(&mut self, ji: u32) {
        let j = self.jobs[ji as usize].as_ref().expect("job");
        let live = self.conns[j.conn as usize].as_ref().is_some_and(|cn| cn.gen == j.conn_gen);
        if !live {
            return;
        }
        let (conn, req_id, version, cap) = (j.conn, j.req_id, j.version, j.out_len);
        let inst = j.inst.expect("a λ job holds its program");
        let Self { jobs, conns, progs, .. } = self;
        let j = jobs[ji as usize].as_ref().expect("job");
        let c = conns[conn as usize].as_mut().expect("live");
        open_frame(c);
        let start = c.frame.begin_msg(req_id, op::LAMBDA, StatusCode::Ok as u16);
        let hdr = c.frame.buf.len();
        c.frame.buf.extend_from_slice(&version.dev.to_le_bytes());
        c.frame.buf.extend_from_slice(&version.ino.to_le_bytes());
        c.frame.buf.extend_from_slice(&version.change.to_le_bytes());
        c.frame.buf.extend_from_slice(&0u64.to_le_bytes());
        let out_at = c.frame.buf.len();
        c.frame.buf.resize(out_at + cap as usize, 0);
        let s = progs.slots[inst as usize].as_mut().expect("held");
        s.inst.set_insn_budget(progs.job_budget[ji as usize]);
        let t0 = std::time::Instant::now();
        let res = s.inst.run_lambda(&j.input, &mut c.frame.buf[out_at..]);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        progs.job_cpu[ji as usize] = progs.job_cpu[ji as usize].saturating_add(ns);
        match res {
            Ok(ret) => {
                let keep = usize::try_from(ret.min(u64::from(cap))).expect("<= cap");
                c.frame.buf.truncate(out_at + keep);
                c.frame.buf[hdr + 24..hdr + 32].copy_from_slice(&ret.to_le_bytes());
                c.frame.end_msg(start);
            }
            Err(e) => {
                c.frame.buf.truncate(start);
                put_status(
                    &mut c.frame,
                    req_id,
                    op::LAMBDA,
                    StatusCode::ChainFailed,
                    &e.to_string(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_tokens_carry_the_job_and_the_chunk() {
        for (ji, chunk) in [(0u32, 0u64), (7, 255), (u32::MAX, 1), (u32::MAX, 255)] {
            let t = chunk_token(ji, chunk);
            assert_eq!((token_job(t), u64::from(token_chunk(t))), (ji, chunk));
        }
        // A plain job's token (READ, XRP: the job index) is its own chunk 0.
        assert_eq!((token_job(42), token_chunk(42)), (42, 0));
    }
}
