//! The range proofs (src/ranges/, src/proofs.rs) against the interpreter, through
//! `Instance::run_xrp` with `data` and `scratch` exactly as long as the xrp views (separate
//! allocations): random xrp programs index data and scratch with constants just inside and
//! just outside the views, masked and compared indices, and pointers stepping through loops.
//! The JIT drops the check wherever the verifier proved an access; a wrong proof would let it
//! read or write past a buffer where the interpreter faults, so any difference in r0, error
//! (with its instruction index), scratch or context outputs fails here. Short buffers take the
//! interpreter fallback and must agree too.

mod common;

use std::sync::Arc;

use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use storefn_vm::insn::*;
use storefn_vm::xrp::{XRP_DATA_VIEW_BYTES, XRP_SCRATCH_BYTES};
use storefn_vm::RegionName;
use storefn_vm::{Engine, Instance, Place, ProgType, VerifiedProgram, VmError, XrpCtx};

/// r2 = ctx->data, r3 = ctx->scratch for the whole program (the body never writes them).
const DATA: u8 = 2;
const SCRATCH: u8 = 3;
/// Registers the body computes with.
const TEMPS: [u8; 5] = [4, 5, 6, 7, 8];
const SIZES: [u8; 4] = [BPF_B, BPF_H, BPF_W, BPF_DW];
const ALU_OPS: [u8; 13] = [
    BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_OR, BPF_AND, BPF_LSH, BPF_RSH, BPF_NEG, BPF_MOD,
    BPF_XOR, BPF_MOV, BPF_ARSH,
];

/// An offset for an access of `n` bytes into a view of `view` bytes: mostly the edges.
fn edge_off(rng: &mut SmallRng, n: i16, view: usize) -> i16 {
    let view = view as i16;
    match rng.gen_range(0..6) {
        0 => view - n,                               // last fitting
        1 => view - n + rng.gen_range(1..=n.max(1)), // just outside
        2 => -rng.gen_range(1..=8),                  // before the start
        3 => 0,
        _ => rng.gen_range(0..view + 16),
    }
}

/// One access through `base` (+ `off`), load or store, random size.
fn access(rng: &mut SmallRng, base: u8, off: i16, out: &mut Vec<Insn>) {
    let size = SIZES[rng.gen_range(0..4)];
    let t = TEMPS[rng.gen_range(0..TEMPS.len())];
    out.push(match rng.gen_range(0..4) {
        0 | 1 => ldx(size, t, base, off),
        2 => stx(size, base, t, off),
        _ => st(size, base, off, rng.gen()),
    });
}

