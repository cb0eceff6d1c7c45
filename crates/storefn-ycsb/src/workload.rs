//! YCSB's core workloads A-F (`workloads/workload[a-f]` of YCSB) and its `CoreWorkload` key,
//! record and operation choices.

use crate::generator::{fnvhash64, InsertCounter, ScrambledZipfian, SkewedLatest};
use rand::Rng;
use std::fmt;

/// The operations of YCSB's core workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    /// Read a record, then write it back (YCSB's `READ-MODIFY-WRITE`).
    ReadModifyWrite,
}

impl OpKind {
    pub const ALL: [OpKind; 5] =
        [OpKind::Read, OpKind::Update, OpKind::Insert, OpKind::Scan, OpKind::ReadModifyWrite];

    /// The name in summaries and JSON keys.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "rmw",
        }
    }
}

/// YCSB's `requestdistribution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Scrambled zipfian, constant 0.99.
    Zipfian,
    /// Skewed towards the newest inserts.
    Latest,
    Uniform,
}

/// One core workload: the operation mix and how keys are chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    /// `a` .. `f`.
    pub name: char,
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub read_modify_write: f64,
    pub distribution: Distribution,
    /// Scans are 1..=this many records, uniformly (YCSB's `maxscanlength`,
    /// `scanlengthdistribution=uniform`).
    pub max_scan_length: u64,
}

impl Workload {
    /// YCSB's workload `a`..`f` as its property files define them.
    ///
    /// # Errors
    /// A letter outside a-f.
    pub fn core(letter: char) -> Result<Self, String> {
        let w = |read, update, insert, scan, rmw, distribution| Workload {
            name: letter.to_ascii_lowercase(),
            read,
            update,
            insert,
            scan,
            read_modify_write: rmw,
            distribution,
            max_scan_length: 100,
        };
        use Distribution::{Latest, Zipfian};
        Ok(match letter.to_ascii_lowercase() {
            // Update heavy: a session store recording recent actions.
            'a' => w(0.5, 0.5, 0.0, 0.0, 0.0, Zipfian),
            // Read mostly: photo tagging.
            'b' => w(0.95, 0.05, 0.0, 0.0, 0.0, Zipfian),
            // Read only: a user profile cache.
            'c' => w(1.0, 0.0, 0.0, 0.0, 0.0, Zipfian),
            // Read latest: status updates.
            'd' => w(0.95, 0.0, 0.05, 0.0, 0.0, Latest),
            // Short ranges: threaded conversations.
            'e' => w(0.0, 0.0, 0.05, 0.95, 0.0, Zipfian),
            // Read-modify-write: a user database.
            'f' => w(0.5, 0.0, 0.0, 0.0, 0.5, Zipfian),
            other => return Err(format!("workload {other:?}: YCSB's core workloads are a-f")),
        })
    }

    /// Picks an operation by the mix (YCSB's `DiscreteGenerator` over the proportions).
    pub fn choose(&self, rng: &mut impl Rng) -> OpKind {
        let weights = [
            (OpKind::Read, self.read),
            (OpKind::Update, self.update),
            (OpKind::Insert, self.insert),
            (OpKind::Scan, self.scan),
            (OpKind::ReadModifyWrite, self.read_modify_write),
        ];
        let total: f64 = weights.iter().map(|w| w.1).sum();
        let mut u = rng.gen::<f64>() * total;
        for (op, wgt) in weights {
            if u < wgt {
                return op;
            }
            u -= wgt;
        }
        weights.iter().rev().find(|w| w.1 > 0.0).map_or(OpKind::Read, |w| w.0)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name)
    }
}

/// Record shape (YCSB's `fieldcount`, `fieldlength`): a record is the fields' bytes in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordShape {
    pub fields: usize,
    pub field_length: usize,
}

impl Default for RecordShape {
    /// YCSB's defaults: 10 fields of 100 bytes.
    fn default() -> Self {
        RecordShape { fields: 10, field_length: 100 }
    }
}

impl RecordShape {
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.fields * self.field_length
    }

    /// The record of key `num` at `version` (0 when loaded, a draw of the run's generator for
    /// updates): printable bytes that name both, so a reader returning an older version or
    /// another key's record is caught by comparing.
    pub fn fill(&self, num: u64, version: u64, out: &mut Vec<u8>) {
        out.clear();
        let mut x = num.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.rotate_left(29);
        while out.len() < self.bytes() {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            for b in z.to_le_bytes() {
                if out.len() < self.bytes() {
                    out.push(b' ' + (b % 95));
                }
            }
        }
    }
}

