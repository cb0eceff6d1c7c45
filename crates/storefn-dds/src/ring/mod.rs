//! Rings between the storage server's front end, the file service and the host application.
//!
//! [`ProgressiveRing`] is DDS's: reserve by CAS on `tail`, publish by adding to `progress`, the
//! consumer takes a batch only when `tail == progress`. [`MutexRing`] and [`FlagRing`] are the
//! two designs DDS compares it with (one lock around a byte ring; a ready flag per fixed-size
//! slot); `storefn ring bench` measures all three ([`bench`]).

use std::time::Duration;

#[cfg(feature = "bench")]
pub mod bench;
mod compare;
pub mod progressive;
pub mod shm;

pub use compare::{FlagRing, MutexRing};
pub use progressive::{Consumer, ProgressiveRing};
pub use shm::{SharedMemory, ShmError};

/// Ring errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// Not enough free space now; retry after the consumer catches up.
    #[error("ring full")]
    Full,
    /// The message exceeds the ring's bound.
    #[error("message of {len} bytes exceeds the ring's {max}-byte bound")]
    TooLarge {
        /// Payload bytes.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A bad ring header or size, named.
    #[error("ring layout: {0}")]
    Layout(String),
    /// A record in the ring is invalid (a peer wrote garbage) at byte position `position`.
    #[error("ring corrupt at byte position {position}: {what}")]
    Corrupt {
        /// Byte position (monotonic, not wrapped).
        position: u64,
        /// What is wrong.
        what: &'static str,
    },
    /// The ring stayed full (push) or empty (wait) this long.
    #[error("ring: timed out after {0:?}")]
    Timeout(Duration),
}
