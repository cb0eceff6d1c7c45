//! A local λ request in steady state allocates nothing: the engine's slots, the input buffer
//! and the instance are all built before the first request, and the dispatcher's rings are
//! fixed arrays.

use storefn_io::IoMode;
use storefn_lambda::bench::ensure_data;
use storefn_lambda::{
    DispatchConfig, Dispatcher, LambdaError, LambdaProg, LocalFile, LocalSide, Run, Side, SideKind,
    Workload,
};
use storefn_testkit::CountingAlloc;
use storefn_vm::Engine;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocs() -> u64 {
    CountingAlloc::thread_allocs()
}

#[test]
fn steady_state_requests_do_not_allocate() {
    let dir = std::env::temp_dir().join(format!("storefn-lambda-noalloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = ensure_data(&dir, Workload::Knn, 1 << 20, 5).unwrap();
    let mut file = LocalFile::open(&path, IoMode::Buffered).unwrap();
    let w = Workload::Knn;
    let prog = LambdaProg::from_elf(w.prog_name(), storefn_progs::must(w.prog_name()), None);
    let mut inst = prog.instance(Engine::Jit).unwrap();
    let mut out = vec![0u8; w.out_cap(0)];
    let len = 256 << 10;
    file.pread_lambda(0, len, &mut inst, &mut out).unwrap();
    let mut d = Dispatcher::new(DispatchConfig::default());
    let before = allocs();
    for i in 0..20u64 {
        let off = (i % 3) * 2048;
        let (n, t) = file.pread_lambda(off, len, &mut inst, &mut out).unwrap();
        assert_eq!(n, 136);
        let u = file.uncached_fraction(off, len).unwrap().0;
        let dec = d.decide(len, u);
        let run = Run {
            out_bytes: n,
            wall_ns: t.io_ns + t.compute_ns,
            io_ns: t.io_ns,
            compute_ns: t.compute_ns,
        };
        let server = Run { out_bytes: n, wall_ns: 1_000_000, ..Run::default() };
        d.record(dec, len, u, if dec.side == SideKind::Local { &run } else { &server });
    }
    assert_eq!(allocs() - before, 0, "allocations in 20 steady-state requests");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server that answers at once, 1 ms per request (the local side wins).
struct FarServer;

impl Side for FarServer {
    fn kind(&self) -> SideKind {
        SideKind::Server
    }
    fn run(&mut self, _: u64, _: u64, _: &mut [u8]) -> Result<Run, LambdaError> {
        Ok(Run { out_bytes: 136, wall_ns: 1_000_000, ..Run::default() })
    }
}

#[test]
fn dispatcher_run_in_steady_state_does_not_allocate() {
    let dir = std::env::temp_dir().join(format!("storefn-lambda-noalloc2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let w = Workload::Knn;
    let path = ensure_data(&dir, w, 1 << 20, 5).unwrap();
    let prog = LambdaProg::from_elf(w.prog_name(), storefn_progs::must(w.prog_name()), None);
    let mut local = LocalSide {
        file: LocalFile::open(&path, IoMode::Buffered).unwrap(),
        prog: prog.instance(Engine::Jit).unwrap(),
    };
    let mut out = vec![0u8; w.out_cap(0)];
    let len = 64 << 10;
    let mut d = Dispatcher::new(DispatchConfig::default());
    for _ in 0..5 {
        d.run(&mut local, &mut FarServer, 0, len, &mut out).unwrap();
    }
    let before = allocs();
    for i in 0..50u64 {
        let (_, run) = d.run(&mut local, &mut FarServer, (i % 3) * 2048, len, &mut out).unwrap();
        assert_eq!(run.out_bytes, 136);
    }
    assert_eq!(allocs() - before, 0, "allocations in 50 steady-state Dispatcher::run calls");
    std::fs::remove_dir_all(&dir).unwrap();
}
