// Regression: an open file evicted or replaced while another file's reads were in flight was
// never closed in the engine (`Engine::close` refused, the error was dropped), leaking one of
// its 64 registered-file slots each time until every new file failed; a symlink in the served
// directory did it on every request (its identity was taken without following it).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{client, serve, TempDir};
use storefn_wire::Request;

const FILES: usize = 10_000;
const RENAMES: usize = 1_000;
/// Distinct files per frame.
const BATCH: usize = 20;
const BIG: usize = 1 << 20;

fn content(i: usize) -> Vec<u8> {
    format!("file {i:05}").into_bytes()
}

/// Keeps reads of `big` in flight on the server until `stop`.
fn load(addr: &str, stop: &AtomicBool) -> u64 {
    let mut c = storefn_wire::Client::connect(addr, storefn_wire::ClientConfig::default()).unwrap();
    let reqs: Vec<Request<'_>> =
        (0..64u64).map(|i| Request::Read { path: b"big", offset: i * 16384, len: 4096 }).collect();
    let mut n = 0;
    // Bounded even if the main thread never sets `stop`.
    for _ in 0..1_000_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for r in c.call(&reqs).unwrap() {
            assert_eq!(r.status, 0, "load read: {}", r.message);
        }
        n += reqs.len() as u64;
    }
    n
}

#[test]
fn ten_thousand_files_and_a_thousand_renames_under_load_leave_no_engine_slot_behind() {
    let dir = TempDir::new("slots");
    std::fs::write(dir.join("big"), vec![7u8; BIG]).unwrap();
    std::fs::create_dir(dir.join("f")).unwrap();
    for i in 0..FILES {
        std::fs::write(dir.join(&format!("f/{i:05}")), content(i)).unwrap();
    }
    std::fs::write(dir.join("target"), b"through the link").unwrap();
    std::os::unix::fs::symlink("target", dir.join("link")).unwrap();
    let mut cfg = storefn_server::ServerConfig::new(dir.path());
    cfg.metrics = Some("127.0.0.1:0".into());
    let server = storefn_server::Server::start("127.0.0.1:0", cfg).unwrap();
    let stats = server.stats();
    let slots = |s: &storefn_server::Server| {
        common::metric(&common::scrape(s), "storefn_engine_files", &[("kind", "slots")])
    };
    let mut scraped_begin = None;
    let stop = Arc::new(AtomicBool::new(false));
    let loader = {
        let (addr, stop) = (server.local_addr().to_string(), Arc::clone(&stop));
        std::thread::spawn(move || load(&addr, &stop))
    };
    let mut c = client(&server);
    let mut begin = None;
    let mut renamed = 0;
    for (b, chunk) in (0..FILES).collect::<Vec<_>>().chunks(BATCH).enumerate() {
        let paths: Vec<String> = chunk.iter().map(|i| format!("f/{i:05}")).collect();
        let mut reqs: Vec<Request<'_>> = paths
            .iter()
            .map(|p| Request::Read { path: p.as_bytes(), offset: 0, len: 10 })
            .collect();
        reqs.push(Request::Read { path: b"link", offset: 0, len: 16 });
        let replies = c.call(&reqs).unwrap();
        for (i, r) in chunk.iter().zip(&replies) {
            assert_eq!(r.status, 0, "f/{i:05}: {}", r.message);
            assert_eq!(r.data, content(*i), "f/{i:05}");
        }
        assert_eq!(replies[chunk.len()].data, b"through the link");
        // Two renames over `r` per batch: every one a new inode at the same path.
        for _ in 0..2 {
            if renamed < RENAMES {
                let tmp = dir.join("r.tmp");
                std::fs::write(&tmp, content(renamed)).unwrap();
                std::fs::rename(&tmp, dir.join("r")).unwrap();
                let r = c.one(&Request::Read { path: b"r", offset: 0, len: 10 }).unwrap();
                assert_eq!(r.data, content(renamed), "rename {renamed}");
                renamed += 1;
            }
        }
        if b == 10 {
            // The table is full by now: this is the steady state the run must keep.
            begin = Some(stats.engine_files.load(Ordering::Relaxed));
            scraped_begin = Some(slots(&server));
        }
    }
    assert_eq!(renamed, RENAMES);
    stop.store(true, Ordering::Relaxed);
    let loaded = loader.join().unwrap();
    assert!(loaded > 0, "the load ran");
    // One more request publishes the thread's counters as they are with nothing in flight.
    c.one(&Request::Stat { path: b"big" }).unwrap();
    let (engine, cached) =
        (stats.engine_files.load(Ordering::Relaxed), stats.cached_files.load(Ordering::Relaxed));
    assert_eq!(engine, cached, "every engine slot in use belongs to an open file");
    assert_eq!(Some(engine), begin, "the engine's slot count is where the steady state began");
    assert!(engine <= storefn_server::limits::MAX_OPEN_FILES_PER_THREAD as u64);
    // The operator's view (the metrics endpoint) says the same.
    assert_eq!(Some(slots(&server)), scraped_begin, "engine slots as scraped");
    assert_eq!(scraped_begin, begin.map(|b| b as f64));
    server.stop();
    server.join().unwrap();
}

#[test]
fn a_file_reached_through_a_symlink_is_opened_once_not_per_request() {
    let dir = TempDir::new("link_once");
    std::fs::write(dir.join("target"), b"linked").unwrap();
    std::os::unix::fs::symlink("target", dir.join("link")).unwrap();
    let server = serve(dir.path(), 1);
    let mut c = client(&server);
    for _ in 0..50 {
        assert_eq!(
            c.one(&Request::Read { path: b"link", offset: 0, len: 6 }).unwrap().data,
            b"linked"
        );
    }
    assert_eq!(server.stats().files_opened.load(Ordering::Relaxed), 1);
    // A link pointed elsewhere is noticed like a rename.
    std::fs::write(dir.join("other"), b"second").unwrap();
    std::fs::remove_file(dir.join("link")).unwrap();
    std::os::unix::fs::symlink("other", dir.join("link")).unwrap();
    assert_eq!(c.one(&Request::Read { path: b"link", offset: 0, len: 6 }).unwrap().data, b"second");
    assert_eq!(server.stats().files_opened.load(Ordering::Relaxed), 2);
    server.stop();
    server.join().unwrap();
}
