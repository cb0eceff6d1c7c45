//! Wire protocol: requests and responses round-trip through frames (proptest); malformed,
//! truncated and oversized frames are typed errors naming the frame, message and offset.

use proptest::prelude::*;
use storefn_wire::layout::*;
use storefn_wire::limits::*;
use storefn_wire::*;

fn arb_path() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..64)
}
fn arb_hash() -> impl Strategy<Value = [u8; HASH_BYTES]> {
    any::<[u8; HASH_BYTES]>()
}

#[derive(Debug, Clone)]
enum OwnedReq {
    Hello(Vec<u8>),
    Auth([u8; 32]),
    Load(u8, Vec<u8>, Vec<u8>),
    Read(Vec<u8>, u64, u32),
    Xrp(Vec<u8>, u64, u32, [u8; 32], Vec<u8>, u32),
    Lambda(Vec<u8>, u64, u32, [u8; 32], u32),
    Write(Vec<u8>, u64, Vec<u8>),
    Stat(Vec<u8>),
    Offload(Vec<u8>),
    LambdaWrite(Vec<u8>, u64, [u8; 32], Vec<u8>, u32),
}

impl OwnedReq {
    fn view(&self) -> Request<'_> {
        match self {
            Self::Hello(t) => Request::Hello { tenant: t },
            Self::Auth(m) => Request::Auth { mac: m },
            Self::Load(t, s, e) => Request::LoadProg { prog_type: *t, section: s, elf: e },
            Self::Read(p, o, l) => Request::Read { path: p, offset: *o, len: *l },
            Self::Xrp(p, o, l, h, s, ol) => {
                Request::Xrp { path: p, offset: *o, len: *l, hash: h, scratch: s, out_len: *ol }
            }
            Self::Lambda(p, o, l, h, c) => {
                Request::Lambda { path: p, offset: *o, len: *l, hash: h, out_cap: *c }
            }
            Self::Write(p, o, d) => Request::Write { path: p, offset: *o, data: d },
            Self::Stat(p) => Request::Stat { path: p },
            Self::Offload(m) => Request::Offload { msg: m },
            Self::LambdaWrite(p, o, h, i, c) => {
                Request::LambdaWrite { path: p, offset: *o, hash: h, input: i, out_cap: *c }
            }
        }
    }
}

fn arb_req() -> impl Strategy<Value = OwnedReq> {
    let len = 1..=MAX_READ_BYTES;
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..=MAX_TENANT_BYTES).prop_map(OwnedReq::Hello),
        arb_hash().prop_map(OwnedReq::Auth),
        (
            0..2u8,
            proptest::collection::vec(any::<u8>(), 0..16),
            proptest::collection::vec(any::<u8>(), 1..256)
        )
            .prop_map(|(t, s, e)| OwnedReq::Load(t, s, e)),
        (arb_path(), any::<u64>(), len.clone()).prop_map(|(p, o, l)| OwnedReq::Read(p, o, l)),
        (
            arb_path(),
            any::<u64>(),
            1..=MAX_XRP_READ_BYTES,
            arb_hash(),
            proptest::collection::vec(any::<u8>(), 0..128),
            0..=4096u32
        )
            .prop_map(|(p, o, l, h, s, ol)| OwnedReq::Xrp(p, o, l, h, s, ol)),
        (arb_path(), any::<u64>(), 1..=MAX_LAMBDA_IN_BYTES, arb_hash(), 0..=MAX_LAMBDA_OUT_BYTES)
            .prop_map(|(p, o, l, h, c)| OwnedReq::Lambda(p, o, l, h, c)),
        (arb_path(), any::<u64>(), proptest::collection::vec(any::<u8>(), 1..512))
            .prop_map(|(p, o, d)| OwnedReq::Write(p, o, d)),
        arb_path().prop_map(OwnedReq::Stat),
        proptest::collection::vec(any::<u8>(), 1..=MAX_OFFLOAD_MSG_BYTES as usize)
            .prop_map(OwnedReq::Offload),
        (
            arb_path(),
            any::<u64>(),
            arb_hash(),
            proptest::collection::vec(any::<u8>(), 1..512),
            1..=MAX_LAMBDA_WRITE_OUT_BYTES
        )
            .prop_map(|(p, o, h, i, c)| OwnedReq::LambdaWrite(p, o, h, i, c)),
    ]
}

