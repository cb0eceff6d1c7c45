//! storefn-kv: BPF-KV, the B+-tree store XRP was evaluated on, byte-compatible.

pub mod memtable;
pub mod wal;
