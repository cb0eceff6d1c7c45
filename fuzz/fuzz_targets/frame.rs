//! The wire-protocol frame decoder (storefn_server::proto): any bytes, as a request frame and
//! as a response frame, must decode to messages or a typed error, never panic; every request
//! that parses re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use storefn_server::proto::{
    decode_frame, put_request, FrameBuf, Request, Response, KIND_REQUEST, KIND_RESPONSE,
};

fuzz_target!(|data: &[u8]| {
    if let Ok((_, msgs)) = decode_frame(data, 0, KIND_REQUEST) {
        for m in msgs {
            let Ok(m) = m else { break };
            if let Ok(r) = Request::parse(&m) {
                let mut f = FrameBuf::default();
                f.begin(KIND_REQUEST);
                put_request(&mut f, m.req_id, &r);
                f.finish();
                let again = &f.buf[storefn_server::proto::FRAME_HEADER_BYTES..];
                let orig_len = storefn_server::proto::MSG_HEADER_BYTES + m.payload.len();
                assert_eq!(again.len(), orig_len, "re-encoded request differs in length");
                assert_eq!(&again[storefn_server::proto::MSG_HEADER_BYTES..], m.payload);
            }
        }
    }
    if let Ok((_, msgs)) = decode_frame(data, 0, KIND_RESPONSE) {
        for m in msgs {
            let Ok(m) = m else { break };
            let _ = Response::parse(&m);
        }
    }
});
