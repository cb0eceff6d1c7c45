//! storefn-server: run storage functions where the data is, for remote clients (BPF-oF, DDS).
//!
//! - [`proto`]: the wire protocol (docs/FORMAT.md, "Wire protocol").
pub mod proto;
