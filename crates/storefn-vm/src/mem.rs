//! The sandbox: the address ranges an invocation may touch, and the run environment the
//! interpreter and the JIT share.
//!
//! Contract (both engines): a load of `n` bytes at `a` is allowed iff `[a, a+n)` lies wholly
//! inside one entry of `read`; a store iff it lies inside one entry of `write`. Anything else
//! aborts the invocation with [`crate::VmError::BadRead`] / [`crate::VmError::BadWrite`] naming the
//! instruction and address.
//! Programs see real host addresses, so unmodified C pointer arithmetic works.

use crate::error::{Place, PLACE_NEAR_BYTES};

/// Most regions one invocation can be granted (ctx, its writable parts, data, scratch, stack,
/// rodata, rw globals, plus room for helper-specific buffers).
pub const MAX_REGIONS: usize = 8;

/// What a region is, for error messages ([`crate::error::Place`]): set once per slot where an
/// env is laid out, so naming costs nothing per call.
#[repr(u8)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegionName {
    /// A region laid out by hand (a test's env): named by its slot.
    #[default]
    Unnamed,
    Context,
    /// xrp: the block just read.
    Data,
    /// xrp: the application's scratch buffer.
    Scratch,
    /// λ: `buf_i`.
    Input,
    /// λ: `buf_o`.
    Output,
    /// offload: the message.
    Msg,
    /// offload: the output buffer.
    Out,
    /// The instance's stack block (all frames).
    Stack,
    Globals,
}

impl std::fmt::Display for RegionName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RegionName::Unnamed => "region",
            RegionName::Context => "context",
            RegionName::Data => "data",
            RegionName::Scratch => "scratch",
            RegionName::Input => "input",
            RegionName::Output => "output",
            RegionName::Msg => "msg",
            RegionName::Out => "out",
            RegionName::Stack => "stack",
            RegionName::Globals => "globals",
        })
    }
}

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
    /// What each slot holds, for messages (engines never read it on the hot path).
    pub names: [RegionName; MAX_REGIONS],
}

impl RegionSet {
    /// # Panics
    /// When more than [`MAX_REGIONS`] are pushed: a runtime bug, never program-controlled.
    pub fn push(&mut self, r: Region) {
        self.push_named(r, RegionName::Unnamed);
    }

    /// # Panics
    /// As [`RegionSet::push`].
    pub fn push_named(&mut self, r: Region, name: RegionName) {
        let i = usize::try_from(self.len).unwrap();
        assert!(i < MAX_REGIONS, "region set full");
        self.regions[i] = r;
        self.names[i] = name;
        self.len += 1;
    }

    /// `addr` in the program's terms: from the region that holds it, else the nearest one
    /// within [`PLACE_NEAR_BYTES`], else a low address as is, else [`Place::Wild`]. Never a
    /// host address.
    #[cold]
    #[must_use]
    pub fn place(&self, addr: u64) -> Place {
        let named = self.as_slice().iter().zip(&self.names).filter(|(r, _)| r.start <= r.end);
        let distance = |r: &Region| {
            if addr < r.start {
                r.start - addr
            } else {
                addr.saturating_sub(r.end.saturating_sub(1))
            }
        };
        let best = named.min_by_key(|(r, _)| distance(r));
        if let Some((r, &name)) = best.filter(|(r, _)| distance(r) < PLACE_NEAR_BYTES) {
            let offset = addr.wrapping_sub(r.start) as i64;
            return Place::Region { name, offset, len: r.end - r.start };
        }
        if addr < PLACE_NEAR_BYTES {
            Place::Low(addr)
        } else {
            Place::Wild
        }
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