fn arb_version() -> impl Strategy<Value = FileVersion> {
    (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(dev, ino, change)| FileVersion {
        dev,
        ino,
        change,
    })
}

proptest! {
    #[test]
    fn requests_round_trip(reqs in proptest::collection::vec((any::<u64>(), arb_req()), 1..20)) {
        let mut f = FrameBuf::default();
        f.begin(KIND_REQUEST);
        for (id, r) in &reqs {
            put_request(&mut f, *id, &r.view());
        }
        let bytes = f.finish().to_vec();
        let (h, msgs) = decode_frame(&bytes, 7, KIND_REQUEST).unwrap();
        prop_assert_eq!(h.count as usize, reqs.len());
        let got: Vec<_> = msgs.collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(got.len(), reqs.len());
        for (m, (id, r)) in got.iter().zip(&reqs) {
            prop_assert_eq!(m.req_id, *id);
            prop_assert_eq!(Request::parse(m).unwrap(), r.view());
        }
    }

    #[test]
    fn responses_round_trip(v in arb_version(), data in proptest::collection::vec(any::<u8>(), 0..4096),
                            hops in any::<u32>(), ret in any::<u64>(), id in any::<u64>(), h in arb_hash()) {
        let rs = [
            (op::READ, Response::Read { version: v, data: &data }),
            (op::XRP, Response::Xrp { version: v, hops, scratch: &data }),
            (op::LAMBDA, Response::Lambda { version: v, ret, out: &data }),
            (op::WRITE, Response::Write { version: v, written: hops }),
            (op::STAT, Response::Stat { version: v, size: ret }),
            (op::LOAD_PROG, Response::LoadProg { hash: &h, insns: hops }),
            (op::HELLO, Response::Hello { challenge: &h, flags: 1, max_frame_bytes: 5, max_in_flight: 6 }),
            (op::AUTH, Response::Auth),
            (op::OFFLOAD, Response::Offload { served_by: SERVED_BY_HOST, data: &data }),
            (op::OFFLOAD, Response::Offload { served_by: SERVED_BY_OFFLOAD, data: &data }),
            (op::LAMBDA_WRITE, Response::LambdaWrite { version: v, written: ret }),
        ];
        let mut f = FrameBuf::default();
        f.begin(KIND_RESPONSE);
        for (o, r) in &rs {
            put_response(&mut f, id, *o, r);
        }
        put_status(&mut f, id, op::XRP, StatusCode::UnknownProg, "no such program");
        let bytes = f.finish().to_vec();
        let (_, msgs) = decode_frame(&bytes, 0, KIND_RESPONSE).unwrap();
        let got: Vec<_> = msgs.map(|m| Response::parse(&m.unwrap()).unwrap()).collect();
        for (g, (_, r)) in got.iter().zip(&rs) {
            prop_assert_eq!(g, r);
        }
        prop_assert_eq!(got[rs.len()], Response::Error {
            status: StatusCode::UnknownProg as u16,
            code: Some(StatusCode::UnknownProg),
            message: b"no such program",
        });
    }

    /// Any truncation of a valid frame is an error, never a panic or a short success.
    #[test]
    fn truncated_frames_are_errors(reqs in proptest::collection::vec((any::<u64>(), arb_req()), 1..5), cut in any::<prop::sample::Index>()) {
        let mut f = FrameBuf::default();
        f.begin(KIND_REQUEST);
        for (id, r) in &reqs {
            put_request(&mut f, *id, &r.view());
        }
        let bytes = f.finish().to_vec();
        let n = cut.index(bytes.len());
        prop_assert!(decode_frame(&bytes[..n], 3, KIND_REQUEST).is_err());
    }
}