/// A YCSB key: its record number and its name, `user<fnvhash64(number)>` (YCSB's
/// `buildKeyName` with hashed insert order and no zero padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub num: u64,
    pub name: String,
}

impl Key {
    #[must_use]
    pub fn new(num: u64) -> Self {
        let mut k = Key { num: 0, name: String::with_capacity(24) };
        k.set(num);
        k
    }

    /// Re-points this key at `num`, reusing the name's buffer.
    pub fn set(&mut self, num: u64) {
        use std::fmt::Write;
        self.num = num;
        self.name.clear();
        let _ = write!(self.name, "user{}", fnvhash64(num));
    }
}

/// Chooses the keys of one thread's operations (YCSB's `CoreWorkload.nextKeynum`).
#[derive(Debug, Clone)]
pub enum KeyChooser {
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest),
    Uniform { records: u64 },
}

impl KeyChooser {
    /// For a run over `records` loaded records expecting `operations` operations: zipfian
    /// spans the loaded records plus twice the expected inserts, as YCSB sizes it.
    #[must_use]
    pub fn new(w: &Workload, records: u64, operations: u64) -> Self {
        match w.distribution {
            Distribution::Zipfian => {
                let expected_new = (operations as f64 * w.insert * 2.0) as u64;
                KeyChooser::Zipfian(ScrambledZipfian::new(0, records + expected_new))
            }
            Distribution::Latest => KeyChooser::Latest(SkewedLatest::new(records)),
            Distribution::Uniform => KeyChooser::Uniform { records },
        }
    }

    /// A key number at most `inserts.last()`: drawn again until it is (YCSB's loop).
    pub fn next(&mut self, rng: &mut impl Rng, inserts: &InsertCounter) -> u64 {
        let last = inserts.last();
        match self {
            KeyChooser::Latest(g) => g.next(rng, last),
            KeyChooser::Uniform { records } => rng.gen_range(0..(*records).max(1)),
            KeyChooser::Zipfian(g) => loop {
                let v = g.next(rng);
                if v <= last {
                    break v;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    #[test]
    fn mixes_match_ycsb_proportions() {
        let mut rng = SmallRng::seed_from_u64(1);
        for letter in ['a', 'b', 'c', 'd', 'e', 'f'] {
            let w = Workload::core(letter).unwrap();
            let n = 40_000;
            let mut counts = std::collections::BTreeMap::new();
            for _ in 0..n {
                *counts.entry(w.choose(&mut rng)).or_insert(0u32) += 1;
            }
            let want = [
                (OpKind::Read, w.read),
                (OpKind::Update, w.update),
                (OpKind::Insert, w.insert),
                (OpKind::Scan, w.scan),
                (OpKind::ReadModifyWrite, w.read_modify_write),
            ];
            for (op, p) in want {
                let got = f64::from(*counts.get(&op).unwrap_or(&0)) / f64::from(n);
                // 5 standard deviations of a binomial proportion at n = 40k is under 0.013.
                assert!((got - p).abs() < 0.013, "workload {letter}: {op:?} {got} vs {p}");
            }
        }
        assert!(Workload::core('g').is_err());
    }

    #[test]
    fn key_names_are_ycsb_hashed() {
        let k = Key::new(0);
        assert_eq!(k.name, format!("user{}", fnvhash64(0)));
        assert!(k.name.starts_with("user") && k.name.len() > 10);
    }

    #[test]
    fn records_have_their_shape_and_differ_by_version() {
        let s = RecordShape { fields: 3, field_length: 7 };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        s.fill(5, 0, &mut a);
        s.fill(5, 1, &mut b);
        assert_eq!(a.len(), 21);
        assert_ne!(a, b);
        assert!(a.iter().all(|c| (b' '..=b'~').contains(c)));
    }

    #[test]
    fn chosen_keys_stay_below_the_acknowledged_limit() {
        let mut rng = SmallRng::seed_from_u64(2);
        let inserts = InsertCounter::new(100);
        for letter in ['a', 'd', 'e'] {
            let w = Workload::core(letter).unwrap();
            let mut k = KeyChooser::new(&w, 100, 1000);
            for _ in 0..5000 {
                assert!(k.next(&mut rng, &inserts) < 100);
            }
        }
        let mut u = KeyChooser::Uniform { records: 100 };
        let mut seen = [0u32; 100];
        for _ in 0..20_000 {
            seen[u.next(&mut rng, &inserts) as usize] += 1;
        }
        // Uniform: every key near 200 draws (5 sigma ~ 70).
        assert!(seen.iter().all(|&c| (130..270).contains(&c)), "{seen:?}");
    }
}
