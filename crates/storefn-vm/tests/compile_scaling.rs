//! Compile- and verify-time scaling (`storefn_vm::harness::shapes`), alone in its own test
//! binary: the ratio it checks would be skewed by other tests running beside it.

use std::time::Duration;

use storefn_vm::harness::shapes::{program, SHAPES};
use storefn_vm::JitProgram;
use storefn_vm::VerifiedProgram;

/// CPU time of the calling thread: unlike wall time, it does not count the time this thread
/// waits while other processes on a loaded machine run, so the ratios below hold there too.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(t.tv_sec.unsigned_abs(), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// The least thread CPU time of `runs` calls of `f`, in microseconds.
fn fastest<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..runs)
        .map(|_| {
            let t = thread_cpu();
            std::hint::black_box(f());
            (thread_cpu() - t).as_secs_f64() * 1e6
        })
        .fold(f64::MAX, f64::min)
}

/// (verify us, compile us) of the `n`-slot program of `shape`.
fn cost(shape: &str, n: usize) -> (f64, f64) {
    let prog = program(shape, n).unwrap();
    assert!(prog.insns.len() >= n - n / 40, "{shape}: {} slots", prog.insns.len());
    let verified = VerifiedProgram::new(prog.clone()).unwrap();
    let v = fastest(5, || VerifiedProgram::new(prog.clone()).unwrap());
    let c = fastest(3, || JitProgram::compile(&verified).unwrap());
    (v, c)
}

/// The stated bound, in the only form a test may check on a shared machine (absolute
/// figures live in the bench: `storefn prog bench --shapes 4096`): verifying and compiling
/// 4,096 slots of any shape costs at most ~4x (here 4 x 3 of margin) what 1,024 slots cost,
/// i.e. time grows linearly, not quadratically (16x), with size. Thread CPU time, the fastest
/// of a few runs, so other processes on the machine skew it least. Programs above 1,024 slots
/// compile in Cranelift's quick tier (the JIT's `QUICK_TIER_SLOTS`), so the second check
/// compares two sizes inside that tier (1,088 slots), where a super-linear pass would show
/// undiluted by the change of tier.
#[test]
fn compile_and_verify_time_grow_linearly_with_size() {
    for small in [1024, 1088] {
        for shape in SHAPES {
            let (vs, cs) = cost(shape, small);
            let (vl, cl) = cost(shape, 4096);
            let (v, c) = (vl / vs.max(1.0), cl / cs.max(1.0));
            let k = 4096.0 / small as f64;
            eprintln!("{shape}: verify {vs:.0} -> {vl:.0} us (x{v:.1}), compile {cs:.0} -> {cl:.0} us (x{c:.1})");
            assert!(
                v < 3.0 * k && c < 3.0 * k,
                "{shape}: verify x{v:.1}, compile x{c:.1} for {k:.1}x the slots"
            );
        }
    }
}
