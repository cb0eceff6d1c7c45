//! The dispatcher's sample ring: the last samples of one quantity with their mean, median and
//! bounds.

use super::{MAX_SAMPLES, MIN_SAMPLES};

/// A fixed ring of the latest samples with their mean and a sorted copy (median, bounds),
/// kept up to date when a sample arrives (the model reads them on every request; samples
/// arrive once per request on one side). The mean keeps a running sum (exact again at every wrap); the sorted copy takes one removal
/// and one insertion per sample. Sorting on every sample was most of the dispatcher's own time
/// on 1 µs requests.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring {
    v: [f64; MAX_SAMPLES],
    /// `v[..len]` in ascending order.
    sorted: [f64; MAX_SAMPLES],
    /// Sum of `v[..len]`.
    sum: f64,
    pub(super) len: usize,
    next: usize,
    cap: usize,
    mean: Option<f64>,
}

impl Ring {
    pub(super) fn new(cap: usize) -> Self {
        let cap = cap.clamp(1, MAX_SAMPLES);
        let v = [0.0; MAX_SAMPLES];
        Self { v, sorted: v, sum: 0.0, len: 0, next: 0, cap, mean: None }
    }

    pub(super) fn push(&mut self, x: f64) {
        debug_assert!(x.is_finite(), "a sample is a finite cost: {x}");
        if self.len == self.cap {
            let old = self.v[self.next];
            self.sum -= old;
            // Remove the sample this one replaces (same bits: it was stored as is).
            let at = self.sorted[..self.len]
                .iter()
                .position(|s| s.to_bits() == old.to_bits())
                .expect("every ring sample is in the sorted copy");
            self.sorted.copy_within(at + 1..self.len, at);
            self.len -= 1;
        }
        let at = self.sorted[..self.len].partition_point(|s| *s <= x);
        self.sorted.copy_within(at..self.len, at + 1);
        self.sorted[at] = x;
        debug_assert!(self.sorted[..=self.len].windows(2).all(|w| w[0] <= w[1]));
        self.len += 1;
        self.v[self.next] = x;
        self.sum += x;
        self.next += 1;
        if self.next == self.cap {
            self.next = 0;
            // Once per wrap: no rounding drift from the running sum.
            self.sum = self.v[..self.len].iter().sum();
        }
        self.mean = self.plain_mean();
    }

    pub(super) fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
        self.sum = 0.0;
        self.mean = None;
    }

    /// Mean of the samples, `None` below [`MIN_SAMPLES`].
    pub(super) fn mean(&self) -> Option<f64> {
        self.mean
    }

    /// The smallest and largest sample kept (`None` when empty).
    pub(super) fn bounds(&self) -> Option<(f64, f64)> {
        (self.len > 0).then(|| (self.sorted[0], self.sorted[self.len - 1]))
    }

    /// The median (upper middle) of the samples, `None` when empty: a side's level, which
    /// its own tail does not move (the change signals' reference, not the estimate's).
    pub(super) fn median(&self) -> Option<f64> {
        (self.len > 0).then(|| self.sorted[self.len / 2])
    }

    /// The side's preliminary estimate, even below [`MIN_SAMPLES`]: the mean once
    /// there are enough samples, the plain mean of the one or two there are before (`None`
    /// when empty). Never the best sample: one fast outlier of a side measured far behind
    /// (a bimodal 5 ms among 50 ms requests) must not win it back on its own.
    pub(super) fn mean_any(&self) -> Option<f64> {
        if self.len == 0 {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        self.mean.or_else(|| Some(self.sum / self.len as f64))
    }

    fn plain_mean(&self) -> Option<f64> {
        if self.len < MIN_SAMPLES.min(self.cap) {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        Some(self.sum / self.len as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mean from the running sum, the incrementally sorted copy, its median and bounds
    /// equal the ones from sorting the ring's samples, across wrap-arounds, repeated values
    /// and clears.
    #[test]
    fn the_ring_keeps_its_sorted_copy_in_step() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            #[allow(clippy::cast_precision_loss)]
            let x = (state % 50) as f64;
            x
        };
        for cap in [16, 8, 3, 32, 1] {
            let mut r = Ring::new(cap);
            let mut all: Vec<f64> = Vec::new();
            for i in 0..500 {
                if i % 97 == 0 {
                    r.clear();
                    all.clear();
                }
                let x = next();
                r.push(x);
                all.push(x);
                let mut last: Vec<f64> = all.iter().rev().take(cap).copied().collect();
                last.sort_unstable_by(f64::total_cmp);
                assert_eq!(&r.sorted[..r.len], &last[..], "cap {cap} push {i}");
                assert_eq!(r.median(), Some(last[last.len() / 2]), "cap {cap} push {i}");
                let want = (last.len() >= MIN_SAMPLES.min(cap)).then(|| {
                    #[allow(clippy::cast_precision_loss)]
                    let m = last.iter().sum::<f64>() / last.len() as f64;
                    m
                });
                // Integers below 2^53: the running sum is exact.
                assert_eq!(r.mean(), want, "cap {cap} push {i}");
                assert_eq!(r.bounds(), Some((last[0], last[last.len() - 1])), "cap {cap}");
            }
        }
    }
}