/// A random xrp program over data and scratch (module documentation).
fn gen(seed: u64) -> Vec<Insn> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut p = vec![ldx(BPF_DW, DATA, 1, 0), ldx(BPF_DW, SCRATCH, 1, 272), mov64_imm(0, 0)];
    for &t in &TEMPS {
        p.push(mov64_imm(t, rng.gen_range(0..64)));
    }
    for _ in 0..rng.gen_range(1..8) {
        let (base, view) = if rng.gen_bool(0.5) {
            (DATA, XRP_DATA_VIEW_BYTES)
        } else {
            (SCRATCH, XRP_SCRATCH_BYTES)
        };
        let n = 8;
        let t = TEMPS[rng.gen_range(0..3)];
        let ptr = TEMPS[3 + rng.gen_range(0..2)];
        match rng.gen_range(0..12) {
            10 => linked_index(&mut rng, base, view, (t, TEMPS[(t as usize + 1) % 3]), ptr, &mut p),
            11 => spilled_pointer(&mut rng, base, view, ptr, &mut p),
            6 | 7 => clang_counted_loop(&mut rng, base, view, t, ptr, &mut p),
            9 => register_bounded_loop(
                &mut rng,
                base,
                view,
                (t, TEMPS[(t as usize + 1) % 3]),
                ptr,
                &mut p,
            ),
            8 => stack_array(&mut rng, t, ptr, &mut p),
            // A loaded value through random ALU ops and compares (every transfer rule of
            // ranges/, 32- and 64-bit, immediate and register), then used as an index.
            5 => {
                p.push(ldx(SIZES[rng.gen_range(0..4)], t, SCRATCH, 8 * rng.gen_range(0..4)));
                for _ in 0..rng.gen_range(1..4) {
                    let op = ALU_OPS[rng.gen_range(0..ALU_OPS.len())];
                    let other = TEMPS[rng.gen_range(0..3)];
                    let imm = [1, 3, 7, 8, 63, 255, 4095, 4096, -1, -8][rng.gen_range(0..10)];
                    // `neg` has no register form.
                    let form =
                        if op == BPF_NEG { 3 * rng.gen_range(0..2) } else { rng.gen_range(0..5) };
                    p.push(match form {
                        0 => alu32_imm(op, t, imm),
                        1 => alu32_reg(op, t, other),
                        2 => alu64_reg(op, t, other),
                        _ => alu64_imm(op, t, imm),
                    });
                    if rng.gen_bool(0.4) {
                        let jop = [
                            BPF_JGT, BPF_JGE, BPF_JLT, BPF_JLE, BPF_JNE, BPF_JEQ, BPF_JSGT,
                            BPF_JSLT,
                        ][rng.gen_range(0..8)];
                        let class = if rng.gen_bool(0.5) { BPF_JMP } else { BPF_JMP32 };
                        p.push(ins(
                            class | jop | BPF_K,
                            t,
                            0,
                            3,
                            [8, 511, 4088, 4095][rng.gen_range(0..4)],
                        ));
                        p.push(mov64_reg(ptr, base));
                        p.push(alu64_reg(BPF_ADD, ptr, t));
                        p.push(ldx(BPF_B, TEMPS[0], ptr, 0));
                    }
                }
                p.push(mov64_reg(ptr, base));
                p.push(alu64_reg(BPF_ADD, ptr, t));
                let off = rng.gen_range(-2..9);
                access(&mut rng, ptr, off, &mut p);
            }
            // A constant offset at the edges.
            0 => {
                let off = edge_off(&mut rng, n, view);
                access(&mut rng, base, off, &mut p);
            }
            // A loaded index, masked (sometimes past the view) and scaled.
            1 => {
                p.push(ldx(SIZES[rng.gen_range(0..4)], t, SCRATCH, 8 * rng.gen_range(0..4)));
                let mask = [7, 63, 511, 4095, 4096, 8191][rng.gen_range(0..6)];
                p.push(alu64_imm(BPF_AND, t, mask));
                p.push(alu64_imm(BPF_LSH, t, rng.gen_range(0..4)));
                p.push(mov64_reg(ptr, base));
                p.push(alu64_reg(BPF_ADD, ptr, t));
                let off = rng.gen_range(-4..12);
                access(&mut rng, ptr, off, &mut p);
            }
            // A loaded index bounded by a comparison (sometimes one too loose).
            2 => {
                p.push(ldx(BPF_DW, t, SCRATCH, 8 * rng.gen_range(0..4)));
                let limit = view as i32 - 8 + rng.gen_range(-2..=2);
                let op = [BPF_JGE, BPF_JGT, BPF_JSGE][rng.gen_range(0..3)];
                p.push(jmp_imm(op, t, limit, 3));
                p.push(mov64_reg(ptr, base));
                p.push(alu64_reg(BPF_ADD, ptr, t));
                p.push(ldx(BPF_DW, TEMPS[0], ptr, 0));
            }
            // A pointer stepping through a counted loop (sometimes one step too many).
            3 => {
                let step = [1, 4, 8][rng.gen_range(0..3)];
                let start = rng.gen_range(0..64);
                let fit = (view as i32 - start - 8) / step + 1;
                let trips = (fit + rng.gen_range(-3..=1)).clamp(1, 40);
                let (start, trips) = if trips == fit || rng.gen_bool(0.5) {
                    (view as i32 - 8 - step * (trips - 1) + rng.gen_range(-1..=1), trips)
                } else {
                    (start, trips)
                };
                p.push(mov64_reg(ptr, base));
                p.push(alu64_imm(BPF_ADD, ptr, start));
                p.push(mov64_imm(t, 0));
                access(&mut rng, ptr, 0, &mut p); // the loop header
                p.push(alu64_imm(BPF_ADD, ptr, step));
                p.push(alu64_imm(BPF_ADD, t, 1));
                p.push(jmp_imm(BPF_JNE, t, trips, -4));
            }
            // Binary search over the view (node4k's shape), hi clamped (sometimes too high).
            _ => {
                let max = (view as i32 - 8) / 8 + rng.gen_range(0..=1);
                p.extend([
                    mov64_imm(4, 0),
                    ldx(BPF_DW, 5, SCRATCH, 0),
                    jmp_imm(BPF_JLT, 5, max, 1),
                    mov64_imm(5, max),
                    // loop: if lo >= hi break
                    jmp_reg(BPF_JGE, 4, 5, 13),
                    mov64_reg(6, 4),
                    alu64_reg(BPF_ADD, 6, 5),
                    alu64_imm(BPF_RSH, 6, 1),
                    mov64_reg(7, 6),
                    alu64_imm(BPF_LSH, 7, 3),
                    alu64_reg(BPF_ADD, 7, base),
                    ldx(BPF_DW, 8, 7, 0),
                    // go right when the word's low bit is set, else left
                    jmp_imm(BPF_JSET, 8, 1, 2),
                    mov64_reg(5, 6),
                    ja(-11),
                    mov64_reg(4, 6),
                    alu64_imm(BPF_ADD, 4, 1),
                    ja(-14),
                ]);
            }
        }
    }
    p.push(alu64_reg(BPF_ADD, 0, TEMPS[0]));
    p.push(exit());
    p
}

