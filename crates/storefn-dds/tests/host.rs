//! The host path with two real processes: this test binary re-executes itself as the host
//! application (`host_child`), which drives the file service in the parent through the host
//! file library over shared memory. Bounded: the child is killed after `CHILD_DEADLINE`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use storefn_dds::limits::DEFAULT_CHANNEL_RING_BYTES;
use storefn_dds::limits::MAX_IO_BYTES;
use storefn_dds::{CacheTable, Item};
use storefn_dds::{FileHooks, FileService, HostChannel, HostError, HostFiles};

const CHILD_ENV: &str = "STOREFN_DDS_HOST_FD";
const CHILD_DEADLINE: Duration = Duration::from_secs(60);
const CHUNKS: usize = 120;
const ASYNC_OPS: usize = 64;

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131) ^ seed.wrapping_mul(7)) as u8).collect()
}

/// Chunk i: (offset, len); lengths 1..=150000 so some span several requests.
fn chunks() -> Vec<(u64, usize)> {
    let mut at = 0u64;
    (0..CHUNKS)
        .map(|i| {
            let len = 1 + (i * 7919 + i * i * 31) % 150_000;
            let c = (at, len);
            at += len as u64;
            c
        })
        .collect()
}

fn async_base() -> u64 {
    let (off, len) = *chunks().last().unwrap();
    (off + len as u64).next_multiple_of(4096)
}

