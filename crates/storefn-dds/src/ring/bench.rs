//! The ring microbenchmark behind `storefn ring bench`: P producer threads push fixed-size
//! messages into one ring, one consumer thread drains it in batches; messages per second, the
//! median of rounds (interleaved across rings), for the progressive ring (in a sealed memfd, as between processes), the
//! mutex ring and the flag-per-slot ring at the same byte capacity. The consumer checks every
//! message (per-producer FIFO order, no loss, no duplicate), so a fast wrong ring fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;

use super::progressive::{backoff, record_bytes, ring_words};
use super::{FlagRing, MutexRing, ProgressiveRing, RingError, SharedMemory};
use crate::limits::MAX_BATCH_RECORDS;
use crate::limits::{MAX_CASE_TIME, MAX_PRODUCERS, MIN_MESSAGE_BYTES};

/// Ring names, as `--ring` and the JSON key `ring` spell them.
pub const RING_NAMES: &[&str] = &["progressive", "mutex", "flag"];

/// What to run.
#[derive(Debug, Clone)]
pub struct RingBenchConfig {
    /// Rings to measure (names from [`RING_NAMES`]).
    pub rings: Vec<String>,
    /// Producer-thread counts.
    pub producers: Vec<usize>,
    /// Messages per case (split evenly over the producers).
    pub messages: u64,
    /// Payload bytes per message.
    pub message_bytes: usize,
    /// Ring data bytes (a power of two); the flag ring gets the same bytes in slots.
    pub ring_bytes: usize,
    /// Rounds per case; the median is reported.
    pub rounds: usize,
}

/// One case (median round).
#[derive(Debug, Clone, Serialize)]
pub struct RingBenchResult {
    /// progressive | mutex | flag.
    pub ring: String,
    /// Producer threads.
    pub producers: usize,
    /// Messages per second through the ring (push to consumed), median of the rounds.
    pub ops_per_sec: f64,
    /// Slowest and fastest round.
    pub min_ops_per_sec: f64,
    /// Fastest round.
    pub max_ops_per_sec: f64,
    /// Messages per round.
    pub messages: u64,
    /// Payload bytes per message.
    pub message_bytes: usize,
    /// Mean messages per non-empty consumer batch.
    pub mean_batch: f64,
    /// Rounds.
    pub rounds: usize,
    /// CPUs available to the process (producers beyond it time-share).
    pub cpus: usize,
}

/// Bench errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RingBenchError {
    /// A bad setting, named.
    #[error("ring bench: {0}")]
    Config(String),
    /// A ring failed (or the consumer saw a lost, duplicated or reordered message).
    #[error("ring bench, {ring} ring with {producers} producers: {what}")]
    Failed {
        /// The ring.
        ring: String,
        /// Producers.
        producers: usize,
        /// What went wrong.
        what: String,
    },
}

/// Runs every (ring, producers) case.
///
/// # Errors
/// `Config` for bad settings; `Failed` when a ring loses, duplicates or reorders a message,
/// reports corruption, or a case exceeds [`MAX_CASE_TIME`].
pub fn run(cfg: &RingBenchConfig) -> Result<Vec<RingBenchResult>, RingBenchError> {
    if let Some(r) = cfg.rings.iter().find(|r| !RING_NAMES.contains(&r.as_str())) {
        return Err(RingBenchError::Config(format!(
            "--ring {r}: expected one of {}",
            RING_NAMES.join("|")
        )));
    }
    if let Some(&p) = cfg.producers.iter().find(|&&p| p == 0 || p > MAX_PRODUCERS) {
        return Err(RingBenchError::Config(format!(
            "--producers {p}: must be 1..={MAX_PRODUCERS}"
        )));
    }
    if cfg.rounds == 0 || cfg.messages == 0 || cfg.message_bytes < MIN_MESSAGE_BYTES {
        return Err(RingBenchError::Config(format!(
            "rounds and messages must be >= 1 and --message-bytes >= {MIN_MESSAGE_BYTES}"
        )));
    }
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    // Rounds interleave the rings (round r runs every ring once before round r+1), so load
    // from elsewhere on the machine hits every ring alike and the ratios stay comparable.
    let mut out = Vec::new();
    for &producers in &cfg.producers {
        let mut rates = vec![Vec::with_capacity(cfg.rounds); cfg.rings.len()];
        let mut batches = vec![(0u64, 0u64); cfg.rings.len()];
        for _ in 0..cfg.rounds {
            for (i, ring) in cfg.rings.iter().enumerate() {
                let r = one_round(ring, producers, cfg).map_err(|what| RingBenchError::Failed {
                    ring: ring.clone(),
                    producers,
                    what,
                })?;
                rates[i].push(r.0);
                batches[i].0 += r.1;
                batches[i].1 += r.2;
            }
        }
        for (i, ring) in cfg.rings.iter().enumerate() {
            let rates = &mut rates[i];
            rates.sort_by(f64::total_cmp);
            out.push(RingBenchResult {
                ring: ring.clone(),
                producers,
                ops_per_sec: rates[rates.len() / 2],
                min_ops_per_sec: rates[0],
                max_ops_per_sec: rates[rates.len() - 1],
                messages: per_producer(cfg.messages, producers) * producers as u64,
                message_bytes: cfg.message_bytes,
                mean_batch: batches[i].0 as f64 / batches[i].1.max(1) as f64,
                rounds: cfg.rounds,
                cpus,
            });
        }
    }
    Ok(out)
}

