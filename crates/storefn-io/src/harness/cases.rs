//! The timed cases on one engine and file.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Instant;

use super::file::Rng;
use super::flight::{keep_in_flight, Flight};
use super::{Case, IoBenchConfig, IoBenchError, CASE_NAMES};
use crate::{func, ChainError, Engine, EngineConfig, EngineError, FileId, IoMode, XrpCtx};

/// Alignment of the pread case's buffer (O_DIRECT's strictest on the devices here).
const PREAD_BUF_ALIGN: usize = 4096;

/// A case's per-chain work; `Err` names what failed.
type Step<'b, 'c> = dyn FnMut(&mut Bench<'c>, u64) -> Result<(), String> + 'b;

/// One engine and the pointer file opened on it, shared by the cases.
pub(super) struct Bench<'c> {
    pub(super) cfg: &'c IoBenchConfig<'c>,
    pub(super) ecfg: EngineConfig,
    pub(super) mode: IoMode,
    pub(super) e: Engine,
    pub(super) id: FileId,
    pub(super) nodes: u64,
    pub(super) align: u64,
    /// Chains that completed `Stale` in raw mode (redone on the file path; raw mode refreshed).
    pub(super) stale: u64,
    pub(super) raw_fallback: Option<String>,
}

/// Raw mode after a `Stale` chain: set it up again (a failure leaves the file path on, which
/// the next chains use; the report's `mode` stays what was opened).
pub(super) fn refresh_if_stale(e: &mut Engine, id: FileId) {
    if e.raw_access(id).is_some() && !e.is_raw(id) {
        // A failed refresh is not an error of the bench: the file path serves the rest.
        let _ = e.refresh_raw(id);
    }
}

pub(super) fn next_of(block: &[u8]) -> u64 {
    u64::from_le_bytes(block[..8].try_into().expect("8 bytes"))
}

