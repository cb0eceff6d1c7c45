//! Regression: error messages leaked server addresses (`read of 8 bytes at 0x7f86...`), which
//! helps exploit any future memory bug; faults now name a region of the program and an offset
//! into it (or a low number the program made up), never a host address, on both engines.

mod common;

use std::sync::Arc;

use common::*;
use storefn_vm::insn::*;
use storefn_vm::RegionName;
use storefn_vm::{Engine, Instance, Place, ProgType, VerifiedProgram, VmError, XrpCtx};

/// r2 = ctx->data, r3 = ctx->scratch, then `body`.
fn xrp(body: &[Insn]) -> Arc<VerifiedProgram> {
    let mut p = vec![ldx(BPF_DW, 2, 1, 0), ldx(BPF_DW, 3, 1, 272)];
    p.extend_from_slice(body);
    p.extend([mov64_imm(0, 0), exit()]);
    Arc::new(VerifiedProgram::new(program(p, ProgType::Xrp)).unwrap())
}

/// Runs on both engines over 4 KiB data and scratch; the (equal) error and the host
/// addresses a message must not contain.
fn fault(prog: &Arc<VerifiedProgram>) -> (VmError, Vec<u64>) {
    let (data, mut scratch) = (vec![0u8; 4096], vec![0u8; 4096]);
    let mut ctx = XrpCtx::default();
    let mut errs = Vec::new();
    for engine in [Engine::Interp, Engine::Jit] {
        let mut inst = Instance::new(Arc::clone(prog), engine).unwrap();
        errs.push(inst.run_xrp(&mut ctx, &data, &mut scratch).unwrap_err());
    }
    assert_eq!(errs[0], errs[1], "interpreter and JIT name the same place");
    let ctx_addr = std::ptr::from_ref(&ctx) as u64;
    (errs.remove(0), vec![data.as_ptr() as u64, scratch.as_ptr() as u64, ctx_addr])
}

fn assert_no_host_address(msg: &str, hosts: &[u64]) {
    for h in hosts {
        for shown in [format!("{h:x}"), format!("{h}"), format!("{:x}", h >> 12)] {
            assert!(!msg.contains(&shown), "{msg} shows {shown}");
        }
    }
    assert!(!msg.contains("0x7f") && !msg.contains("0x5"), "{msg}");
}

#[test]
fn a_read_past_the_data_block_names_data_and_the_offset() {
    let (e, hosts) = fault(&xrp(&[ldx(BPF_DW, 0, 2, 4096)]));
    let at = Place::Region { name: RegionName::Data, offset: 4096, len: 4096 };
    assert_eq!(e, VmError::BadRead { insn: 2, at, len: 8 });
    let msg = e.to_string();
    assert_eq!(
        msg,
        "insn #2: read of 8 bytes at data+4096 (data is 4096 bytes) outside the program's regions"
    );
    assert_no_host_address(&msg, &hosts);
}

#[test]
fn writes_name_the_region_they_hit_or_missed() {
    // The data block is read-only.
    let (e, hosts) = fault(&xrp(&[st(BPF_B, 2, 5, 1)]));
    assert_eq!(e.to_string(), "insn #2: write of 1 bytes at data+5 (data is 4096 bytes) outside the program's writable regions");
    assert_no_host_address(&e.to_string(), &hosts);
    // Before scratch.
    let (e, hosts) = fault(&xrp(&[st(BPF_DW, 3, -8, 1)]));
    let at = Place::Region { name: RegionName::Scratch, offset: -8, len: 4096 };
    assert_eq!(e, VmError::BadWrite { insn: 2, at, len: 8 });
    assert!(e.to_string().contains("scratch-8 (scratch is 4096 bytes)"), "{e}");
    assert_no_host_address(&e.to_string(), &hosts);
    // The context's own `data` pointer field.
    let (e, hosts) = fault(&xrp(&[st(BPF_DW, 1, 0, 1)]));
    let ctx = format!("at context+0 (context is {} bytes)", storefn_vm::xrp::XRP_CTX_BYTES);
    assert!(e.to_string().contains(&ctx), "{e}");
    assert_no_host_address(&e.to_string(), &hosts);
}

#[test]
fn wild_and_null_pointers_show_no_host_address() {
    // A pointer far from every region: nothing of it is shown.
    let mut body = Vec::from(lddw(4, 0x7f86_1234_5678));
    body.push(ldx(BPF_DW, 0, 4, 0));
    let (e, hosts) = fault(&xrp(&body));
    assert_eq!(e, VmError::BadRead { insn: 4, at: Place::Wild, len: 8 });
    assert!(e.to_string().contains("an address far from every region"), "{e}");
    assert_no_host_address(&e.to_string(), &hosts);
    assert!(!e.to_string().contains("7f86"), "{e}");
    // A null pointer is the program's own number.
    let (e, _) = fault(&xrp(&[mov64_imm(4, 0), ldx(BPF_W, 0, 4, 16)]));
    assert_eq!(e, VmError::BadRead { insn: 3, at: Place::Low(16), len: 4 });
    assert!(e.to_string().contains("at address 0x10"), "{e}");
}

#[test]
fn lambda_faults_name_input_and_output() {
    // r2 = buf_i (ctx offset 8): read one byte past the input.
    let p = vec![ldx(BPF_DW, 2, 1, 8), ldx(BPF_B, 0, 2, 100), exit()];
    let prog = Arc::new(VerifiedProgram::new(program(p, ProgType::Lambda)).unwrap());
    let (input, mut output) = (vec![0u8; 100], vec![0u8; 64]);
    for engine in [Engine::Interp, Engine::Jit] {
        let mut inst = Instance::new(Arc::clone(&prog), engine).unwrap();
        let e = inst.run_lambda(&input, &mut output).unwrap_err();
        let at = Place::Region { name: RegionName::Input, offset: 100, len: 100 };
        assert_eq!(e, VmError::BadRead { insn: 1, at, len: 1 }, "{engine:?}");
        assert_no_host_address(&e.to_string(), &[input.as_ptr() as u64, output.as_ptr() as u64]);
    }
}
