//! Every bound of the C API, named once with its reason.

/// Bytes of scratch a chain carries (XRP's 4 KiB): a larger scratch is refused by name.
pub(crate) const SCRATCH_BYTES: usize = storefn_io::limits::SCRATCH_BYTES;

/// Descriptors one engine keeps open: its io engine's file table.
pub(crate) const MAX_FILES: usize = storefn_io::limits::MAX_FILES;

/// Programs one engine keeps prepared (compiled); the least recently added is dropped beyond
/// this, so a caller loading programs in a loop does not grow the engine without bound.
pub(crate) const MAX_PROGS_PER_ENGINE: usize = 64;

/// Bytes of a BPF-KV value (`storefn_kv_get`'s out buffer).
pub(crate) const VALUE_BYTES: usize = storefn_kv::layout::tree::VALUE_BYTES;
