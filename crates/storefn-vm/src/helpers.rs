//! Helper functions a program may call (`call imm` with src = 0), per program type.
//!
//! Every pointer argument is checked against the invocation's regions exactly like a load or
//! store, so a helper can never be used to escape the sandbox. Ids: the kernel's
//! `bpf_trace_printk` (6), plus storefn memory helpers numbered from [`STOREFN_HELPER_BASE`]
//! (declared in `progs/include/storefn.h`).

use std::fmt::Write as _;

use crate::offload;
use crate::program::{ProgType, RunEnv};
use crate::VmError;

/// `long bpf_trace_printk(const char *fmt, u32 fmt_size, ...)`: up to 3 integer arguments.
pub const BPF_TRACE_PRINTK: u32 = 6;
/// First storefn-specific helper id; far above the kernel's (~210) so they never collide.
pub const STOREFN_HELPER_BASE: u32 = 0x1000;
/// `long storefn_memcpy(void *dst, const void *src, u64 n)`: 0 on success (overlap allowed).
pub const STOREFN_MEMCPY: u32 = STOREFN_HELPER_BASE;
/// `long storefn_memset(void *dst, int c, u64 n)`: 0 on success.
pub const STOREFN_MEMSET: u32 = STOREFN_HELPER_BASE + 1;
/// `long storefn_memcmp(const void *a, const void *b, u64 n)`: <0, 0, >0 like memcmp (-1/0/1).
pub const STOREFN_MEMCMP: u32 = STOREFN_HELPER_BASE + 2;
/// `u32 storefn_crc32c(u32 crc, const void *p, u64 n)`: the CRC-32C of `crc`'s data followed by
/// `[p, p+n)` (zlib's convention: 0 to start, results chain), for functions that check the
/// blocks they read themselves.
pub const STOREFN_CRC32C: u32 = STOREFN_HELPER_BASE + 3;

/// Trace lines kept per instance; older lines are dropped (and counted) beyond this, so a
/// looping program cannot grow the host's memory without bound.
pub const MAX_TRACE_LINES: usize = 1024;
/// Longest formatted trace line, in bytes (the kernel's trace_printk limit is similar).
pub const MAX_TRACE_LINE_BYTES: usize = 512;
/// Longest format string read from the program.
pub const MAX_FORMAT_BYTES: u64 = 256;
/// Instructions a helper call costs against the invocation's budget before any per-byte part:
/// the trampoline and argument checks take about as long as this many JIT'd instructions.
pub const HELPER_CALL_INSNS: u64 = 16;
/// Bytes a memory helper moves or compares per instruction charged (a copy of 64 bytes costs
/// about one JIT'd instruction's time).
pub const HELPER_BYTES_PER_INSN: u64 = 64;
/// Bytes `storefn_crc32c` checksums per instruction charged: the CPU's CRC instruction takes
/// 8 bytes a step at a few cycles each, about one JIT'd instruction's time per 8 bytes.
pub const CRC32C_BYTES_PER_INSN: u64 = 8;
/// What `bpf_trace_printk` costs: formatting, allocating the line and rotating the log take
/// about a microsecond, ~100x a simple instruction; charged high so a program that only logs
/// stops no later than one that computes.
pub const TRACE_PRINTK_INSNS: u64 = 256;
/// `-EINVAL`, what the kernel's helpers return for bad arguments.
const EINVAL: u64 = (-22i64) as u64;

/// Host-side state helpers may touch; one per instance, reached through `RunEnv::host`.
#[derive(Debug, Default)]
pub struct HostState {
    /// `bpf_trace_printk` output, oldest first.
    pub trace: Vec<String>,
    /// Lines dropped because `trace` was full.
    pub trace_dropped: u64,
    /// The cache table `offload` programs' table helpers reach (none: they return -ENODEV).
    pub offload_table: Option<crate::offload::SharedTable>,
}

/// Helper ids each program type may call.
const XRP_HELPERS: &[u32] = &[BPF_TRACE_PRINTK, STOREFN_CRC32C];
const LAMBDA_HELPERS: &[u32] =
    &[BPF_TRACE_PRINTK, STOREFN_MEMCPY, STOREFN_MEMSET, STOREFN_MEMCMP, STOREFN_CRC32C];
const OFFLOAD_HELPERS: &[u32] = &[
    BPF_TRACE_PRINTK,
    STOREFN_MEMCPY,
    STOREFN_MEMSET,
    STOREFN_MEMCMP,
    STOREFN_CRC32C,
    offload::STOREFN_TABLE_LOOKUP,
    offload::STOREFN_TABLE_INSERT,
    offload::STOREFN_TABLE_DELETE,
];

/// The helper table of a program type.
#[must_use]
pub fn table(prog_type: ProgType) -> &'static [u32] {
    match prog_type {
        ProgType::Xrp => XRP_HELPERS,
        ProgType::Lambda => LAMBDA_HELPERS,
        ProgType::Offload => OFFLOAD_HELPERS,
    }
}

