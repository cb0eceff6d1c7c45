//! Forwarding: requests DDS's predicate sends to the host application travel over a
//! [`HostChannel`] (the same two progressive rings as the file path), and the host's responses
//! come back over the other ring for the server to relay to the client. The payload is the
//! client's request as received (opaque here); each message carries the server's request id.
//!
//! Messages (docs/FORMAT.md, "DDS host channel"): a request is `id: u64` little-endian, then
//! the payload; an answer is `id: u64 | host_ns: u32 | device_ns: u32`, then the payload, the
//! two times being the host's own account of the request ([`AnswerTiming`]), so the server
//! can split a forwarded request's latency into ring, host and device time.

use std::time::Duration;

use super::{HostChannel, HostError, CHANNEL_MAX_MESSAGE, DEFAULT_TIMEOUT};
use crate::limits::MAX_BATCH_RECORDS;
use crate::ring::progressive::{Consumer, ProgressiveRing};

/// Bytes before the payload of a forwarded request.
pub const FORWARD_HEADER_BYTES: usize = 8;
/// Bytes before the payload of an answer: the id, then [`AnswerTiming`].
pub const ANSWER_HEADER_BYTES: usize = 16;
/// Largest payload either way.
pub const MAX_FORWARD_BYTES: usize = CHANNEL_MAX_MESSAGE - ANSWER_HEADER_BYTES;

/// The host's account of one answered request, carried in the answer's header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AnswerTiming {
    /// Wall time from taking the request off the ring to sending the answer, ns (saturating).
    pub host_ns: u32,
    /// Of which in the file service's system calls (the device), ns (saturating).
    pub device_ns: u32,
}

/// Which end of the channel this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The storage server: sends requests, receives responses.
    Server,
    /// The host application: receives requests, sends responses.
    Host,
}

/// One end of a forwarding channel.
#[derive(Debug)]
pub struct ForwardEnd {
    channel: HostChannel,
    side: Side,
    consumer: Consumer,
    timeout: Duration,
}

impl ForwardEnd {
    /// This process's end of `channel`.
    pub fn new(channel: HostChannel, side: Side) -> Self {
        let consumer = match side {
            Side::Server => channel.responses().consumer(CHANNEL_MAX_MESSAGE),
            Side::Host => channel.requests().consumer(CHANNEL_MAX_MESSAGE),
        };
        Self { channel, side, consumer, timeout: DEFAULT_TIMEOUT }
    }

    /// How long `send` waits for room.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn outgoing(&self) -> ProgressiveRing<'_> {
        match self.side {
            Side::Server => self.channel.requests(),
            Side::Host => self.channel.responses(),
        }
    }

    /// Sends request (server) or answer (host, with zero timing) `id` with `payload`.
    ///
    /// # Errors
    /// `Ring`: `TooLarge` above [`MAX_FORWARD_BYTES`], `Timeout` when the ring stayed full.
    pub fn send(&self, id: u64, payload: &[u8]) -> Result<(), HostError> {
        self.answer(id, AnswerTiming::default(), payload)
    }

    /// Sends `id` with `payload`; on the host side with `timing` in the answer header (the
    /// server side ignores it: requests carry none).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn answer(&self, id: u64, timing: AnswerTiming, payload: &[u8]) -> Result<(), HostError> {
        if payload.len() > MAX_FORWARD_BYTES {
            let e = crate::ring::RingError::TooLarge { len: payload.len(), max: MAX_FORWARD_BYTES };
            return Err(e.into());
        }
        match self.side {
            Side::Server => {
                self.outgoing().push(&[&id.to_le_bytes(), payload], self.timeout)?;
                self.channel.request_bell().ring();
            }
            Side::Host => {
                let mut head = [0u8; ANSWER_HEADER_BYTES];
                head[..8].copy_from_slice(&id.to_le_bytes());
                head[8..12].copy_from_slice(&timing.host_ns.to_le_bytes());
                head[12..].copy_from_slice(&timing.device_ns.to_le_bytes());
                self.outgoing().push(&[&head, payload], self.timeout)?;
                self.channel.response_bell().ring();
            }
        }
        Ok(())
    }

    /// The host application says it is alive (done by every host-side poll and wait; a host
    /// busy elsewhere for long calls it itself). The server fails the requests forwarded to a
    /// host whose heartbeat stopped ([`HOST_HEARTBEAT_TIMEOUT`](super::HOST_HEARTBEAT_TIMEOUT)).
    pub fn beat(&self) {
        self.channel.beat();
    }

    /// The channel this end uses.
    pub fn channel(&self) -> &HostChannel {
        &self.channel
    }

    /// Sleeps on the incoming ring's doorbell until something arrives or `timeout` (at most
    /// [`PARK_SLICE`](super::doorbell::PARK_SLICE)) passes; returns at once when messages wait.
    pub fn wait_incoming(&self, timeout: Duration) {
        if self.side == Side::Host {
            self.beat();
        }
        let (ring, bell) = match self.side {
            Side::Server => (self.channel.responses(), self.channel.response_bell()),
            Side::Host => (self.channel.requests(), self.channel.request_bell()),
        };
        let _ =
            bell.park_unless(timeout, || Ok::<bool, std::convert::Infallible>(ring.has_unread()));
    }

    /// Hands every message ready now (up to one batch) to `f(id, payload)`. Returns how many.
    ///
    /// # Errors
    /// `Ring` for a corrupt ring; `Malformed` for a message shorter than its header.
    pub fn poll(&mut self, mut f: impl FnMut(u64, &[u8])) -> Result<usize, HostError> {
        self.poll_timed(|id, _, payload| f(id, payload))
    }

    /// [`poll`](Self::poll) with the host's timing of each answer (zero on the host side).
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub fn poll_timed(
        &mut self,
        mut f: impl FnMut(u64, AnswerTiming, &[u8]),
    ) -> Result<usize, HostError> {
        let mut bad = None;
        let (ring, header) = match self.side {
            Side::Server => (self.channel.responses(), ANSWER_HEADER_BYTES),
            Side::Host => {
                self.channel.beat();
                (self.channel.requests(), FORWARD_HEADER_BYTES)
            }
        };
        let n = self.consumer.pop_batch(&ring, MAX_BATCH_RECORDS, |msg| {
            if msg.len() < header {
                bad.get_or_insert(HostError::Malformed(format!(
                    "forwarded message of {} bytes, header is {header}",
                    msg.len()
                )));
                return;
            }
            let id = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
            let word = |a: usize| u32::from_le_bytes(msg[a..a + 4].try_into().expect("4 bytes"));
            let timing = if header == ANSWER_HEADER_BYTES {
                AnswerTiming { host_ns: word(8), device_ns: word(12) }
            } else {
                AnswerTiming::default()
            };
            f(id, timing, &msg[header..]);
        })?;
        match bad {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}