fn temp_dir(tag: &str) -> PathBuf {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let d = std::env::temp_dir().join(format!("storefn-dds-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(d.join("served")).unwrap();
    d
}

fn errno_of(r: Result<impl std::fmt::Debug, HostError>) -> i32 {
    match r {
        Err(HostError::File { errno, .. }) => errno,
        other => panic!("expected a file error, got {other:?}"),
    }
}

/// The host application, run in the child process by `host_library_drives_file_service_across_processes`.
#[test]
#[ignore = "run as a child process by host_library_drives_file_service_across_processes"]
fn host_child() {
    let Ok(fd) = std::env::var(CHILD_ENV) else {
        eprintln!("host_child: {CHILD_ENV} unset; this is the child half of another test");
        return;
    };
    // SAFETY: the parent passed this fd (a dup of the channel memfd, inherited) for us alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd.parse().unwrap()) };
    let mut host = HostFiles::attach(fd).unwrap();

    let f = host.create("pages.dat").unwrap();
    for (i, &(off, len)) in chunks().iter().enumerate() {
        host.write(f, off, &pattern(len, i)).unwrap();
    }
    host.flush(f).unwrap();
    let g = host.open("pages.dat").unwrap();
    assert_ne!(f, g, "two opens share a file id");
    for (i, &(off, len)) in chunks().iter().enumerate() {
        let mut buf = vec![0; len];
        assert_eq!(host.read(g, off, &mut buf).unwrap(), len);
        assert!(buf == pattern(len, i), "chunk {i} read back differently");
    }

    // Asynchronous: many writes in flight, then many reads; completions matched by id.
    let base = async_base();
    let mut ids = Vec::new();
    for i in 0..ASYNC_OPS {
        ids.push(host.submit_write(f, base + (i * 4096) as u64, &pattern(4096, 1000 + i)).unwrap());
    }
    assert!(matches!(host.open("pages.dat"), Err(HostError::Busy(ASYNC_OPS))));
    let mut acked = 0;
    let start = Instant::now();
    while acked < ASYNC_OPS {
        host.poll(|c| {
            assert!(ids.contains(&c.id));
            assert_eq!(c.result, Ok(4096));
            acked += 1;
        })
        .unwrap();
        assert!(start.elapsed() < CHILD_DEADLINE, "async writes unanswered");
    }
    let reads: Vec<u64> = (0..ASYNC_OPS)
        .map(|i| host.submit_read(g, base + (i * 4096) as u64, 4096).unwrap())
        .collect();
    let mut got = 0;
    while got < ASYNC_OPS {
        host.poll(|c| {
            let i = reads.iter().position(|&id| id == c.id).expect("known id");
            assert_eq!(c.result, Ok(4096));
            assert!(c.data == pattern(4096, 1000 + i), "async read {i}");
            got += 1;
        })
        .unwrap();
    }

    // A read past the end is short; errors come back as errnos.
    let end = base + (ASYNC_OPS * 4096) as u64;
    assert_eq!(host.read(g, end - 10, &mut [0; 100]).unwrap(), 10);
    assert_eq!(errno_of(host.open("../outside")), libc::EXDEV);
    assert_eq!(errno_of(host.create("../outside")), libc::EXDEV);
    assert_eq!(errno_of(host.open("/etc/hostname")), libc::EXDEV);
    assert_eq!(errno_of(host.open("escape/hostname")), libc::EXDEV);
    assert_eq!(errno_of(host.open("missing")), libc::ENOENT);
    assert_eq!(errno_of(host.read(999, 0, &mut [0; 8])), libc::EBADF);
    let id = host.submit_read(g, 0, (MAX_IO_BYTES + 1) as u32).unwrap();
    let mut answered = false;
    while !answered {
        host.poll(|c| {
            assert_eq!((c.id, c.result), (id, Err(libc::EINVAL)));
            answered = true;
        })
        .unwrap();
    }
    host.close(g).unwrap();
    assert_eq!(errno_of(host.read(g, 0, &mut [0; 8])), libc::EBADF);
    host.flush(f).unwrap();
    let d = host.create("done.txt").unwrap();
    host.write(d, 0, b"ok").unwrap();
    host.flush(d).unwrap();
}

#[test]
fn host_library_drives_file_service_across_processes() {
    let root = temp_dir("host");
    let dir = root.join("served");
    std::os::unix::fs::symlink("/etc", dir.join("escape")).unwrap();
    let channel = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES).unwrap();
    let mut service = FileService::new(&dir, &channel).unwrap();
    // The child inherits a dup without close-on-exec; the parent's copy is closed after spawn.
    // SAFETY: plain dup of an fd we own.
    let inherit = unsafe { libc::dup(channel.fd().as_raw_fd()) };
    assert!(inherit >= 0);
    // SAFETY: fresh fd from dup.
    let inherit = unsafe { OwnedFd::from_raw_fd(inherit) };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "host_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, inherit.as_raw_fd().to_string())
        .spawn()
        .unwrap();
    drop(inherit);
    let stop = AtomicBool::new(false);
    let status = std::thread::scope(|s| {
        let server = s.spawn(|| service.serve_until(&channel, &stop));
        let start = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if start.elapsed() > CHILD_DEADLINE {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        status
    });
    let status = status.expect("host child did not finish within the deadline");
    assert!(status.success(), "host child failed: {status}");

    // What the child wrote is on disk, byte for byte; nothing escaped the served directory.
    let data = std::fs::read(dir.join("pages.dat")).unwrap();
    for (i, &(off, len)) in chunks().iter().enumerate() {
        assert!(data[off as usize..off as usize + len] == pattern(len, i), "chunk {i} on disk");
    }
    let base = async_base() as usize;
    for i in 0..ASYNC_OPS {
        assert!(data[base + i * 4096..base + (i + 1) * 4096] == pattern(4096, 1000 + i));
    }
    assert_eq!(std::fs::read(dir.join("done.txt")).unwrap(), b"ok");
    assert!(!root.join("outside").exists(), "a create escaped the served directory");
    let stats = service.stats();
    assert_eq!(stats.errors, 8, "{stats:?}");
    assert_eq!(stats.malformed, 0);
    std::fs::remove_dir_all(&root).unwrap();
}

/// DDS's cache-on-write in miniature: the service's write hook records page -> (version, file,
/// offset) in the cache table, the read hook drops it; run in one process, two threads.
#[test]
fn write_and_read_hooks_fill_and_invalidate_the_cache_table() {
    struct PageHooks {
        table: Arc<CacheTable>,
        version: u64,
        reads: Arc<Mutex<Vec<(u32, u64, u32)>>>,
    }
    impl FileHooks for PageHooks {
        fn on_write(&mut self, file: u32, offset: u64, data: &[u8]) {
            self.version += 1;
            let item = Item {
                key: offset / 4096,
                version: self.version,
                file,
                offset,
                size: data.len() as u32,
            };
            self.table.insert(item).unwrap();
        }
        fn on_read(&mut self, file: u32, offset: u64, len: u32) {
            self.reads.lock().unwrap().push((file, offset, len));
            self.table.remove(offset / 4096);
        }
    }
    let root = temp_dir("hooks");
    let dir = root.join("served");
    let channel = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES).unwrap();
    let mut service = FileService::new(&dir, &channel).unwrap();
    let table = Arc::new(CacheTable::with_capacity(64).unwrap());
    let reads = Arc::new(Mutex::new(Vec::new()));
    service.set_hooks(Box::new(PageHooks {
        table: Arc::clone(&table),
        version: 0,
        reads: Arc::clone(&reads),
    }));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let server = s.spawn(|| service.serve_until(&channel, &stop));
        let mut host = HostFiles::new(
            HostChannel::attach(channel.fd().try_clone_to_owned().unwrap()).unwrap(),
        );
        let f = host.create("pages").unwrap();
        for page in 0..8u64 {
            host.write(f, page * 4096, &[page as u8; 4096]).unwrap();
        }
        host.write(f, 3 * 4096, &[33; 4096]).unwrap();
        let mut buf = [0u8; 4096];
        host.read(f, 5 * 4096, &mut buf).unwrap();
        assert_eq!(buf, [5; 4096]);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap().unwrap();
        assert_eq!(
            table.get(3),
            Some(Item { key: 3, version: 9, file: f, offset: 3 * 4096, size: 4096 })
        );
        assert_eq!(table.get(0).map(|i| i.version), Some(1));
        assert_eq!(table.get(5), None, "the read did not invalidate page 5");
        assert_eq!(*reads.lock().unwrap(), [(f, 5 * 4096, 4096)]);
    });
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn attach_refuses_a_foreign_memfd() {
    let other = storefn_dds::SharedMemory::create("not-a-channel", 1 << 16).unwrap();
    let err = HostChannel::attach(other.fd().try_clone_to_owned().unwrap()).unwrap_err();
    assert!(err.to_string().contains("no channel magic"), "{err}");
    assert!(FileService::new(
        Path::new("/nonexistent-storefn-dir"),
        &HostChannel::create(1 << 18).unwrap()
    )
    .is_err());
}

