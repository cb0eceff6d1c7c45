//! Raw mode for one file: lease, digest and device, set up in the order that makes the
//! staleness protocol sound. This is the type the engine uses.

use std::fs::File;
use std::os::fd::RawFd;

use std::time::Instant;

use super::{Digest, DigestError, LeaseGuard, RawDevice};
use crate::limits::RAW_RETRY_INTERVAL;

/// Where to read on the device for a translated file range: the block-aligned window that
/// O_DIRECT needs, and where the requested bytes start inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceWindow {
    /// Device byte offset of the window (a multiple of the logical block size).
    pub dev_offset: u64,
    /// Window length (a multiple of the logical block size).
    pub len: u64,
    /// Offset of the requested first byte inside the window.
    pub skip: u64,
}

/// Spaces attempts to set raw mode up again after it was dropped: at most one per
/// [`RAW_RETRY_INTERVAL`] (each attempt takes a lease and runs FIEMAP).
#[derive(Debug, Default, Clone, Copy)]
pub struct RetryGate {
    last_attempt: Option<Instant>,
}

impl RetryGate {
    /// True, and the attempt is recorded, when none was made within the interval.
    pub fn try_now(&mut self) -> bool {
        let now = Instant::now();
        if self.last_attempt.is_some_and(|t| now.duration_since(t) < RAW_RETRY_INTERVAL) {
            return false;
        }
        self.last_attempt = Some(now);
        true
    }
}

/// Raw-mode state for one open file.
///
/// Protocol (the engine's side):
/// 1. [`RawAccess::open`] once per file; any error means "use the file path"
///    ([`DigestError::is_fallback`] is true for all of them).
/// 2. Per hop: [`RawAccess::translate`]; `OutsideFile` fails the chain (the function aimed
///    outside its file), `SpansExtents` serves that hop through the file.
/// 3. After the chain's last read completed, before handing results out:
///    [`RawAccess::check_after_chain`]; on `Stale`, discard the chain's result and rerun it on
///    the file path, then [`RawAccess::refresh`] (or drop raw mode).
#[derive(Debug)]
pub struct RawAccess {
    // Field order = drop order: the device closes before the lease is released.
    device: RawDevice,
    digest: Digest,
    lease: LeaseGuard,
}

impl RawAccess {
    /// Take a read lease, then build the digest (FIEMAP with SYNC), then open the device.
    /// Lease first: once it is held no one can be writing, so the flushed map stays true
    /// until the lease breaks.
    ///
    /// # Errors
    /// Any [`DigestError`] from [`LeaseGuard::acquire`], [`Digest::build`] or
    /// [`RawDevice::open`] — e.g. `DeviceAccess` with EPERM for files on this machine's
    /// `/dev/vda`. All mean "stay on the file path".
    pub fn open(file: &File) -> Result<Self, DigestError> {
        let lease = LeaseGuard::acquire(file)?;
        let digest = Digest::build(file)?;
        let device = RawDevice::open(&digest)?;
        // Only a speed-up (see write_back_cache): a refusal leaves reads correct, just slower.
        let _ = device.write_back_cache();
        lease.check()?; // a break during the build would make the map suspect
        Ok(Self { device, digest, lease })
    }

    /// Translate a requested file range to its aligned device window.
    ///
    /// # Errors
    /// `OutsideFile` (fail the chain) or `SpansExtents` (use the file for this hop).
    pub fn translate(&self, file_offset: u64, len: u64) -> Result<DeviceWindow, DigestError> {
        let dev = self.digest.map(file_offset, len)?;
        Ok(align_window(dev, len, self.device.logical_block_size()))
    }

    /// After a chain's reads completed: the lease is unbroken and the file's identity (inode,
    /// size, mtime, ctime) is unchanged, so the data read through the device was the file's.
    ///
    /// # Errors
    /// [`DigestError::Stale`]: discard the chain's data and use the file path.
    pub fn check_after_chain(&self) -> Result<(), DigestError> {
        self.lease.check()?;
        if self.digest.still_valid(self.lease.file())? {
            Ok(())
        } else {
            Err(DigestError::Stale { why: "file identity (size, mtime or ctime) changed" })
        }
    }

    /// After `Stale`: release the old lease, then set raw mode up again from scratch. Fails
    /// (stay on the file path) while a writer still has the file open.
    ///
    /// # Errors
    /// As [`RawAccess::open`].
    pub fn refresh(self, file: &File) -> Result<Self, DigestError> {
        drop(self);
        Self::open(file)
    }

    /// The device fd to register with io_uring.
    #[must_use]
    pub fn device_fd(&self) -> RawFd {
        self.device.fd()
    }

    /// Buffer bytes a translated request of `len` bytes may need: its window can start up to
    /// one logical block minus one byte before the requested byte (size registered buffers
    /// with this).
    #[must_use]
    pub fn window_capacity(&self, len: u64) -> u64 {
        window_capacity(len, self.device.logical_block_size())
    }

    /// The device's logical block size: O_DIRECT buffer alignment.
    #[must_use]
    pub fn logical_block_size(&self) -> u64 {
        self.device.logical_block_size()
    }

    /// The digest.
    #[must_use]
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// The device.
    #[must_use]
    pub fn device(&self) -> &RawDevice {
        &self.device
    }
}

/// The `block`-aligned device window containing `[dev_offset, dev_offset + len)`.
///
/// Invariant that keeps this confined: every digest run starts and ends on a file-system
/// block boundary on both sides, and `block` divides the file-system block size
/// ([`RawDevice::open`] checks), so the widened window never leaves the blocks of the run
/// that holds the requested range.
#[must_use]
pub fn align_window(dev_offset: u64, len: u64, block: u64) -> DeviceWindow {
    assert!(block.is_power_of_two(), "block size {block} is a power of two");
    let start = dev_offset & !(block - 1);
    let end = (dev_offset + len).next_multiple_of(block);
    DeviceWindow { dev_offset: start, len: end - start, skip: dev_offset - start }
}

/// Largest [`align_window`] length for a `len`-byte request on `block`-sized blocks.
#[must_use]
pub fn window_capacity(len: u64, block: u64) -> u64 {
    (len + block - 1).next_multiple_of(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_capacity_bounds_every_window() {
        for block in [512u64, 4096] {
            for len in [1u64, 511, 512, 4096, 5000] {
                let worst = (0..2 * block).map(|o| align_window(o, len, block).len).max().unwrap();
                assert_eq!(window_capacity(len, block), worst, "len {len} block {block}");
            }
        }
    }

    #[test]
    fn windows_are_aligned_and_contain_the_range() {
        assert_eq!(
            align_window(8192 + 512, 512, 4096),
            DeviceWindow { dev_offset: 8192, len: 4096, skip: 512 }
        );
        assert_eq!(
            align_window(4096, 4096, 512),
            DeviceWindow { dev_offset: 4096, len: 4096, skip: 0 }
        );
        assert_eq!(
            align_window(4000, 200, 512),
            DeviceWindow { dev_offset: 3584, len: 1024, skip: 416 }
        );
    }
}
