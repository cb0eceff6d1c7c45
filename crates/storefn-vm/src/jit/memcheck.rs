//! Loads, stores and atomics, each behind the run-time region check of [`crate::mem`]'s
//! contract (a window in registers, a per-site hint, then a full scan in Rust).

use super::abi::*;
use super::translate::Tx;
use super::*;

/// Which region set an access is checked against; the value is also the fault kind.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    Write,
}

/// A program with at least this many checked loads outside loops checks those out of line
/// ([`Tx::check_out_of_line`]). Each inline check is a window compare and two Cranelift blocks
/// (five after critical-edge splitting), ~10-30 µs of compile; a load outside a loop runs
/// at most once per run of its function, so a call there costs a few nanoseconds per run
/// while the blocks cost compile time on every load. Below this count (every bench
/// workload) the inline checks stay, being the fastest.
const OUT_OF_LINE_MIN_LOADS: usize = 64;

/// Per slot: a checked load that calls the out-of-line check, when the program has at least
/// [`OUT_OF_LINE_MIN_LOADS`] checked loads outside loops (else all false).
pub(super) fn out_of_line_loads(verified: &VerifiedProgram, in_loop: &[bool]) -> Vec<bool> {
    let cfg = verified.cfg();
    let marks: Vec<bool> = verified
        .insns
        .iter()
        .enumerate()
        .map(|(pc, i)| {
            i.class() == BPF_LDX
                && !cfg.is_second_half(pc)
                && !verified.in_bounds()[pc]
                && !in_loop[pc]
        })
        .collect();
    if marks.iter().filter(|&&m| m).count() >= OUT_OF_LINE_MIN_LOADS {
        marks
    } else {
        vec![false; marks.len()]
    }
}

impl Tx<'_, '_> {
    /// The out-of-line check of a load of `len` bytes at `addr` ([`define_check_read_shim`]):
    /// returns the address to load from, `addr` itself or, when the check failed (the fault
    /// recorded), `aux.sink`. No block, no branch: the fault is tested by
    /// [`Tx::flush_pending`] before the next instruction that is not register arithmetic or
    /// a load, so the run stops before anything the loaded values could reach is seen, and
    /// with the first fault (`resolve_region` keeps it), exactly where the interpreter stops.
    fn check_out_of_line(&mut self, pc: usize, addr: Value, len: u64, shim: FuncRef) -> Value {
        let site = (u64::try_from(pc).unwrap_or(0) << 8) | len;
        let site = self.iconst(site.cast_signed());
        self.b.ins().call(shim, &[self.aux, addr, site]);
        self.pending = true;
        self.b.ins().load(I64, MemFlagsData::trusted(), self.aux, OFF_AUX_CHECKED)
    }

    /// Ends the run at the first failed out-of-line check, if one was emitted since the last
    /// test: `env.fault.kind` is set only by a failed check (or a fault that already returned).
    pub(super) fn flush_pending(&mut self) {
        if !std::mem::take(&mut self.pending) {
            return;
        }
        let env = self.env();
        let kind = self.b.ins().load(I32, MemFlagsData::trusted(), env, OFF_FAULT_KIND);
        let cont = self.b.create_block();
        self.b.ins().brif(kind, self.exit_block, &[], cont, &[]);
        self.enter(cont);
    }

    /// [`Tx::check`], unless the verifier proved this access in bounds (`proofs.rs`: the
    /// stack frame through r10, or a constant-offset context read); the proof rests on the
    /// run contract, under which that memory is always granted.
    pub(super) fn check_unless_proved(&mut self, pc: usize, addr: Value, len: u64, access: Access) {
        if !self.in_bounds[pc] {
            self.check(pc, addr, len, access);
        }
    }

