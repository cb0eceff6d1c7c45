//! Loops whose jumps over short runs the JIT emits as conditional moves, against the
//! interpreter (part of `jit_differential`: its sandbox, generators and comparisons).

use super::*;

/// The bench's search and min/max loops (clang's shape: `if c goto T; A; T:` and a second
/// back edge `if c goto H; A; goto H`) keep no branch on their data: both jumps of each
/// become conditional moves. The same programs under budgets that stop inside their loops
/// leave what the interpreter leaves (result, faulting instruction, budget left).
#[test]
fn bench_search_loops_are_if_converted_and_equal_interp() {
    use storefn_vm::xrp::{XRP_OFF_DATA, XRP_OFF_SCRATCH};
    let setup = |sb: &mut Sandbox| {
        gen_setup(sb);
        sb.ctx[XRP_OFF_DATA / 8] = sb.data_addr();
        sb.ctx[XRP_OFF_SCRATCH / 8] = sb.data_addr() + DATA_BYTES as u64 / 2;
        // A rising first half (node4k: a count, then keys), so the searches take their
        // data-dependent paths.
        for (i, w) in sb.data.iter_mut().take(DATA_BYTES / 16).enumerate() {
            *w = (i as u64 + 1) * 0x0001_0003_0000_0007;
        }
    };
    // bsearch32 and stats64: the two jumps of their loop; node4k also its clamp of the count.
    for (name, jumps) in [("bench/bsearch32", 2), ("bench/stats64", 2), ("bench_node4k", 3)] {
        let elf = storefn_progs::must(name);
        let prog = storefn_vm::load(elf, None, storefn_vm::ProgType::Xrp).unwrap();
        let prog = VerifiedProgram::new(prog).unwrap();
        let jit = JitProgram::compile(&prog).unwrap();
        assert_eq!(jit.if_converted(), jumps, "{name}: its jumps over moves converted");
        let mut stops = 0;
        for budget in (5..400).step_by(7).chain([4_000, DEFAULT_INSN_BUDGET]) {
            let (j, i) = both(&prog, budget, &setup);
            assert_same(&j, &i, &format!("{name} budget {budget}"));
            stops += usize::from(matches!(j.result, Err(VmError::BudgetExhausted { .. })));
        }
        assert!(stops > 10, "{name}: only {stops} budget stops compared");
    }
}

/// Loops whose body holds jumps over short runs: register arithmetic (emitted as conditional
/// moves, counted by `if_converted`), and loads (never: a load on one path only may fault, or
/// be proved in bounds only by the jump's own test, so it must stay behind its branch). The
/// loads read `data[x * 8]` with `x` bounded by the jump on one path and not on the other,
/// so a hoisted load would fault where the interpreter does not. Same result, faulting
/// instruction, memory and budget left as the interpreter, under budgets that stop the loop
/// on either side of every jump.
#[test]
fn loops_with_converted_and_refused_jumps_jit_equal_interp() {
    let (mut stops, mut faults, mut converted) = (0, 0, 0);
    for seed in 0..500u64 {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x005e_1ec7);
        let mut insns = vec![ldx(BPF_DW, DATA_REG, 1, 0)];
        for r in 0..8 {
            insns.push(mov64(r, rand_imm(&mut rng)));
        }
        let (mut alu_runs, mut load_runs) = (0, 0);
        counted_loop(&mut insns, rng.gen_range(1..30), |insns| {
            for _ in 0..rng.gen_range(1..5) {
                let x = rng.gen_range(0..8);
                if rng.gen_bool(0.6) {
                    let n = rng.gen_range(1..=4usize);
                    let op = JMP_OPS[rng.gen_range(0..JMP_OPS.len())];
                    insns.push(jmp_reg(op, x, rng.gen_range(0..8), n as i16));
                    for _ in 0..n {
                        let mut a = gen_alu(&mut rng);
                        a.dst = rng.gen_range(0..8);
                        insns.push(a);
                    }
                    alu_runs += 1;
                } else {
                    // Skip when x is large (the run's load is then proved by the test) or when
                    // it is small (the run's load may then leave the data).
                    let bounded = rng.gen_bool(0.5);
                    let (op, k) = if bounded { (BPF_JGT, 511) } else { (BPF_JLT, 600) };
                    let dst = rng.gen_range(0..8);
                    insns.push(jmp_imm(op, x, k, 4));
                    insns.push(mov64_reg(dst, x));
                    insns.push(alu64_imm(BPF_LSH, dst, 3));
                    insns.push(alu64_reg(BPF_ADD, dst, DATA_REG));
                    insns.push(ldx(BPF_DW, dst, dst, 0));
                    load_runs += 1;
                }
            }
        });
        insns.push(exit());
        let Ok(prog) = VerifiedProgram::new(program(insns)) else { continue };
        let jit = JitProgram::compile(&prog).unwrap();
        if alu_runs == 0 {
            assert_eq!(jit.if_converted(), 0, "seed {seed}: a run with a load converted");
        } else {
            assert!(jit.if_converted() >= 1, "seed {seed}: no run converted: {:?}", prog.insns);
        }
        converted += usize::from(load_runs > 0 && jit.if_converted() > 0);
        for budget in [3, 11, 29, 64, GEN_BUDGET, 100_000] {
            let (j, i) = both(&prog, budget, &gen_setup);
            assert_same(&j, &i, &format!("seed {seed} budget {budget}: {:?}", prog.insns));
            stops += usize::from(matches!(j.result, Err(VmError::BudgetExhausted { .. })));
            faults += usize::from(matches!(j.result, Err(VmError::BadRead { .. })));
        }
    }
    assert!(stops > 300 && faults > 50 && converted > 50, "{stops} stops, {faults} faults");
}

