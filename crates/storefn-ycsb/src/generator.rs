//! YCSB's request generators, as its `site.ycsb.generator` package defines them: zipfian
//! (Gray et al.'s algorithm, incremental zeta), scrambled zipfian, skewed latest, uniform,
//! and the acknowledged insert counter the latest distribution follows.

use crate::limits::{SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN, ZIPFIAN_CONSTANT};
use rand::Rng;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the eight little-endian bytes of `v`, then the
/// absolute value of the signed result (Java's `Math.abs`, which leaves `i64::MIN` as is).
#[must_use]
pub fn fnvhash64(v: u64) -> u64 {
    let mut h = FNV_OFFSET_BASIS_64;
    for i in 0..8 {
        h ^= (v >> (8 * i)) & 0xff;
        h = h.wrapping_mul(FNV_PRIME_64);
    }
    (h as i64).wrapping_abs() as u64
}

/// zeta(n) = sum over i in 1..=n of 1/i^theta, continued from `from` items whose sum is `sum`.
fn zeta_from(from: u64, n: u64, theta: f64, sum: f64) -> f64 {
    let mut s = sum;
    for i in from..n {
        s += 1.0 / ((i + 1) as f64).powf(theta);
    }
    s
}

/// YCSB's `ZipfianGenerator` over `[base, base + items)`: item `base` is the most popular.
#[derive(Debug, Clone)]
pub struct Zipfian {
    base: u64,
    theta: f64,
    alpha: f64,
    zeta2theta: f64,
    /// The item count `zetan` and `eta` were computed for; grows with inserts.
    count_for_zeta: u64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    /// Over `items` items from `base`, zipfian constant 0.99, zeta computed here.
    #[must_use]
    pub fn new(base: u64, items: u64) -> Self {
        let zetan = zeta_from(0, items, ZIPFIAN_CONSTANT, 0.0);
        Self::with_zetan(base, items, zetan)
    }

    /// With a precomputed zeta(items) (YCSB's constant for the scrambled generator).
    #[must_use]
    pub fn with_zetan(base: u64, items: u64, zetan: f64) -> Self {
        let theta = ZIPFIAN_CONSTANT;
        let zeta2theta = zeta_from(0, 2, theta, 0.0);
        let mut z = Zipfian {
            base,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2theta,
            count_for_zeta: items,
            zetan,
            eta: 0.0,
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// The next value among `items` items (YCSB's `nextLong(itemcount)`): when `items` grew,
    /// zeta is extended incrementally; when it shrank it is recomputed, as YCSB does.
    pub fn next_of(&mut self, rng: &mut impl Rng, items: u64) -> u64 {
        if items != self.count_for_zeta {
            self.zetan = if items > self.count_for_zeta {
                zeta_from(self.count_for_zeta, items, self.theta, self.zetan)
            } else {
                zeta_from(0, items, self.theta, 0.0)
            };
            self.count_for_zeta = items;
            self.eta = self.eta_for(items);
        }
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }

    /// The next value over the item count the generator was built with.
    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        self.next_of(rng, self.count_for_zeta)
    }
}

/// YCSB's `ScrambledZipfianGenerator`: a zipfian draw over 10^10 items, hashed onto
/// `[min, min + items)`, so the popular keys are spread over the key space.
#[derive(Debug, Clone)]
pub struct ScrambledZipfian {
    min: u64,
    items: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    #[must_use]
    pub fn new(min: u64, items: u64) -> Self {
        let gen = Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN);
        ScrambledZipfian { min, items: items.max(1), gen }
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        self.min + fnvhash64(self.gen.next(rng)) % self.items
    }
}

/// YCSB's `AcknowledgedCounterGenerator`: hands out insert key numbers and reports the highest
/// number below which every insert was acknowledged, so reads never aim at a key not yet
/// written.
#[derive(Debug)]
pub struct InsertCounter {
    next: AtomicU64,
    /// The newest acknowledged number with all below it acknowledged too.
    limit: AtomicU64,
    /// Acknowledged numbers above `limit + 1`, waiting for the gap to close.
    pending: Mutex<BTreeSet<u64>>,
}

impl InsertCounter {
    /// Numbers from `start`; `start - 1` counts as acknowledged (the loaded records).
    #[must_use]
    pub fn new(start: u64) -> Self {
        InsertCounter {
            next: AtomicU64::new(start),
            limit: AtomicU64::new(start.saturating_sub(1)),
            pending: Mutex::new(BTreeSet::new()),
        }
    }

