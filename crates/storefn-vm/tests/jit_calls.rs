//! JIT: BPF-to-BPF calls (frames, callee-saved registers, depth limit, the budget across
//! frames), helper calls, and arbitrary verified streams without panicking.

mod jit_support;

use jit_support::*;
use proptest::prelude::*;
use storefn_vm::insn::*;
use storefn_vm::limits::{MAX_CALL_DEPTH, STACK_FRAME_BYTES};
use storefn_vm::JitProgram;
use storefn_vm::{Place, VerifiedProgram, VmError};

fn run_with(insns: Vec<Insn>, sb: &mut Sandbox) -> Result<u64, VmError> {
    let jit = JitProgram::compile(&verified(insns)).expect("compiles");
    let mut env = sb.env(DEFAULT_INSN_BUDGET);
    run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top())
}

#[test]
fn local_call_gets_args_own_frame_and_preserves_r6_to_r9() {
    let mut sb = Sandbox::new();
    let p = vec![
        mov64(6, 60),
        mov64(9, 90),
        st(BPF_DW, 10, -8, 111), // caller's frame slot
        mov64(1, 5),
        mov64(2, 7),
        call_local(5), // 5: -> 11
        ldx(BPF_DW, 3, 10, -8),
        alu64_reg(BPF_ADD, 0, 3), // r0 = callee + 111
        alu64_reg(BPF_ADD, 0, 6),
        alu64_reg(BPF_ADD, 0, 9),
        exit(),
        // 11: callee: r0 = r1 * r2 + its own frame pointer offset check; clobbers r6, r9
        mov64_reg(0, 1),
        alu64_reg(BPF_MUL, 0, 2),
        mov64(6, 1000),
        mov64(9, 1000),
        st(BPF_DW, 10, -8, 222), // callee's own slot: must not overwrite the caller's
        exit(),
    ];
    assert_eq!(run_with(p, &mut sb).unwrap(), 35 + 111 + 60 + 90);
    let top_words = sb.stack.len();
    assert_eq!(sb.stack[top_words - 1], 111, "entry frame slot");
    assert_eq!(sb.stack[top_words - 1 - STACK_FRAME_BYTES / 8], 222, "callee frame slot");
}

#[test]
fn callee_r10_is_one_frame_lower() {
    let mut sb = Sandbox::new();
    let p = vec![call_local(1), exit(), mov64_reg(0, 10), exit()];
    let top = sb.stack_top();
    assert_eq!(run_with(p, &mut sb).unwrap(), top - STACK_FRAME_BYTES as u64);
}

#[test]
fn recursion_never_reaches_the_jit() {
    // f: call f. The JIT keeps a run-time depth limit, but only verified programs compile and
    // the verifier refuses recursion.
    let p = vec![call_local(1), exit(), call_local(-1), exit()];
    let e = VerifiedProgram::new(program(p)).unwrap_err();
    assert_eq!(e.to_string(), "insn #2: recursive call to the function at #2");
}

#[test]
fn depth_limit_allows_exactly_max_frames() {
    // A chain of MAX_CALL_DEPTH - 1 nested calls is fine: f_k calls f_{k+1}.
    let mut p = Vec::new();
    for _ in 0..MAX_CALL_DEPTH - 1 {
        p.push(call_local(1));
        p.push(exit());
    }
    p.push(mov64(0, 42));
    p.push(exit());
    assert_eq!(run_with(p, &mut Sandbox::new()).unwrap(), 42);
}

#[test]
fn fault_in_callee_aborts_the_whole_invocation() {
    let p = vec![call_local(2), mov64(0, 1), exit(), mov64(1, 0), ldx(BPF_DW, 0, 1, 0), exit()];
    let e = run_with(p, &mut Sandbox::new()).unwrap_err();
    assert_eq!(e, VmError::BadRead { insn: 4, at: Place::Low(0), len: 8 });
}

#[test]
fn budget_is_shared_across_frames() {
    // Charges: main 4 at its entry; the callee 1 at its entry (4) and 3 at its loop header (5:
    // 5, 6 and the exit), so a call costs 1 + 10 * 3 = 31 and the run 4 + 31 + 31 = 66. With
    // 40 the second call's loop stops in its 2nd iteration (4 + 31 + 1 + 3 = 39, 1 left).
    let callee_loop = [mov64(1, 10), alu64_imm(BPF_SUB, 1, 1), jmp_imm(BPF_JNE, 1, 0, -2), exit()];
    let mut p = vec![call_local(3), call_local(2), mov64(0, 3), exit()];
    p.extend(callee_loop);
    let jit = JitProgram::compile(&verified(p)).unwrap();
    let mut sb = Sandbox::new();
    let mut env = sb.env(40);
    let e = run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 5, budget: 40 });
    let mut env = sb.env(66);
    assert_eq!(run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top()), Ok(3));
    assert_eq!(env.insns_left, 0);
}

#[test]
fn helper_error_names_helper_and_insn() {
    // trace_printk("hi") with no host state (these sandboxes have none) fails in the helper.
    let p = vec![
        st(BPF_W, 10, -8, 0x6968),
        mov64_reg(1, 10),
        alu64_imm(BPF_ADD, 1, -8),
        mov64(2, 3),
        call_helper(6),
        exit(),
    ];
    match run_with(p, &mut Sandbox::new()).unwrap_err() {
        VmError::Helper { insn, helper, .. } => assert_eq!((insn, helper), (4, 6)),
        e => panic!("{e:?}"),
    }
}

#[test]
fn env_fault_is_reset_between_runs() {
    let prog = verified(vec![mov64(1, 0), ldx(BPF_B, 0, 1, 0), exit()]);
    let ok = verified(vec![mov64(0, 3), exit()]);
    let (bad, ok) = (JitProgram::compile(&prog).unwrap(), JitProgram::compile(&ok).unwrap());
    let mut sb = Sandbox::new();
    let mut env = sb.env(10);
    assert!(run_jit(&bad, &mut env, sb.ctx_addr(), sb.stack_top()).is_err());
    assert_eq!(run_jit(&ok, &mut env, sb.ctx_addr(), sb.stack_top()), Ok(3));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Arbitrary instruction streams the verifier accepts compile; running one in a sandbox
    /// returns (a value or a fault) without harming the host.
    #[test]
    fn arbitrary_streams_never_panic(raw in proptest::collection::vec(any::<[u8; 8]>(), 1..40)) {
        let insns: Vec<Insn> = raw.iter().map(Insn::decode).collect();
        if let Ok(prog) = VerifiedProgram::new(program(insns)) {
            let jit = JitProgram::compile(&prog).expect("a verified program compiles");
            let mut sb = Sandbox::new();
            let mut env = sb.env(1000);
            let _ = run_jit(&jit, &mut env, sb.ctx_addr(), sb.stack_top());
        }
    }
}
