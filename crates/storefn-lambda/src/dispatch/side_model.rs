//! One side's model: its rings, its spread, the change signal and its tail factor.

use super::ring::Ring;
use super::{TAIL_AFTER_CHANGE, TAIL_SAMPLES};

/// Pending confirmation of a change: direction (+1 slower, -1 faster, 0 none), how many
/// samples in a row said so, and the first one's ratio to its level (it joins the side's
/// spread if not confirmed).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Suspect {
    pub(super) dir: i8,
    seen: u8,
    ratio: f64,
}

/// Samples in a row that confirm a change. The winner getting slower needs one more: its
/// samples come on every request, so a burst of load on the machine (a few slow requests in a
/// row, on both sides alike) would otherwise drop its history and send the next requests to
/// the other side until probes win it back; a real slowdown costs one request more to see.
const CONFIRM_SAMPLES: u8 = 2;
const CONFIRM_WINNER_SLOWER: u8 = 3;

/// The quantities one side's estimate is made of (ns per input byte).
#[derive(Debug, Clone, Copy)]
pub(super) struct SideModel {
    /// Server: wall time. Local: the function's time.
    pub(super) main: Ring,
    /// Local: I/O time of cached ranges.
    pub(super) hit: Ring,
    /// Local: I/O time of uncached ranges, normalized to a fully uncached range.
    pub(super) miss: Ring,
    /// The latest samples over the level they were judged against: the side's own spread.
    /// A sample is a change signal only outside it (and outside the threshold), so a bimodal
    /// side (5 ms now and then among 50 ms requests) does not signal on each mode.
    pub(super) spread: Ring,
    pub(super) suspect: Suspect,
    /// The side's mean over its level (median): a running mean of sample / level, so the
    /// estimate is `level x tail`. The level follows the side within a few samples and its
    /// own tail does not move it; the tail is the shape of the side's noise, averaged over
    /// [`TAIL_SAMPLES`]. A plain mean of the last 32 samples of a side that stalls once in
    /// twenty for 10x holds 1.6 stalls on average and moved by a quarter either way: two
    /// sides 1.3x apart swapped places in their estimates every few dozen requests (auto
    /// 1.2x the better side on a capped server's cold rows).
    pub(super) tail: f64,
    /// Samples in `tail` (its weight is `1/n` until [`TAIL_SAMPLES`]).
    pub(super) tail_n: u32,
}

impl SideModel {
    pub(super) fn new(n: usize) -> Self {
        Self {
            main: Ring::new(n),
            hit: Ring::new(n),
            miss: Ring::new(n),
            spread: Ring::new(n),
            suspect: Suspect::default(),
            tail: 1.0,
            tail_n: 0,
        }
    }

    /// Adds one sample's `x / level` to the tail factor.
    pub(super) fn add_tail(&mut self, ratio: f64) {
        debug_assert!(ratio.is_finite() && ratio >= 0.0, "{ratio}");
        self.tail_n = self.tail_n.saturating_add(1);
        let w = 1.0 / f64::from(self.tail_n.min(TAIL_SAMPLES));
        self.tail += w * (ratio - self.tail);
    }

    /// After a confirmed change ([`TAIL_AFTER_CHANGE`]).
    pub(super) fn tail_changed(&mut self) {
        self.tail_n = self.tail_n.min(TAIL_AFTER_CHANGE);
    }

    /// The ratios to the level a sample may have without being off it: beyond `thr` either
    /// way and beyond the side's spread. The change signal, the cache-state check and the
    /// fast path's bounds all use these.
    pub(super) fn limits(&self, thr: f64) -> (f64, f64) {
        let (lo, hi) = self.spread.bounds().unwrap_or((1.0, 1.0));
        ((1.0 - thr).min(lo), (1.0 + thr).max(hi))
    }

    /// Is `x` off `level` beyond [`SideModel::limits`]?
    pub(super) fn outside(&self, level: f64, x: f64, thr: f64) -> bool {
        let (lo, hi) = self.limits(thr);
        let ratio = if level > 0.0 { x / level } else { 1.0 };
        ratio > hi || ratio < lo
    }

    /// Judges `x` against `level` ([`signal`]) and [`SideModel::limits`]; true = a confirmed
    /// change.
    ///
    /// A suspect sample joins the spread only once the next sample did not confirm it (an
    /// outlier of the side's own noise); a confirmed change starts the spread afresh. So a
    /// mode seen twice in a row stays a change (a server recovering), and a mode that comes
    /// and goes widens the spread (a bimodal side).
    pub(super) fn judge(&mut self, level: f64, x: f64, thr: f64, winner: bool) -> bool {
        let (lo, hi) = self.limits(thr);
        let before = self.suspect;
        let ratio = if level > 0.0 { x / level } else { 1.0 };
        let changed = signal(&mut self.suspect, ratio, lo, hi, winner);
        if changed {
            self.spread.clear();
            return true;
        }
        if before.dir != 0 && self.suspect.dir != before.dir {
            self.spread.push(before.ratio);
        }
        if self.suspect.dir == 0 {
            self.spread.push(ratio);
        }
        false
    }
}

/// Is `ratio` (a sample over its level) the last of [`CONFIRM_SAMPLES`] in a row below
/// `lo` or above `hi` ([`CONFIRM_WINNER_SLOWER`] above, for the side the model runs)? A sample
/// within bounds clears the suspicion.
fn signal(s: &mut Suspect, ratio: f64, lo: f64, hi: f64, winner: bool) -> bool {
    let dir = if ratio > hi {
        1
    } else if ratio < lo {
        -1
    } else {
        0
    };
    if dir == 0 {
        *s = Suspect::default();
        return false;
    }
    if s.dir != dir {
        *s = Suspect { dir, seen: 1, ratio };
        return false;
    }
    s.seen += 1;
    let need = if winner && dir > 0 { CONFIRM_WINNER_SLOWER } else { CONFIRM_SAMPLES };
    if s.seen >= need {
        *s = Suspect::default();
        return true;
    }
    false
}
