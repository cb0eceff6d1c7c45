//! A connection's output: the response frame being collected, the send buffer, and whole
//! frames sent from the range buffers their data was read into (a READ's answer, a DDS
//! offloaded read's), several per `writev`.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Instant;

use storefn_io::RangeBuf;

use super::ranges::RangePool;
use super::Conn;
use crate::server::CONN_KEEP_BYTES;
use storefn_wire::limits::{MAX_FRAME_BYTES, MAX_LAMBDA_OUT_BYTES, MAX_MSGS_PER_FRAME};
use storefn_wire::KIND_RESPONSE;

/// A whole response frame queued on a connection: `buf[bytes]`, an answer's head and the data
/// read right behind it.
#[derive(Debug)]
pub(super) struct OutFrame {
    pub(super) buf: RangeBuf,
    pub(super) bytes: std::ops::Range<usize>,
}

impl OutFrame {
    fn bytes(&self) -> &[u8] {
        &self.buf.as_slice()[self.bytes.clone()]
    }

    fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

/// A response frame is closed (moved to the send buffer) before it could pass
/// `MAX_FRAME_BYTES` with the largest message or `MAX_MSGS_PER_FRAME` messages.
const ROLL_FRAME_BYTES: usize = MAX_FRAME_BYTES - MAX_LAMBDA_OUT_BYTES as usize - 1024;

/// Queued frames one `writev` sends at most.
const FRAMES_PER_WRITEV: usize = 64;

/// Makes the connection's response frame ready for one more message of any size.
pub(super) fn open_frame(c: &mut Conn) {
    if !c.frame.is_empty()
        && (c.frame.len() > ROLL_FRAME_BYTES || c.frame.count() >= MAX_MSGS_PER_FRAME)
    {
        move_frame_to_tx(c);
    }
    if c.frame.is_empty() {
        c.frame.begin(KIND_RESPONSE);
    }
}

/// Appends the connection's finished response frame to its send buffer, dropping the bytes
/// already sent first once they are half of it: the buffer holds unsent bytes (and at most as
/// many sent ones), never everything since it was last empty. A client that reads steadily
/// but never drains its responses fully used to grow it without bound, as only the unsent
/// bytes were counted against `MAX_CONN_OUT_BYTES`.
pub(super) fn move_frame_to_tx(c: &mut Conn) {
    if c.tx_pos > 0 && c.tx_pos * 2 >= c.tx.len() {
        c.tx.drain(..c.tx_pos);
        c.tx_pos = 0;
    }
    let bytes = c.frame.finish();
    c.meter.count_frame(bytes, c.id, c.peer);
    let need = c.tx.len() + bytes.len();
    if c.authed && need > c.tx.capacity() {
        // One step to the size a drained buffer keeps rather than a doubling at each larger
        // frame than before: an authenticated connection's steady traffic of frames below it
        // then never allocates again, however its answers happen to be grouped into frames
        // (unauthenticated ones keep the small start their HELLO and AUTH answers need).
        c.tx.reserve_exact(need.max(CONN_KEEP_BYTES) - c.tx.len());
    }
    c.tx.extend_from_slice(bytes);
    c.frame.begin(KIND_RESPONSE); // count 0 again: the next response restarts it
    if c.frame.buf.capacity() > CONN_KEEP_BYTES {
        c.frame.buf.shrink_to(CONN_KEEP_BYTES);
    }
}

impl Conn {
    /// Queues a whole answer frame held in a range buffer (counted as it is queued, as
    /// `move_frame_to_tx` counts the others).
    pub(super) fn push_out(&mut self, f: OutFrame) {
        self.meter.count_frame(f.bytes(), self.id, self.peer);
        self.out_frames.push_back(f);
    }

    /// Bytes waiting to be sent: `tx`'s and the queued frames'.
    pub(super) fn out_backlog(&self) -> usize {
        let frames: usize = self.out_frames.iter().map(|f| f.bytes().len()).sum();
        self.tx.len() - self.tx_pos + frames - self.out_pos
    }

