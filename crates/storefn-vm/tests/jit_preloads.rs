//! An xrp call passes the compiled entry function `ctx.scratch` and scratch's first word in
//! registers, and the loads the verifier found reading exactly those (`proofs.rs`, `Preload`)
//! take them from there. JIT against the interpreter through `Instance::run_xrp`, on its first
//! call (the slow path, which reads both from memory) and on the calls after it with the same
//! buffers (the in-line path, which passes them from the slices), with scratch's first word
//! changing between calls and written by the program before it reads it again.

mod jit_support;

use std::sync::Arc;

use jit_support::*;
use storefn_vm::insn::*;
use storefn_vm::xrp::XRP_OFF_SCRATCH;
use storefn_vm::{Engine, Instance, VerifiedProgram, XrpCtx};

const SCRATCH: i16 = XRP_OFF_SCRATCH as i16;

/// `r2 = ctx->scratch; r3 = scratch[0]` (both preloads), then `body`, then
/// `scratch[2] = r0; ctx->done = 1; exit`.
fn xrp_program(body: &[Insn]) -> Arc<VerifiedProgram> {
    let mut p = vec![ldx(BPF_DW, 2, 1, SCRATCH), ldx(BPF_DW, 3, 2, 0)];
    p.extend_from_slice(body);
    p.extend([stx(BPF_DW, 2, 0, 16), st(BPF_W, 1, 8, 1), mov64(0, 0), exit()]);
    Arc::new(verified(p))
}

/// Runs `prog` on both engines for each first word in `keys` (same buffers every call):
/// the same r0, scratch and `done`, and the answer in `scratch[2]` the one `want` gives.
fn same_on_both(prog: &Arc<VerifiedProgram>, keys: &[u64], want: impl Fn(u64, u64) -> u64) {
    let mut jit = Instance::new(Arc::clone(prog), Engine::Jit).unwrap();
    let mut interp = Instance::new(Arc::clone(prog), Engine::Interp).unwrap();
    let data = vec![0u8; 4096];
    let (mut sj, mut si) = (vec![0u8; 4096], vec![0u8; 4096]);
    let (mut cj, mut ci) = (XrpCtx::default(), XrpCtx::default());
    for (n, &key) in keys.iter().enumerate() {
        let second = 1000 + n as u64;
        for s in [&mut sj, &mut si] {
            s[..8].copy_from_slice(&key.to_le_bytes());
            s[8..16].copy_from_slice(&second.to_le_bytes());
        }
        let a = jit.run_xrp(&mut cj, &data, &mut sj);
        let b = interp.run_xrp(&mut ci, &data, &mut si);
        assert_eq!(a, b, "call {n}, key {key:#x}");
        assert_eq!(sj, si, "call {n}: scratch");
        assert_eq!(cj.done, 1, "call {n}");
        let got = u64::from_le_bytes(sj[16..24].try_into().unwrap());
        assert_eq!(got, want(key, second), "call {n}, key {key:#x}");
    }
}

const KEYS: [u64; 5] = [7, 7, 0xdead_beef_0000_0001, 0, u64::MAX];

#[test]
fn the_first_word_is_this_calls_on_every_call() {
    // r0 = key * 3 + scratch[1].
    let p = xrp_program(&[
        mov64_reg(0, 3),
        alu64_imm(BPF_MUL, 0, 3),
        ldx(BPF_DW, 4, 2, 8),
        alu64_reg(BPF_ADD, 0, 4),
    ]);
    same_on_both(&p, &KEYS, |k, s| k.wrapping_mul(3).wrapping_add(s));
}

#[test]
fn a_read_after_the_program_wrote_the_first_word_sees_its_write() {
    // Regression: a load of scratch[0] after a store to it must not take the value the call
    // began with. scratch[0] = scratch[1]; r0 = scratch[0] (read again) - key.
    let p = xrp_program(&[
        ldx(BPF_DW, 4, 2, 8),
        stx(BPF_DW, 2, 4, 0),
        ldx(BPF_DW, 0, 2, 0),
        alu64_reg(BPF_SUB, 0, 3),
    ]);
    same_on_both(&p, &KEYS, |k, s| s.wrapping_sub(k));
}

#[test]
fn a_first_word_read_only_after_a_store_or_a_jump_is_read_from_memory() {
    // A store through a copy of the pointer before the first read: scratch[0] = scratch[1].
    let stored = Arc::new(verified(vec![
        ldx(BPF_DW, 2, 1, SCRATCH),
        ldx(BPF_DW, 4, 2, 8),
        mov64_reg(6, 2),
        stx(BPF_DW, 6, 4, 0),
        ldx(BPF_DW, 3, 2, 0),
        mov64_reg(0, 3),
        alu64_reg(BPF_ADD, 0, 4),
        stx(BPF_DW, 2, 0, 16),
        st(BPF_W, 1, 8, 1),
        mov64(0, 0),
        exit(),
    ]));
    same_on_both(&stored, &KEYS, |_, s| s.wrapping_add(s));
    // Written on one path only: if key != 0, scratch[0] = scratch[1]; r0 = scratch[0].
    let p = xrp_program(&[
        ldx(BPF_DW, 4, 2, 8),
        jmp_imm(BPF_JEQ, 3, 0, 1),
        stx(BPF_DW, 2, 4, 0),
        ldx(BPF_DW, 0, 2, 0),
    ]);
    same_on_both(&p, &KEYS, |k, s| if k == 0 { 0 } else { s });
}