/// clang's counted loop over an index (`i = start; do { *(base + i + off); i += step; }
/// while (i != end)`, the test `if i == end goto out; goto header`), many trips past the
/// analysis' per-slot states so the index range comes from widening and its congruence: the
/// last access ends exactly at the view's end, or one byte (or one step) past it, or `end`
/// is off the index's class (the loop never meets it and runs until the budget stops it).
fn clang_counted_loop(
    rng: &mut SmallRng,
    base: u8,
    view: usize,
    t: u8,
    ptr: u8,
    p: &mut Vec<Insn>,
) {
    let step = [1, 2, 4, 8][rng.gen_range(0..4)];
    let n = [1, 2, 4, 8][rng.gen_range(0..4)];
    let view = view as i32;
    let trips = rng.gen_range(41..=view / step).min(700);
    let start = view - n - step * (trips - 1);
    let start = start + [0, 0, 0, 1, step][rng.gen_range(0..5)];
    let end = start + step * trips + [0, 0, 0, 1, -1][rng.gen_range(0..5)];
    let size = match n {
        1 => BPF_B,
        2 => BPF_H,
        4 => BPF_W,
        _ => BPF_DW,
    };
    let wide = rng.gen_bool(0.7);
    p.push(mov64_imm(t, start));
    p.push(mov64_reg(ptr, base)); // header
    p.push(alu64_reg(BPF_ADD, ptr, t));
    p.push(if rng.gen_bool(0.5) {
        ldx(size, TEMPS[0], ptr, 0)
    } else {
        st(size, ptr, 0, rng.gen())
    });
    p.push(if wide { alu64_imm(BPF_ADD, t, step) } else { alu32_imm(BPF_ADD, t, step) });
    let class = if wide { BPF_JMP } else { BPF_JMP32 };
    p.push(ins(class | BPF_JEQ | BPF_K, t, 0, 1, end));
    p.push(ja(-6));
}

