//! Bench statistics shared by every storefn harness (vm, io, kv, server, dds, λ-IO), so that a
//! "p99" or a "median of rounds" means the same thing in every JSON a bench writes.
//!
//! - [`median`]: the median of rounds. For an even count it is the upper of the two middle
//!   values (a value that was measured, never an average of two rounds).
//! - [`percentile_us`]: the nearest-rank percentile of ascending nanosecond samples, in µs: the
//!   smallest sample such that at least `q` of all samples are at or below it (p50 of 1..=10 is
//!   5, p99 of 1..=1000 is 990, p100 is the maximum).
//! - [`standard_error`]: of the mean of rounds (sample standard deviation over `sqrt(n)`).

/// Median of `values` (reordered in place); the upper middle value for an even count.
/// `None` for no values.
#[must_use]
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// Standard error of the mean of `values`: the sample standard deviation (`n - 1`) over
/// `sqrt(n)`. 0 for fewer than two values.
#[must_use]
pub fn standard_error(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (var / n).sqrt()
}

/// Nearest-rank percentile `q` (0.0..=1.0, clamped) of `sorted` (ascending samples, any unit).
/// `None` for no samples.
///
/// # Panics
/// In debug builds, if `sorted` is not ascending (a caller that forgot to sort would get a
/// silently wrong figure).
#[must_use]
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn percentile<T: Copy + PartialOrd>(sorted: &[T], q: f64) -> Option<T> {
    debug_assert!(sorted.is_sorted(), "percentile needs ascending samples");
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    // Rank in 1..=n: ceil(q * n), at least 1 (p0 is the minimum).
    let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

/// [`percentile`] of `sorted_ns` (ascending nanoseconds), in µs.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn percentile_us(sorted_ns: &[u64], q: f64) -> Option<f64> {
    percentile(sorted_ns, q).map(|ns| ns as f64 / 1000.0)
}

/// p50, p99 and p99.9 of `sorted_ns` in µs (0 for no samples): the three every bench summary
/// line and JSON carries.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Tail {
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// 99.9th percentile latency, µs.
    pub p999_us: f64,
}

impl Tail {
    /// The tail of ascending nanosecond samples (all 0 when there are none).
    #[must_use]
    pub fn of(sorted_ns: &[u64]) -> Self {
        let p = |q| percentile_us(sorted_ns, q).unwrap_or(0.0);
        Self { p50_us: p(0.50), p99_us: p(0.99), p999_us: p(0.999) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nearest_rank_on_known_samples() {
        let v: Vec<u64> = (1..=10).map(|i| i * 1000).collect();
        assert_eq!(percentile_us(&v, 0.5), Some(5.0));
        assert_eq!(percentile_us(&v, 0.0), Some(1.0));
        assert_eq!(percentile_us(&v, 1.0), Some(10.0));
        assert_eq!(percentile_us(&v, 0.91), Some(10.0));
        let k: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        assert_eq!(percentile_us(&k, 0.99), Some(990.0));
        assert_eq!(percentile_us(&k, 0.999), Some(999.0));
        assert_eq!(percentile_us(&[], 0.5), None);
        assert_eq!(percentile(&[0.5, 1.5, 2.5, 3.5], 0.5), Some(1.5));
        assert_eq!(Tail::of(&[]), Tail::default());
        assert_eq!(Tail::of(&k), Tail { p50_us: 500.0, p99_us: 990.0, p999_us: 999.0 });
    }

    #[test]
    fn standard_error_of_known_values() {
        // Mean 2.5, sample variance 5/3: sqrt(5/3 / 4).
        let se = standard_error(&[1.0, 2.0, 3.0, 4.0]);
        assert!((se - (5.0f64 / 12.0).sqrt()).abs() < 1e-12, "{se}");
        assert_eq!(standard_error(&[7.0]), 0.0);
        assert_eq!(standard_error(&[]), 0.0);
    }

    #[test]
    fn median_takes_the_upper_middle_value() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median(&mut []), None);
    }

    proptest! {
        /// The definition itself: at least q of the samples are at or below the answer, and
        /// fewer than q are strictly below it.
        #[test]
        fn percentile_is_the_nearest_rank(mut v in proptest::collection::vec(0u64..1_000_000, 1..300), q in 0.0f64..=1.0) {
            v.sort_unstable();
            let got_ns = (percentile_us(&v, q).unwrap() * 1000.0).round() as u64;
            let n = v.len() as f64;
            let at_or_below = v.iter().filter(|&&x| x <= got_ns).count() as f64;
            let below = v.iter().filter(|&&x| x < got_ns).count() as f64;
            prop_assert!(v.contains(&got_ns));
            prop_assert!(at_or_below >= (q * n).ceil().max(1.0));
            prop_assert!(below < (q * n).ceil().max(1.0));
        }
    }
}
