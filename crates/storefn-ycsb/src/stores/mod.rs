//! The stores a run drives.

pub mod bpfkv;
pub mod rocksdb;
pub mod wiredtiger;
