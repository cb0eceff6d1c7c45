//! Forwarding: requests DDS's predicate sends to the host application travel over a
//! [`HostChannel`] (the same two progressive rings as the file path), and the host's responses
//! come back over the other ring for the server to relay to the client. The payload is the
//! client's request as received (opaque here); each message carries the server's request id.
//!
//! Message: `id: u64` little-endian, then the payload (docs/FORMAT.md, "DDS host channel").

use std::time::Duration;

use super::{HostChannel, HostError, CHANNEL_MAX_MESSAGE, DEFAULT_TIMEOUT};
use crate::ring::progressive::{Consumer, ProgressiveRing, MAX_BATCH_RECORDS};

/// Bytes before the payload of a forwarded message.
pub const FORWARD_HEADER_BYTES: usize = 8;
/// Largest forwarded payload.
pub const MAX_FORWARD_BYTES: usize = CHANNEL_MAX_MESSAGE - FORWARD_HEADER_BYTES;

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

    /// Sends request (server) or response (host) `id` with `payload`.
    ///
    /// # Errors
    /// `Ring`: `TooLarge` above [`MAX_FORWARD_BYTES`], `Timeout` when the ring stayed full.
    pub fn send(&self, id: u64, payload: &[u8]) -> Result<(), HostError> {
        self.outgoing().push(&[&id.to_le_bytes(), payload], self.timeout)?;
        match self.side {
            Side::Server => self.channel.request_bell().ring(),
            Side::Host => self.channel.response_bell().ring(),
        }
        Ok(())
    }

    /// Sleeps on the incoming ring's doorbell until something arrives or `timeout` (at most
    /// [`PARK_SLICE`](super::doorbell::PARK_SLICE)) passes; returns at once when messages wait.
    pub fn wait_incoming(&self, timeout: Duration) {
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
    /// `Ring` for a corrupt ring; `Malformed` for a message without an id.
    pub fn poll(&mut self, mut f: impl FnMut(u64, &[u8])) -> Result<usize, HostError> {
        let mut bad = None;
        let ring = match self.side {
            Side::Server => self.channel.responses(),
            Side::Host => self.channel.requests(),
        };
        let n = self.consumer.pop_batch(&ring, MAX_BATCH_RECORDS, |msg| {
            if msg.len() < FORWARD_HEADER_BYTES {
                bad.get_or_insert(HostError::Malformed(format!(
                    "forwarded message of {} bytes, header is {FORWARD_HEADER_BYTES}",
                    msg.len()
                )));
                return;
            }
            let id = u64::from_le_bytes(msg[..8].try_into().expect("8 bytes"));
            f(id, &msg[FORWARD_HEADER_BYTES..]);
        })?;
        match bad {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}