/// A copy of a loaded value moved by a constant (`c = v + k`, 32- or 64-bit), sometimes
/// broken after (either register written) or stepped (`v += 1`), then `v` compared and `c`
/// used as the index: the links of ranges/state.rs, with bounds at the view's edge or a byte past.
fn linked_index(
    rng: &mut SmallRng,
    base: u8,
    view: usize,
    (v, c): (u8, u8),
    ptr: u8,
    p: &mut Vec<Insn>,
) {
    let k = [8, 1, -8, 0, 4096][rng.gen_range(0..5)];
    let wide = rng.gen_bool(0.5);
    let limit = view as i32 - 8 - k + rng.gen_range(-1..=1);
    p.push(ldx(
        [BPF_B, BPF_H, BPF_W, BPF_DW][rng.gen_range(0..4)],
        v,
        SCRATCH,
        8 * rng.gen_range(0..4),
    ));
    let edge = rng.gen_bool(0.7);
    if edge {
        // `limit` or one more (the analysis: anything in [16, 0xffff + 16]): the access runs
        // at the edge half the time, and only the link bounds `c` there (its range was taken
        // before the compare). A mistaken link offset shows as a proved access one byte past.
        p.push(alu64_imm(BPF_AND, v, 1));
        p.push(alu64_imm(BPF_ADD, v, limit - 16));
        p.push(alu64_imm(BPF_AND, v, 0xffff));
        p.push(alu64_imm(BPF_ADD, v, 16));
    }
    p.push(if wide { mov64_reg(c, v) } else { alu32_reg(BPF_MOV, c, v) });
    p.push(if wide { alu64_imm(BPF_ADD, c, k) } else { alu32_imm(BPF_ADD, c, k) });
    match rng.gen_range(0..6) {
        0 => p.push(alu64_imm(BPF_ADD, v, 1)),
        1 => p.push(ldx(BPF_W, [v, c][rng.gen_range(0..2)], SCRATCH, 8)),
        _ => {}
    }
    let class = if rng.gen_bool(0.5) { BPF_JMP } else { BPF_JMP32 };
    let op = [BPF_JGT, BPF_JGE, BPF_JSGT][rng.gen_range(0..3)];
    p.push(ins(class | op | BPF_K, v, 0, 3, limit));
    p.push(mov64_reg(ptr, base));
    p.push(alu64_reg(BPF_ADD, ptr, c));
    if edge {
        // 8 bytes: the last fitting word, or one byte past the view.
        p.push(ldx(BPF_DW, TEMPS[0], ptr, 0));
    } else {
        access(rng, ptr, 0, p);
    }
}

/// A pointer at the view's last word (or a byte past) spilled to the frame, a store beside
/// it, over its low bytes (the address stays near the buffer, so both engines fault alike)
/// or through scratch, then reloaded (8 or 4 bytes) and used: the frame slots of ranges/state.rs.
fn spilled_pointer(rng: &mut SmallRng, base: u8, view: usize, ptr: u8, p: &mut Vec<Insn>) {
    let at = -8 * rng.gen_range(1..4i16);
    p.push(mov64_reg(ptr, base));
    p.push(alu64_imm(BPF_ADD, ptr, view as i32 - 8 + rng.gen_range(-1..=1)));
    p.push(stx(BPF_DW, 10, ptr, at));
    match rng.gen_range(0..5) {
        0 => p.push(st(BPF_DW, 10, at - 8, 1)),
        1 => p.push(st([BPF_B, BPF_H][rng.gen_range(0..2)], 10, at, rng.gen())),
        2 => p.push(st(BPF_B, SCRATCH, edge_off(rng, 1, XRP_SCRATCH_BYTES), 1)),
        _ => {}
    }
    p.push(mov64_imm(ptr, 0));
    p.push(ldx(if rng.gen_bool(0.8) { BPF_DW } else { BPF_W }, ptr, 10, at));
    access(rng, ptr, 0, p);
}

