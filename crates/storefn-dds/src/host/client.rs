//! The host file library: what the host application links to reach the file service.
//!
//! Two ways to call it: blocking (`create`, `open`, `read`, `write`, `flush`, `close`; each
//! waits for its answer, up to the timeout) or asynchronous (`submit_*` returns a request id,
//! `poll` hands over completed requests). Blocking calls refuse to run while submitted requests
//! are outstanding ([`HostError::Busy`]) so an answer is never taken from under `poll`.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use super::wire::{Op, RequestHeader, ResponseHeader};
use super::{HostChannel, HostError, DEFAULT_TIMEOUT};
use crate::limits::{MAX_BATCH_RECORDS, MAX_IO_BYTES};
use crate::ring::progressive::Consumer;

/// One finished request, handed to [`HostFiles::poll`]'s callback.
#[derive(Debug)]
pub struct Completion<'a> {
    /// The id `submit_*` returned.
    pub id: u64,
    /// File id (create/open), bytes (read/write), 0 (flush/close); or the errno.
    pub result: Result<u64, i32>,
    /// The data of a read (valid only during the callback).
    pub data: &'a [u8],
    /// Time the file service spent in the system call, ns (the device's share of the call).
    pub device_ns: u32,
}

/// The host side of one channel.
#[derive(Debug)]
pub struct HostFiles {
    channel: HostChannel,
    consumer: Consumer,
    next_id: u64,
    outstanding: usize,
    timeout: Duration,
    /// Sum of `device_ns` over the completions of blocking calls since the last
    /// [`take_device_ns`](Self::take_device_ns).
    device_ns: u64,
}

impl HostFiles {
    /// Uses `channel` (the host process usually got it from [`attach`](Self::attach)).
    pub fn new(channel: HostChannel) -> Self {
        let consumer = channel.responses().consumer(MAX_IO_BYTES + 64);
        Self {
            channel,
            consumer,
            next_id: 1,
            outstanding: 0,
            timeout: DEFAULT_TIMEOUT,
            device_ns: 0,
        }
    }

    /// Attaches to the channel memfd the storage server handed this process.
    ///
    /// # Errors
    /// As [`HostChannel::attach`].
    pub fn attach(fd: OwnedFd) -> Result<Self, HostError> {
        Ok(Self::new(HostChannel::attach(fd)?))
    }

    /// How long blocking calls (and pushes into a full request ring) wait.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Device time (ns in the file service's system calls) of the blocking calls made since the
    /// last call, and restarts the sum.
    pub fn take_device_ns(&mut self) -> u64 {
        std::mem::take(&mut self.device_ns)
    }

    /// Submitted requests not yet handed to `poll`.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    fn submit(
        &mut self,
        op: Op,
        file: u32,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> Result<u64, HostError> {
        let id = self.next_id;
        let head = RequestHeader { op: op as u8, file, id, offset, len }.encode();
        self.channel.requests().push(&[&head, payload], self.timeout)?;
        self.channel.request_bell().ring();
        // A host storing or replaying pages is alive even before it answers forwarded requests.
        self.channel.beat();
        self.next_id += 1;
        self.outstanding += 1;
        Ok(id)
    }

    /// Submits a create (truncating an existing file) of `path` beneath the service's directory.
    ///
    /// # Errors
    /// `Ring` (`TooLarge` for an over-long path, `Timeout` when the ring stayed full).
    pub fn submit_create(&mut self, path: &str) -> Result<u64, HostError> {
        self.submit(Op::Create, 0, 0, path.len() as u32, path.as_bytes())
    }

    /// Submits an open of an existing file.
    ///
    /// # Errors
    /// As [`submit_create`](Self::submit_create).
    pub fn submit_open(&mut self, path: &str) -> Result<u64, HostError> {
        self.submit(Op::Open, 0, 0, path.len() as u32, path.as_bytes())
    }

    /// Submits a read of `len` (<= [`MAX_IO_BYTES`]) bytes at `offset`.
    ///
    /// # Errors
    /// As [`submit_create`](Self::submit_create).
    pub fn submit_read(&mut self, file: u32, offset: u64, len: u32) -> Result<u64, HostError> {
        self.submit(Op::Read, file, offset, len, &[])
    }

    /// Submits a write of `data` (<= [`MAX_IO_BYTES`]) at `offset`.
    ///
    /// # Errors
    /// As [`submit_create`](Self::submit_create).
    pub fn submit_write(&mut self, file: u32, offset: u64, data: &[u8]) -> Result<u64, HostError> {
        self.submit(Op::Write, file, offset, data.len() as u32, data)
    }

    /// Submits a flush (fdatasync): writes answered before it are durable when it answers.
    ///
    /// # Errors
    /// As [`submit_create`](Self::submit_create).
    pub fn submit_flush(&mut self, file: u32) -> Result<u64, HostError> {
        self.submit(Op::Flush, file, 0, 0, &[])
    }

    /// Submits a close of the file id.
    ///
    /// # Errors
    /// As [`submit_create`](Self::submit_create).
    pub fn submit_close(&mut self, file: u32) -> Result<u64, HostError> {
        self.submit(Op::Close, file, 0, 0, &[])
    }