    /// Emits the region check for `len` bytes at `addr`; on return the builder is positioned
    /// where the access may be performed. Inline, only the window (last region this function
    /// matched for this access kind: one subtract, one compare); on a miss a cold call to
    /// [`resolve_region`], which tries the site's hint (a region index that persists across
    /// invocations, re-validated against the current RunEnv) and then scans every region.
    /// Keeping the hint out of line makes each check two small blocks, so programs with many
    /// unproved accesses compile several times faster; a window miss costs a call instead.
    pub(super) fn check(&mut self, pc: usize, addr: Value, len: u64, access: Access) {
        debug_assert!((1..=MAX_ACCESS_BYTES).contains(&len));
        let fl = MemFlagsData::trusted();
        // Reads use window variables (registers) in the optimising tier; writes, and reads in
        // the quick tier, keep theirs in `aux` (two L1 loads).
        let vars = if access == Access::Read { self.read_window(pc) } else { None };
        let (lo, span) = match (vars, access) {
            (Some((lo, span)), _) => (self.b.use_var(lo), self.b.use_var(span)),
            (None, Access::Read) => (
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_LO),
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_SPAN),
            ),
            (None, Access::Write) => (
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_WR_LO),
                self.b.ins().load(I64, fl, self.aux, OFF_AUX_WR_SPAN),
            ),
        };
        let off = self.b.ins().isub(addr, lo);
        let inside = self.b.ins().icmp(IntCC::UnsignedLessThan, off, span);
        let cont = self.b.create_block();
        let miss = self.cold_block();
        self.b.ins().brif(inside, cont, &[], miss, &[]);

        // Tiers 2 and 3 in Rust: the site's hint, then every region.
        self.enter(miss);
        let site =
            (u64::try_from(pc).unwrap_or(0) << 8) | (u64::from(access == Access::Write) << 4) | len;
        let site = self.iconst(site.cast_signed());
        // Preserve-all call: the hot code around it keeps its registers.
        self.b.ins().call(self.resolve_shim, &[self.aux, addr, site]);
        let found = self.b.ins().load(I64, fl, self.aux, OFF_AUX_FOUND);
        if let Some((lo_v, span_v)) = vars {
            // The resolver refreshed the window in `aux`; read before the branch so a check
            // is two blocks (on a fault the values go unused).
            let lo = self.b.ins().load(I64, fl, self.aux, OFF_AUX_LO);
            let span = self.b.ins().load(I64, fl, self.aux, OFF_AUX_SPAN);
            self.b.def_var(lo_v, lo);
            self.b.def_var(span_v, span);
        }
        self.b.ins().brif(found, cont, &[], self.exit_block, &[]);

        self.enter(cont);
    }

    /// The read window the load at `pc` checks against: its own while the function's pool
    /// lasts if it sits in a loop, else the function's shared one (`None`: in `aux`).
    pub(super) fn read_window(&mut self, pc: usize) -> Option<(Variable, Variable)> {
        if let Some(&(_, w)) = self.site_windows.iter().find(|(at, _)| *at == pc) {
            return Some(w);
        }
        if self.in_loop[pc] {
            if let Some(w) = self.window_pool.pop() {
                self.site_windows.push((pc, w));
                return Some(w);
            }
        }
        self.win_read
    }

    pub(super) fn size_of(pc: usize, insn: Insn) -> Result<u64, JitError> {
        Ok(match insn.op & 0x18 {
            BPF_B => 1,
            BPF_H => 2,
            BPF_W => 4,
            BPF_DW => 8,
            _ => return Err(invalid(pc, "bad size")),
        })
    }

    pub(super) fn addr(&mut self, pc: usize, base: u8, off: i16) -> Result<Value, JitError> {
        let b = self.reg(pc, base)?;
        Ok(self.offset(b, off))
    }

    /// `base + off`: `base` itself at offset 0, which the quick tier would otherwise add (the
    /// optimising tier folds the add away either way).
    pub(super) fn offset(&mut self, base: Value, off: i16) -> Value {
        match off {
            0 => base,
            _ => self.b.ins().iadd_imm_s(base, i64::from(off)),
        }
    }

    pub(super) fn ldx(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        if self.slot_plan.at[pc] {
            return self.slot_load(pc, insn);
        }
        if let Some(v) = self.preloaded_value(pc) {
            return self.set_reg(pc, insn.dst, v);
        }
        let mode = insn.op & 0xe0;
        let len = Self::size_of(pc, insn)?;
        let sx = match mode {
            BPF_MEM => false,
            BPF_MEMSX if len < 8 => true,
            _ => return Err(invalid(pc, format!("unsupported load op {:#04x}", insn.op))),
        };
        let base = self.reg(pc, insn.src)?;
        let mut addr = self.offset(base, insn.off);
        // A load checked out of line may read `aux.sink` instead of its address: no fact.
        let own_address = match self.check_read_shim.filter(|_| self.out_of_line[pc]) {
            Some(shim) => {
                addr = self.check_out_of_line(pc, addr, len, shim);
                false
            }
            None => {
                self.check_unless_proved(pc, addr, len, Access::Read);
                true
            }
        };
        let f = MemFlagsData::new().with_notrap();
        let ins = self.b.ins();
        let v = match (len, sx) {
            (1, false) => ins.uload8(I64, f, addr, 0),
            (2, false) => ins.uload16(I64, f, addr, 0),
            (4, false) => ins.uload32(f, addr, 0),
            (1, true) => ins.sload8(I64, f, addr, 0),
            (2, true) => ins.sload16(I64, f, addr, 0),
            (4, true) => ins.sload32(f, addr, 0),
            _ => ins.load(I64, f, addr, 0),
        };
        if (len, sx, own_address) == (1, false, true) {
            self.bytes.byte_load(v, base, insn.off);
        }
        self.set_reg(pc, insn.dst, v)
    }

    /// The entry function's parameter holding what the load at `pc` reads, if the verifier
    /// found it one of those ([`Preload`]).
    fn preloaded_value(&self, pc: usize) -> Option<Value> {
        let [scratch, word0] = self.preloaded?;
        match self.preload[pc]? {
            Preload::ScratchAddr => Some(scratch),
            Preload::ScratchWord0 => Some(word0),
        }
    }

    pub(super) fn store(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let mode = insn.op & 0xe0;
        let len = Self::size_of(pc, insn)?;
        let is_stx = insn.class() == BPF_STX;
        if mode == BPF_ATOMIC && is_stx {
            self.atomic(pc, insn, len)?;
            if super::slots::may_write_frames(insn, self.in_bounds[pc]) {
                self.reload_slots();
            }
            return Ok(());
        }
        if mode != BPF_MEM {
            return Err(invalid(pc, format!("unsupported store op {:#04x}", insn.op)));
        }
        let v = if is_stx { self.reg(pc, insn.src)? } else { self.iconst(i64::from(insn.imm)) };
        if self.slot_plan.at[pc] {
            self.slot_store(pc, insn, v)?;
        }
        let addr = self.addr(pc, insn.dst, insn.off)?;
        self.check_unless_proved(pc, addr, len, Access::Write);
        self.store_n(len, v, addr);
        if super::slots::may_write_frames(insn, self.in_bounds[pc]) {
            self.reload_slots();
        }
        Ok(())
    }

    pub(super) fn store_n(&mut self, len: u64, v: Value, addr: Value) {
        let f = MemFlagsData::new().with_notrap();
        let ins = self.b.ins();
        match len {
            1 => ins.istore8(f, v, addr, 0),
            2 => ins.istore16(f, v, addr, 0),
            4 => ins.istore32(f, v, addr, 0),
            _ => ins.store(f, v, addr, 0),
        };
    }

    /// Atomics as plain read-modify-write (single-threaded semantics: an invocation owns the
    /// memory it writes for its duration). Checked for write first, then for read, as the
    /// interpreter does (an address in neither set reports BadWrite).
    pub(super) fn atomic(&mut self, pc: usize, insn: Insn, len: u64) -> Result<(), JitError> {
        if len != 4 && len != 8 {
            return Err(invalid(pc, "atomic operations are 32- or 64-bit"));
        }
        let op = insn.imm;
        let alu = op & !ATOMIC_FETCH;
        let fetch = op & ATOMIC_FETCH != 0;
        let known =
            matches!(alu, 0x00 /* ADD */ | 0x40 /* OR */ | 0x50 /* AND */ | 0xa0 /* XOR */)
                || op == ATOMIC_XCHG
                || op == ATOMIC_CMPXCHG;
        if !known {
            return Err(invalid(pc, format!("unknown atomic op {op:#x}")));
        }
        let addr = self.addr(pc, insn.dst, insn.off)?;
        self.check_unless_proved(pc, addr, len, Access::Write);
        self.check_unless_proved(pc, addr, len, Access::Read);
        let f = MemFlagsData::new().with_notrap();
        let old = if len == 4 {
            self.b.ins().uload32(f, addr, 0)
        } else {
            self.b.ins().load(I64, f, addr, 0)
        };
        let src = self.reg(pc, insn.src)?;
        if op == ATOMIC_CMPXCHG {
            let r0 = self.reg(pc, 0)?;
            let eq = if len == 4 {
                let a = self.b.ins().ireduce(I32, old);
                let e = self.b.ins().ireduce(I32, r0);
                self.b.ins().icmp(IntCC::Equal, a, e)
            } else {
                self.b.ins().icmp(IntCC::Equal, old, r0)
            };
            let new = self.b.ins().select(eq, src, old);
            self.store_n(len, new, addr);
            return self.set_reg(pc, 0, old);
        }
        let new = match alu {
            0x00 => self.b.ins().iadd(old, src),
            0x40 => self.b.ins().bor(old, src),
            0x50 => self.b.ins().band(old, src),
            0xa0 => self.b.ins().bxor(old, src),
            _ => src, // XCHG
        };
        self.store_n(len, new, addr);
        if fetch {
            self.set_reg(pc, insn.src, old)?;
        }
        Ok(())
    }
}