/// User + system CPU seconds of the process so far.
#[allow(clippy::cast_precision_loss)]
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed rusage we own; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &raw mut ru);
        ru
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Elapsed ns as u64 (saturating: a bench never runs 584 years).
pub(super) fn ns_since(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl<'c> Bench<'c> {
    /// A new engine with `ecfg` and the pointer file opened in the asked mode; raw mode that
    /// cannot be set up falls back to O_DIRECT (or buffered) and records why.
    pub(super) fn open(
        cfg: &'c IoBenchConfig<'c>,
        ecfg: EngineConfig,
    ) -> Result<Self, IoBenchError> {
        let mut e = Engine::new(ecfg)?;
        let plain = if cfg.buffered { IoMode::Buffered } else { IoMode::Direct };
        let (mode, id, raw_fallback) = if cfg.raw {
            match e.open(&cfg.file, IoMode::Raw) {
                Ok(id) => (IoMode::Raw, id, None),
                Err(
                    err @ (EngineError::RawUnavailable { .. } | EngineError::RawBlockSize { .. }),
                ) => (plain, e.open(&cfg.file, plain)?, Some(err.to_string())),
                Err(other) => return Err(other.into()),
            }
        } else {
            (plain, e.open(&cfg.file, plain)?, None)
        };
        let align = e.file_align(id).unwrap_or(1);
        Ok(Self {
            cfg,
            ecfg,
            mode,
            e,
            id,
            nodes: cfg.size_bytes / cfg.node_bytes,
            align,
            stale: 0,
            raw_fallback,
        })
    }

    /// One plain read; a `Stale` one is redone (on the file path) and raw mode refreshed.
    fn read_or_redo(&mut self, at: u64, buf: &mut [u8]) -> Result<(), ChainError> {
        match self.e.read(self.id, at, buf) {
            Err(e) if e.is_stale() => {
                self.stale += 1;
                self.e.read(self.id, at, buf)?;
                refresh_if_stale(&mut self.e, self.id);
                Ok(())
            }
            r => r.map(drop),
        }
    }

    /// `n` node offsets, a deterministic function of the seed and the case's `salt`.
    pub(super) fn starts(&self, salt: u64, n: usize) -> Vec<u64> {
        let mut rng = Rng(self.cfg.seed ^ salt.wrapping_mul(0x51_7cc1_b727_220a));
        (0..n).map(|_| rng.below(self.nodes) * self.cfg.node_bytes).collect()
    }

    /// Runs `step` over warm-up then measured starts; a sample is the step's time divided by
    /// `per` (the depth for chains, 1 for plain reads).
    fn timed(
        &mut self,
        name: &'static str,
        salt: u64,
        reads: usize,
        per: u64,
        step: &mut Step<'_, 'c>,
    ) -> Result<Case, IoBenchError> {
        let w = self.cfg.warmup;
        let starts = self.starts(salt, w + reads);
        let fail = |what| IoBenchError::Failed { case: name, what };
        for &s in &starts[..w] {
            step(self, s).map_err(fail)?;
        }
        let mut samples_ns = Vec::with_capacity(reads);
        let cpu0 = cpu_seconds();
        let t0 = Instant::now();
        for &s in &starts[w..] {
            let t = Instant::now();
            step(self, s).map_err(fail)?;
            samples_ns.push(ns_since(t) / per);
        }
        let elapsed_s = t0.elapsed().as_secs_f64();
        let cpu_s = cpu_seconds() - cpu0;
        samples_ns.sort_unstable();
        Ok(Case { name, hops: reads as u64 * per, elapsed_s, samples_ns, cpu_s })
    }

    pub(super) fn case_pread(&mut self) -> Result<Case, IoBenchError> {
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        if !self.cfg.buffered {
            opts.custom_flags(libc::O_DIRECT);
        }
        let f = opts
            .open(&self.cfg.file)
            .map_err(|source| IoBenchError::File { path: self.cfg.file.clone(), source })?;
        let span = usize::try_from(self.cfg.node_bytes.max(self.align)).expect("<= 4 KiB");
        // An aligned buffer for O_DIRECT: over-allocate and start at an aligned address.
        let mut raw = vec![0u8; span + PREAD_BUF_ALIGN];
        let pad = raw.as_ptr().align_offset(PREAD_BUF_ALIGN);
        let (depth, align) = (self.cfg.depth, self.align);
        self.timed(CASE_NAMES[0], 1, self.cfg.requests, u64::from(depth), &mut |_, start| {
            let buf = &mut raw[pad..pad + span];
            let mut at = start;
            for _ in 0..depth {
                let base = at & !(align - 1);
                f.read_exact_at(buf, base).map_err(|e| format!("pread at {base}: {e}"))?;
                at = next_of(&buf[usize::try_from(at - base).expect("< 4 KiB")..]);
            }
            Ok(())
        })
    }

    pub(super) fn case_uring_hop(&mut self) -> Result<Case, IoBenchError> {
        let depth = self.cfg.depth;
        let mut buf = [0u8; 16];
        self.timed(CASE_NAMES[1], 2, self.cfg.requests, u64::from(depth), &mut |b, start| {
            let mut at = start;
            for _ in 0..depth {
                b.read_or_redo(at, &mut buf).map_err(|e| e.to_string())?;
                at = next_of(&buf);
            }
            Ok(())
        })
    }

    pub(super) fn case_one_chain(&mut self) -> Result<Case, IoBenchError> {
        let depth = u64::from(self.cfg.depth);
        let mut walk = self.cfg.function.build()?;
        self.timed(CASE_NAMES[2], 3, self.cfg.requests, depth, &mut |b, start| {
            let mut scratch = depth.to_le_bytes();
            let st = match b.e.read_xrp(b.id, start, 16, &mut *walk, &mut scratch) {
                Err(e) if e.is_stale() => {
                    // The fallback: redo on the file path (raw mode is off now), then refresh.
                    b.stale += 1;
                    scratch = depth.to_le_bytes();
                    let st = b.e.read_xrp(b.id, start, 16, &mut *walk, &mut scratch);
                    refresh_if_stale(&mut b.e, b.id);
                    st
                }
                r => r,
            }
            .map_err(|e| format!("chain from {start}: {e}"))?;
            if u64::from(st.hops) != depth {
                return Err(format!("chain from {start}: {} hops, expected {depth}", st.hops));
            }
            Ok(())
        })
    }

    pub(super) fn case_chains_in_flight(&mut self) -> Result<Case, IoBenchError> {
        self.in_flight(CASE_NAMES[3], 4, false, self.cfg.requests)
    }

    /// The device reference: plain random reads at queue depth `qd`.
    pub(super) fn case_reference(&mut self, qd: usize) -> Result<Case, IoBenchError> {
        let reads = self.cfg.requests * self.cfg.depth as usize;
        if qd > 1 {
            return self.in_flight(CASE_NAMES[5], 6, true, reads);
        }
        let mut buf = [0u8; 16];
        self.timed(CASE_NAMES[4], 5, reads, 1, &mut |b, s| {
            b.read_or_redo(s, &mut buf).map_err(|e| format!("read at {s}: {e}"))
        })
    }

    /// `n` chains (or plain reads) kept `chains` in flight per thread.
    fn in_flight(
        &mut self,
        name: &'static str,
        salt: u64,
        plain: bool,
        n: usize,
    ) -> Result<Case, IoBenchError> {
        let cfg = self.cfg;
        let depth = u64::from(cfg.depth);
        let fl = Flight { id: self.id, depth, chains: cfg.chains, plain };
        let warm = self.starts(salt ^ 0xff, cfg.warmup);
        let starts = self.starts(salt, n);
        let fail = |what| IoBenchError::Failed { case: name, what };
        let mut samples_ns = Vec::with_capacity(n);
        let cpu0 = cpu_seconds();
        let elapsed_s = if cfg.threads == 1 {
            let mut f = cfg.function.build()?;
            let e = &mut self.e;
            self.stale += keep_in_flight(e, fl, &warm, &mut *f, &mut Vec::new()).map_err(fail)?;
            let t0 = Instant::now();
            self.stale += keep_in_flight(e, fl, &starts, &mut *f, &mut samples_ns).map_err(fail)?;
            t0.elapsed().as_secs_f64()
        } else {
            let (ecfg, mode) = (self.ecfg, self.mode);
            super::flight::threaded(cfg, ecfg, mode, fl, &warm, &starts, &mut samples_ns)
                .map_err(fail)?
        };
        let cpu_s = cpu_seconds() - cpu0;
        samples_ns.sort_unstable();
        let hops = if plain { n as u64 } else { n as u64 * depth };
        Ok(Case { name, hops, elapsed_s, samples_ns, cpu_s })
    }
}

/// The Rust chain function: scratch[0..8] counts the hops left; follow the node's first u64
/// until it reaches zero.
pub(super) fn hop_counter(
) -> impl FnMut(&mut XrpCtx, &[u8], &mut [u8]) -> Result<u64, storefn_vm::VmError> {
    func(|ctx, data, s| {
        let left = u64::from_le_bytes(s[..8].try_into().expect("8 bytes")).saturating_sub(1);
        s[..8].copy_from_slice(&left.to_le_bytes());
        if left == 0 {
            ctx.done = 1;
        } else {
            ctx.next_addr[0] = next_of(data);
            ctx.size[0] = 16;
        }
        Ok(0)
    })
}