    /// Hands every response ready now (up to one ring batch) to `f`. Returns how many.
    ///
    /// # Errors
    /// `Ring` for a corrupt response ring; `Malformed` for a response too short or with no
    /// outstanding request.
    pub fn poll(&mut self, f: impl FnMut(Completion<'_>)) -> Result<usize, HostError> {
        let Self { channel, consumer, outstanding, next_id, .. } = self;
        poll_responses(channel, consumer, outstanding, *next_id, f)
    }

    /// Submits through `submit` and waits for its answer; returns (value, bytes copied to `out`).
    fn call(
        &mut self,
        op: &'static str,
        out: &mut [u8],
        submit: impl FnOnce(&mut Self) -> Result<u64, HostError>,
    ) -> Result<(u64, usize), HostError> {
        if self.outstanding != 0 {
            return Err(HostError::Busy(self.outstanding));
        }
        let id = submit(self)?;
        // Spin briefly, then sleep on the response ring's doorbell (the file service rings it
        // after each batch): a blocking call burns no CPU while the service works.
        let deadline = Instant::now() + self.timeout;
        let mut answer = None;
        let Self { channel, consumer, outstanding, next_id, device_ns, .. } = self;
        let got = channel.response_bell().wait_until(deadline, || {
            poll_responses(channel, consumer, outstanding, *next_id, |c| {
                debug_assert_eq!(c.id, id, "only one request outstanding");
                let n = c.data.len().min(out.len());
                out[..n].copy_from_slice(&c.data[..n]);
                answer = Some(c.result.map(|v| (v, n)));
                *device_ns += u64::from(c.device_ns);
            })?;
            Ok::<bool, HostError>(answer.is_some())
        })?;
        if !got {
            return Err(HostError::Timeout { op, after: self.timeout });
        }
        answer.expect("loop ends with an answer").map_err(|errno| HostError::File { op, errno })
    }

    /// Creates (or truncates) `path`; returns its file id.
    ///
    /// # Errors
    /// `File` with the service's errno (EXDEV for a path leaving the directory), `Busy`,
    /// `Timeout`, `Ring`.
    pub fn create(&mut self, path: &str) -> Result<u32, HostError> {
        self.call("create", &mut [], |s| s.submit_create(path)).map(|(v, _)| v as u32)
    }

    /// Opens an existing `path`; returns its file id.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn open(&mut self, path: &str) -> Result<u32, HostError> {
        self.call("open", &mut [], |s| s.submit_open(path)).map(|(v, _)| v as u32)
    }

    /// Reads into `buf` from `offset` (in requests of at most [`MAX_IO_BYTES`]); returns the
    /// bytes read (short only at end of file).
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn read(&mut self, file: u32, offset: u64, buf: &mut [u8]) -> Result<usize, HostError> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(MAX_IO_BYTES);
            let at = offset + done as u64;
            let (_, n) = self.call("read", &mut buf[done..done + want], |s| {
                s.submit_read(file, at, want as u32)
            })?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Writes all of `data` at `offset` (in requests of at most [`MAX_IO_BYTES`]).
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn write(&mut self, file: u32, offset: u64, data: &[u8]) -> Result<(), HostError> {
        for (i, chunk) in data.chunks(MAX_IO_BYTES).enumerate() {
            let at = offset + (i * MAX_IO_BYTES) as u64;
            self.call("write", &mut [], |s| s.submit_write(file, at, chunk))?;
        }
        Ok(())
    }

    /// Makes the file's acknowledged writes durable.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn flush(&mut self, file: u32) -> Result<(), HostError> {
        self.call("flush", &mut [], |s| s.submit_flush(file)).map(|_| ())
    }

    /// Forgets the file id.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn close(&mut self, file: u32) -> Result<(), HostError> {
        self.call("close", &mut [], |s| s.submit_close(file)).map(|_| ())
    }
}

/// [`HostFiles::poll`] over split borrows (so a blocking call can poll inside a doorbell wait).
fn poll_responses(
    channel: &HostChannel,
    consumer: &mut Consumer,
    outstanding: &mut usize,
    next_id: u64,
    mut f: impl FnMut(Completion<'_>),
) -> Result<usize, HostError> {
    let mut bad = None;
    let n = consumer.pop_batch(&channel.responses(), MAX_BATCH_RECORDS, |msg| {
        match ResponseHeader::decode(msg) {
            Ok((h, _)) if *outstanding == 0 || h.id >= next_id => {
                bad.get_or_insert(HostError::Malformed(format!(
                    "response to request {} never submitted",
                    h.id
                )));
            }
            Ok((h, data)) => {
                *outstanding -= 1;
                let result = if h.status == 0 { Ok(h.value) } else { Err(-h.status) };
                f(Completion { id: h.id, result, data, device_ns: h.device_ns });
            }
            Err(e) => {
                bad.get_or_insert(e);
            }
        }
    })?;
    match bad {
        Some(e) => Err(e),
        None => Ok(n),
    }
}