/// Forwarding: the server end sends opaque client requests with ids, the host end answers each
/// (here: the payload reversed), the server matches every answer to its id. Many in flight,
/// sizes up to the bound; bounded by a deadline.
#[test]
fn forwarded_requests_reach_the_host_and_answers_come_back() {
    use storefn_dds::layout::MAX_FORWARD_BYTES;
    use storefn_dds::{ForwardEnd, Side};
    const REQUESTS: u64 = 500;
    let channel = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES).unwrap();
    let host_channel = HostChannel::attach(channel.fd().try_clone_to_owned().unwrap()).unwrap();
    let mut server = ForwardEnd::new(channel, Side::Server);
    let payload = |id: u64| pattern((id as usize * 977) % 9000, id as usize);
    let host = std::thread::spawn(move || {
        let mut end = ForwardEnd::new(host_channel, Side::Host);
        let (mut answered, start) = (0, Instant::now());
        while answered < REQUESTS {
            let mut got = Vec::new();
            end.poll(|id, req| got.push((id, req.iter().rev().copied().collect::<Vec<u8>>())))
                .unwrap();
            for (id, resp) in &got {
                end.send(*id, resp).unwrap();
            }
            answered += got.len() as u64;
            assert!(start.elapsed() < CHILD_DEADLINE, "host stalled at {answered}");
        }
    });
    let mut pending: std::collections::HashSet<u64> = (0..REQUESTS).collect();
    let start = Instant::now();
    let mut next = 0;
    while !pending.is_empty() {
        // Keep up to 32 in flight.
        while next < REQUESTS && (next as usize) < REQUESTS as usize - pending.len() + 32 {
            server.send(next, &payload(next)).unwrap();
            next += 1;
        }
        server
            .poll(|id, resp| {
                let want: Vec<u8> = payload(id).into_iter().rev().collect();
                assert!(resp == want.as_slice(), "answer to {id} mismatched");
                assert!(pending.remove(&id), "answer to {id} twice or never asked");
            })
            .unwrap();
        assert!(start.elapsed() < CHILD_DEADLINE, "{} answers missing", pending.len());
    }
    host.join().unwrap();
    let too_big = vec![0; MAX_FORWARD_BYTES + 1];
    assert!(matches!(server.send(1, &too_big), Err(HostError::Ring(_))));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Whatever bytes a host sends as requests, the service answers each message long enough to
    /// carry an id with an errno or a result, drops shorter ones (counted), and never panics or
    /// touches a file outside its directory.
    #[test]
    fn garbage_requests_get_errnos_not_panics(
        msgs in proptest::collection::vec(
            (0u8..9, proptest::prelude::any::<u32>(), proptest::prelude::any::<u64>(),
             proptest::prelude::any::<u32>(), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
             0usize..100),
            1..32),
    ) {
        use storefn_dds::layout::{RequestHeader, ResponseHeader, REQUEST_HEADER_BYTES};
        let root = temp_dir("garbage");
        let dir = root.join("served");
        let channel = HostChannel::create(1 << 18).unwrap();
        let mut service = FileService::new(&dir, &channel).unwrap();
        let mut long = 0;
        for (op, file, offset, len, payload, cut) in &msgs {
            let h = RequestHeader { op: *op, file: *file % 4, id: 7, offset: *offset, len: *len };
            let mut m = h.encode().to_vec();
            m.extend_from_slice(payload);
            m.truncate(*cut);
            long += u64::from(m.len() >= REQUEST_HEADER_BYTES);
            channel.requests().try_push(&[&m]).unwrap();
        }
        while service.serve_batch(&channel).unwrap() > 0 {}
        let stats = service.stats();
        proptest::prop_assert_eq!(stats.requests, long);
        proptest::prop_assert_eq!(stats.malformed, msgs.len() as u64 - long);
        let mut answers = 0u64;
        let mut consumer = channel.responses().consumer(0);
        while consumer
            .pop_batch(&channel.responses(), 256, |m| {
                let (h, _) = ResponseHeader::decode(m).unwrap();
                assert_eq!(h.id, 7);
                answers += 1;
            })
            .unwrap()
            > 0
        {}
        proptest::prop_assert_eq!(answers, long);
        std::fs::remove_dir_all(&root).unwrap();
    }
}

