//! Steady state allocates nothing (AIOS): cache-table lookups, inserts, removes (displacement
//! included); ring pushes and batches; host-library reads and writes through the file service,
//! both ends. A global allocator counts allocations; one test in this binary so nothing else
//! allocates meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use storefn_dds::layout::ring_words;
use storefn_dds::limits::DEFAULT_CHANNEL_RING_BYTES;
use storefn_dds::ProgressiveRing;
use storefn_dds::{CacheTable, Item};
use storefn_dds::{FileService, HostChannel, HostFiles};
use storefn_testkit::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Allocations made by this thread while `f` runs. The single-threaded sections count only
/// their own thread: libtest's main thread may still be writing its header when the test starts,
/// and a process-wide count caught those allocations (4, in about 1 run of 20).
fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = CountingAlloc::thread_allocs();
    f();
    CountingAlloc::thread_allocs() - before
}

/// Allocations made by every thread while `f` runs (the host section: the file service runs on
/// its own thread; libtest's main thread is idle by then).
fn process_allocations_during(f: impl FnOnce()) -> u64 {
    let before = CountingAlloc::process_allocs();
    f();
    CountingAlloc::process_allocs() - before
}

#[test]
fn steady_state_allocates_nothing() {
    // The counter counts: one vector, one allocation.
    assert_eq!(allocations_during(|| drop(std::hint::black_box(vec![0u8; 16]))), 1);
    // Cache table: fill to ~85% (inserts displace), then churn and look up.
    let table = CacheTable::with_capacity(3600).unwrap();
    let item =
        |key: u64, version: u64| Item { key, version, file: 1, offset: key * 4096, size: 4096 };
    for key in 0..3000 {
        table.insert(item(key, 0)).unwrap();
    }
    let n = allocations_during(|| {
        for round in 1..20u64 {
            for key in 0..3000 {
                if key % 7 == round % 7 {
                    table.remove(key).unwrap();
                    table.insert(item(key, round)).unwrap();
                }
                assert!(table.get(key).is_some());
            }
        }
    });
    assert_eq!(n, 0, "cache table allocated {n} times");

    // Ring: pushes and batches.
    let mem: Vec<AtomicU64> = (0..ring_words(1 << 16)).map(|_| AtomicU64::new(0)).collect();
    let ring = ProgressiveRing::init(&mem, 1 << 16, 256).unwrap();
    let mut consumer = ring.consumer(0);
    let msg = [7u8; 200];
    let n = allocations_during(|| {
        for _ in 0..10_000 {
            ring.try_push(&[&msg[..100], &msg[100..]]).unwrap();
            assert_eq!(consumer.pop_batch(&ring, 16, |m| assert_eq!(m.len(), 200)).unwrap(), 1);
        }
    });
    assert_eq!(n, 0, "ring allocated {n} times");

    // Host path: the service on a thread, the library here; reads and writes after set-up.
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir =
        std::env::temp_dir().join(format!("storefn-dds-noalloc-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let channel = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES).unwrap();
    let mut service = FileService::new(&dir, &channel).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        let server = s.spawn(|| service.serve_until(&channel, &stop));
        let mut host = HostFiles::new(
            HostChannel::attach(channel.fd().try_clone_to_owned().unwrap()).unwrap(),
        );
        let f = host.create("data").unwrap();
        let page = vec![3u8; 4096];
        let mut buf = vec![0u8; 4096];
        host.write(f, 0, &page).unwrap();
        let n = process_allocations_during(|| {
            for i in 0..2000u64 {
                host.write(f, (i % 64) * 4096, &page).unwrap();
                assert_eq!(host.read(f, (i % 64) * 4096, &mut buf).unwrap(), 4096);
            }
        });
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        assert_eq!(n, 0, "host path allocated {n} times (library and service)");
    });
    std::fs::remove_dir_all(&dir).unwrap();
}
