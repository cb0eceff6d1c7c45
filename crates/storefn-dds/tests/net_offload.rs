//! DDS over the network, on loopback: storefn-server runs the page server's offload functions
//! on OFFLOAD requests; offloaded GetPages are read next to the data, the rest are forwarded to
//! the host application (a thread here, on the same shared-memory channels a separate process
//! would use) and its answers relayed back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::{Rng, SeedableRng};
use storefn_dds::{fill_page, get_page, page_lsn, DeployOptions, Deployment, PageHost, PAGE_BYTES};
use storefn_dds::{ForwardEnd, HostChannel, HostFiles, Side};
use storefn_wire::{Client, Request};
use storefn_wire::{SERVED_BY_HOST, SERVED_BY_OFFLOAD};

const PAGES: u64 = 64;

/// Every test here starts a server whose worker thread is named `storefn-serve-0`, and
/// `server_thread_cpu_ms` finds its server's thread by that name: the tests run one at a time.
/// (Run in parallel, the stuck-host test read two different servers' threads and its CPU
/// difference underflowed: "attempt to subtract with overflow", CI at 9c573b0.)
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    // A test that failed holding the lock poisoned it; the next test's servers are still its own.
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let d = std::env::temp_dir().join(format!("storefn-dds-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The host application's ends of a deployment's two channels (file, forwarding).
fn host_ends(d: &Deployment) -> (HostChannel, HostChannel) {
    let attach = |ch: &Option<HostChannel>| {
        HostChannel::attach(ch.as_ref().unwrap().fd().try_clone_to_owned().unwrap()).unwrap()
    };
    (attach(&d.host_files), attach(&d.host_forward))
}

/// A page host over those ends, storing `PAGES` pages.
fn page_host((files, fwd): (HostChannel, HostChannel)) -> PageHost {
    PageHost::create(HostFiles::new(files), ForwardEnd::new(fwd, Side::Host), "pages", PAGES)
        .unwrap()
}

/// Starts the deployment and a host thread that creates the pages, publishes each page's LSN
/// in `lsns` after its write is acknowledged, applies `updates` random updates while answering
/// forwarded requests, then keeps answering until `stop`.
fn run<T>(
    tag: &str,
    updates: u64,
    client: impl FnOnce(&Deployment, &str, &[AtomicU64], &AtomicBool) -> T,
) -> (T, storefn_dds::HostStats) {
    run_opts(tag, updates, &DeployOptions::new(4096, true), client)
}

/// [`run`] with every deployment option.
fn run_opts<T>(
    tag: &str,
    updates: u64,
    opts: &DeployOptions,
    client: impl FnOnce(&Deployment, &str, &[AtomicU64], &AtomicBool) -> T,
) -> (T, storefn_dds::HostStats) {
    let dir = temp_dir(tag);
    let elf = storefn_progs::must("dds/pageserver");
    let d = Deployment::start_opts("127.0.0.1:0", &dir, elf, opts).unwrap();
    let addr = d.server.local_addr().to_string();
    let lsns: Vec<AtomicU64> = (0..PAGES).map(|_| AtomicU64::new(0)).collect();
    let (ready, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let ends = host_ends(&d);
    let out = std::thread::scope(|s| {
        let host = s.spawn(|| {
            let mut h = page_host(ends);
            for p in 0..PAGES {
                // Release: a client acquiring the LSN asks for a page already written.
                lsns[p as usize].store(h.lsn(p).unwrap(), Ordering::Release);
            }
            ready.store(true, Ordering::Release);
            let mut rng = rand::rngs::StdRng::seed_from_u64(7);
            let mut left = updates;
            while !stop.load(Ordering::Acquire) {
                h.serve_forwarded().unwrap();
                if left > 0 {
                    let p = rng.gen_range(0..PAGES);
                    let lsn = h.apply_update(p).unwrap();
                    lsns[p as usize].store(lsn, Ordering::Release);
                    left -= 1;
                }
            }
            h.stats()
        });
        while !ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // Stops the host thread even when the client panics (else the scope waits forever).
        let guard = StopOnDrop(&stop);
        let out = client(&d, &addr, &lsns, &stop);
        drop(guard);
        (out, host.join().unwrap())
    });
    d.stop().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

/// Checks one answer: the right page, at least the LSN asked, its bytes those of its LSN.
fn check(page: u64, asked: u64, data: &[u8]) -> u64 {
    assert_eq!(data.len(), PAGE_BYTES, "page {page}: {} bytes", data.len());
    let lsn = page_lsn(data).unwrap();
    assert!(lsn >= asked, "page {page}: LSN {lsn} older than the {asked} asked");
    let mut want = vec![0; PAGE_BYTES];
    fill_page(&mut want, page, lsn);
    assert!(data == want.as_slice(), "page {page} LSN {lsn}: bytes differ from that version");
    lsn
}

#[test]
fn forwarded_and_offloaded_answers_agree() {
    let _one = one_at_a_time();
    let ((), host) = run("agree", 0, |d, addr, lsns, _| {
        let mut c = Client::connect(addr, d.client_config()).unwrap();
        let msgs: Vec<_> =
            (0..PAGES).map(|p| get_page(p, lsns[p as usize].load(Ordering::Acquire))).collect();
        let reqs: Vec<Request<'_>> = msgs.iter().map(|m| Request::Offload { msg: m }).collect();
        let offloaded = c.call(&reqs).unwrap();
        d.front.set_offload(false);
        let forwarded = c.call(&reqs).unwrap();
        for p in 0..PAGES as usize {
            let (o, f) = (&offloaded[p], &forwarded[p]);
            assert_eq!((o.status, f.status), (0, 0), "page {p}: {} / {}", o.message, f.message);
            assert_eq!(o.value, u64::from(SERVED_BY_OFFLOAD), "page {p} was not offloaded");
            assert_eq!(f.value, u64::from(SERVED_BY_HOST), "page {p} was not forwarded");
            check(p as u64, lsns[p].load(Ordering::Acquire), &o.data);
            assert_eq!(o.data, f.data, "page {p}: offloaded and forwarded answers differ");
        }
        // A GetPage for an LSN newer than the cached one goes to the host, which replays the
        // page up to it first.
        d.front.set_offload(true);
        let newer = lsns[3].load(Ordering::Acquire) + 1000;
        let r = c.one(&Request::Offload { msg: &get_page(3, newer) }).unwrap();
        assert_eq!(r.value, u64::from(SERVED_BY_HOST));
        check(3, newer, &r.data);
        // The replayed page was cached on its write: the same GetPage is now offloaded.
        let again = c.one(&Request::Offload { msg: &get_page(3, newer) }).unwrap();
        assert_eq!(again.value, u64::from(SERVED_BY_OFFLOAD));
        assert_eq!(again.data, r.data);
        // A message that is no GetPage is judged "host" by pred and answered empty by the host.
        let r = c.one(&Request::Offload { msg: &[1, 2, 3] }).unwrap();
        assert_eq!((r.value, r.data.len()), (u64::from(SERVED_BY_HOST), 0));
    });
    assert_eq!(host.bad_requests, 1);
    assert_eq!((host.answered, host.updates), (PAGES + 1, 1));
}

/// Regression guard for DDS's staleness rule: under concurrent replay (the host reading pages,
/// which invalidates them, and writing newer LSNs, which re-caches them), no GetPage returns a
/// page older than the LSN it asked for, offloaded or forwarded.
#[test]
fn get_page_never_returns_a_page_older_than_asked_under_replay() {
    let _one = one_at_a_time();
    let ((off, fwd), host) = run("replay", 3000, |d, addr, lsns, _| {
        let mut c = Client::connect(addr, d.client_config()).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let (mut off, mut fwd) = (0u64, 0u64);
        for _ in 0..200 {
            let asked: Vec<(u64, u64)> = (0..16)
                .map(|_| {
                    let p = rng.gen_range(0..PAGES);
                    (p, lsns[p as usize].load(Ordering::Acquire))
                })
                .collect();
            let msgs: Vec<_> = asked.iter().map(|&(p, l)| get_page(p, l)).collect();
            let reqs: Vec<Request<'_>> = msgs.iter().map(|m| Request::Offload { msg: m }).collect();
            for (r, &(p, l)) in c.call(&reqs).unwrap().iter().zip(&asked) {
                assert_eq!(r.status, 0, "page {p}: {}", r.message);
                check(p, l, &r.data);
                if r.value == u64::from(SERVED_BY_OFFLOAD) {
                    off += 1;
                } else {
                    fwd += 1;
                }
            }
        }
        (off, fwd)
    });
    assert_eq!(host.bad_requests, 0);
    assert!(host.updates > 0);
    assert!(off > 0 && fwd > 0, "both paths must be exercised: {off} offloaded, {fwd} forwarded");
}

/// Sets the flag when dropped: stops a host thread even when the test panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// CPU time (user + system, ms) of this process's server worker thread `storefn-serve-0` (one
/// server at a time: [`ONE_AT_A_TIME`]).
fn server_thread_cpu_ms() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == "storefn-serve-0" {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap();
            // Fields after the parenthesised name: state is field 3; utime 14, stime 15.
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            let f: Vec<u64> =
                rest.split(' ').skip(11).take(2).map(|v| v.parse().unwrap()).collect();
            return (f[0] + f[1]) * 1000 / hz;
        }
    }
    panic!("no storefn-serve-0 thread");
}

/// Regression test for forwarded requests hanging on a stuck host: a host that stops taking
/// requests fails only the requests forwarded to it, each with `HOST_TIMEOUT` after the
/// forward timeout, while offloaded ones are still served; when it wakes up, its late answer
/// to the timed-out request is dropped, never relayed to the request that reused the slot.
#[test]
fn a_stuck_host_times_out_only_forwarded_requests() {
    let _one = one_at_a_time();
    use storefn_wire::StatusCode;
    const TIMEOUT: std::time::Duration = std::time::Duration::from_millis(800);
    let dir = temp_dir("stuck");
    let mut opts = DeployOptions::new(4096, true);
    opts.forward_timeout = TIMEOUT;
    let d =
        Deployment::start_opts("127.0.0.1:0", &dir, storefn_progs::must("dds/pageserver"), &opts)
            .unwrap();
    let addr = d.server.local_addr().to_string();
    let ends = host_ends(&d);
    let (ready, stuck, stop) =
        (AtomicBool::new(false), AtomicBool::new(true), AtomicBool::new(false));
    std::thread::scope(|s| {
        let host = s.spawn(|| {
            let mut h = page_host(ends);
            ready.store(true, Ordering::Release);
            while !stop.load(Ordering::Acquire) {
                if stuck.load(Ordering::Acquire) {
                    // Alive (its heartbeat moves) but not answering: a slow host, not a gone one.
                    h.beat();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                } else {
                    h.serve_forwarded().unwrap();
                }
            }
            h.stats()
        });
        while !ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // Stops the host thread even when an assertion fails (else the scope waits forever).
        let _guard = StopOnDrop(&stop);
        let mut c = Client::connect(&addr, d.client_config()).unwrap();
        // Page 5 at LSN 6 is cached: offloaded. At LSN 1000 only the (stuck) host can answer.
        let t0 = std::time::Instant::now();
        let cpu0 = server_thread_cpu_ms();
        let r = c.call(&[Request::Offload { msg: &get_page(5, 1000) }]).unwrap().remove(0);
        let waited = t0.elapsed();
        let worker_cpu_ms = server_thread_cpu_ms() - cpu0;
        assert_eq!(r.status, StatusCode::HostTimeout as u16, "{}", r.message);
        assert!(r.message.contains("did not answer"), "message names the cause: {}", r.message);
        assert!(waited >= TIMEOUT && waited < TIMEOUT * 4, "timed out after {waited:?}");
        // Regression guard: the worker sleeps in poll (woken by the front end's eventfd) while
        // it waits for a host answer, rather than polling the ring without a timeout.
        assert!(
            worker_cpu_ms * 4 < waited.as_millis() as u64,
            "server thread used {worker_cpu_ms} ms of CPU in {waited:?} waiting for the host"
        );
        // The stuck host does not hurt offloaded requests, on this or another connection.
        let mut c2 = Client::connect(&addr, d.client_config()).unwrap();
        let t0 = std::time::Instant::now();
        let r = c2.one(&Request::Offload { msg: &get_page(7, 8) }).unwrap();
        assert_eq!(r.value, u64::from(SERVED_BY_OFFLOAD));
        check(7, 8, &r.data);
        assert!(t0.elapsed() < TIMEOUT, "offloaded request waited {:?}", t0.elapsed());
        // A second forwarded request reuses the slot; the host wakes up meanwhile and answers
        // both: the late answer (page 5) must be dropped, this one gets page 9.
        let r = std::thread::scope(|s2| {
            let waker = s2.spawn(|| {
                std::thread::sleep(TIMEOUT / 4);
                stuck.store(false, Ordering::Release);
            });
            let r = c.one(&Request::Offload { msg: &get_page(9, 2000) }).unwrap();
            waker.join().unwrap();
            r
        });
        assert_eq!(r.value, u64::from(SERVED_BY_HOST));
        check(9, 2000, &r.data);
        let stats = d.server.stats();
        assert_eq!(stats.forward_timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(stats.late_answers.load(Ordering::Relaxed), 1);
        stop.store(true, Ordering::Release);
        let st = host.join().unwrap();
        assert_eq!(st.answered, 2, "the host answered both forwarded requests");
    });
    d.stop().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The answers routed to each server thread so far.
fn routed(d: &Deployment) -> Vec<u64> {
    d.front.link_stats().routed.iter().map(|n| n.load(Ordering::Relaxed)).collect()
}

/// Regression test for the page server refusing more than one server thread (forwarded
/// answers had one consumer and were not routed to the thread that forwarded the request):
/// with 2 and 4 threads, connections on different threads forward and offload GetPages
/// concurrently under replay; every answer is the page its request asked for, at least as new
/// as asked, and the host's answers reach more than one thread.
#[test]
fn forwarded_answers_reach_the_thread_that_forwarded_them_with_2_and_4_threads() {
    let _one = one_at_a_time();
    for threads in [2, 4] {
        let mut opts = DeployOptions::new(4096, true);
        opts.threads = threads;
        let ((), host) = run_opts(&format!("threads{threads}"), 2000, &opts, |d, addr, lsns, _| {
            // Connections until two threads are seen forwarding (a connection's thread is the
            // one whose routed count its forwarded request moved).
            let mut conns = Vec::new();
            let mut seen = std::collections::BTreeSet::new();
            for i in 1..=64 {
                let mut c = Client::connect(addr, d.client_config()).unwrap();
                let before = routed(d);
                // Newer than any version so far (each ask replays the page up to it).
                let newer = lsns[1].load(Ordering::Acquire) + 1_000_000 * i;
                let r = c.one(&Request::Offload { msg: &get_page(1, newer) }).unwrap();
                assert_eq!(r.value, u64::from(SERVED_BY_HOST), "{}", r.message);
                check(1, newer, &r.data);
                let after = routed(d);
                let t = (0..threads).find(|&t| after[t] > before[t]).expect("answer routed");
                seen.insert(t);
                conns.push(c);
                if seen.len() >= 2 && conns.len() >= threads {
                    break;
                }
            }
            assert!(seen.len() >= 2, "{threads} threads: connections only reached {seen:?}");
            std::thread::scope(|s| {
                for (k, mut c) in conns.into_iter().enumerate() {
                    s.spawn(move || {
                        let mut rng = rand::rngs::StdRng::seed_from_u64(100 + k as u64);
                        for _ in 0..40 {
                            let asked: Vec<(u64, u64)> = (0..16)
                                .map(|_| {
                                    let p = rng.gen_range(0..PAGES);
                                    let l = lsns[p as usize].load(Ordering::Acquire);
                                    (p, if rng.gen_bool(0.3) { l + 1 } else { l })
                                })
                                .collect();
                            let msgs: Vec<_> = asked.iter().map(|&(p, l)| get_page(p, l)).collect();
                            let reqs: Vec<Request<'_>> =
                                msgs.iter().map(|m| Request::Offload { msg: m }).collect();
                            for (r, &(p, l)) in c.call(&reqs).unwrap().iter().zip(&asked) {
                                assert_eq!(r.status, 0, "page {p}: {}", r.message);
                                check(p, l, &r.data);
                            }
                        }
                    });
                }
            });
            let per_thread = routed(d);
            let busy = per_thread.iter().filter(|&&n| n > 0).count();
            assert!(busy >= 2, "{threads} threads: answers routed {per_thread:?}");
            assert_eq!(d.front.link_stats().dropped_answers.load(Ordering::Relaxed), 0);
            assert_eq!(d.server.stats().late_answers.load(Ordering::Relaxed), 0);
        });
        assert_eq!(host.bad_requests, 0);
    }
}

/// Sends HELLO, then one frame of `reqs`, on a fresh connection that never authenticates;
/// returns each reply's status (`None`: the server closed the connection before answering).
fn unauthenticated(addr: &str, reqs: &[storefn_wire::Request<'_>]) -> Vec<Option<u16>> {
    use std::io::Write;
    use storefn_wire::read_response_frame;
    use storefn_wire::{put_request, FrameBuf, Request, KIND_REQUEST};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut f = FrameBuf::default();
    f.begin(KIND_REQUEST);
    put_request(&mut f, 1, &Request::Hello { tenant: b"intruder" });
    for (i, r) in reqs.iter().enumerate() {
        put_request(&mut f, 2 + i as u64, r);
    }
    let _ = s.write_all(f.finish());
    let mut status = vec![None; reqs.len()];
    let mut rx = Vec::new();
    'read: for _ in 0..=reqs.len() {
        let Ok(msgs) = read_response_frame(&mut s, 0, &mut rx) else { break };
        for m in msgs {
            let Ok(m) = m else { break 'read };
            if let Some(slot) = m.req_id.checked_sub(2).and_then(|i| status.get_mut(i as usize)) {
                *slot = Some(m.status);
            }
        }
        if status.iter().all(Option::is_some) {
            break;
        }
    }
    status
}

/// Regression test for the page server serving anyone: without authentication a client read
/// and wrote the served files and loaded programs, and a raw WRITE over a page was then served
/// to GetPage clients by the offload path with the attacker's bytes. Now a client that does not
/// authenticate is refused all of it and GetPage serves the host's page; under
/// `--insecure-no-auth` the same attack still lands (shown here, so the check can fail).
#[test]
fn an_unauthenticated_client_cannot_read_write_load_programs_or_inject_pages() {
    let _one = one_at_a_time();
    use storefn_dds::PageServerAuth;
    use storefn_wire::Request;
    let elf = storefn_progs::must("bench_empty");
    for insecure in [false, true] {
        let mut opts = DeployOptions::new(4096, true);
        if insecure {
            opts.auth = PageServerAuth::InsecureNoAuth;
        }
        run_opts(&format!("auth{insecure}"), 0, &opts, |d, addr, lsns, _| {
            let lsn = lsns[5].load(Ordering::Acquire);
            // A page image that passes for page 5 at its LSN, with the attacker's body.
            let mut evil = vec![0xEE; PAGE_BYTES];
            evil[..8].copy_from_slice(&lsn.to_le_bytes());
            evil[8..16].copy_from_slice(&5u64.to_le_bytes());
            let at = 5 * PAGE_BYTES as u64;
            let msg = get_page(5, lsn);
            let reqs = [
                Request::Read { path: b"pages", offset: at, len: 4096 },
                Request::Write { path: b"pages", offset: at, data: &evil },
                Request::LoadProg { prog_type: 0, section: b"", elf },
                Request::Offload { msg: &msg },
            ];
            let got = unauthenticated(addr, &reqs);
            let mut c = Client::connect(addr, d.client_config()).unwrap();
            let r = c.one(&Request::Offload { msg: &msg }).unwrap();
            assert_eq!(r.value, u64::from(SERVED_BY_OFFLOAD));
            if insecure {
                assert!(got.iter().all(|s| *s == Some(0)), "insecure: {got:?}");
                assert_eq!(r.data, evil, "insecure: the injected page is served");
            } else {
                assert!(
                    got.iter().all(|s| *s != Some(0)),
                    "an unauthenticated request ran: {got:?}"
                );
                check(5, lsn, &r.data);
            }
        });
    }
}

/// Regression test for a dead host going unnoticed and a new host unable to attach: each
/// forwarded GetPage waited the full forward timeout (5 s) for a host that had died, and a new
/// host could not attach without restarting the server. Now a request waiting for the dead
/// host fails once its heartbeat has been still for a second, later ones fail at once,
/// offloaded ones are still served, and a new host attaches: it serves forwarded GetPages,
/// and no page the previous host cached is served from the new host's file.
#[test]
fn a_dead_host_fails_forwarded_requests_fast_and_a_new_host_attaches() {
    let _one = one_at_a_time();
    use storefn_dds::limits::{DEFAULT_CHANNEL_RING_BYTES, HOST_HEARTBEAT_TIMEOUT};
    let dir = temp_dir("reattach");
    let elf = storefn_progs::must("dds/pageserver");
    let mut opts = DeployOptions::new(4096, true);
    opts.metrics = Some("127.0.0.1:0".into());
    let d = Deployment::start_opts("127.0.0.1:0", &dir, elf, &opts).unwrap();
    // The operator's view of the host (the metrics endpoint), as it changes below.
    let maddr = d.server.metrics_addr().unwrap();
    let sample = |name: &str| scrape_value(maddr, name);
    let addr = d.server.local_addr().to_string();
    let mut c = Client::connect(&addr, d.client_config()).unwrap();
    let forwarded = |c: &mut Client, page: u64, lsn: u64| {
        let t0 = std::time::Instant::now();
        let r = c.call(&[Request::Offload { msg: &get_page(page, lsn) }]).unwrap().remove(0);
        (r, t0.elapsed())
    };
    // The first host answers, replays page 1 far ahead (cached at that LSN), then dies.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let ends = host_ends(&d);
        let host = s.spawn(|| {
            let mut h = page_host(ends);
            storefn_dds::host_loop(&mut h, &stop, 0, 1).unwrap();
        });
        let _guard = StopOnDrop(&stop);
        let (r, _) = forwarded(&mut c, 1, 1_000_000);
        assert_eq!((r.status, r.value), (0, u64::from(SERVED_BY_HOST)), "{}", r.message);
        check(1, 1_000_000, &r.data);
        assert_eq!(sample("storefn_dds_host_alive"), 1.0);
        assert!(sample(r#"storefn_events_total{event="dds_forwarded"}"#) >= 1.0);
        stop.store(true, Ordering::Release);
        host.join().unwrap();
    });
    let (r, waited) = forwarded(&mut c, 2, 5_000_000);
    assert_ne!(r.status, 0, "answered by a dead host?");
    assert!(r.message.contains("gone"), "names the cause: {}", r.message);
    assert!(waited < HOST_HEARTBEAT_TIMEOUT * 3, "failed after {waited:?}");
    let (r, waited) = forwarded(&mut c, 3, 5_000_000);
    assert!(r.status != 0 && r.message.contains("gone"), "{}", r.message);
    assert!(
        waited < HOST_HEARTBEAT_TIMEOUT / 2,
        "a request to a known-dead host waited {waited:?}"
    );
    let r = c.one(&Request::Offload { msg: &get_page(7, 8) }).unwrap();
    assert_eq!(r.value, u64::from(SERVED_BY_OFFLOAD), "offloaded GetPages are still served");
    assert_eq!(sample("storefn_dds_host_alive"), 0.0, "the dead host shows as dead");
    // A new host attaches to the running server with fresh channels.
    let create = || HostChannel::create(DEFAULT_CHANNEL_RING_BYTES).unwrap();
    let (files, fwd) = (create(), create());
    let dup =
        |ch: &HostChannel| HostChannel::attach(ch.fd().try_clone_to_owned().unwrap()).unwrap();
    let ends = (dup(&files), dup(&fwd));
    d.attach_host(files, fwd).unwrap();
    let (stop, ready) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let host = s.spawn(|| {
            let mut h = page_host(ends);
            ready.store(true, Ordering::Release);
            storefn_dds::host_loop(&mut h, &stop, 0, 2).unwrap();
        });
        let _guard = StopOnDrop(&stop);
        while !ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // Its pages start over at LSN p + 1: page 1 cached at 1,000,000 by the first host must
        // not be read from the new file (it would be an older page than asked).
        let (r, _) = forwarded(&mut c, 1, 1_000_000);
        assert_eq!((r.status, r.value), (0, u64::from(SERVED_BY_HOST)), "{}", r.message);
        check(1, 1_000_000, &r.data);
        let (r, _) = forwarded(&mut c, 4, 2_000_000);
        assert_eq!((r.status, r.value), (0, u64::from(SERVED_BY_HOST)), "{}", r.message);
        check(4, 2_000_000, &r.data);
        assert_eq!(sample("storefn_dds_host_alive"), 1.0, "the new host shows as alive");
        // A third host is refused while this one is alive.
        let e = d.attach_host(create(), create()).unwrap_err();
        assert!(e.to_string().contains("alive"), "{e}");
        stop.store(true, Ordering::Release);
        host.join().unwrap();
    });
    assert_eq!(d.front.link_stats().reattached.load(Ordering::Relaxed), 1);
    d.stop().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression test for an OFFLOAD message of another length shifting its batch: the messages
/// were concatenated and `pred`/`func` read request `i` at `8 + 16 i`, so after a 24-byte
/// message the next GetPage was read from the wrong bytes and answered, status OK, with
/// another page. Now each message is found through the batch's index of offsets and lengths.
#[test]
fn a_message_of_another_length_never_shifts_the_get_pages_after_it() {
    let _one = one_at_a_time();
    let ((), host) = run("odd", 0, |d, addr, lsns, _| {
        let lsn = |p: usize| lsns[p].load(Ordering::Acquire);
        let mut c = Client::connect(addr, d.client_config()).unwrap();
        // 24 bytes: a GetPage of page 9, then page 11's id, which a reader off by 8 bytes
        // takes for the next request's page.
        let mut crafted = get_page(9, lsn(9)).to_vec();
        crafted.extend_from_slice(&11u64.to_le_bytes());
        let reqs = [
            Request::Offload { msg: &get_page(2, lsn(2)) },
            Request::Offload { msg: &[0x5A; 17] },
            Request::Offload { msg: &get_page(3, lsn(3)) },
            Request::Offload { msg: &crafted },
            Request::Offload { msg: &get_page(4, lsn(4)) },
            Request::Offload { msg: &get_page(5, lsn(5)) },
        ];
        let r = c.call(&reqs).unwrap();
        for (i, page) in [(0, 2), (2, 3), (4, 4), (5, 5)] {
            assert_eq!(r[i].status, 0, "request {i}: {}", r[i].message);
            assert_eq!(r[i].value, u64::from(SERVED_BY_OFFLOAD), "request {i}");
            check(page, lsn(page as usize), &r[i].data);
        }
        for i in [1, 3] {
            assert_eq!(
                (r[i].value, r[i].data.len()),
                (u64::from(SERVED_BY_HOST), 0),
                "request {i}"
            );
        }
    });
    assert_eq!(host.bad_requests, 2);
}

/// Regression test for the host's LSN counter wrapping: a GetPage asking for LSN u64::MAX made
/// the host replay the page to that LSN, and its next update's LSN wrapped (a panic in a debug
/// build, LSN 0 in a release build: pages going back in time). Now an LSN past `MAX_LSN` is
/// refused (answered empty) and the counter is untouched.
#[test]
fn an_lsn_past_the_bound_is_refused_and_the_counter_never_wraps() {
    let _one = one_at_a_time();
    use storefn_dds::limits::MAX_LSN;
    let ((), host) = run("lsn", 0, |d, addr, lsns, _| {
        let mut c = Client::connect(addr, d.client_config()).unwrap();
        for asked in [u64::MAX, MAX_LSN + 1] {
            let r = c.one(&Request::Offload { msg: &get_page(3, asked) }).unwrap();
            assert_eq!((r.value, r.data.len()), (u64::from(SERVED_BY_HOST), 0), "LSN {asked}");
        }
        // Replays still move forward from where they were.
        let before = lsns[4].load(Ordering::Acquire);
        let r = c.one(&Request::Offload { msg: &get_page(4, before + 1) }).unwrap();
        let got = check(4, before + 1, &r.data);
        assert!(got < MAX_LSN, "replayed to LSN {got}");
        let r = c.one(&Request::Offload { msg: &get_page(6, got + 1) }).unwrap();
        assert!(check(6, got + 1, &r.data) > got);
    });
    assert_eq!(host.bad_requests, 2);
}

/// The value of the sample line `series` (name and labels exactly as written) in a scrape of
/// the metrics endpoint at `addr` (loopback).
fn scrape_value(addr: std::net::SocketAddr, series: &str) -> f64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let line = body
        .lines()
        .find(|l| l.strip_prefix(series).is_some_and(|v| v.starts_with(' ')))
        .unwrap_or_else(|| panic!("no {series} in {body}"));
    line[series.len()..].trim().parse().unwrap()
}
