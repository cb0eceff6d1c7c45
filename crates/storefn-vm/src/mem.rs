//! The sandbox: the address ranges an invocation may touch, and the run environment the
//! interpreter and the JIT share.
//!
//! Contract (both engines): a load of `n` bytes at `a` is allowed iff `[a, a+n)` lies wholly
//! inside one entry of `read`; a store iff it lies inside one entry of `write`. Anything else
//! aborts the invocation with [`crate::VmError::BadRead`] / [`crate::VmError::BadWrite`] naming the
//! instruction and address.
//! Programs see real host addresses, so unmodified C pointer arithmetic works.

/// Most regions one invocation can be granted (ctx, its writable parts, data, scratch, stack,
/// rodata, rw globals, plus room for helper-specific buffers).
pub const MAX_REGIONS: usize = 8;

/// A half-open host address range `[start, end)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
}

impl Region {
    /// Grants nothing, not even a zero-length access (`end < start`). Fills a per-call slot
    /// whose buffer is empty, so slot positions stay fixed and no earlier buffer survives there.
    pub const EMPTY: Region = Region { start: u64::MAX, end: 0 };

    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        let start = bytes.as_ptr() as u64;
        Self { start, end: start + bytes.len() as u64 }
    }

    /// Does `[addr, addr+len)` lie wholly inside? Overflow-safe.
    #[must_use]
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.start && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }
}

/// Fixed-capacity region list (no allocation per invocation).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RegionSet {
    pub len: u64,
    pub regions: [Region; MAX_REGIONS],
}

impl RegionSet {
    /// # Panics
    /// When more than [`MAX_REGIONS`] are pushed: a runtime bug, never program-controlled.
    pub fn push(&mut self, r: Region) {
        let i = usize::try_from(self.len).unwrap();
        assert!(i < MAX_REGIONS, "region set full");
        self.regions[i] = r;
        self.len += 1;
    }

    /// The first `N` slots, to overwrite in place: the per-call patching of a prebuilt set,
    /// which keeps its per-call slots first so this needs no run-time check (a slot at or past
    /// `len` grants nothing, so patching one is harmless; the caller lays out `len >= N`).
    #[inline]
    pub fn first_mut<const N: usize>(&mut self) -> &mut [Region; N] {
        const { assert!(N <= MAX_REGIONS, "more slots than a RegionSet has") };
        self.regions.first_chunk_mut::<N>().expect("N <= MAX_REGIONS")
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    #[must_use]
    pub fn allows(&self, addr: u64, len: u64) -> bool {
        self.as_slice().iter().any(|r| r.contains(addr, len))
    }

    #[must_use]
    pub fn as_slice(&self) -> &[Region] {
        &self.regions[..usize::try_from(self.len).unwrap()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_region_grants_nothing() {
        for addr in [0, 1, u64::MAX - 8, u64::MAX] {
            for len in [0, 1, 8] {
                assert!(!Region::EMPTY.contains(addr, len), "{addr:#x}+{len}");
            }
        }
    }

    #[test]
    fn first_mut_overwrites_the_head() {
        let mut set = RegionSet::default();
        for start in [16, 32, 48] {
            set.push(Region { start, end: start + 8 });
        }
        *set.first_mut::<2>() = [Region::EMPTY, Region { start: 100, end: 108 }];
        assert_eq!(set.len, 3);
        assert!(!set.allows(16, 8), "the old slot is gone");
        assert!(set.allows(100, 8));
        assert!(!set.allows(32, 8));
        assert!(set.allows(48, 8));
    }
}