    /// The next key number to insert.
    pub fn next(&self) -> u64 {
        // Relaxed: only uniqueness matters; the insert's visibility is published by `acknowledge`.
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The insert of `v` is done (the store returned).
    pub fn acknowledge(&self, v: u64) {
        let mut p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        p.insert(v);
        let mut limit = self.limit.load(Ordering::Relaxed);
        while p.remove(&(limit + 1)) {
            limit += 1;
        }
        // Release: a reader that sees the new limit also sees the inserts below it completed.
        self.limit.store(limit, Ordering::Release);
    }

    /// The highest key number every insert up to which is acknowledged.
    pub fn last(&self) -> u64 {
        // Acquire: pairs with the Release in `acknowledge`.
        self.limit.load(Ordering::Acquire)
    }
}

/// YCSB's `SkewedLatestGenerator`: zipfian over the distance below the newest acknowledged
/// insert, so recently inserted keys are the most popular.
#[derive(Debug, Clone)]
pub struct SkewedLatest {
    gen: Zipfian,
}

impl SkewedLatest {
    #[must_use]
    pub fn new(last: u64) -> Self {
        SkewedLatest { gen: Zipfian::new(0, last.max(1)) }
    }

    /// A key number in `(0, last]`, most often `last`.
    pub fn next(&mut self, rng: &mut impl Rng, last: u64) -> u64 {
        let max = last.max(1);
        max - self.gen.next_of(rng, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    #[test]
    fn fnvhash64_matches_ycsb() {
        // YCSB's Utils.fnvhash64(0) and (1), computed by hand from its definition: FNV-1a over
        // eight zero bytes gives 0xa8c7f832281a39c5, negative as a Java long, so Math.abs.
        assert_eq!(fnvhash64(0), 0xa8c7_f832_281a_39c5u64.wrapping_neg() & i64::MAX as u64);
        assert_ne!(fnvhash64(1), fnvhash64(0));
    }

    #[test]
    fn zipfian_first_item_has_its_probability() {
        let (n, draws) = (1000u64, 200_000u32);
        let mut z = Zipfian::new(0, n);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            let v = z.next(&mut rng);
            assert!(v < n, "{v} out of range");
            counts[v as usize] += 1;
        }
        let zetan = zeta_from(0, n, ZIPFIAN_CONSTANT, 0.0);
        // Gray et al.'s method is exact for the two most popular items, approximate after.
        for (i, &c) in counts.iter().enumerate().take(2) {
            let p = 1.0 / ((i + 1) as f64).powf(ZIPFIAN_CONSTANT) / zetan;
            let got = c as f64 / f64::from(draws);
            assert!((got - p).abs() < 0.1 * p + 0.002, "item {i}: {got} vs {p}");
        }
        // The head dominates: the top 10% of items draw well over half.
        let head: u64 = counts[..100].iter().sum();
        assert!(head as f64 / f64::from(draws) > 0.6, "head share {head}");
    }

    #[test]
    fn scrambled_zipfian_is_skewed_but_spread() {
        let (n, draws) = (10_000u64, 100_000);
        let mut z = ScrambledZipfian::new(0, n);
        let mut rng = SmallRng::seed_from_u64(9);
        let mut counts = vec![0u32; n as usize];
        for _ in 0..draws {
            counts[z.next(&mut rng) as usize] += 1;
        }
        let hottest = counts.iter().enumerate().max_by_key(|c| c.1).unwrap();
        // Not the lowest key (scrambled), and much hotter than uniform (10 per key).
        assert_ne!(hottest.0, 0);
        assert!(*hottest.1 > 1000, "{hottest:?}");
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        // The 100 hottest keys hold at least the 100 most popular of the 10^10 zipfian items:
        // zeta(100) / zeta(10^10) ~ 0.196 of the draws.
        let top: u32 = sorted[..100].iter().sum();
        let want = zeta_from(0, 100, ZIPFIAN_CONSTANT, 0.0) / SCRAMBLED_ZETAN;
        let got = f64::from(top) / f64::from(draws);
        assert!(got > want * 0.9 && got < want * 1.3, "{got} vs {want}");
    }

    #[test]
    fn latest_prefers_the_newest() {
        let mut g = SkewedLatest::new(999);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut newest = 0;
        for _ in 0..10_000 {
            let v = g.next(&mut rng, 999);
            assert!(v <= 999 && v > 0);
            newest += u32::from(v > 989);
        }
        // v > 989 when the zipfian distance is below 10: zeta(10) / zeta(999) of the draws.
        let want =
            zeta_from(0, 10, ZIPFIAN_CONSTANT, 0.0) / zeta_from(0, 999, ZIPFIAN_CONSTANT, 0.0);
        let got = f64::from(newest) / 10_000.0;
        assert!((got - want).abs() < 0.1 * want, "{got} vs {want}");
    }

    #[test]
    fn acknowledged_counter_waits_for_gaps() {
        let c = InsertCounter::new(10);
        let (a, b) = (c.next(), c.next());
        assert_eq!((a, b, c.last()), (10, 11, 9));
        c.acknowledge(b);
        assert_eq!(c.last(), 9, "11 acknowledged, 10 still outstanding");
        c.acknowledge(a);
        assert_eq!(c.last(), 11);
    }
}