/// A loop bounded by a register (grep's `for (i = 0; i < at; i += step)`, `at = arg % K` or
/// `arg & (K - 1)`): the counter's range comes from widening to the `%`/`&` limit. The last
/// access ends exactly at the view's end, or a byte or a step past it (not provable: must
/// fault at the same instruction when the loaded argument is large enough).
fn register_bounded_loop(
    rng: &mut SmallRng,
    base: u8,
    view: usize,
    (limit, i): (u8, u8),
    ptr: u8,
    p: &mut Vec<Insn>,
) {
    let step = [8, 16][rng.gen_range(0..2)];
    let view = view as i32;
    // i < at <= k - 1, i a multiple of `step`: the widened header range ends at the class'
    // value at or below k - 1; an 8-byte access there ends at or past the view.
    let k = view - 8 + [1, 2, step + 1, step + 2, 2 * step + 1, 1 - step][rng.gen_range(0..6)];
    p.push(ldx(BPF_DW, limit, SCRATCH, 8 * rng.gen_range(0..2)));
    if rng.gen_bool(0.5) || k & (k - 1) != 0 {
        p.push(alu64_imm(BPF_MOD, limit, k));
    } else {
        p.push(alu64_imm(BPF_AND, limit, k - 1));
    }
    p.push(mov64_imm(i, 0));
    p.push(jmp_imm(BPF_JEQ, limit, 0, 5));
    p.push(mov64_reg(ptr, base)); // header
    p.push(alu64_reg(BPF_ADD, ptr, i));
    p.push(ldx(BPF_DW, ptr, ptr, 0));
    p.push(alu64_imm(BPF_ADD, i, step));
    p.push(jmp_reg(BPF_JLT, i, limit, -5));
}

/// A stack array indexed by a loaded value (a histogram's `h[d[i] >> 4]++`): the index masked
/// and scaled, the array placed so the last element ends at the frame's top, one element
/// past it, or wholly below the frame (sometimes).
fn stack_array(rng: &mut SmallRng, t: u8, ptr: u8, p: &mut Vec<Insn>) {
    let mask = [15, 63, 511][rng.gen_range(0..3)];
    let shift = rng.gen_range(0..4);
    let span = (mask << shift) + (1 << shift);
    let below = span + [0, 0, -1, -(1 << shift), 8, 512 - span][rng.gen_range(0..6)];
    if rng.gen_bool(0.5) {
        p.push(ldx(BPF_B, t, DATA, rng.gen_range(0..64)));
        p.push(ldx(BPF_DW, TEMPS[0], SCRATCH, 0));
        p.push(alu64_reg(BPF_XOR, t, TEMPS[0]));
    } else {
        // The last element itself: the edge of the proof every time.
        p.push(mov64_imm(t, -1));
    }
    p.push(alu64_imm(BPF_AND, t, mask));
    p.push(alu64_imm(BPF_LSH, t, shift));
    p.push(mov64_reg(ptr, 10));
    p.push(alu64_imm(BPF_ADD, ptr, -below));
    p.push(alu64_reg(BPF_ADD, ptr, t));
    let size = [BPF_B, BPF_H, BPF_W, BPF_DW][rng.gen_range(0..=shift.min(3)) as usize];
    p.push(ldx(size, TEMPS[1], ptr, 0));
    p.push(alu64_imm(BPF_ADD, TEMPS[1], 1));
    p.push(stx(size, ptr, TEMPS[1], 0));
    // The two instances' stacks lie at different addresses: no stack address may flow into
    // what the engines' outputs are compared on.
    p.push(mov64_imm(ptr, 0));
}

/// Bytes around each buffer that no instance is granted: the generated offsets (at most
/// 8191 << 3 past a base) land there, so both engines fault alike instead of one reaching the
/// other instance's stack; a JIT access a wrong proof let through reads these bytes and differs.
const GUARD: usize = 80 << 10;

/// `data` and `scratch`, each in the middle of its own guarded allocation.
struct Buffers {
    data: Vec<u8>,
    scratch: Vec<u8>,
    data_len: usize,
    scratch_len: usize,
}

