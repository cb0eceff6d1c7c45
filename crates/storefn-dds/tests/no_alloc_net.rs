//! AIOS over the network: a page server's storage-server threads allocate nothing per
//! offloaded GetPage in steady state (the batch through `pred`/`func`, the io_uring read into
//! the response frame, the frame's send and reuse). Counted process-wide; the client writes
//! pre-encoded frames and reads replies into a fixed buffer, and the host application idles
//! (every GetPage is offloaded), so what is counted is the server's.

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};

use storefn_dds::{get_page, host_loop, Deployment, PageHost, PAGE_BYTES};
use storefn_dds::{ForwardEnd, HostChannel, HostFiles, Side};
use storefn_testkit::CountingAlloc;
use storefn_wire::SERVED_BY_OFFLOAD;
use storefn_wire::{put_request, read_response_frame, FrameBuf, Request, KIND_REQUEST};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const PAGES: u64 = 64;
const PER_FRAME: u32 = 16;

/// Sends `frame` of `n` requests and reads replies into `rx` until all `n` are in; checks each
/// is an offloaded page (no allocation).
fn round_trip(s: &mut TcpStream, frame: &[u8], n: u32, rx: &mut Vec<u8>, offloaded: bool) {
    s.write_all(frame).unwrap();
    let mut got = 0;
    while got < n {
        for m in read_response_frame(s, 0, rx).unwrap() {
            let m = m.unwrap();
            assert_eq!(m.status, 0, "status OK");
            if offloaded {
                assert_eq!(m.payload[0], SERVED_BY_OFFLOAD, "request {} offloaded", m.req_id);
                assert_eq!(m.payload.len(), 8 + PAGE_BYTES);
            }
            got += 1;
        }
    }
}

#[test]
fn offloaded_get_pages_allocate_nothing_on_the_server() {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir =
        std::env::temp_dir().join(format!("storefn-dds-noalloc-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The raw frames below skip AUTH: this test measures allocations, not authentication.
    let mut opts = storefn_dds::DeployOptions::new(4096, true);
    opts.auth = storefn_dds::PageServerAuth::InsecureNoAuth;
    let d =
        Deployment::start_opts("127.0.0.1:0", &dir, storefn_progs::must("dds/pageserver"), &opts)
            .unwrap();
    let attach = |ch: &Option<HostChannel>| {
        HostChannel::attach(ch.as_ref().unwrap().fd().try_clone_to_owned().unwrap()).unwrap()
    };
    let (files, fwd) = (attach(&d.host_files), attach(&d.host_forward));
    let (ready, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|sc| {
        let host = sc.spawn(|| {
            let mut h = PageHost::create(
                HostFiles::new(files),
                ForwardEnd::new(fwd, Side::Host),
                "pages",
                PAGES,
            )
            .unwrap();
            ready.store(true, Ordering::Release);
            host_loop(&mut h, &stop, 0, 1).unwrap();
        });
        while !ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let mut s = TcpStream::connect(d.server.local_addr()).unwrap();
        s.set_nodelay(true).unwrap();
        let mut f = FrameBuf::default();
        let mut rx = vec![0u8; 1 << 20];
        f.begin(KIND_REQUEST);
        put_request(&mut f, 1, &Request::Hello { tenant: b"t" });
        let hello = f.finish().to_vec();
        round_trip(&mut s, &hello, 1, &mut rx, false);
        // Page p is stored at LSN p + 1 and cached on its write: every GetPage is offloaded.
        let msgs: Vec<[u8; 16]> =
            (0..u64::from(PER_FRAME)).map(|i| get_page(i * 3 % PAGES, i * 3 % PAGES + 1)).collect();
        f.begin(KIND_REQUEST);
        for (i, m) in msgs.iter().enumerate() {
            put_request(&mut f, 10 + i as u64, &Request::Offload { msg: m });
        }
        let frame = f.finish().to_vec();
        for _ in 0..200 {
            round_trip(&mut s, &frame, PER_FRAME, &mut rx, true);
        }
        let before = CountingAlloc::process_allocs();
        for _ in 0..500 {
            round_trip(&mut s, &frame, PER_FRAME, &mut rx, true);
        }
        let allocs = CountingAlloc::process_allocs() - before;
        stop.store(true, Ordering::Release);
        host.join().unwrap();
        assert_eq!(allocs, 0, "{allocs} allocations in {} offloaded GetPages", 500 * PER_FRAME);
    });
    d.stop().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
