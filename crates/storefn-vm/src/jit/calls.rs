//! Calls in the translation: helper calls through the trampoline, BPF-to-BPF calls to
//! compiled functions with their depth check, calls to small leaf functions inlined, and the
//! budget spilled around them.

use super::abi::*;
use super::translate::{back_targets, Tx};
use super::*;

impl Tx<'_, '_> {
    /// Writes the budget variable back to `env.insns_left` (before calls and returns).
    pub(super) fn spill_budget(&mut self) {
        let left = self.b.use_var(self.budget);
        let env = self.env();
        self.b.ins().store(MemFlagsData::trusted(), left, env, OFF_INSNS_LEFT);
    }

    /// Reloads the budget variable from `env` (after a call, which may have spent some).
    pub(super) fn reload_budget(&mut self) {
        let env = self.env();
        let left = self.b.ins().load(I64, MemFlagsData::trusted(), env, OFF_INSNS_LEFT);
        self.b.def_var(self.budget, left);
    }

    /// After a call: reload the budget, and leave through `exit_block` if the callee recorded a
    /// fault.
    pub(super) fn check_fault_after_call(&mut self) {
        self.reload_budget();
        let env = self.env();
        let kind = self.b.ins().load(I32, MemFlagsData::trusted(), env, OFF_FAULT_KIND);
        let cont = self.b.create_block();
        self.b.ins().brif(kind, self.exit_block, &[], cont, &[]);
        self.enter(cont);
    }

    pub(super) fn call(&mut self, pc: usize, insn: Insn) -> Result<(), JitError> {
        let mut args = Vec::with_capacity(9);
        args.push(self.aux);
        let r0 = match insn.src {
            CALL_HELPER => {
                let id = self.iconst(i64::from(insn.imm.cast_unsigned()));
                args.push(id);
                for r in 1..=5 {
                    args.push(self.reg(pc, r)?);
                }
                args.push(self.iconst(i64::try_from(pc).unwrap_or(i64::MAX)));
                let f = self.iconst(helper_trampoline as *const () as usize as i64);
                self.spill_budget();
                let call = self.b.ins().call_indirect(self.helper_sig, f, &args);
                let r0 = self.b.inst_results(call)[0];
                self.check_fault_after_call();
                r0
            }
            BPF_PSEUDO_CALL => {
                let target = rel_target(pc, i64::from(insn.imm), self.insns.len())?;
                if self.inline_at[pc] {
                    return self.inline_call(pc, target);
                }
                let Some(&(_, fref)) = self.callees.iter().find(|(s, _)| *s == target) else {
                    return Err(invalid(pc, format!("call target {target} is not a function")));
                };
                let f = MemFlagsData::trusted();
                let entry = self.is_entry;
                let (depth, deeper) = self.depth_check(pc);
                self.b.ins().store(f, deeper, self.aux, OFF_AUX_DEPTH);
                for r in 1..=5 {
                    args.push(self.reg(pc, r)?);
                }
                let fp = self.reg(pc, FRAME_REG)?;
                let frame = i64::try_from(STACK_FRAME_BYTES).unwrap_or(i64::MAX);
                args.push(self.b.ins().iadd_imm_s(fp, -frame));
                self.spill_budget();
                let call = self.b.ins().call(fref, &args);
                let r0 = self.b.inst_results(call)[0];
                self.check_fault_after_call();
                if !entry {
                    self.b.ins().store(f, depth, self.aux, OFF_AUX_DEPTH);
                }
                r0
            }
            s => return Err(invalid(pc, format!("call with src {s} is not supported"))),
        };
        self.set_reg(pc, 0, r0)?;
        // r1-r5 are caller-saved: their values after a call are undefined; zero them so the
        // generated code need not keep the old values alive across the call.
        let z = self.iconst(0);
        for r in 1..=5 {
            self.set_reg(pc, r, z)?;
        }
        // A helper may write memory, a callee may make checked stores: promoted stack slots
        // are read from the frame again.
        self.reload_slots();
        Ok(())
    }