impl Buffers {
    fn new(rng: &mut SmallRng, data_len: usize, scratch_len: usize) -> Self {
        let mut fill = |n: usize| {
            let mut v = vec![0xa5u8; 2 * GUARD + n];
            v[GUARD..GUARD + n].iter_mut().for_each(|b| *b = rng.gen());
            v
        };
        Self { data: fill(data_len), scratch: fill(scratch_len), data_len, scratch_len }
    }
}

/// Runs once on `b` in place (same addresses for both engines, so fault addresses compare),
/// then restores the scratch bytes.
fn run(inst: &mut Instance, b: &mut Buffers) -> (Result<u64, VmError>, Vec<u8>, XrpCtx) {
    let mut ctx = XrpCtx::default();
    let before = b.scratch.clone();
    let data = &b.data[GUARD..GUARD + b.data_len];
    let r = inst.run_xrp(&mut ctx, data, &mut b.scratch[GUARD..GUARD + b.scratch_len]);
    let after = b.scratch.clone();
    b.scratch.copy_from_slice(&before);
    (r, after, ctx)
}

/// A fault without its place: the two instances have different stacks, so which region lies
/// nearest a wild address differs between them (the place is named from the nearest).
fn comparable(r: &Result<u64, VmError>) -> Result<u64, VmError> {
    match r.clone() {
        Err(VmError::BadRead { insn, len, .. }) => {
            Err(VmError::BadRead { insn, at: Place::Wild, len })
        }
        Err(VmError::BadWrite { insn, len, .. }) => {
            Err(VmError::BadWrite { insn, at: Place::Wild, len })
        }
        r => r,
    }
}

/// A run one engine stopped with a wild access (an address far from every region of its own
/// instance) while the other went on: the two instances' stacks lie at different addresses, so
/// the same wild pointer can land in a region only one of them grants (region-level checking
/// allows that by design). Such runs are layout-dependent, not a disagreement of the engines.
fn layout_dependent(a: &Result<u64, VmError>, b: &Result<u64, VmError>) -> bool {
    let wild = |r: &Result<u64, VmError>| {
        matches!(
            r,
            Err(VmError::BadRead { at: Place::Wild, .. }
                | VmError::BadWrite { at: Place::Wild, .. })
        )
    };
    comparable(a) != comparable(b) && (wild(a) || wild(b))
}

fn same(a: &(Result<u64, VmError>, Vec<u8>, XrpCtx), b: &(Result<u64, VmError>, Vec<u8>, XrpCtx)) {
    assert_eq!(comparable(&a.0), comparable(&b.0), "result");
    assert_eq!(a.1, b.1, "scratch");
    assert_eq!((a.2.done, a.2.next_addr, a.2.size), (b.2.done, b.2.next_addr, b.2.size), "ctx");
}