/// A host application started on its own gets its channel through the server's Unix socket
/// (fd passing); it then works like an inherited one. A second host gets a second channel.
#[test]
fn channel_handoff_over_a_unix_socket() {
    use storefn_dds::{connect, ChannelListener};
    let root = temp_dir("handoff");
    let sock = root.join("host.sock");
    let listener = ChannelListener::bind(&sock).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);
    let dir = root.join("served");
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let mut channels = Vec::new();
            for _ in 0..2 {
                channels.push(listener.accept(DEFAULT_CHANNEL_RING_BYTES).unwrap());
            }
            // Serve both until their hosts have each written and read back a file.
            for (i, ch) in channels.iter().enumerate() {
                let mut service = FileService::new(&dir, ch).unwrap();
                let start = Instant::now();
                while service.stats().requests < 3 {
                    service.serve_batch(ch).unwrap();
                    assert!(start.elapsed() < CHILD_DEADLINE, "host {i} stalled");
                }
            }
        });
        let mut hosts: Vec<HostFiles> =
            (0..2).map(|_| HostFiles::new(connect(&sock).unwrap())).collect();
        for (i, host) in hosts.iter_mut().enumerate() {
            let f = host.create(&format!("h{i}")).unwrap();
            host.write(f, 0, &[i as u8 + 1; 100]).unwrap();
            let mut buf = [0u8; 100];
            assert_eq!(host.read(f, 0, &mut buf).unwrap(), 100);
            assert_eq!(buf, [i as u8 + 1; 100]);
        }
        server.join().unwrap();
    });
    drop(listener);
    assert!(!sock.exists(), "listener left its socket behind");
    // Nothing listening: a clear error naming the socket.
    let err = connect(&sock).unwrap_err().to_string();
    assert!(err.contains("host.sock"), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// Regression test for the host library spinning (yield loop) through a blocking call: with a
/// file service that answers only after `DELAY`, the caller's thread must sleep on the
/// response doorbell, not burn the wait as CPU; and an idle file service must sleep on the
/// request doorbell, yet answer a request that arrives while it sleeps.
#[test]
fn blocking_calls_and_idle_service_sleep_instead_of_spinning() {
    use storefn_dds::thread_cpu_ns;
    const DELAY: Duration = Duration::from_millis(300);
    // Generous: a sleeping wait costs a few system calls per PARK_SLICE, a spinning one ~DELAY.
    const MAX_CPU: Duration = Duration::from_millis(60);
    let dir = temp_dir("sleep");
    let channel = HostChannel::create(DEFAULT_CHANNEL_RING_BYTES).unwrap();
    let mut files =
        HostFiles::new(HostChannel::attach(channel.fd().try_clone_to_owned().unwrap()).unwrap());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Phase 1: the caller blocks while the service has not started yet.
        let svc = s.spawn(|| {
            std::thread::sleep(DELAY);
            let mut service = FileService::new(&dir.join("served"), &channel).unwrap();
            let cpu0 = thread_cpu_ns();
            service.serve_until(&channel, &stop).unwrap();
            Duration::from_nanos(thread_cpu_ns() - cpu0)
        });
        let (cpu0, t0) = (thread_cpu_ns(), Instant::now());
        let id = files.create("a").unwrap();
        let (cpu, wall) = (Duration::from_nanos(thread_cpu_ns() - cpu0), t0.elapsed());
        assert!(wall >= DELAY / 2, "answered after {wall:?}: the service was not delayed");
        assert!(cpu < MAX_CPU, "blocking call used {cpu:?} of CPU in {wall:?}");
        // Phase 2: the service idles (asleep on its doorbell), then a write wakes it.
        std::thread::sleep(DELAY);
        let t0 = Instant::now();
        files.write(id, 0, b"woken").unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "idle service answered late");
        let mut back = [0u8; 5];
        assert_eq!(files.read(id, 0, &mut back).unwrap(), 5);
        assert_eq!(&back, b"woken");
        stop.store(true, Ordering::Relaxed);
        let service_cpu = svc.join().unwrap();
        assert!(service_cpu < MAX_CPU, "idle file service used {service_cpu:?} of CPU");
    });
    std::fs::remove_dir_all(&dir).unwrap();
}