/// Running minima and maxima in loops (`d = v; if v < m goto T; d = m; T: m = d`, as clang
/// writes λ-IO's Stats64), which Cranelift makes min/max instructions of: every compare, both
/// operand orders, both arms' orders, on data with equal values and the signed and unsigned
/// extremes, under budgets stopping inside the loop. Same result and budget left as the
/// interpreter.
#[test]
fn running_min_max_loops_jit_equal_interp() {
    const EDGES: [u64; 6] = [0, 1, 5, u64::MAX, 1 << 63, (1 << 63) - 1];
    let setup = |sb: &mut Sandbox| {
        gen_setup(sb);
        for (i, w) in sb.data.iter_mut().enumerate() {
            let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58;
            *w = if h < 40 { EDGES[h as usize % EDGES.len()] } else { h.wrapping_mul(*w) };
        }
    };
    let ops = [BPF_JLT, BPF_JLE, BPF_JGT, BPF_JGE, BPF_JSLT, BPF_JSLE, BPF_JSGT, BPF_JSGE];
    let mut stops = 0;
    for seed in 0..300u64 {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x3a11);
        let mut insns = vec![ldx(BPF_DW, DATA_REG, 1, 0), mov64(2, rng.gen_range(0..1024))];
        for r in [0, 6, 7] {
            insns.push(mov64(r, rand_imm(&mut rng)));
        }
        let runs = rng.gen_range(1..4);
        // Each trip: r4 = data[r2 & 1023]; r2 += 1; <runs>
        counted_loop(&mut insns, rng.gen_range(1..60), |insns| {
            insns.push(mov64_reg(3, 2));
            insns.push(alu64_imm(BPF_AND, 3, 1023));
            insns.push(alu64_imm(BPF_LSH, 3, 3));
            insns.push(alu64_reg(BPF_ADD, 3, DATA_REG));
            insns.push(ldx(BPF_DW, 4, 3, 0));
            insns.push(alu64_imm(BPF_ADD, 2, 1));
            for _ in 0..runs {
                let m = [0, 6, 7][rng.gen_range(0..3)];
                let op = ops[rng.gen_range(0..ops.len())];
                let (first, second) = if rng.gen_bool(0.5) { (4, m) } else { (m, 4) };
                insns.push(mov64_reg(5, first));
                insns.push(if rng.gen_bool(0.5) {
                    jmp_reg(op, 4, m, 1)
                } else {
                    jmp_reg(op, m, 4, 1)
                });
                insns.push(mov64_reg(5, second));
                insns.push(mov64_reg(m, 5));
            }
        });
        insns.extend([alu64_reg(BPF_XOR, 0, 6), alu64_reg(BPF_ADD, 0, 7), exit()]);
        let prog = VerifiedProgram::new(program(insns)).unwrap();
        assert!(JitProgram::compile(&prog).unwrap().if_converted() >= runs, "seed {seed}");
        for budget in [3, 20, 57, 150, GEN_BUDGET, 100_000] {
            let (j, i) = both(&prog, budget, &setup);
            assert_same(&j, &i, &format!("seed {seed} budget {budget}: {:?}", prog.insns));
            stops += usize::from(matches!(j.result, Err(VmError::BudgetExhausted { .. })));
        }
    }
    assert!(stops > 300, "only {stops} budget stops compared");
}

/// Appends `r8 = trips; H: r8 -= 1; if r8 == 0 goto out; <body>; goto H; out:` (the body
/// must not write r8).
fn counted_loop(insns: &mut Vec<Insn>, trips: i32, body: impl FnOnce(&mut Vec<Insn>)) {
    insns.push(mov64(8, trips));
    let head = insns.len();
    insns.push(alu64_imm(BPF_SUB, 8, 1));
    let exit_at = insns.len();
    insns.push(jmp_imm(BPF_JEQ, 8, 0, 0));
    body(insns);
    let at = insns.len();
    insns.push(ja(i16::try_from(head as i64 - at as i64 - 1).unwrap()));
    insns[exit_at].off = i16::try_from(insns.len() - exit_at - 1).unwrap();
}
