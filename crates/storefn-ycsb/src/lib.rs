//! storefn-ycsb: YCSB's core workloads A-F against every storefn store.
//!
//! [`load`] writes the records (YCSB's load phase); [`open`] opens a [`Store`] named by a
//! [`StoreSpec`] (`bpfkv:DB`, `wiredtiger:DIR:TABLE`, `wiredtiger-native:DIR:TABLE`,
//! `rocksdb:DIR`, `rocksdb-native:DIR`); [`run`]
//! drives a [`Workload`] through it with [`RunConfig`] and returns a [`Report`] (ops/s,
//! p50/p99/p99.9 per operation kind, CPU per operation, JSON). [`MemoryGroup`] runs the
//! process in a cgroup v1 memory budget that counts the page cache.
//!
//! Generators follow YCSB's definitions: scrambled zipfian (constant 0.99), skewed latest,
//! uniform; keys are `user<fnvhash64(n)>`.

mod cgroup;
mod error;
pub mod generator;
pub mod limits;
mod runner;
mod store;
mod stores;
mod workload;

pub use cgroup::{drop_cache, MemoryGroup, GROUP_PREFIX, MEMORY_ROOT};
pub use error::YcsbError;
pub use runner::{run, OpStats, Report, RunConfig};
pub use store::{load, open, OpenOptions, Session, Store, StoreSpec};
pub use stores::bpfkv::BpfKvStore;
pub use stores::rocksdb::{run_options as rocksdb_options, RocksFnStore, RocksNativeStore};
pub use stores::wiredtiger::{run_config as wiredtiger_config, FnStore, NativeStore};
pub use workload::{Distribution, Key, KeyChooser, OpKind, RecordShape, Workload};
