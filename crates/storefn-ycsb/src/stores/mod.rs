//! The stores a run drives.

pub mod bpfkv;
mod epochs;
mod periodic;
pub mod rocksdb;
pub mod wiredtiger;