#[test]
fn proved_accesses_agree_with_the_interpreter_at_the_edges_of_exact_buffers() {
    let (mut proved, mut checked, mut faults, mut fallbacks) = (0, 0, 0, 0);
    let mut layout_runs = 0;
    for seed in 0..3000u64 {
        let insns = gen(seed);
        let prog = match VerifiedProgram::new(program(insns.clone(), ProgType::Xrp)) {
            Ok(p) => Arc::new(p),
            Err(e) => panic!("seed {seed}: {e}: {insns:?}"),
        };
        for pc in 0..prog.insns.len() {
            if matches!(prog.insns[pc].class(), BPF_LDX | BPF_ST | BPF_STX) {
                if prog.access_in_bounds(pc) {
                    proved += 1;
                } else {
                    checked += 1;
                }
            }
        }
        let mut jit = Instance::new(Arc::clone(&prog), Engine::Jit).unwrap();
        let mut interp = Instance::new(Arc::clone(&prog), Engine::Interp).unwrap();
        jit.set_insn_budget(5_000);
        interp.set_insn_budget(5_000);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
        let mut exact = Buffers::new(&mut rng, XRP_DATA_VIEW_BYTES, XRP_SCRATCH_BYTES);
        let (j, i) = (run(&mut jit, &mut exact), run(&mut interp, &mut exact));
        let what = format!("seed {seed}: {:?}", prog.insns);
        if layout_dependent(&j.0, &i.0) {
            layout_runs += 1;
        } else {
            std::panic::catch_unwind(|| same(&j, &i)).unwrap_or_else(|_| panic!("{what}"));
        }
        faults +=
            usize::from(matches!(j.0, Err(VmError::BadRead { .. } | VmError::BadWrite { .. })));
        // Shorter than the proofs need: the JIT instance runs these on the interpreter.
        let mut short = Buffers::new(&mut rng, 64, 16);
        let (need_data, need_scratch) = prog.xrp_min_bytes();
        fallbacks += usize::from(need_data > 64 || need_scratch > 16);
        let (j, i) = (run(&mut jit, &mut short), run(&mut interp, &mut short));
        if layout_dependent(&j.0, &i.0) {
            layout_runs += 1;
        } else {
            std::panic::catch_unwind(|| same(&j, &i)).unwrap_or_else(|_| panic!("short: {what}"));
        }
    }
    // Wild pointers landing in one instance's stack are rare; many would hide real disagreements.
    assert!(layout_runs <= 10, "{layout_runs} layout-dependent runs of 6000");
    assert!(proved > 5_000 && checked > 5_000, "proved {proved}, checked {checked}");
    assert!(faults > 300 && fallbacks > 1_000, "faults {faults}, fallbacks {fallbacks}");
}

/// A proved access just inside the view and one just outside: the outside one still faults on
/// the JIT with its instruction index, the inside one runs.
#[test]
fn just_outside_a_proved_view_still_faults_with_the_instruction_index() {
    let prog = Arc::new(
        VerifiedProgram::new(program(
            vec![
                ldx(BPF_DW, DATA, 1, 0),
                ldx(BPF_DW, 0, DATA, 4088), // 1: proved
                ldx(BPF_B, 0, DATA, 4096),  // 2: checked: faults
                exit(),
            ],
            ProgType::Xrp,
        ))
        .unwrap(),
    );
    assert!(prog.access_in_bounds(1) && !prog.access_in_bounds(2));
    let mut jit = Instance::new(prog, Engine::Jit).unwrap();
    let mut b = Buffers::new(&mut SmallRng::seed_from_u64(1), XRP_DATA_VIEW_BYTES, 8);
    let (r, ..) = run(&mut jit, &mut b);
    let at = Place::Region { name: RegionName::Data, offset: 4096, len: 4096 };
    assert_eq!(r, Err(VmError::BadRead { insn: 2, at, len: 1 }));
}

/// A loop bounded by a register that `% K` limited (grep's shape): its loads are proved when
/// the last one ends inside the view, and with `K` one larger the last one is not proved and
/// faults at its instruction on the JIT, as on the interpreter.
#[test]
fn a_loop_bounded_by_a_modulo_limit_is_proved_only_inside_the_view() {
    let looped = |k: i32| {
        vec![
            ldx(BPF_DW, DATA, 1, 0),
            ldx(BPF_DW, SCRATCH, 1, 272),
            ldx(BPF_DW, 6, SCRATCH, 0),
            alu64_imm(BPF_MOD, 6, k),
            mov64_imm(7, 0),
            mov64_imm(0, 0),
            jmp_imm(BPF_JEQ, 6, 0, 5),
            mov64_reg(8, DATA), // 7: header
            alu64_reg(BPF_ADD, 8, 7),
            ldx(BPF_B, 0, 8, 0), // 9: d[i]
            alu64_imm(BPF_ADD, 7, 1),
            jmp_reg(BPF_JLT, 7, 6, -5),
            exit(),
        ]
    };
    let view = XRP_DATA_VIEW_BYTES as i32;
    // k = view: i < at <= view - 1, so i <= view - 2 (the widened header range: view - 1).
    // k = view + 2: i reaches view, one byte past.
    for (k, proved) in [(view, true), (view + 2, false)] {
        let prog = Arc::new(VerifiedProgram::new(program(looped(k), ProgType::Xrp)).unwrap());
        assert_eq!(prog.access_in_bounds(9), proved, "k = {k}");
        // at = k - 1: the loop reads d[0 ..= k - 2].
        let r = jit_as_interp(prog, k as u64 - 1);
        if proved {
            assert!(r.is_ok(), "{r:?}");
        } else {
            let at = Place::Region { name: RegionName::Data, offset: 4096, len: 4096 };
            assert_eq!(r, Err(VmError::BadRead { insn: 9, at, len: 1 }));
        }
    }
}