    /// Response bytes the connection holds, sent or not: what `MAX_CONN_OUT_BYTES` bounds. A
    /// queued frame counts its whole buffer (a small READ's answer holds a range buffer).
    pub(super) fn out_held(&self) -> usize {
        let frames: usize = self.out_frames.iter().map(OutFrame::capacity).sum();
        self.tx.len() + frames + self.frame.len()
    }

    /// Bytes of memory the connection's buffers hold (their capacities).
    pub(super) fn held_bytes(&self) -> usize {
        let frames: usize = self.out_frames.iter().map(OutFrame::capacity).sum();
        self.rx.capacity() + self.tx.capacity() + self.frame.buf.capacity() + frames
    }
}

/// Writes `bytes[*pos..]`; Ok(true) when all of it went out, Ok(false) when the socket is full.
fn write_some(stream: &mut TcpStream, bytes: &[u8], pos: &mut usize) -> Result<bool, String> {
    while *pos < bytes.len() {
        match stream.write(&bytes[*pos..]) {
            Ok(0) => return Err("write returned 0".into()),
            Ok(n) => *pos += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("write: {e}")),
        }
    }
    Ok(true)
}

/// Sends the queued frames the socket takes, up to [`FRAMES_PER_WRITEV`] per call; a sent
/// frame's buffer goes back for reuse. Ok(true) when every frame the call offered went out.
fn send_frames(c: &mut Conn, ranges: &mut RangePool) -> Result<bool, String> {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; FRAMES_PER_WRITEV];
    let mut n = 0usize;
    let mut offered = 0;
    for (k, f) in c.out_frames.iter().take(FRAMES_PER_WRITEV).enumerate() {
        let b = if k == 0 { &f.bytes()[c.out_pos..] } else { f.bytes() };
        iov[k] = libc::iovec { iov_base: b.as_ptr().cast_mut().cast(), iov_len: b.len() };
        n += 1;
        offered += b.len();
    }
    let wrote = loop {
        let cnt = i32::try_from(n).expect("at most FRAMES_PER_WRITEV");
        // SAFETY: `iov[..n]` describes live byte slices of the queued frames, which stay
        // queued (unmoved, unchanged) across the call; writev only reads them.
        let r = unsafe { libc::writev(c.stream.as_raw_fd(), iov.as_ptr(), cnt) };
        if let Ok(r) = usize::try_from(r) {
            break r;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted => {}
            std::io::ErrorKind::WouldBlock => return Ok(false),
            _ => return Err(format!("write: {e}")),
        }
    };
    if wrote == 0 {
        return Err("write returned 0".into());
    }
    let mut left = wrote;
    while left > 0 {
        let rest = c.out_frames.front().expect("bytes were sent from it").bytes().len() - c.out_pos;
        if left < rest {
            c.out_pos += left;
            break;
        }
        left -= rest;
        c.out_pos = 0;
        ranges.give(c.out_frames.pop_front().expect("checked").buf);
    }
    Ok(wrote == offered)
}

/// Sends what the socket takes; `Err` = the connection is broken. A frame is never split by
/// another: a partly sent queued frame finishes before `tx` resumes, and `tx` (once started)
/// before the next queued frame.
pub(super) fn send(c: &mut Conn, ranges: &mut RangePool) -> Result<(), String> {
    loop {
        let frame_first = c.out_pos > 0 || (c.tx_pos == c.tx.len() && !c.out_frames.is_empty());
        let before = c.out_backlog();
        let done = if frame_first {
            send_frames(c, ranges)?
        } else if c.tx_pos < c.tx.len() {
            let done = write_some(&mut c.stream, &c.tx, &mut c.tx_pos)?;
            if done {
                c.tx.clear();
                c.tx_pos = 0;
                if c.tx.capacity() > CONN_KEEP_BYTES {
                    c.tx.shrink_to(CONN_KEEP_BYTES);
                }
            }
            done
        } else {
            c.tx_stalled_since = None;
            return Ok(());
        };
        if c.out_backlog() < before {
            c.tx_stalled_since = None;
        }
        if !done {
            c.tx_stalled_since = Some(c.tx_stalled_since.unwrap_or_else(Instant::now));
            return Ok(());
        }
    }
}
