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

/// A structured input: control byte 1 (one structured message), then `op | path | a u64 |
/// b u32 | n` with no bytes.
fn structured(op: u8, path: u8, a: u64, b: u32) -> Vec<u8> {
    let mut v = vec![1, op, path];
    v.extend_from_slice(&a.to_le_bytes());
    v.extend_from_slice(&b.to_le_bytes());
    v.push(0);
    v
}

#[test]
fn the_generator_reaches_the_handlers() {
    let t = AuthedTarget::start("generator");
    // READ (op 3) of w/f (path 0), offset 0 (even a: inside the file), 16 bytes: answered,
    // the connection stays open.
    let o = t.check(&structured(3, 0, 0, 16));
    assert!(o.answered_bytes > 16 && !o.closed, "{o:?}");
    // STAT (op 7) of a path outside the tenant's scope: refused, answered, open.
    let o = t.check(&structured(7, 2, 0, 0));
    assert!(o.answered_bytes > 0 && !o.closed, "{o:?}");
    // A malformed message of an unknown op: the connection is closed.
    let o = t.check(&[0x81, 11, 1, 0, 0]);
    assert!(o.closed, "{o:?}");
    t.stop();
}

#[test]
fn authenticated_garbage_of_every_op_hurts_only_its_own_connection() {
    let t = AuthedTarget::start("proptest");
    for s in seeds() {
        let _ = t.check(&s);
    }
    let cfg = ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() };
    proptest!(cfg, |(data in prop::collection::vec(any::<u8>(), 0..600))| {
        let _ = t.check(&data);
    });
    // Well-formed requests only (every op, fields from the strategy), so cases go past the
    // frame checks into the handlers rather than ending at the first malformed message.
    let cfg = ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() };
    let frame = (1u8..64, prop::collection::vec(any::<u8>(), 15..90));
    proptest!(cfg, |(frames in prop::collection::vec(frame, 1..6))| {
        let data: Vec<u8> = frames.iter().flat_map(|(c, b)| std::iter::once(*c).chain(b.iter().copied())).collect();
        let _ = t.check(&data);
    });
    t.stop();
}