/// mismatch's shape: `r0 = r4 + k; if r4 > 4080 goto out; load data[r0]`, the bound coming
/// from the compare on the copy. With `k` = 8 the last word ends at the view's end and is
/// proved; with `k` = 9 it is one byte past: not proved, and the JIT faults at its
/// instruction as the interpreter does. The same for a data pointer spilled to the frame.
#[test]
fn a_linked_or_spilled_bound_one_past_the_view_still_faults_at_its_instruction() {
    let linked = |k: i32| {
        vec![
            ldx(BPF_DW, DATA, 1, 0),
            ldx(BPF_DW, SCRATCH, 1, 272),
            ldx(BPF_DW, 4, SCRATCH, 0),
            mov64_reg(0, 4),
            alu64_imm(BPF_ADD, 0, k),
            jmp_imm(BPF_JGT, 4, 4080, 3),
            mov64_reg(5, DATA),
            alu64_reg(BPF_ADD, 5, 0),
            ldx(BPF_DW, 0, 5, 0), // 8
            exit(),
        ]
    };
    let spilled = |k: i32| {
        vec![
            ldx(BPF_DW, DATA, 1, 0),
            ldx(BPF_DW, SCRATCH, 1, 272),
            alu64_imm(BPF_ADD, DATA, 4080 + k),
            stx(BPF_DW, 10, DATA, -16),
            st(BPF_DW, 10, -8, 0),
            mov64_imm(DATA, 0),
            ldx(BPF_DW, 6, 10, -16),
            mov64_imm(0, 0),
            ldx(BPF_DW, 0, 6, 0), // 8
            exit(),
        ]
    };
    for (k, proved) in [(8, true), (9, false)] {
        for (what, insns) in [("linked", linked(k)), ("spilled", spilled(k))] {
            let prog = Arc::new(VerifiedProgram::new(program(insns, ProgType::Xrp)).unwrap());
            assert_eq!(prog.access_in_bounds(8), proved, "{what}, k = {k}");
            let r = jit_as_interp(prog, 4080);
            if proved {
                assert!(r.is_ok(), "{what}: {r:?}");
            } else {
                let at = Place::Region { name: RegionName::Data, offset: 4089, len: 4096 };
                assert_eq!(r, Err(VmError::BadRead { insn: 8, at, len: 8 }), "{what}");
            }
        }
    }
}

/// Runs `prog` once on a JIT and an interpreter instance over exact-size data (scratch word 0
/// = `arg`), checks they agree, and returns the JIT's result.
fn jit_as_interp(prog: Arc<VerifiedProgram>, arg: u64) -> Result<u64, VmError> {
    let mut jit = Instance::new(Arc::clone(&prog), Engine::Jit).unwrap();
    let mut interp = Instance::new(prog, Engine::Interp).unwrap();
    let mut b = Buffers::new(&mut SmallRng::seed_from_u64(2), XRP_DATA_VIEW_BYTES, 16);
    b.scratch[GUARD..GUARD + 8].copy_from_slice(&arg.to_le_bytes());
    let (j, i) = (run(&mut jit, &mut b), run(&mut interp, &mut b));
    same(&j, &i);
    j.0
}