/// May a program of this type call helper `id`?
#[must_use]
pub fn allowed(prog_type: ProgType, id: u32) -> bool {
    table(prog_type).contains(&id)
}

/// Calls helper `id` with r1..r5 = `args` for the instruction `insn`; returns r0. Charges the
/// helper's cost to `env.insns_left` first.
///
/// # Errors
/// [`VmError::Helper`] for an id outside the type's table, a pointer argument outside the
/// regions ([`VmError::BadRead`] / [`VmError::BadWrite`] naming `insn`), or
/// [`VmError::BudgetExhausted`] when the cost does not fit.
///
/// # Safety
/// The contract of [`crate::interp::run`] for `env`: its regions are valid memory (writes:
/// and unaliased) and `env.host` is null or an unborrowed `HostState`.
pub(crate) unsafe fn call(
    env: &mut RunEnv,
    prog_type: ProgType,
    id: u32,
    args: [u64; 5],
    insn: usize,
) -> Result<u64, VmError> {
    if !allowed(prog_type, id) {
        return Err(VmError::Helper {
            insn,
            helper: id,
            reason: format!("not available to {prog_type:?} programs"),
        });
    }
    // Only the memory and checksum helpers take a length (r3); anything else in r3 is whatever the program
    // left there and must not count (a stale pointer would look like a huge length).
    let cost = match id {
        BPF_TRACE_PRINTK => TRACE_PRINTK_INSNS,
        STOREFN_MEMCPY | STOREFN_MEMSET | STOREFN_MEMCMP => {
            HELPER_CALL_INSNS.saturating_add(args[2].div_ceil(HELPER_BYTES_PER_INSN))
        }
        STOREFN_CRC32C => HELPER_CALL_INSNS.saturating_add(args[2].div_ceil(CRC32C_BYTES_PER_INSN)),
        _ => HELPER_CALL_INSNS,
    };
    if env.insns_left < cost {
        return Err(VmError::BudgetExhausted { insn, budget: env.insn_budget });
    }
    env.insns_left -= cost;
    match id {
        BPF_TRACE_PRINTK => trace_printk(env, args, insn),
        STOREFN_MEMCPY => {
            let (dst, src, n) = (args[0], args[1], args[2]);
            check(env, insn, src, n, false)?;
            check(env, insn, dst, n, true)?;
            if n > 0 {
                // SAFETY: both ranges lie inside regions the instance keeps alive for the call
                // (checked above); `copy` allows overlap.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n as usize) };
            }
            Ok(0)
        }
        STOREFN_MEMSET => {
            let (dst, c, n) = (args[0], args[1], args[2]);
            check(env, insn, dst, n, true)?;
            if n > 0 {
                // SAFETY: `[dst, dst+n)` is inside a write region (checked above).
                unsafe { std::ptr::write_bytes(dst as *mut u8, c as u8, n as usize) };
            }
            Ok(0)
        }
        STOREFN_MEMCMP => {
            let (a, b, n) = (args[0], args[1], args[2]);
            check(env, insn, a, n, false)?;
            check(env, insn, b, n, false)?;
            let (x, y) = (bytes(a, n), bytes(b, n));
            Ok(match x.cmp(y) {
                std::cmp::Ordering::Less => u64::MAX,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            })
        }
        STOREFN_CRC32C => {
            let (crc, p, n) = (args[0] as u32, args[1], args[2]);
            check(env, insn, p, n, false)?;
            Ok(u64::from(crc32c::crc32c_append(crc, bytes(p, n))))
        }
        offload::STOREFN_TABLE_LOOKUP
        | offload::STOREFN_TABLE_INSERT
        | offload::STOREFN_TABLE_DELETE => {
            let table = if env.host.is_null() {
                None
            } else {
                // SAFETY: a non-null `RunEnv::host` always points at the instance's `HostState`,
                // which outlives the invocation and is not otherwise borrowed while it runs.
                unsafe { (*env.host.cast::<HostState>()).offload_table.clone() }
            };
            offload::call_table_helper(table.as_ref(), id, args, |addr, n, write| {
                check(env, insn, addr, n, write)
            })
        }
        _ => Err(VmError::Helper { insn, helper: id, reason: "unknown helper".into() }),
    }
}

/// Checks `[addr, addr+n)` against the read (or write) regions; an empty range is always fine.
fn check(env: &RunEnv, insn: usize, addr: u64, n: u64, write: bool) -> Result<(), VmError> {
    if n == 0 {
        return Ok(());
    }
    if write && !env.write.allows(addr, n) {
        return Err(VmError::BadWrite { insn, at: env.read.place(addr), len: n });
    }
    if !write && !env.read.allows(addr, n) {
        return Err(VmError::BadRead { insn, at: env.read.place(addr), len: n });
    }
    Ok(())
}

/// A checked range as a slice; only call after [`check`].
fn bytes<'a>(addr: u64, n: u64) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the caller checked `[addr, addr+n)` lies in a read region that stays alive and is
    // not written during this helper call; the slice does not outlive the call.
    unsafe { std::slice::from_raw_parts(addr as *const u8, n as usize) }
}

