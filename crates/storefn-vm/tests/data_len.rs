//! The xrp context's `data_len` (offset 280, after XRP's layout) tells a program how many
//! bytes its hop holds, and `data` is bounded by exactly that many on both engines.

mod common;

use std::sync::Arc;

use common::*;
use storefn_vm::insn::*;
use storefn_vm::xrp::XRP_OFF_DATA_LEN;
use storefn_vm::{Engine, Instance, ProgType, VerifiedProgram, VmError, XrpCtx};

/// `r0 = data[data_len + back]` (a byte), through a pointer the verifier cannot bound.
fn read_at_len(back: i16) -> Vec<Insn> {
    asm![
        ldx(BPF_DW, 2, 1, XRP_OFF_DATA_LEN as i16),
        ldx(BPF_DW, 3, 1, 0),
        alu64_reg(BPF_ADD, 3, 2),
        ldx(BPF_B, 0, 3, back),
        exit()
    ]
}

fn run(insns: Vec<Insn>, engine: Engine, data: &[u8]) -> Result<u64, VmError> {
    let prog = VerifiedProgram::new(program(insns, ProgType::Xrp)).expect("verifies");
    let mut inst = Instance::new(Arc::new(prog), engine).unwrap();
    let mut scratch = vec![0u8; 4096];
    let mut ctx = XrpCtx::default();
    inst.run_xrp(&mut ctx, data, &mut scratch)
}

#[test]
fn programs_see_the_hop_length_and_nothing_past_it() {
    for engine in [Engine::Interp, Engine::Jit] {
        for len in [512usize, 4096, 32 << 10, 64 << 10] {
            // A larger backing buffer: the bytes after `len` exist but are not the hop's.
            let mut backing = vec![0u8; len + 4096];
            backing[len - 1] = 0xa5;
            backing[len] = 0x5a;
            let data = &backing[..len];
            let got = run(asm![ldx(BPF_DW, 0, 1, XRP_OFF_DATA_LEN as i16), exit()], engine, data);
            assert_eq!(got.unwrap(), len as u64, "{engine:?} data_len for {len}");
            assert_eq!(run(read_at_len(-1), engine, data).unwrap(), 0xa5, "{engine:?} last byte");
            let past = run(read_at_len(0), engine, data).unwrap_err();
            assert!(matches!(past, VmError::BadRead { insn: 3, len: 1, .. }), "{engine:?}: {past}");
        }
    }
}

#[test]
fn data_len_is_read_only() {
    let store = asm![st(BPF_DW, 1, XRP_OFF_DATA_LEN as i16, 1), mov64_imm(0, 0), exit()];
    for engine in [Engine::Interp, Engine::Jit] {
        let err = run(store.clone(), engine, &[0u8; 4096]).unwrap_err();
        assert!(matches!(err, VmError::BadWrite { insn: 0, len: 8, .. }), "{engine:?}: {err}");
    }
}
