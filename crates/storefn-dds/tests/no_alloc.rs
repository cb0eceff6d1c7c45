//! Steady state allocates nothing (AIOS): cache-table lookups, inserts, removes (displacement
//! included); ring pushes and batches; host-library reads and writes through the file service,
//! both ends. A global allocator counts allocations; one test in this binary so nothing else
//! allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use storefn_dds::host::{FileService, HostChannel, HostFiles, DEFAULT_CHANNEL_RING_BYTES};
use storefn_dds::ring::progressive::{ring_words, ProgressiveRing};
use storefn_dds::table::{CacheTable, Item};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.load(Ordering::Relaxed);
    f();
    ALLOCS.load(Ordering::Relaxed) - before
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
        let n = allocations_during(|| {
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
