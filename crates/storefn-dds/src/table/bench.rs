//! The cache-table benchmark behind `storefn dds table-bench`: inserts/s into an empty table,
//! and lookups/s from N reader threads while one writer keeps inserting and removing (so
//! readers race displacements and seqlock retries, DDS's steady state: the host's writes fill
//! the table while the front end reads it).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::{CacheTable, Item, TableError};
use crate::limits::{MAX_DURATION, MAX_READERS};

/// What to run.
#[derive(Debug, Clone)]
pub struct TableBenchConfig {
    /// Items the table is sized for.
    pub capacity_items: usize,
    /// Occupancy (percent of `capacity_items`) the lookup phase keeps.
    pub fill_percent: u32,
    /// Reader-thread counts to measure, one lookup phase each.
    pub readers: Vec<usize>,
    /// Length of each lookup phase.
    pub duration: Duration,
    /// Rounds per case; the median is reported.
    pub rounds: usize,
    /// Seed of the key choices.
    pub seed: u64,
}

/// One measured case (the median round).
#[derive(Debug, Clone, Serialize)]
pub struct TableBenchResult {
    /// `insert` (one thread filling an empty table) or `lookup` (N readers, one writer).
    pub workload: &'static str,
    /// Reader threads (0 for `insert`).
    pub readers: usize,
    /// Slots in the table.
    pub capacity: usize,
    /// Items present when the phase started (lookup) or inserted (insert).
    pub items: usize,
    /// Lookups/s (all readers) or inserts/s, median of the rounds.
    pub ops_per_sec: f64,
    /// Writer inserts + removes per second during the lookup phase (0 for `insert`).
    pub writer_ops_per_sec: f64,
    /// Share of lookups that found their key (keys are drawn from the present range, so a
    /// miss is a key just removed by the writer or a lookup that lost the race with a move).
    pub hit_share: f64,
    /// Rounds measured.
    pub rounds: usize,
}

/// Bench errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableBenchError {
    /// A bad configuration value, named.
    #[error("table bench: {0}")]
    Config(String),
    /// The table refused an insert the bench needed.
    #[error(transparent)]
    Table(#[from] TableError),
}

fn item(key: u64) -> Item {
    Item { key, version: key, file: 1, offset: key.wrapping_mul(4096), size: 4096 }
}

/// Runs the insert case, then one lookup case per entry of `readers`.
///
/// # Errors
/// `Config` for out-of-range settings; `Table` if the table refuses the prefill.
pub fn run(cfg: &TableBenchConfig) -> Result<Vec<TableBenchResult>, TableBenchError> {
    if cfg.rounds == 0 || cfg.readers.is_empty() || cfg.duration > MAX_DURATION {
        return Err(TableBenchError::Config(format!(
            "rounds ({}) and reader counts must be >= 1, duration <= {MAX_DURATION:?}",
            cfg.rounds
        )));
    }
    if let Some(&r) = cfg.readers.iter().find(|&&r| r == 0 || r > MAX_READERS) {
        return Err(TableBenchError::Config(format!("--readers {r}: must be 1..={MAX_READERS}")));
    }
    if !(1..=90).contains(&cfg.fill_percent) {
        return Err(TableBenchError::Config(format!(
            "--fill {}: must be 1..=90",
            cfg.fill_percent
        )));
    }
    let items = cfg.capacity_items * cfg.fill_percent as usize / 100;
    let mut out = Vec::new();

    let mut rates = Vec::new();
    let mut capacity = 0;
    for _ in 0..cfg.rounds {
        let table = CacheTable::with_capacity(cfg.capacity_items)?;
        capacity = table.capacity();
        let start = Instant::now();
        for key in 0..items as u64 {
            table.insert(item(key))?;
        }
        rates.push(items as f64 / start.elapsed().as_secs_f64());
    }
    out.push(TableBenchResult {
        workload: "insert",
        readers: 0,
        capacity,
        items,
        ops_per_sec: storefn_stats::median(&mut rates).unwrap_or(0.0),
        writer_ops_per_sec: 0.0,
        hit_share: 1.0,
        rounds: cfg.rounds,
    });

    for &readers in &cfg.readers {
        let mut rounds = Vec::new();
        for round in 0..cfg.rounds {
            rounds.push(lookup_round(cfg, readers, items, round as u64)?);
        }
        rounds.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let mid = rounds.swap_remove(rounds.len() / 2);
        out.push(TableBenchResult { rounds: cfg.rounds, ..mid });
    }
    Ok(out)
}

/// One lookup round: prefill keys `0..items`, then for `duration` the writer inserts key
/// `next` and removes key `next - items` (a sliding window, occupancy constant) while
/// `readers` threads look up random keys of the current window.
fn lookup_round(
    cfg: &TableBenchConfig,
    readers: usize,
    items: usize,
    round: u64,
) -> Result<TableBenchResult, TableBenchError> {
    let table = Arc::new(CacheTable::with_capacity(cfg.capacity_items)?);
    for key in 0..items as u64 {
        table.insert(item(key))?;
    }
    // The window's low end; readers draw keys from [low, low + items).
    let low = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(readers + 1));
    let mut handles = Vec::with_capacity(readers);
    for r in 0..readers {
        let (table, low, stop, barrier) =
            (Arc::clone(&table), Arc::clone(&low), Arc::clone(&stop), Arc::clone(&barrier));
        let seed = cfg.seed ^ (round << 32) ^ r as u64;
        handles.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(seed);
            let (mut lookups, mut hits) = (0u64, 0u64);
            barrier.wait();
            // Relaxed: a stop flag; the join below synchronises the counts.
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    let key = low.load(Ordering::Relaxed) + rng.gen_range(0..items as u64);
                    hits += u64::from(table.get(key).is_some());
                }
                lookups += 256;
            }
            (lookups, hits)
        }));
    }
    barrier.wait();
    let start = Instant::now();
    let mut writer_ops = 0u64;
    let mut next = items as u64;
    while start.elapsed() < cfg.duration {
        for _ in 0..64 {
            table.insert(item(next))?;
            table.remove(next - items as u64);
            // Relaxed: readers only use it to choose keys.
            low.store(next - items as u64 + 1, Ordering::Relaxed);
            next += 1;
        }
        writer_ops += 128;
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let (mut lookups, mut hits) = (0u64, 0u64);
    for h in handles {
        let (l, hit) = h.join().expect("reader thread panicked");
        lookups += l;
        hits += hit;
    }
    Ok(TableBenchResult {
        workload: "lookup",
        readers,
        capacity: table.capacity(),
        items,
        ops_per_sec: lookups as f64 / elapsed,
        writer_ops_per_sec: writer_ops as f64 / elapsed,
        hit_share: if lookups == 0 { 0.0 } else { hits as f64 / lookups as f64 },
        rounds: 1,
    })
}