proptest! {
    /// The fuzz target's property on random bytes and on valid frames with bytes flipped.
    #[test]
    fn fuzz_property_holds(noise in proptest::collection::vec(any::<u8>(), 0..512),
                           reqs in proptest::collection::vec((any::<u64>(), arb_req()), 1..4),
                           flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
        fuzz::check_frame(&noise);
        let mut f = FrameBuf::default();
        f.begin(KIND_REQUEST);
        for (id, r) in &reqs {
            put_request(&mut f, *id, &r.view());
        }
        let mut bytes = f.finish().to_vec();
        fuzz::check_frame(&bytes);
        for (i, b) in flips {
            let at = i.index(bytes.len());
            bytes[at] = b;
        }
        fuzz::check_frame(&bytes);
    }
}

fn one_read_frame() -> Vec<u8> {
    let mut f = FrameBuf::default();
    f.begin(KIND_REQUEST);
    put_request(&mut f, 1, &Request::Read { path: b"db", offset: 0, len: 512 });
    f.finish().to_vec()
}

fn first_msg_err(bytes: &[u8]) -> ProtoError {
    match decode_frame(bytes, 9, KIND_REQUEST) {
        Err(e) => e,
        Ok((_, mut m)) => match m.next().unwrap() {
            Err(e) => e,
            Ok(msg) => Request::parse(&msg).unwrap_err(),
        },
    }
}

#[test]
fn malformed_headers_name_the_frame() {
    let good = one_read_frame();
    let mut b = good.clone();
    b[0] = b'X';
    assert!(matches!(first_msg_err(&b), ProtoError::BadMagic { frame: 9, .. }));
    let mut b = good.clone();
    b[FRAME_OFF_VERSION] = 2;
    assert_eq!(first_msg_err(&b).to_string(), "frame 9: protocol version 2, this build speaks 1");
    let mut b = good.clone();
    b[FRAME_OFF_KIND] = KIND_RESPONSE;
    assert!(matches!(first_msg_err(&b), ProtoError::BadKind { frame: 9, got: 1, expected: 0 }));
    let mut b = good.clone();
    b[FRAME_OFF_BODY_BYTES..FRAME_OFF_BODY_BYTES + 4]
        .copy_from_slice(&(MAX_FRAME_BYTES as u32).to_le_bytes());
    assert!(matches!(first_msg_err(&b), ProtoError::FrameTooLarge { frame: 9, .. }));
    let mut b = good.clone();
    b[FRAME_OFF_COUNT..FRAME_OFF_COUNT + 4].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(first_msg_err(&b), ProtoError::Empty { frame: 9 }));
    let mut b = good.clone();
    b[FRAME_OFF_COUNT..FRAME_OFF_COUNT + 4]
        .copy_from_slice(&(MAX_MSGS_PER_FRAME + 1).to_le_bytes());
    assert!(matches!(first_msg_err(&b), ProtoError::TooManyMessages { frame: 9, .. }));
    // Count says two messages, the body holds one.
    let mut b = good.clone();
    b[FRAME_OFF_COUNT..FRAME_OFF_COUNT + 4].copy_from_slice(&2u32.to_le_bytes());
    let (_, msgs) = decode_frame(&b, 9, KIND_REQUEST).unwrap();
    let r: Vec<_> = msgs.collect();
    assert_eq!(
        r[1].clone().unwrap_err(),
        ProtoError::Truncated {
            frame: 9,
            msg: 1,
            offset: good.len() - FRAME_HEADER_BYTES,
            need: MSG_HEADER_BYTES,
            have: 0
        }
    );
}