fn trace_printk(env: &mut RunEnv, args: [u64; 5], insn: usize) -> Result<u64, VmError> {
    let (fmt, fmt_size) = (args[0], args[1]);
    if fmt_size == 0 || fmt_size > MAX_FORMAT_BYTES {
        return Ok(EINVAL);
    }
    check(env, insn, fmt, fmt_size, false)?;
    let raw = bytes(fmt, fmt_size);
    let raw = raw.iter().position(|&b| b == 0).map_or(raw, |z| &raw[..z]);
    let Some(line) = format_trace(raw, &args[2..]) else {
        return Ok(EINVAL);
    };
    let n = line.len() as u64;
    if env.host.is_null() {
        return Err(VmError::Helper {
            insn,
            helper: BPF_TRACE_PRINTK,
            reason: "no host state for the trace log".into(),
        });
    }
    // SAFETY: a non-null `RunEnv::host` always points at the instance's `HostState`, which
    // outlives the invocation and is not otherwise borrowed while the program runs.
    let host = unsafe { &mut *env.host.cast::<HostState>() };
    if host.trace.len() >= MAX_TRACE_LINES {
        host.trace.remove(0);
        host.trace_dropped += 1;
    }
    host.trace.push(line);
    Ok(n)
}

/// Formats a trace_printk format with up to 3 integer arguments: `%d %i %u %x` with optional
/// `l`/`ll`, and `%%`. `None` for anything else (the kernel returns -EINVAL too).
#[must_use]
pub fn format_trace(fmt: &[u8], args: &[u64]) -> Option<String> {
    let mut out = String::new();
    let mut next = 0;
    let mut k = 0;
    while k < fmt.len() {
        let c = fmt[k];
        k += 1;
        if c != b'%' {
            out.push(if c.is_ascii() { c as char } else { '?' });
            continue;
        }
        let mut long = 0;
        while k < fmt.len() && fmt[k] == b'l' && long < 2 {
            long += 1;
            k += 1;
        }
        let conv = *fmt.get(k)?;
        k += 1;
        if conv == b'%' && long == 0 {
            out.push('%');
            continue;
        }
        let v = *args.get(next)?;
        next += 1;
        let v32 = long == 0;
        match conv {
            b'd' | b'i' if v32 => write!(out, "{}", v as u32 as i32),
            b'd' | b'i' => write!(out, "{}", v as i64),
            b'u' if v32 => write!(out, "{}", v as u32),
            b'u' => write!(out, "{v}"),
            b'x' if v32 => write!(out, "{:x}", v as u32),
            b'x' => write!(out, "{v:x}"),
            _ => return None,
        }
        .ok()?;
        if out.len() > MAX_TRACE_LINE_BYTES {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_trace_conversions() {
        let s = format_trace(b"a=%d b=%lu c=%x %%", &[u64::MAX, 7, 255]).unwrap();
        assert_eq!(s, "a=-1 b=7 c=ff %");
        assert_eq!(format_trace(b"%lld %llx", &[u64::MAX, 16]).unwrap(), "-1 10");
        assert_eq!(format_trace(b"%s", &[0]), None);
        assert_eq!(format_trace(b"%d %d %d %d", &[1, 2, 3]), None);
    }

    /// Regression: table helpers were charged by their r3 as if it were a length, so a stale
    /// pointer left in r3 stopped the program on the budget.
    #[test]
    fn only_memory_helpers_charge_by_length() {
        let mut env = RunEnv {
            read: crate::mem::RegionSet::default(),
            write: crate::mem::RegionSet::default(),
            globals_base: 0,
            insns_left: 100,
            insn_budget: 100,
            fault: crate::program::FaultInfo::default(),
            host: std::ptr::null_mut(),
        };
        let stale_r3 = 0x7fff_0000_0000;
        // SAFETY: no regions and no host: the helpers touch no memory (delete takes only a key).
        let r = unsafe {
            call(
                &mut env,
                ProgType::Offload,
                offload::STOREFN_TABLE_DELETE,
                [1, 0, stale_r3, 0, 0],
                3,
            )
        };
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(env.insns_left, 100 - HELPER_CALL_INSNS);
        // SAFETY: as above; a memset of 6400 bytes (cost 116) is refused before any access.
        let r = unsafe { call(&mut env, ProgType::Lambda, STOREFN_MEMSET, [0, 0, 6400, 0, 0], 4) };
        assert_eq!(r, Err(VmError::BudgetExhausted { insn: 4, budget: 100 }));
    }

    #[test]
    fn tables() {
        assert!(allowed(ProgType::Xrp, BPF_TRACE_PRINTK));
        assert!(!allowed(ProgType::Xrp, STOREFN_MEMCPY));
        assert!(allowed(ProgType::Lambda, STOREFN_MEMCMP));
        assert!(!allowed(ProgType::Lambda, 1));
    }
}
