//! λ requests on a real storefn-server on loopback: the same function object runs locally
//! (io_uring on the file), on the server (LOAD_PROG + LAMBDA frame) and on the client over READ
//! frames, and every workload returns the same bytes on all three and as its native baseline.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use storefn_io::IoMode;
use storefn_lambda::bench::ensure_data;
use storefn_lambda::limits::MAX_REMOTE_RANGE_BYTES;
use storefn_lambda::{
    DispatchConfig, Dispatcher, LambdaError, LambdaProg, LocalFile, LocalSide, Profiling,
    RemoteReadSide, RemoteSide, ServerTransport, Side, SideKind, Workload,
};
use storefn_server::{Server, ServerConfig};
use storefn_vm::Engine;
use storefn_wire::ClientConfig;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn setup(tag: &str) -> (Dir, Server) {
    let d = std::env::temp_dir().join(format!("storefn-lambda-srv-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let server = Server::start("127.0.0.1:0", ServerConfig::new(&d)).unwrap();
    (Dir(d), server)
}

/// `DIR/<workload>.dat` of `size` bytes, its served name and the workload's program.
fn fixture(d: &Dir, w: Workload, size: u64, seed: u64) -> (PathBuf, String, LambdaProg) {
    let path = ensure_data(&d.0, w, size, seed).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    (path, name, LambdaProg::from_elf(w.prog_name(), storefn_progs::must(w.prog_name()), None))
}

fn connect(server: &Server) -> ServerTransport {
    ServerTransport::connect(&server.local_addr().to_string(), ClientConfig::default()).unwrap()
}

/// Every read-path workload (bitmap is the write path), tpch_q6's 40 KiB row groups included.
const REMOTE_WORKLOADS: [Workload; 5] =
    [Workload::Stats64, Workload::Stats32, Workload::Knn, Workload::Grep, Workload::TpchQ6];

#[test]
fn local_server_and_remote_read_return_the_same_bytes() {
    let (d, server) = setup("same");
    for w in REMOTE_WORKLOADS {
        let (path, name, prog) = fixture(&d, w, 2 << 20, 7);
        let mut local = LocalSide {
            file: LocalFile::open(&path, IoMode::Buffered).unwrap(),
            prog: prog.instance(Engine::Jit).unwrap(),
        };
        let mut remote = RemoteSide::new(connect(&server), &name, &prog).unwrap();
        let mut reads =
            RemoteReadSide::new(connect(&server), &name, prog.instance(Engine::Interp).unwrap());
        let raw = std::fs::File::open(&path).unwrap();
        let unit = w.unit_bytes();
        let size = local.file.size_bytes();
        // Multi-block ranges the server stages in several 4 KiB engine reads (offsets not
        // block-aligned for the small units), and one at the LAMBDA frame's limit.
        let mid = (2 * unit).max((14 << 10) / unit * unit);
        let limit = MAX_REMOTE_RANGE_BYTES / unit * unit;
        assert!(mid > 4096 && limit > 4096 && limit + unit <= size, "{w}");
        for i in 0..12u64 {
            let len = if i % 4 == 0 { limit } else { mid };
            let cap = w.out_cap(len as usize);
            let off = (i * 37 % ((size - len) / unit)) * unit;
            let mut input = vec![0u8; len as usize];
            raw.read_exact_at(&mut input, off).unwrap();
            let mut want = vec![0u8; cap];
            let n = w.native(&input, &mut want);
            for side in [&mut local as &mut dyn Side, &mut remote, &mut reads] {
                let mut got = vec![0xa5u8; cap];
                let r = side.run(off, len, &mut got).unwrap();
                assert_eq!(r.out_bytes, n, "{w} {:?} at {off}", side.kind());
                assert_eq!(got[..n], want[..n], "{w} {:?} at {off}", side.kind());
            }
        }
        // A range longer than one LAMBDA frame covers is refused, not split.
        let mut out = vec![0u8; w.out_cap(unit as usize)];
        let e = remote.run(0, 2 * MAX_REMOTE_RANGE_BYTES, &mut out).unwrap_err();
        assert!(matches!(e, LambdaError::RangeTooLarge { max: 1_048_576, .. }), "{e}");
        // READ frames have no such limit: a range of many chunks equals the local run.
        let long = (16 << 10) / unit * unit;
        let (mut a, mut b) =
            (vec![0u8; w.out_cap(long as usize)], vec![0u8; w.out_cap(long as usize)]);
        let ra = local.run(unit, long, &mut a).unwrap();
        let rb = reads.run(unit, long, &mut b).unwrap();
        assert_eq!((ra.out_bytes, &a[..ra.out_bytes]), (rb.out_bytes, &b[..rb.out_bytes]), "{w}");
    }
    server.stop();
    server.join().unwrap();
}

#[test]
fn dispatcher_mixes_local_and_server_with_equal_results() {
    let (d, server) = setup("mixed");
    let w = Workload::Knn;
    let (path, name, prog) = fixture(&d, w, 512 << 10, 9);
    let mut local = LocalSide {
        file: LocalFile::open(&path, IoMode::Buffered).unwrap(),
        prog: prog.instance(Engine::Jit).unwrap(),
    };
    let mut remote = RemoteSide::new(connect(&server), &name, &prog).unwrap();
    let cfg = DispatchConfig {
        profiling: Profiling::Fixed { window: 20, probes: 5 },
        ..DispatchConfig::default()
    };
    let mut disp = Dispatcher::new(cfg);
    let raw = std::fs::File::open(&path).unwrap();
    let len = 2 * w.unit_bytes();
    let (mut on_local, mut on_server) = (0, 0);
    for i in 0..60u64 {
        let off = (i * 11 % 200) * w.unit_bytes();
        let mut got = vec![0u8; w.out_cap(len as usize)];
        let (side, run) = disp.run(&mut local, &mut remote, off, len, &mut got).unwrap();
        let mut input = vec![0u8; len as usize];
        raw.read_exact_at(&mut input, off).unwrap();
        let mut want = vec![0u8; got.len()];
        let n = w.native(&input, &mut want);
        assert_eq!(got[..run.out_bytes], want[..n], "{side:?} at {off}");
        match side {
            SideKind::Local => on_local += 1,
            SideKind::Server => on_server += 1,
        }
    }
    assert!(on_local >= 5 && on_server >= 5, "local {on_local} server {on_server}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn server_errors_are_typed_and_name_the_file() {
    let (d, server) = setup("errors");
    let w = Workload::Stats64;
    let (_, name, prog) = fixture(&d, w, 64 << 10, 1);
    let mut remote = RemoteSide::new(connect(&server), &name, &prog).unwrap();
    let mut out = vec![0u8; w.out_cap(4096)];
    // Past the end of the file: the server's OUT_OF_RANGE, carried as a typed client error.
    let e = remote.run(64 << 10, 4096, &mut out).unwrap_err();
    let LambdaError::Remote { file, source, .. } = &e else { panic!("{e}") };
    assert_eq!(file, &name);
    let ce = source.downcast_ref::<storefn_wire::ClientError>().expect("typed cause");
    assert!(ce.to_string().contains("outside the file"), "{ce}");
    // A missing file.
    let mut missing = RemoteSide::new(connect(&server), "nope.dat", &prog).unwrap();
    let e = missing.run(0, 8, &mut out).unwrap_err();
    assert!(matches!(e, LambdaError::Remote { .. }), "{e}");
    // Bytes the server cannot load as a λ program are refused with its status.
    let bad = LambdaProg::from_elf("junk", b"\x7fELF not really", None);
    let Err(e) = RemoteSide::new(connect(&server), &name, &bad) else { panic!("junk loaded") };
    assert!(e.to_string().contains("PROG_REJECTED"), "{e}");
    server.stop();
    server.join().unwrap();
}

#[test]
fn the_client_cache_serves_repeated_ranges_without_the_network() {
    let (d, server) = setup("cache");
    let w = Workload::Stats64;
    let (_, name, prog) = fixture(&d, w, 64 << 10, 5);
    let mut reads =
        RemoteReadSide::new(connect(&server), &name, prog.instance(Engine::Jit).unwrap());
    let mut out = vec![0u8; w.out_cap(0)];
    assert_eq!(reads.uncached_fraction(100, 8000), Some(1.0));
    let first = reads.run(100, 8000, &mut out).unwrap();
    let trips = reads.transport.client_mut().round_trips;
    // Blocks 0 and 1 are cached now; block 2 is not.
    assert_eq!(reads.uncached_fraction(0, 8192), Some(0.0));
    assert_eq!(reads.uncached_fraction(0, 3 * 4096), Some(1.0 / 3.0));
    let again = reads.run(100, 8000, &mut out).unwrap();
    assert_eq!(reads.transport.client_mut().round_trips, trips, "cached: no frame sent");
    assert_eq!(first.out_bytes, again.out_bytes);
    reads.drop_cached(4096, 1);
    assert_eq!(reads.uncached_fraction(0, 8192), Some(0.5));
    reads.run(100, 8000, &mut out).unwrap();
    assert_eq!(reads.transport.client_mut().round_trips, trips + 1, "one frame for block 1");
    // Past the end of the remote file.
    let e = reads.run(60 << 10, 8 << 10, &mut out).unwrap_err();
    assert!(matches!(e, LambdaError::OutsideFile { size: 65536, .. }), "{e}");
    server.stop();
    server.join().unwrap();
}
