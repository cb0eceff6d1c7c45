//! Loader: every compiled program loads; malformed objects are errors, never panics.

use storefn_vm::insn::{BPF_CALL, BPF_JMP, BPF_PSEUDO_CALL};
use storefn_vm::ProgType;
use storefn_vm::{load, LoadError};

fn type_of(name: &str) -> ProgType {
    if name.contains("lambda") {
        ProgType::Lambda
    } else if name.contains("offload") || name.starts_with("dds/") {
        ProgType::Offload
    } else {
        ProgType::Xrp
    }
}

#[test]
fn every_program_loads_and_verifies_unless_named_reject() {
    for (name, elf) in storefn_progs::ALL {
        let r = load(elf, None, type_of(name));
        if name.contains("reject_load_") {
            assert!(r.is_err(), "{name} should not load");
            continue;
        }
        let prog = r.unwrap_or_else(|e| panic!("{name}: {e}"));
        let v = storefn_vm::verify(&prog);
        if name.contains("reject_") {
            assert!(v.is_err(), "{name} should be rejected");
        } else {
            v.unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn maps_are_rejected_with_the_section_name() {
    let e = load(storefn_progs::must("test/reject_load_maps"), None, ProgType::Xrp).unwrap_err();
    assert_eq!(e, LoadError::Maps { section: ".maps".into() });
    assert_eq!(e.to_string(), "section .maps: maps are not supported (yet); use globals instead");
}

#[test]
fn selects_by_section_and_function() {
    let elf = storefn_progs::must("test/subprog");
    assert_eq!(load(elf, None, ProgType::Xrp).unwrap().name, "xrp");
    assert_eq!(load(elf, Some("xrp"), ProgType::Xrp).unwrap().name, "xrp");
    assert_eq!(load(elf, Some("prog"), ProgType::Xrp).unwrap().name, "prog");
    // A .text function can be a program on its own.
    let g = load(elf, Some("global_fn"), ProgType::Xrp).unwrap();
    assert_eq!(g.insns.len(), 3);
    assert_eq!(
        load(elf, Some("nope"), ProgType::Xrp).unwrap_err().to_string(),
        "no program named \"nope\" (neither a section nor a function)"
    );
}

#[test]
fn links_subprograms_with_pc_relative_calls() {
    let p = load(storefn_progs::must("test/subprog"), None, ProgType::Xrp).unwrap();
    // Entry (14 slots) + twice_plus (3) + global_fn (3) + twice (3).
    assert_eq!(p.insns.len(), 23);
    let calls: Vec<usize> = p
        .insns
        .iter()
        .enumerate()
        .filter(|(_, i)| i.op == BPF_JMP | BPF_CALL && i.src == BPF_PSEUDO_CALL)
        .map(|(pc, i)| (pc as i64 + i64::from(i.imm) + 1) as usize)
        .collect();
    assert_eq!(calls, vec![14, 17, 20]);
}

#[test]
fn globals_image_and_relocations() {
    let p = load(storefn_progs::must("test/globals"), None, ProgType::Xrp).unwrap();
    // .rodata (64 B table) first, then .data (bias) and .bss (calls), 8-byte aligned.
    assert_eq!(p.globals_rw_start, 64);
    assert_eq!(p.globals.len(), 80);
    assert_eq!(&p.globals[8..16], &22u64.to_le_bytes());
    assert_eq!(&p.globals[64..72], &100u64.to_le_bytes());
    assert_eq!(&p.globals[72..80], &0u64.to_le_bytes());
    let mut offs: Vec<u64> = p.global_relocs.iter().map(|r| r.1).collect();
    offs.sort_unstable();
    assert_eq!(offs, vec![0, 64, 72]);
    for (pc, _) in &p.global_relocs {
        assert!(p.insns[*pc].is_lddw());
    }
}

#[test]
fn non_bpf_and_garbage_inputs_are_errors() {
    assert!(matches!(load(b"", None, ProgType::Xrp), Err(LoadError::Parse(_))));
    assert!(matches!(load(b"\x7fELF garbage", None, ProgType::Xrp), Err(LoadError::Parse(_))));
    // Flip e_machine to x86-64.
    let mut elf = storefn_progs::must("xrp_follow").to_vec();
    elf[18] = 62;
    elf[19] = 0;
    assert_eq!(
        load(&elf, None, ProgType::Xrp).unwrap_err().to_string(),
        "not an eBPF object: machine is X86_64"
    );
}

/// Truncations, and single-byte mutations of the ELF header, the section header table and the
/// rest of the file (sampled), never panic.
#[test]
fn truncated_and_mutated_objects_never_panic() {
    for name in ["xrp_follow", "test/subprog", "test/globals"] {
        let elf = storefn_progs::must(name);
        for len in (0..elf.len()).step_by(7) {
            let _ = load(&elf[..len], None, ProgType::Xrp);
        }
        let shoff = usize::try_from(u64::from_le_bytes(elf[40..48].try_into().unwrap())).unwrap();
        let positions = (0..64).chain(shoff..elf.len()).chain((64..shoff).step_by(5));
        let mut m = elf.to_vec();
        for pos in positions {
            for v in [0u8, 0xff, 0x41] {
                let old = m[pos];
                m[pos] = v;
                if let Ok(p) = load(&m, None, ProgType::Xrp) {
                    let _ = storefn_vm::verify(&p);
                }
                m[pos] = old;
            }
        }
        assert_eq!(m, *elf, "{name}");
    }
}

// Regression: `object` refused objects whose bytes were not 8-byte aligned ("Invalid ELF header
// size or alignment"), which is how `include_bytes!` data and slices into larger buffers arrive.
#[test]
fn loads_from_unaligned_bytes() {
    let elf = storefn_progs::must("test/globals");
    let mut buf = vec![0u8; elf.len() + 8];
    for shift in 0..8 {
        buf[shift..shift + elf.len()].copy_from_slice(elf);
        let p = load(&buf[shift..shift + elf.len()], None, ProgType::Xrp).unwrap();
        assert_eq!(p.insns.len(), 25, "shift {shift}");
    }
}
