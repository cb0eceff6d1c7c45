//! The frame decoder's fuzz property, shared by the cargo-fuzz target `frame` (fuzz/) and the
//! proptest in `tests/proto.rs`, so the property the fuzzer checks is compiled and run in CI.

use crate::frame::{decode_frame, FrameBuf, KIND_REQUEST, KIND_RESPONSE};
use crate::frame::{FRAME_HEADER_BYTES, MSG_HEADER_BYTES};
use crate::msg::{put_request, Request, Response};

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

/// Any bytes as the payload of an OFFLOAD request and of an OK OFFLOAD response (DDS): a value
/// or a typed error naming the frame, the message and a body offset inside the payload, never
/// a panic; whatever parses re-encodes to exactly its bytes (a request's message and a
/// response's `served_by`/data round-trip), and a message over the bounds never parses.
///
/// # Panics
/// When the property does not hold (that is the fuzzer's finding).
pub fn check_offload(data: &[u8]) {
    use crate::frame::{op, Msg, MsgAt, ProtoError};
    use crate::limits::{MAX_OFFLOAD_DATA_BYTES, MAX_OFFLOAD_MSG_BYTES};
    use crate::msg::put_response;
    let at = MsgAt { frame: 7, msg: 3, offset: 1000 };
    let in_payload = |e: &ProtoError| match *e {
        ProtoError::Truncated { frame, msg, offset, .. }
        | ProtoError::BadField { frame, msg, offset, .. } => {
            assert_eq!((frame, msg), (7, 3), "error names another message: {e}");
            assert!(
                (1000..=1000 + data.len()).contains(&offset),
                "error offset {offset} outside the payload: {e}"
            );
        }
        _ => panic!("OFFLOAD payload error of an unexpected kind: {e}"),
    };
    for (kind, status) in [(KIND_REQUEST, 0u16), (KIND_RESPONSE, 0)] {
        let m = Msg { req_id: 42, op: op::OFFLOAD, status, fence: None, payload: data, at };
        let mut f = FrameBuf::default();
        f.begin(kind);
        if kind == KIND_REQUEST {
            match Request::parse(&m) {
                Ok(r) => {
                    let Request::Offload { msg } = r else { panic!("OFFLOAD parsed as {r:?}") };
                    assert!(!msg.is_empty() && msg.len() <= MAX_OFFLOAD_MSG_BYTES as usize);
                    put_request(&mut f, 42, &r);
                }
                Err(e) => {
                    in_payload(&e);
                    continue;
                }
            }
        } else {
            match Response::parse(&m) {
                Ok(r) => {
                    let Response::Offload { data: d, .. } = r else {
                        panic!("OFFLOAD response parsed as {r:?}")
                    };
                    assert!(d.len() <= MAX_OFFLOAD_DATA_BYTES as usize);
                    put_response(&mut f, 42, op::OFFLOAD, &r);
                }
                Err(e) => {
                    in_payload(&e);
                    continue;
                }
            }
        }
        f.finish();
        let again = &f.buf[FRAME_HEADER_BYTES..];
        assert_eq!(&again[MSG_HEADER_BYTES..], data, "OFFLOAD re-encoded differently");
    }
}
