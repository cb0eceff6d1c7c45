//! The fenced-message flag: a request names the placement version it was routed by, frames
//! without it decode exactly as before, and malformed fences are refused with their offset.

use storefn_wire::layout::{MSG_HEADER_BYTES, MSG_OFF_FLAGS, MSG_OFF_LEN};
use storefn_wire::{
    decode_frame, put_request, put_response, FrameBuf, ProtoError, Request, Response, FENCE_BYTES,
    KIND_REQUEST, KIND_RESPONSE, MSG_FLAG_FENCED,
};

fn frame(fence: Option<u64>) -> Vec<u8> {
    let mut f = FrameBuf::default();
    f.set_fence(fence);
    f.begin(KIND_REQUEST);
    put_request(&mut f, 3, &Request::Read { path: b"c/s0", offset: 512, len: 64 });
    put_request(&mut f, 4, &Request::Stat { path: b"c/s1" });
    f.finish().to_vec()
}

#[test]
fn fenced_requests_carry_their_version_and_the_same_request() {
    let plain = frame(None);
    let fenced = frame(Some(0x0102_0304_0506_0708));
    assert_eq!(fenced.len(), plain.len() + 2 * FENCE_BYTES);
    let (_, a) = decode_frame(&plain, 0, KIND_REQUEST).unwrap();
    let (_, b) = decode_frame(&fenced, 0, KIND_REQUEST).unwrap();
    for (a, b) in a.zip(b) {
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.fence, None);
        assert_eq!(b.fence, Some(0x0102_0304_0506_0708));
        assert_eq!(Request::parse(&a).unwrap(), Request::parse(&b).unwrap());
    }
    // The first message's flags byte and the fence bytes where FORMAT.md puts them.
    let body = &fenced[16..];
    assert_eq!(body[MSG_OFF_FLAGS], MSG_FLAG_FENCED);
    assert_eq!(
        body[MSG_HEADER_BYTES..MSG_HEADER_BYTES + 8],
        0x0102_0304_0506_0708u64.to_le_bytes()
    );
}

#[test]
fn unknown_flag_bits_and_short_fences_are_refused() {
    let mut bad = frame(None);
    bad[16 + MSG_OFF_FLAGS] = 2;
    let (_, mut m) = decode_frame(&bad, 5, KIND_REQUEST).unwrap();
    assert!(matches!(
        m.next().unwrap(),
        Err(ProtoError::BadField { frame: 5, field: "flags", .. })
    ));

    // A fenced message whose payload is shorter than the fence.
    let mut f = FrameBuf::default();
    f.begin(KIND_REQUEST);
    let s = f.begin_msg(1, storefn_wire::op::STAT, 0);
    f.buf.extend_from_slice(&[0; 4]);
    f.end_msg(s);
    let mut short = f.finish().to_vec();
    short[16 + MSG_OFF_FLAGS] = MSG_FLAG_FENCED;
    assert_eq!(short[16 + MSG_OFF_LEN], 4);
    let (_, mut m) = decode_frame(&short, 0, KIND_REQUEST).unwrap();
    assert!(matches!(m.next().unwrap(), Err(ProtoError::BadField { field: "len", .. })));
}

#[test]
fn responses_are_never_fenced() {
    let mut f = FrameBuf::default();
    f.set_fence(Some(9));
    f.begin(KIND_RESPONSE);
    put_response(&mut f, 1, storefn_wire::op::AUTH, &Response::Auth);
    let ok = f.finish().to_vec();
    let (_, mut m) = decode_frame(&ok, 0, KIND_RESPONSE).unwrap();
    let m = m.next().unwrap().unwrap();
    assert_eq!(m.fence, None, "a response frame ignores the request fence");
    let mut bad = ok.clone();
    bad[16 + MSG_OFF_FLAGS] = MSG_FLAG_FENCED;
    bad[16 + MSG_OFF_LEN] = 8;
    bad.extend_from_slice(&[0; 8]);
    let body = (bad.len() - 16) as u32;
    bad[8..12].copy_from_slice(&body.to_le_bytes());
    let (_, mut m) = decode_frame(&bad, 0, KIND_RESPONSE).unwrap();
    let m = m.next().unwrap().unwrap();
    assert!(Response::parse(&m).is_err());
}