#[test]
fn malformed_fields_name_message_and_offset() {
    let good = one_read_frame();
    let p = FRAME_HEADER_BYTES + MSG_HEADER_BYTES; // first payload byte in the frame
    let mut b = good.clone();
    b[p + layout::READ_OFF_LEN..p + layout::READ_OFF_LEN + 4]
        .copy_from_slice(&(MAX_READ_BYTES + 1).to_le_bytes());
    assert_eq!(
        first_msg_err(&b).to_string(),
        format!(
            "frame 9, message 0: field len at body offset {}: not in 1..=MAX_READ_BYTES",
            MSG_HEADER_BYTES + layout::READ_OFF_LEN
        )
    );
    let mut b = good.clone();
    b[FRAME_HEADER_BYTES + MSG_OFF_OP] = 99;
    assert!(matches!(first_msg_err(&b), ProtoError::UnknownOp { frame: 9, msg: 0, op: 99 }));
    let mut b = good.clone();
    b[p + layout::READ_OFF_PATH_LEN + 2] = 1;
    assert!(matches!(first_msg_err(&b), ProtoError::BadField { field: "reserved", .. }));
    let mut b = good;
    b[p + layout::READ_OFF_PATH_LEN..p + layout::READ_OFF_PATH_LEN + 2]
        .copy_from_slice(&0u16.to_le_bytes());
    assert!(matches!(
        first_msg_err(&b),
        ProtoError::BadField { field: "path_len", why: "empty path", .. }
    ));
}

#[test]
fn lambda_len_is_bounded_by_max_lambda_in_bytes_not_by_read() {
    let frame = |len: u32| {
        let mut f = FrameBuf::default();
        f.begin(KIND_REQUEST);
        let r = Request::Lambda { path: b"db", offset: 0, len, hash: &[7; 32], out_cap: 32 };
        put_request(&mut f, 1, &r);
        f.finish().to_vec()
    };
    // Above READ's limit but within the LAMBDA limit: valid.
    let ok = frame(MAX_LAMBDA_IN_BYTES);
    let (_, mut m) = decode_frame(&ok, 9, KIND_REQUEST).unwrap();
    let r = Request::parse(&m.next().unwrap().unwrap()).unwrap();
    assert!(matches!(r, Request::Lambda { len: MAX_LAMBDA_IN_BYTES, .. }), "{r:?}");
    assert_eq!(
        first_msg_err(&frame(MAX_LAMBDA_IN_BYTES + 1)).to_string(),
        format!(
            "frame 9, message 0: field len at body offset {}: not in 1..=MAX_LAMBDA_IN_BYTES",
            MSG_HEADER_BYTES + layout::LAMBDA_OFF_LEN
        )
    );
}

proptest! {
    /// The `offload` fuzz target's property on random payloads and on valid OFFLOAD requests
    /// and responses with bytes flipped or cut.
    #[test]
    fn offload_fuzz_property_holds(noise in proptest::collection::vec(any::<u8>(), 0..256),
                                   msg in proptest::collection::vec(any::<u8>(), 1..64),
                                   served_by in 0u8..3,
                                   flip in (any::<prop::sample::Index>(), any::<u8>()),
                                   cut in any::<prop::sample::Index>()) {
        fuzz::check_offload(&noise);
        let mut req = (msg.len() as u32).to_le_bytes().to_vec();
        req.extend_from_slice(&[0; 4]);
        req.extend_from_slice(&msg);
        let mut resp = vec![served_by, 0, 0, 0, 0, 0, 0, 0];
        resp.extend_from_slice(&msg);
        for mut bytes in [req, resp] {
            fuzz::check_offload(&bytes);
            fuzz::check_offload(&bytes[..cut.index(bytes.len())]);
            let at = flip.0.index(bytes.len());
            bytes[at] = flip.1;
            fuzz::check_offload(&bytes);
        }
    }
}

#[test]
fn an_answer_head_in_front_of_its_data_is_the_frame_put_response_builds() {
    let version = FileVersion { dev: 1, ino: 2, change: 3 };
    for len in [0usize, 1, 4096, MAX_READ_BYTES as usize] {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut head = [0xAAu8; 64];
        let n = put_answer_head(&mut head, 77, op::READ, &version.to_bytes(), len);
        let mut sent = head[..n].to_vec();
        sent.extend_from_slice(&data);
        let mut f = FrameBuf::default();
        f.begin(KIND_RESPONSE);
        put_response(&mut f, 77, op::READ, &Response::Read { version, data: &data });
        assert_eq!(sent, f.finish(), "{len} bytes");
        assert!(sent.len() <= MAX_FRAME_BYTES);
    }
}
