//! The frame decoder's fuzz property, shared by the cargo-fuzz target `frame` (fuzz/) and the
//! proptest in `tests/proto.rs`, so the property the fuzzer checks is compiled and run in CI.

use super::{decode_frame, put_request, FrameBuf, Request, Response, KIND_REQUEST, KIND_RESPONSE};
use super::{FRAME_HEADER_BYTES, MSG_HEADER_BYTES};

/// Any bytes, as a request frame and as a response frame: messages or a typed error, never a
/// panic; every request that parses re-encodes to exactly its bytes.
///
/// # Panics
/// When the property does not hold (that is the fuzzer's finding).
pub fn check_frame(data: &[u8]) {
    if let Ok((_, msgs)) = decode_frame(data, 0, KIND_REQUEST) {
        for m in msgs {
            let Ok(m) = m else { break };
            if let Ok(r) = Request::parse(&m) {
                let mut f = FrameBuf::default();
                f.begin(KIND_REQUEST);
                put_request(&mut f, m.req_id, &r);
                f.finish();
                let again = &f.buf[FRAME_HEADER_BYTES..];
                assert_eq!(again.len(), MSG_HEADER_BYTES + m.payload.len(), "re-encoded length");
                assert_eq!(&again[MSG_HEADER_BYTES..], m.payload, "re-encoded payload");
            }
        }
    }
    if let Ok((_, msgs)) = decode_frame(data, 0, KIND_RESPONSE) {
        for m in msgs {
            let Ok(m) = m else { break };
            let _ = Response::parse(&m);
        }
    }
}
