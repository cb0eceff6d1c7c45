//! storefn-io: the io_uring engine that runs storage functions on the completion path.
pub mod digest;
