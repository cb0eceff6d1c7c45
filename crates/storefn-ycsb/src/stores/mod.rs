//! The stores a run drives.

pub mod bpfkv;
pub mod wiredtiger;
