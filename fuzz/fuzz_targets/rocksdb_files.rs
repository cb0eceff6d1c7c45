//! RocksDB's on-disk structures as storefn-rocksdb parses them (blocks, footers, compressed
//! blocks, logs, version edits, write batches): any bytes give values or a typed error, never a
//! panic (`storefn_rocksdb::fuzz::check_bytes`, also run by its bounded mutation test).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| storefn_rocksdb::fuzz::check_bytes(data));
