//! Keeping many chains (or plain reads) in flight, on one engine or one per thread.

use std::time::Instant;

use super::cases::{ns_since, refresh_if_stale};
use super::IoBenchConfig;
use crate::{Completion, Engine, EngineConfig, FileId, IoMode, NoFunction, StorageFn};

/// What an in-flight run keeps going: `chains` chains of `depth` hops, or plain reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Flight {
    pub(super) id: FileId,
    pub(super) depth: u64,
    pub(super) chains: usize,
    pub(super) plain: bool,
}

/// Keeps `fl.chains` chains (or, with `plain`, single reads) in flight until all of `starts`
/// are done; per-hop latency samples (chain latency / hops) go to `samples_ns`. Returns how
/// many completed `Stale` in raw mode (their results are discarded; raw mode is refreshed).
pub(super) fn keep_in_flight(
    e: &mut Engine,
    fl: Flight,
    starts: &[u64],
    walk: &mut dyn StorageFn,
    samples_ns: &mut Vec<u64>,
) -> Result<u64, String> {
    let mut stale = 0u64;
    let Flight { id, depth, chains, plain } = fl;
    let per = if plain { 1 } else { depth };
    let t0 = Instant::now();
    let mut submitted_ns = vec![0u64; starts.len()];
    let (mut next, mut done) = (0, 0);
    let mut failed = None;
    while done < starts.len() {
        while next < starts.len() && e.live() < chains {
            submitted_ns[next] = ns_since(t0);
            let tok = next as u64;
            let r = if plain {
                e.submit_read(id, starts[next], 16, tok)
            } else {
                e.submit_chain(id, starts[next], 16, tok, |s| {
                    s[..8].copy_from_slice(&depth.to_le_bytes());
                })
            };
            r.map_err(|e| e.to_string())?;
            next += 1;
        }
        let on_done = |c: Completion<'_>| {
            let now = ns_since(t0);
            match c.result {
                Err(e) if e.is_stale() => stale += 1,
                Err(e) => {
                    failed.get_or_insert(e.to_string());
                }
                Ok(st) if !plain && u64::from(st.hops) != depth => {
                    failed.get_or_insert(format!(
                        "chain {}: {} hops, expected {depth}",
                        c.token, st.hops
                    ));
                }
                Ok(_) => {}
            }
            let at = usize::try_from(c.token).expect("tokens are indices into starts");
            samples_ns.push((now - submitted_ns[at]) / per);
        };
        let got =
            if plain { e.wait(1, &mut NoFunction, on_done) } else { e.wait(1, walk, on_done) };
        done += got.map_err(|e| e.to_string())?;
    }
    if stale > 0 {
        refresh_if_stale(e, id);
    }
    failed.map_or(Ok(stale), Err)
}

/// The in-flight case on `cfg.threads` threads, each with its own engine (`ecfg`, the file
/// opened in `mode`) and its share of `starts`; returns the measured wall time, seconds.
pub(super) fn threaded(
    cfg: &IoBenchConfig<'_>,
    ecfg: EngineConfig,
    mode: IoMode,
    fl: Flight,
    warm: &[u64],
    starts: &[u64],
    samples_ns: &mut Vec<u64>,
) -> Result<f64, String> {
    let threads = cfg.threads;
    let barrier = std::sync::Barrier::new(threads + 1);
    let share = starts.len().div_ceil(threads);
    let run = |mine: &[u64]| -> Result<Vec<u64>, String> {
        let setup = Engine::new(ecfg).and_then(|mut e| e.open(&cfg.file, mode).map(|id| (e, id)));
        let res = setup.map_err(|e| e.to_string()).and_then(|(mut e, id)| {
            let mut f = cfg.function.build().map_err(|e| e.to_string())?;
            keep_in_flight(&mut e, Flight { id, ..fl }, warm, &mut *f, &mut Vec::new())?;
            Ok((e, id, f))
        });
        // Every thread reaches the barrier, set up or not, so none waits forever.
        barrier.wait();
        let (mut e, id, mut f) = res?;
        let mut out = Vec::with_capacity(mine.len());
        keep_in_flight(&mut e, Flight { id, ..fl }, mine, &mut *f, &mut out)?;
        Ok(out)
    };
    let (elapsed_s, results) = std::thread::scope(|s| {
        let handles: Vec<_> = starts.chunks(share).map(|mine| s.spawn(|| run(mine))).collect();
        // Threads past the chunk count never wait: pad the barrier for them.
        for _ in handles.len()..threads {
            barrier.wait();
        }
        barrier.wait();
        let t0 = Instant::now();
        let results: Vec<_> =
            handles.into_iter().map(std::thread::ScopedJoinHandle::join).collect();
        (t0.elapsed().as_secs_f64(), results)
    });
    for r in results {
        samples_ns.extend(r.map_err(|_| "bench thread panicked".to_string())??);
    }
    Ok(elapsed_s)
}
