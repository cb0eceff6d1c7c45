//! The stores a run drives.

pub mod bpfkv;
mod periodic;
pub mod rocksdb;
pub mod wiredtiger;
