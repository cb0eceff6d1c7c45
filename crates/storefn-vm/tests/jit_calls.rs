//! JIT: BPF-to-BPF calls (frames, callee-saved registers, depth limit), helper calls, and
//! rejection of malformed programs without panicking.

mod jit_support;

use jit_support::*;
use proptest::prelude::*;
use storefn_vm::insn::*;
use storefn_vm::jit::{JitError, JitProgram};
use storefn_vm::program::{MAX_CALL_DEPTH, STACK_FRAME_BYTES};
use storefn_vm::VmError;

fn run_with(insns: Vec<Insn>, sb: &mut Sandbox) -> Result<u64, VmError> {
    let prog = program(insns);
    let jit = JitProgram::compile(&prog).expect("compiles");
    let mut env = sb.env(prog.back_jump_budget);
    jit.run(&mut env, sb.ctx_addr(), sb.stack_top())
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
fn recursion_stops_at_the_depth_limit() {
    // f: call f; the 8th nested frame's call is refused.
    let p = vec![call_local(1), exit(), call_local(-1), exit()];
    let e = run_with(p, &mut Sandbox::new()).unwrap_err();
    assert_eq!(e, VmError::CallDepth { insn: 2, max: MAX_CALL_DEPTH });
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
    assert_eq!(e, VmError::BadRead { insn: 4, addr: 0, len: 8 });
}

#[test]
fn budget_is_shared_across_frames() {
    // The callee loops 10 times; the budget of 15 survives one call but not two.
    let callee_loop = [mov64(1, 10), alu64_imm(BPF_SUB, 1, 1), jmp_imm(BPF_JNE, 1, 0, -2), exit()];
    let mut p = vec![call_local(3), call_local(2), mov64(0, 3), exit()];
    p.extend(callee_loop);
    let mut prog = program(p);
    prog.back_jump_budget = 15;
    let jit = JitProgram::compile(&prog).unwrap();
    let mut sb = Sandbox::new();
    let mut env = sb.env(15);
    let e = jit.run(&mut env, sb.ctx_addr(), sb.stack_top()).unwrap_err();
    assert_eq!(e, VmError::BudgetExhausted { insn: 6, budget: 15 });
}

#[test]
fn helper_error_names_helper_and_insn() {
    // Until the helper table is linked (vm-core), every helper reports an error; either way an
    // unknown helper id must surface as a Helper error at the call instruction.
    let p = vec![mov64(1, 1), call_helper(0x7fff_0000), exit()];
    match run_with(p, &mut Sandbox::new()).unwrap_err() {
        VmError::Helper { insn, helper, .. } => assert_eq!((insn, helper), (1, 0x7fff_0000)),
        e => panic!("{e:?}"),
    }
}

#[test]
fn env_fault_is_reset_between_runs() {
    let prog = program(vec![mov64(1, 0), ldx(BPF_B, 0, 1, 0), exit()]);
    let ok = program(vec![mov64(0, 3), exit()]);
    let (bad, ok) = (JitProgram::compile(&prog).unwrap(), JitProgram::compile(&ok).unwrap());
    let mut sb = Sandbox::new();
    let mut env = sb.env(10);
    assert!(bad.run(&mut env, sb.ctx_addr(), sb.stack_top()).is_err());
    assert_eq!(ok.run(&mut env, sb.ctx_addr(), sb.stack_top()), Ok(3));
}

fn compile_err(insns: Vec<Insn>) -> JitError {
    JitProgram::compile(&program(insns)).expect_err("must be rejected")
}

#[test]
fn malformed_programs_are_errors() {
    assert!(matches!(compile_err(vec![]), JitError::Size { len: 0, .. }));
    let e = compile_err(vec![ja(5), exit()]);
    assert_eq!(e.to_string(), "insn #0: jump/call target 6 outside the program");
    let e = compile_err(vec![mov64(0, 0)]);
    assert_eq!(e.to_string(), "insn #0: falls through past the end of its function");
    let e = compile_err(vec![ins(BPF_LD | BPF_IMM | BPF_DW, 0, 0, 0, 0)]);
    assert_eq!(e.to_string(), "insn #0: lddw without its second slot");
    let mut p = Vec::from(lddw(0, 1));
    p.insert(0, ja(1));
    p.push(exit());
    let e = compile_err(p);
    assert_eq!(e.to_string(), "insn #0: jump target 2 is the second half of lddw");
    let e = compile_err(vec![mov64(10, 0), exit()]);
    assert_eq!(e.to_string(), "insn #0: r10 is not writable");
    let e = compile_err(vec![mov64(11, 0), exit()]);
    assert_eq!(e.to_string(), "insn #0: register r11 does not exist");
    let e = compile_err(vec![ins(0x20, 0, 0, 0, 0), exit()]); // legacy LD ABS
    assert_eq!(e.to_string(), "insn #0: unsupported load op 0x20");
    let e = compile_err(vec![ins(BPF_JMP32 | BPF_EXIT, 0, 0, 0, 0)]);
    assert_eq!(e.to_string(), "insn #0: 0x96 is not a valid JMP32 op");
    // A jump from the entry function into a subprogram.
    let e = compile_err(vec![call_local(2), ja(1), exit(), mov64(0, 1), exit()]);
    assert_eq!(e.to_string(), "insn #1: jump target 3 outside its function");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Arbitrary instruction streams never panic the compiler; if one compiles, running it in a
    /// sandbox returns (a value or a fault) without harming the host.
    #[test]
    fn arbitrary_streams_never_panic(raw in proptest::collection::vec(any::<[u8; 8]>(), 1..40)) {
        let insns: Vec<Insn> = raw.iter().map(Insn::decode).collect();
        if let Ok(jit) = JitProgram::compile(&program(insns)) {
            let mut sb = Sandbox::new();
            let mut env = sb.env(1000);
            let _ = jit.run(&mut env, sb.ctx_addr(), sb.stack_top());
        }
    }
}