fn per_producer(messages: u64, producers: usize) -> u64 {
    messages.div_ceil(producers as u64)
}

/// One round: (messages/s, messages taken, non-empty batches).
fn one_round(
    ring: &str,
    producers: usize,
    cfg: &RingBenchConfig,
) -> Result<(f64, u64, u64), String> {
    let err = |e: RingError| e.to_string();
    let max_batch = MAX_BATCH_RECORDS;
    match ring {
        "progressive" => {
            let shm = SharedMemory::create("storefn-ring-bench", ring_words(cfg.ring_bytes) * 8)
                .map_err(|e| e.to_string())?;
            let ring = ProgressiveRing::init(shm.words(), cfg.ring_bytes, cfg.message_bytes)
                .map_err(err)?;
            let mut consumer = ring.consumer(cfg.message_bytes);
            drive(
                producers,
                cfg,
                |m| ring.try_push(&[m]),
                |f| consumer.pop_batch(&ring, max_batch, f).map_err(err),
            )
        }
        "mutex" => {
            let ring = MutexRing::new(cfg.ring_bytes, cfg.message_bytes).map_err(err)?;
            let mut scratch = Vec::with_capacity(max_batch * (cfg.message_bytes + 4));
            drive(
                producers,
                cfg,
                |m| ring.try_push(m),
                |f| Ok(ring.pop_batch(max_batch, &mut scratch, f)),
            )
        }
        _ => {
            // Same bytes as the others: one slot per record the progressive ring would hold.
            let slots = (cfg.ring_bytes / record_bytes(cfg.message_bytes)).max(1);
            let ring = FlagRing::new(slots, cfg.message_bytes).map_err(err)?;
            let mut scratch = Vec::with_capacity(cfg.message_bytes + 8);
            drive(
                producers,
                cfg,
                |m| ring.try_push(m),
                |f| Ok(ring.pop_batch(max_batch, &mut scratch, f)),
            )
        }
    }
}

/// Runs `producers` threads calling `push`, and the consumer (this thread) calling `pop` until
/// every message arrived; checks order per producer.
fn drive(
    producers: usize,
    cfg: &RingBenchConfig,
    push: impl Fn(&[u8]) -> Result<(), RingError> + Sync,
    mut pop: impl FnMut(&mut dyn FnMut(&[u8])) -> Result<usize, String>,
) -> Result<(f64, u64, u64), String> {
    let each = per_producer(cfg.messages, producers);
    let total = each * producers as u64;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(producers);
        for p in 0..producers {
            let (push, stop) = (&push, &stop);
            let mut msg = vec![0xA5u8; cfg.message_bytes];
            handles.push(s.spawn(move || -> Result<(), String> {
                for seq in 0..each {
                    msg[..8].copy_from_slice(&((p as u64) << 32 | seq).to_le_bytes());
                    let mut spins = 0;
                    loop {
                        match push(&msg) {
                            Ok(()) => break,
                            Err(RingError::Full) => {
                                // Relaxed: an abort flag; nothing is published through it.
                                if stop.load(Ordering::Relaxed) {
                                    return Ok(());
                                }
                                backoff(&mut spins);
                            }
                            Err(e) => return Err(e.to_string()),
                        }
                    }
                }
                Ok(())
            }));
        }
        let mut next = vec![0u64; producers];
        let (mut got, mut batches) = (0u64, 0u64);
        let mut bad: Option<String> = None;
        let mut spins = 0;
        let result = loop {
            if got == total {
                break Ok(());
            }
            let n = match pop(&mut |m: &[u8]| {
                let stamp = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
                let (p, seq) = ((stamp >> 32) as usize, stamp & 0xFFFF_FFFF);
                if bad.is_none()
                    && (p >= producers || next[p] != seq || m.len() != cfg.message_bytes)
                {
                    bad = Some(format!(
                        "message {stamp:#x} ({} bytes) out of order or foreign",
                        m.len()
                    ));
                } else if p < producers {
                    next[p] += 1;
                }
            }) {
                Ok(n) => n,
                Err(e) => break Err(e),
            };
            if let Some(b) = bad.take() {
                break Err(b);
            }
            if n == 0 {
                if start.elapsed() > MAX_CASE_TIME {
                    break Err(format!("only {got} of {total} messages after {MAX_CASE_TIME:?}"));
                }
                backoff(&mut spins);
            } else {
                spins = 0;
                got += n as u64;
                batches += 1;
            }
        };
        let elapsed = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().map_err(|_| "producer panicked".to_string())??;
        }
        result.map(|()| (total as f64 / elapsed, got, batches))
    })
}