    /// The depth check of a BPF-to-BPF call at `pc`: faults `CallDepth` there when the call
    /// would make the `MAX_CALL_DEPTH + 1`-th frame; returns (this function's depth, the
    /// callee's). The entry function runs at depth 0 (nothing calls it: the verifier refuses
    /// recursion), so its calls store depth 1 and need not restore it: every call the entry
    /// makes stores it again first. Any other function's depth comes from `aux`.
    fn depth_check(&mut self, pc: usize) -> (Value, Value) {
        const _: () = assert!(MAX_CALL_DEPTH > 1, "a call from the entry always fits");
        if self.is_entry {
            // Depth 1 is below the limit: nothing to check (the quick tier folds nothing).
            return (self.iconst(0), self.iconst(1));
        }
        let f = MemFlagsData::trusted();
        let depth = self.b.ins().load(I64, f, self.aux, OFF_AUX_DEPTH);
        let deeper = self.b.ins().iadd_imm_s(depth, 1);
        let limit = i64::try_from(MAX_CALL_DEPTH).unwrap_or(i64::MAX);
        let too_deep = self.b.ins().icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, deeper, limit);
        let ok = self.b.create_block();
        let fail = self.cold_block();
        self.b.ins().brif(too_deep, fail, &[], ok, &[]);
        self.enter(fail);
        self.jump_fault(fault::CALL_DEPTH, pc);
        self.enter(ok);
        (depth, deeper)
    }

    /// A BPF-to-BPF call at `pc` to the leaf function starting at `target`, inlined
    /// ([`super::inline`]): the same depth check, the callee's slots translated here with
    /// registers of its own (r1-r5 the caller's, r10 one frame down, r0 and r6-r9 unset:
    /// the verifier makes it write them before reading), its charge at its first slot as on a
    /// call, its faults through this function's fault path (which returns, as the caller
    /// would after seeing the callee's fault), and its `exit`s joining after the call with
    /// r0 its r0 and r1-r5 zero. Nothing reads the depth inside a leaf, so it is not stored.
    fn inline_call(&mut self, pc: usize, target: usize) -> Result<(), JitError> {
        self.depth_check(pc);
        let callee = self.cfg.func_range(self.cfg.func_of(target));
        if callee.0 != target {
            return Err(invalid(pc, format!("call target {target} is not a function")));
        }
        let regs: [Variable; NUM_REGS] = std::array::from_fn(|_| self.b.declare_var(I64));
        let zero = self.iconst(0);
        for (r, &v) in regs.iter().enumerate().take(FRAME_REG.into()) {
            let init = if (1..=5).contains(&r) { self.reg(pc, r as u8)? } else { zero };
            self.b.def_var(v, init);
        }
        let fp = self.reg(pc, FRAME_REG)?;
        let frame = i64::try_from(STACK_FRAME_BYTES).unwrap_or(i64::MAX);
        let callee_fp = self.b.ins().iadd_imm_s(fp, -frame);
        self.b.def_var(regs[usize::from(FRAME_REG)], callee_fp);
        let back = self.b.create_block();
        let block_at: Vec<Option<Block>> = (callee.0..callee.1)
            .map(|q| self.cfg.is_block_start(q).then(|| self.b.create_block()))
            .collect();
        let first = block_at[0].expect("a function start is a block start");
        let saved = (
            std::mem::replace(&mut self.regs, regs),
            std::mem::replace(&mut self.block_at, block_at),
            std::mem::replace(&mut self.func_range, callee),
            std::mem::replace(&mut self.back_target, back_targets(self.cfg, self.insns, callee)),
            self.inline_exit.replace(back),
        );
        // The callee's own promoted slots, loaded from its frame before its first block.
        let caller_slots = self.start_slots(callee.0);
        self.b.ins().jump(first, &[]);
        let r = self.body();
        let callee_r0 = self.regs[0];
        (self.regs, self.block_at, self.func_range, self.back_target, self.inline_exit) = saved;
        self.slot_vars = caller_slots;
        r?;
        self.enter(back);
        let r0 = self.b.use_var(callee_r0);
        self.set_reg(pc, 0, r0)?;
        for r in 1..=5 {
            self.set_reg(pc, r, zero)?;
        }
        self.reload_slots();
        Ok(())
    }
}
