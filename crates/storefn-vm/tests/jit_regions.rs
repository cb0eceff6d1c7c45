//! JIT region checks across invocations: the per-site region hints persist between runs, so
//! they must be re-validated against each run's RunEnv and never grant a region that is gone.

mod jit_support;

use jit_support::*;
use storefn_vm::insn::*;
use storefn_vm::JitProgram;
use storefn_vm::VmError;
use storefn_vm::{Region, RegionSet};

fn read_data_prog(sb: &Sandbox) -> JitProgram {
    let mut p = Vec::from(lddw(1, sb.data_addr()));
    p.push(ldx(BPF_DW, 0, 1, 8));
    p.push(st(BPF_DW, 1, 16, 5));
    p.push(exit());
    JitProgram::compile(&verified(p)).unwrap()
}

#[test]
fn hint_revalidated_when_regions_change() {
    let mut sb = Sandbox::new();
    sb.data[1] = 77;
    let jit = read_data_prog(&sb);
    let data = Region { start: sb.data_addr(), end: sb.data_addr() + DATA_BYTES as u64 };
    let mut env = sb.env(100);
    assert_eq!(run_jit(&jit, &mut env, 0, sb.stack_top()), Ok(77));
    // Same program, data no longer readable: the hint from the last run must not let it through.
    env.read = RegionSet::default();
    env.read.push(Region { start: sb.ctx_addr(), end: sb.ctx_addr() + 8 });
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 2, at: env.read.place(data.start + 8), len: 8 });
    // Readable again, at a different index.
    env.read.push(data);
    assert_eq!(run_jit(&jit, &mut env, 0, sb.stack_top()), Ok(77));
    // Not writable any more.
    env.write = RegionSet::default();
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BadWrite { insn: 3, at: env.read.place(data.start + 16), len: 8 });
}

#[test]
fn stale_region_past_len_grants_nothing() {
    let sb = Sandbox::new();
    let jit = read_data_prog(&sb);
    let mut env = RunEnvBuilder::only_data(&sb);
    assert_eq!(run_jit(&jit, &mut env, 0, sb.stack_top()), Ok(0));
    // Drop the data region by shrinking len: its entry is still in the array.
    env.read.len -= 1;
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert!(matches!(e, VmError::BadRead { insn: 2, .. }), "{e:?}");
}

#[test]
fn region_shrunk_between_runs() {
    // The window/hint covered 256 bytes last run; now the region is 8 bytes: offset 8 faults.
    let mut sb = Sandbox::new();
    let jit = read_data_prog(&sb);
    let mut env = sb.env(100);
    assert!(run_jit(&jit, &mut env, 0, sb.stack_top()).is_ok());
    env.read.regions[1].end = sb.data_addr() + 8;
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 2, at: env.read.place(sb.data_addr() + 8), len: 8 });
}

#[test]
fn region_start_moved_past_the_access() {
    // The hinted slot now starts 64 bytes in: offset 8 is below it (the shim tests the start).
    let mut sb = Sandbox::new();
    let jit = read_data_prog(&sb);
    let mut env = sb.env(100);
    assert!(run_jit(&jit, &mut env, 0, sb.stack_top()).is_ok());
    env.read.regions[1].start = sb.data_addr() + 64;
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 2, at: env.read.place(sb.data_addr() + 8), len: 8 });
}

#[test]
fn inverted_region_is_empty() {
    let mut sb = Sandbox::new();
    let jit = read_data_prog(&sb);
    let mut env = sb.env(100);
    env.read.regions[1] = Region { start: sb.data_addr() + 64, end: sb.data_addr() };
    env.read.regions[0] = Region { start: u64::MAX - 4, end: 16 };
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert!(matches!(e, VmError::BadRead { insn: 2, .. }), "{e:?}");
}

#[test]
fn hinted_region_whose_end_is_below_the_access_length_grants_nothing() {
    // The site's hint points at slot 1; the slot now holds an inverted region whose end (4) is
    // below the access length, so `end - len` wraps: the fast path must test `len <= end`.
    let mut sb = Sandbox::new();
    let jit = read_data_prog(&sb);
    let mut env = sb.env(100);
    assert!(run_jit(&jit, &mut env, 0, sb.stack_top()).is_ok());
    env.read.regions[1] = Region { start: sb.data_addr(), end: 4 };
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 2, at: env.read.place(sb.data_addr() + 8), len: 8 });
}

/// A loop whose two loads take turns between the data region and the context (each load in a
/// loop has a read window of its own in the JIT): after a run that warmed both windows, a run
/// without the data region faults at the data load on its first pass, not with the window of
/// the last run.
#[test]
fn loads_taking_turns_in_a_loop_are_checked_against_each_run() {
    let mut sb = Sandbox::new();
    sb.data[3] = 5;
    let mut p = Vec::from(lddw(1, sb.data_addr()));
    p.extend(lddw(2, sb.ctx_addr()));
    p.extend([
        mov64(0, 0),
        mov64(3, 4),
        // loop: r0 += data[3] + ctx[1]; r3 -= 1; if r3 != 0 goto loop
        ldx(BPF_DW, 4, 1, 24),
        alu64_reg(BPF_ADD, 0, 4),
        ldx(BPF_DW, 4, 2, 8),
        alu64_reg(BPF_ADD, 0, 4),
        alu64_imm(BPF_SUB, 3, 1),
        jmp_imm(BPF_JNE, 3, 0, -6),
        exit(),
    ]);
    let jit = JitProgram::compile(&verified(p)).unwrap();
    let mut env = sb.env(1000);
    assert_eq!(run_jit(&jit, &mut env, 0, sb.stack_top()), Ok(4 * (5 + sb.ctx[1])));
    let data = env.read.regions[1];
    assert_eq!(data.start, sb.data_addr(), "the sandbox's data region is read slot 1");
    env.read.regions[1] = Region::EMPTY;
    let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 6, at: env.read.place(sb.data_addr() + 24), len: 8 });
    env.read.regions[1] = data;
    assert_eq!(run_jit(&jit, &mut env, 0, sb.stack_top()), Ok(4 * (5 + sb.ctx[1])));
}

#[test]
fn access_ending_exactly_at_region_end() {
    let mut sb = Sandbox::new();
    let last = sb.data_addr() + DATA_BYTES as u64;
    for (len_op, n) in [(BPF_B, 1u64), (BPF_H, 2), (BPF_W, 4), (BPF_DW, 8)] {
        let mut p = Vec::from(lddw(1, last - n));
        p.push(ldx(len_op, 0, 1, 0));
        p.push(ldx(len_op, 0, 1, 1)); // one byte further: out
        p.push(exit());
        let jit = JitProgram::compile(&verified(p)).unwrap();
        let mut env = sb.env(100);
        let e = run_jit(&jit, &mut env, 0, sb.stack_top()).unwrap_err();
        assert_eq!(e, VmError::BadRead { insn: 3, at: env.read.place(last - n + 1), len: n });
    }
}

/// Builds RunEnvs with unusual region layouts.
struct RunEnvBuilder;

impl RunEnvBuilder {
    /// ctx, stack, then data last in the read set.
    fn only_data(sb: &Sandbox) -> storefn_vm::RunEnv {
        let mut sb2 = sb.clone();
        let mut env = sb2.env(10);
        let data = Region { start: sb.data_addr(), end: sb.data_addr() + DATA_BYTES as u64 };
        env.read = RegionSet::default();
        env.read.push(Region { start: sb.ctx_addr(), end: sb.ctx_addr() + 8 });
        env.read.push(data);
        env.write = RegionSet::default();
        env.write.push(data);
        env
    }
}
