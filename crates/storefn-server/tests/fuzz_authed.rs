//! The fuzz property of the cargo-fuzz target `server_authed`, bounded, so CI runs it: random
//! frames of every op after a successful AUTH get answers or a closed connection, and another
//! client keeps being served (storefn_server::fuzz).

use proptest::prelude::*;
use storefn_server::fuzz::AuthedTarget;

/// Inputs that reach each op with a plausible shape (the generator's corners).
fn seeds() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for op in 0..12u8 {
        // One message of `op` with a short payload, then one with a payload that claims a
        // path of 0xff bytes.
        v.push(vec![1, op, 7, 8, 0, 1, 0, b'f', 0, 0, 0, 0, 0]);
        v.push(vec![2, op, 1, 3, 0, 0xff, 0xff, 0xff, op, 9, 2, 0, 1, 2]);
    }
    v.push(vec![0x81, 4, 1, 4, 0, 1, 2, 3, 4, 0xff, 0xff]); // a header that lies about its size
    v.push(vec![0, 20, b'S', b'F', b'N', b'P', 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]); // raw
    v
}

#[test]
fn authenticated_garbage_of_every_op_hurts_only_its_own_connection() {
    let t = AuthedTarget::start("proptest");
    for s in seeds() {
        t.check(&s);
    }
    let cfg = ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() };
    proptest!(cfg, |(data in prop::collection::vec(any::<u8>(), 0..600))| {
        t.check(&data);
    });
    t.stop();
}
