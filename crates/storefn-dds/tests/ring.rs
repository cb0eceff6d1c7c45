//! The progressive ring: framing and wrap-around, the `tail == progress` rule, corruption
//! reports, many producers; the comparison rings through the bench (which checks every message);
//! the shared-memory layout against docs/FORMAT.md.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use storefn_dds::bench::ring::{self as bench, RingBenchConfig};
use storefn_dds::layout::{self as pr, record_bytes, ring_words};
use storefn_dds::ProgressiveRing;
use storefn_dds::{RingError, SharedMemory};

fn words(capacity: usize) -> Vec<AtomicU64> {
    (0..ring_words(capacity)).map(|_| AtomicU64::new(0)).collect()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn messages_of_every_size_survive_many_wraps() {
    let mem = words(4096);
    let ring = ProgressiveRing::init(&mem, 4096, 600).unwrap();
    let mut consumer = ring.consumer(0);
    let mut sent = 0usize;
    let mut received = Vec::new();
    // ~50 passes around a 4 KiB ring with sizes 0..=600 (odd sizes, split parts).
    for i in 0..400usize {
        let len = (i * 37) % 601;
        let msg = pattern(len, i as u8);
        let (a, b) = msg.split_at(len / 3);
        while let Err(RingError::Full) = ring.try_push(&[a, b]) {
            consumer.pop_batch(&ring, 8, |m| received.push(m.to_vec())).unwrap();
        }
        sent += 1;
    }
    while received.len() < sent {
        assert!(
            consumer.pop_batch(&ring, 64, |m| received.push(m.to_vec())).unwrap() > 0,
            "messages lost"
        );
    }
    for (i, m) in received.iter().enumerate() {
        assert_eq!(m, &pattern((i * 37) % 601, i as u8), "message {i}");
    }
    assert_eq!(consumer.pop_batch(&ring, 64, |_| panic!("extra message")).unwrap(), 0);
}

#[test]
fn full_and_too_large_are_reported() {
    let mem = words(4096);
    let ring = ProgressiveRing::init(&mem, 4096, 1000).unwrap();
    assert_eq!(ring.try_push(&[&[0; 1001]]), Err(RingError::TooLarge { len: 1001, max: 1000 }));
    let fits = 4096 / record_bytes(1000);
    for _ in 0..fits {
        ring.try_push(&[&[1; 1000]]).unwrap();
    }
    assert_eq!(ring.try_push(&[&[1; 1000]]), Err(RingError::Full));
    assert_eq!(
        ring.push(&[&[1; 1000]], Duration::from_millis(20)),
        Err(RingError::Timeout(Duration::from_millis(20)))
    );
    let mut consumer = ring.consumer(0);
    assert_eq!(consumer.pop_batch(&ring, 1, |_| {}).unwrap(), 1);
    ring.try_push(&[&[2; 1000]]).unwrap();
}

/// The consumer takes nothing while any reservation is unpublished, even records published
/// after it; once the stalled producer publishes, it takes them all in order.
#[test]
fn consumer_waits_until_tail_equals_progress() {
    let mem = words(4096);
    let ring = ProgressiveRing::init(&mem, 4096, 100).unwrap();
    ring.try_push(&[b"first"]).unwrap();
    // A producer reserves 16 bytes and stalls before writing (done by hand on the layout).
    let tail = &mem[pr::TAIL_OFFSET / 8];
    let stalled_at = tail.fetch_add(16, Ordering::Relaxed);
    ring.try_push(&[b"third"]).unwrap();
    let mut consumer = ring.consumer(0);
    assert_eq!(
        consumer.pop_batch(&ring, 64, |_| {}).unwrap(),
        0,
        "took records past an unpublished one"
    );
    // The stalled producer writes its record ("second") and publishes it.
    let data = |pos: u64| &mem[pr::DATA_OFFSET / 8 + (pos as usize % 4096) / 8];
    data(stalled_at).store(6 | (u64::from(pr::RECORD_TAG) << 32), Ordering::Relaxed);
    data(stalled_at + 8).store(u64::from_le_bytes(*b"second\0\0"), Ordering::Relaxed);
    mem[pr::PROGRESS_OFFSET / 8].fetch_add(16, Ordering::Release);
    let mut got = Vec::new();
    assert_eq!(consumer.pop_batch(&ring, 64, |m| got.push(m.to_vec())).unwrap(), 3);
    assert_eq!(got, [b"first".to_vec(), b"second".to_vec(), b"third".to_vec()]);
}

#[test]
fn garbage_records_are_reported_with_their_position() {
    let mem = words(4096);
    let ring = ProgressiveRing::init(&mem, 4096, 100).unwrap();
    ring.try_push(&[b"ok"]).unwrap();
    ring.try_push(&[b"bad"]).unwrap();
    // A peer overwrites the second record's header with a length beyond the bound.
    mem[pr::DATA_OFFSET / 8 + 2].store(5000 | (u64::from(pr::RECORD_TAG) << 32), Ordering::Relaxed);
    let mut consumer = ring.consumer(0);
    let mut got = 0;
    let err = consumer.pop_batch(&ring, 64, |_| got += 1).unwrap_err();
    assert_eq!(err, RingError::Corrupt { position: 16, what: "record length out of range" });
    assert_eq!(got, 1);
    mem[pr::DATA_OFFSET / 8 + 2].store(3, Ordering::Relaxed);
    assert_eq!(
        consumer.pop_batch(&ring, 64, |_| {}).unwrap_err(),
        RingError::Corrupt { position: 16, what: "record tag missing" }
    );
}

/// A peer that moves `head` past `tail` makes producers report corruption, not spin forever.
#[test]
fn head_beyond_tail_is_reported_to_producers() {
    let mem = words(4096);
    let ring = ProgressiveRing::init(&mem, 4096, 100).unwrap();
    mem[pr::HEAD_OFFSET / 8].store(1 << 20, Ordering::Relaxed);
    assert_eq!(
        ring.try_push(&[b"x"]),
        Err(RingError::Corrupt { position: 1 << 20, what: "head beyond tail" })
    );
}

#[test]
fn attach_validates_the_header() {
    let mem = words(8192);
    assert!(
        matches!(ProgressiveRing::attach(&mem), Err(RingError::Layout(m)) if m.contains("magic"))
    );
    ProgressiveRing::init(&mem, 8192, 100).unwrap();
    assert!(ProgressiveRing::attach(&mem).is_ok());
    mem[pr::CAPACITY_OFFSET / 8].store(5000, Ordering::Relaxed);
    assert!(
        matches!(ProgressiveRing::attach(&mem), Err(RingError::Layout(m)) if m.contains("offset 16"))
    );
    assert!(ProgressiveRing::init(&mem[..100], 8192, 100).is_err());
    assert!(ProgressiveRing::init(&mem, 3000, 100).is_err());
    assert!(ProgressiveRing::init(&mem, 8192, 8192).is_err());
}

/// Eight producer threads through a ring in shared memory: every message arrives once, in
/// order per producer (the bench's consumer checks that), for all three rings.
#[test]
fn every_ring_delivers_every_message_in_order_under_contention() {
    let cfg = RingBenchConfig {
        rings: bench::RING_NAMES.iter().map(|s| (*s).to_string()).collect(),
        producers: vec![1, 8],
        messages: 20_000,
        message_bytes: 40,
        ring_bytes: 4096,
        rounds: 1,
    };
    let results = bench::run(&cfg).unwrap();
    assert_eq!(results.len(), 6);
    for r in &results {
        assert!(r.ops_per_sec > 0.0 && r.messages == 20_000, "{r:?}");
    }
}

#[test]
fn bench_rejects_bad_settings() {
    let cfg = RingBenchConfig {
        rings: vec!["spsc".into()],
        producers: vec![1],
        messages: 1,
        message_bytes: 64,
        ring_bytes: 4096,
        rounds: 1,
    };
    assert!(bench::run(&cfg).unwrap_err().to_string().contains("--ring spsc"));
}

#[test]
fn ring_in_a_second_mapping_of_the_memfd_sees_the_same_messages() {
    let a = SharedMemory::create("ring-test", ring_words(4096) * 8).unwrap();
    let b = SharedMemory::attach(a.fd().try_clone_to_owned().unwrap()).unwrap();
    let producer = ProgressiveRing::init(a.words(), 4096, 64).unwrap();
    let ring = ProgressiveRing::attach(b.words()).unwrap();
    let mut consumer = ring.consumer(0);
    producer.try_push(&[b"across mappings"]).unwrap();
    let mut got = Vec::new();
    assert_eq!(consumer.pop_batch(&ring, 8, |m| got.extend_from_slice(m)).unwrap(), 1);
    assert_eq!(got, b"across mappings");
}

/// docs/FORMAT.md's table of the ring header names each word at the offset the code uses.
#[test]
fn header_offsets_match_format_md() {
    common::assert_rows(
        "## DDS progressive ring",
        &[
            (pr::MAGIC_OFFSET, "magic"),
            (pr::VERSION_OFFSET, "version"),
            (pr::CAPACITY_OFFSET, "capacity"),
            (pr::MAX_MESSAGE_OFFSET, "max_message"),
            (pr::HEAD_OFFSET, "head"),
            (pr::TAIL_OFFSET, "tail"),
            (pr::PROGRESS_OFFSET, "progress"),
            (pr::DATA_OFFSET, "data"),
        ],
    );
    let section = common::format_section("## DDS progressive ring");
    assert!(section.contains(&format!("{:#010x}", pr::RECORD_TAG)), "record tag value missing");
}

/// docs/FORMAT.md's host-channel tables name each field at the offset the code uses.
#[test]
fn host_channel_offsets_match_format_md() {
    use storefn_dds::layout as host;
    use storefn_dds::layout as wire;
    common::assert_rows(
        "## DDS host channel",
        &[
            (host::CH_MAGIC, "magic"),
            (host::CH_VERSION, "version"),
            (host::CH_RING_BYTES, "ring_bytes"),
            (host::CH_REQ_BELL_SEQ, "req_bell_seq"),
            (host::CH_REQ_BELL_WAITERS, "req_bell_waiters"),
            (host::CH_RESP_BELL_SEQ, "resp_bell_seq"),
            (host::CH_RESP_BELL_WAITERS, "resp_bell_waiters"),
            (host::CH_HEARTBEAT, "heartbeat"),
            (wire::REQ_OP, "op"),
            (wire::REQ_FILE, "file"),
            (wire::REQ_ID, "id"),
            (wire::REQ_OFFSET, "offset"),
            (wire::REQ_LEN, "len"),
            (wire::RESP_ID, "id"),
            (wire::RESP_STATUS, "status"),
            (wire::RESP_VALUE, "value"),
            (wire::RESP_DEVICE_NS, "device_ns"),
            (0, "answer_id"),
            (8, "host_ns"),
            (12, "host_device_ns"),
        ],
    );
    assert_eq!(host::CHANNEL_HEADER_BYTES, 512);
    assert_eq!(wire::REQUEST_HEADER_BYTES, 32);
    assert_eq!(wire::RESPONSE_HEADER_BYTES, 24);
    assert_eq!(storefn_dds::limits::MAX_IO_BYTES, 65536);
    assert_eq!(host::CHANNEL_MAX_MESSAGE, 32 + 65536);
    assert_eq!(host::ANSWER_HEADER_BYTES, 16);
    assert_eq!(host::MAX_FORWARD_BYTES, 65552);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

    /// A peer that writes anything into the ring's counters and data (what a hostile process
    /// sharing the memfd can do) gets errors, never a panic, hang or out-of-bounds access, from
    /// either end; whatever the consumer does hand over respects the message bound.
    #[test]
    fn garbage_in_shared_memory_never_panics(
        head in proptest::prelude::any::<u64>(),
        tail in proptest::prelude::any::<u64>(),
        progress in proptest::prelude::any::<u64>(),
        mode in 0u8..3,
        data in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..512),
    ) {
        let mem = words(4096);
        let ring = ProgressiveRing::init(&mem, 4096, 200).unwrap();
        ring.try_push(&[b"before"]).unwrap();
        let mut consumer = ring.consumer(0);
        // Small counters keep positions near each other, so records get parsed, not just
        // refused; counters near u64::MAX probe overflow.
        let clamp = |v: u64| match mode {
            0 => v % 8192,
            1 => u64::MAX - v % 64,
            _ => v,
        };
        mem[pr::HEAD_OFFSET / 8].store(clamp(head), Ordering::Relaxed);
        mem[pr::TAIL_OFFSET / 8].store(clamp(tail), Ordering::Relaxed);
        mem[pr::PROGRESS_OFFSET / 8].store(clamp(progress), Ordering::Relaxed);
        for (i, w) in data.iter().enumerate() {
            mem[pr::DATA_OFFSET / 8 + i].store(*w, Ordering::Relaxed);
        }
        // A consumer that starts on the garbage (takes head from it) as well as one that began
        // before it.
        let mut late = ring.consumer(0);
        for _ in 0..4 {
            let _ = consumer.pop_batch(&ring, 64, |m| assert!(m.len() <= 200));
            let _ = late.pop_batch(&ring, 64, |m| assert!(m.len() <= 200));
            let _ = ring.try_push(&[b"after"]);
        }
    }
}

/// docs/FORMAT.md's offload-batch table matches what the front end encodes: the header, index
/// entry 0 and the first message where the table puts them.
#[test]
fn offload_batch_layout_matches_format_md() {
    use storefn_dds::{encode_batch, BATCH_ENTRY_BYTES, BATCH_HEADER_BYTES};
    common::assert_rows(
        "### DDS offload batch",
        &[(0, "count"), (4, "pad"), (BATCH_HEADER_BYTES, "msg_offset"), (12, "msg_bytes")],
    );
    assert_eq!((BATCH_HEADER_BYTES, BATCH_ENTRY_BYTES), (8, 8));
    let mut b = Vec::new();
    encode_batch([&[7u8; 17][..], &[9u8; 16][..]].into_iter(), &mut b);
    let word = |a: usize| u32::from_le_bytes(b[a..a + 4].try_into().unwrap()) as usize;
    assert_eq!((word(0), word(4)), (2, 0));
    // Messages after the 24-byte index: 17 bytes padded to 24, then 16.
    assert_eq!((word(8), word(12), word(16), word(20)), (24, 17, 48, 16));
    assert_eq!(b.len(), 64);
    assert_eq!(&b[24..41], &[7u8; 17][..]);
    assert_eq!(&b[41..48], &[0u8; 7][..]);
    assert_eq!(&b[48..64], &[9u8; 16][..]);
}
