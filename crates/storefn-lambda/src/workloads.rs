//! The λ workloads: each a C function in `progs/lambda/`, a native Rust baseline with the same
//! output bytes, and a data generator. Layouts: `progs/include/storefn_lambda.h` (the constants
//! below are checked against it by a test) and docs/design/lambda.md, "λ-IO".

use std::fmt;
use std::io::{self, Write};
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub const STATS_OUT_BYTES: usize = 32;
pub const KNN_ROW_BYTES: usize = 2048;
pub const KNN_FEATURES: usize = 255;
pub const KNN_K: usize = 8;
pub const KNN_FEATURE_MAX: u32 = 1024;
pub const KNN_QUERY_MUL: u32 = 2_654_435_761;
pub const KNN_OUT_BYTES: usize = 8 + 16 * KNN_K;
pub const GREP_ROW_BYTES: usize = 4096;
pub const GREP_NEEDLE: &[u8; 8] = b"storefn!";
pub const GREP_NEEDLE_BYTES: usize = 8;
pub const GREP_MAX_HITS: usize = 256;
pub const GREP_OUT_MAX_BYTES: usize = 16 + 4 * GREP_MAX_HITS;
pub const BITMAP_MEAN_RUN: u32 = 512;
pub const Q6_GROUP_ROWS: usize = 2048;
pub const Q6_GROUP_BYTES: usize = Q6_GROUP_ROWS * 20;
pub const Q6_DATE_LO: i32 = 731;
pub const Q6_DATE_HI: i32 = 1096;
pub const Q6_DISC_LO: i32 = 5;
pub const Q6_DISC_HI: i32 = 7;
pub const Q6_QTY_LT: i32 = 24;
pub const Q6_OUT_BYTES: usize = 24;

/// Days of l_shipdate the generator spreads rows over (1992-01-01 .. 1998-12-31).
const Q6_DAYS: i32 = 2557;
/// One grep row in this many contains the needle.
const GREP_HIT_EVERY: u32 = 50;

/// A built-in workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Workload {
    Stats64,
    Stats32,
    Knn,
    Grep,
    Bitmap,
    TpchQ6,
}

impl Workload {
    pub const ALL: [Workload; 6] = [
        Workload::Stats64,
        Workload::Stats32,
        Workload::Knn,
        Workload::Grep,
        Workload::Bitmap,
        Workload::TpchQ6,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Workload::Stats64 => "stats64",
            Workload::Stats32 => "stats32",
            Workload::Knn => "knn",
            Workload::Grep => "grep",
            Workload::Bitmap => "bitmap",
            Workload::TpchQ6 => "tpch_q6",
        }
    }

    /// The program's name in storefn-progs (`progs/<this>.bpf.c`).
    #[must_use]
    pub fn prog_name(self) -> &'static str {
        match self {
            Workload::Stats64 => "lambda/stats64",
            Workload::Stats32 => "lambda/stats32",
            Workload::Knn => "lambda/knn",
            Workload::Grep => "lambda/grep",
            Workload::Bitmap => "lambda/bitmap",
            Workload::TpchQ6 => "lambda/tpch_q6",
        }
    }

    /// The record the input is made of; request ranges are whole multiples of it.
    #[must_use]
    pub fn unit_bytes(self) -> u64 {
        match self {
            Workload::Stats64 => 8,
            Workload::Stats32 => 4,
            Workload::Knn => KNN_ROW_BYTES as u64,
            Workload::Grep => GREP_ROW_BYTES as u64,
            Workload::Bitmap => 2,
            Workload::TpchQ6 => Q6_GROUP_BYTES as u64,
        }
    }

    /// Is this a write-path workload (`pwrite_lambda`)?
    #[must_use]
    pub fn is_write(self) -> bool {
        self == Workload::Bitmap
    }

    /// Output buffer big enough for any input of `input_bytes` (`bitmap`: every run at most
    /// `u16::MAX` bits).
    #[must_use]
    pub fn out_cap(self, input_bytes: usize) -> usize {
        match self {
            Workload::Stats64 | Workload::Stats32 => STATS_OUT_BYTES,
            Workload::Knn => KNN_OUT_BYTES,
            Workload::Grep => GREP_OUT_MAX_BYTES,
            Workload::Bitmap => (input_bytes / 2) * (usize::from(u16::MAX) / 8 + 1),
            Workload::TpchQ6 => Q6_OUT_BYTES,
        }
    }

    /// The native baseline: the same output bytes as the function, written into `out`
    /// (which must hold [`Workload::out_cap`]); returns the output length.
    ///
    /// # Panics
    /// When `out` is smaller than the output.
    #[must_use]
    pub fn native(self, input: &[u8], out: &mut [u8]) -> usize {
        match self {
            Workload::Stats64 => stats(input.chunks_exact(8).map(le_u64), out),
            Workload::Stats32 => stats(input.chunks_exact(4).map(|c| u64::from(le_u32(c))), out),
            Workload::Knn => knn(input, out),
            Workload::Grep => grep(input, out),
            Workload::Bitmap => bitmap(input, out),
            Workload::TpchQ6 => tpch_q6(input, out),
        }
    }

    /// Writes `size_bytes` (rounded down to whole units) of this workload's input, from `seed`.
    ///
    /// # Errors
    /// The writer's.
    pub fn generate(self, w: &mut dyn Write, size_bytes: u64, seed: u64) -> io::Result<u64> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let units = size_bytes / self.unit_bytes();
        let mut buf = Vec::with_capacity(64 * 1024);
        let mut written = 0u64;
        for i in 0..units {
            match self {
                Workload::Stats64 => buf.extend_from_slice(&rng.gen::<u64>().to_le_bytes()),
                Workload::Stats32 => buf.extend_from_slice(&rng.gen::<u32>().to_le_bytes()),
                Workload::Knn => {
                    buf.extend_from_slice(&i.to_le_bytes());
                    for _ in 0..KNN_FEATURES {
                        let f = i64::from(rng.gen_range(0..KNN_FEATURE_MAX));
                        buf.extend_from_slice(&f.to_le_bytes());
                    }
                }
                Workload::Grep => gen_grep_row(&mut rng, &mut buf),
                Workload::Bitmap => {
                    let run = rng.gen_range(1..2 * BITMAP_MEAN_RUN) as u16;
                    buf.extend_from_slice(&run.to_le_bytes());
                }
                Workload::TpchQ6 => gen_q6_group(&mut rng, &mut buf),
            }
            if buf.len() >= 64 * 1024 {
                w.write_all(&buf)?;
                written += buf.len() as u64;
                buf.clear();
            }
        }
        w.write_all(&buf)?;
        written += buf.len() as u64;
        Ok(written)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL.into_iter().find(|w| w.name() == s).ok_or_else(|| {
            let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
            format!("unknown workload {s:?}: expected one of {}", names.join(", "))
        })
    }
}

fn le_u64(c: &[u8]) -> u64 {
    u64::from_le_bytes(c[..8].try_into().unwrap())
}

fn le_u32(c: &[u8]) -> u32 {
    u32::from_le_bytes(c[..4].try_into().unwrap())
}

fn put_u64s(out: &mut [u8], words: &[u64]) {
    for (i, w) in words.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
}

fn stats(values: impl Iterator<Item = u64>, out: &mut [u8]) -> usize {
    let (mut mn, mut mx, mut sum, mut n) = (u64::MAX, 0u64, 0u64, 0u64);
    for v in values {
        mn = mn.min(v);
        mx = mx.max(v);
        sum = sum.wrapping_add(v);
        n += 1;
    }
    put_u64s(out, &[mn, mx, sum, n]);
    STATS_OUT_BYTES
}

/// The query point's feature `j`.
#[must_use]
pub fn knn_query(j: u32) -> i64 {
    i64::from(j.wrapping_mul(KNN_QUERY_MUL) % KNN_FEATURE_MAX)
}

fn knn(input: &[u8], out: &mut [u8]) -> usize {
    let mut best: Vec<(u64, u64)> = Vec::with_capacity(KNN_K + 1);
    for row in input.chunks_exact(KNN_ROW_BYTES) {
        let id = le_u64(row);
        let mut dist = 0u64;
        for (j, f) in row[8..].chunks_exact(8).take(KNN_FEATURES).enumerate() {
            let d = (le_u64(f) as i64).wrapping_sub(knn_query(j as u32));
            dist = dist.wrapping_add(d.wrapping_mul(d) as u64);
        }
        best.push((dist, id));
        best.sort_unstable();
        best.truncate(KNN_K);
    }
    let mut words = vec![best.len() as u64];
    for k in 0..KNN_K {
        let (d, id) = best.get(k).copied().unwrap_or((0, 0));
        words.extend([d, id]);
    }
    put_u64s(out, &words);
    KNN_OUT_BYTES
}

fn grep(input: &[u8], out: &mut [u8]) -> usize {
    let mut hits = 0usize;
    let rows = input.len() / GREP_ROW_BYTES;
    for (r, row) in input.chunks_exact(GREP_ROW_BYTES).enumerate() {
        if row.windows(GREP_NEEDLE_BYTES).any(|w| w == GREP_NEEDLE) {
            if hits < GREP_MAX_HITS {
                let at = 16 + 4 * hits;
                out[at..at + 4].copy_from_slice(&(r as u32).to_le_bytes());
            }
            hits += 1;
        }
    }
    put_u64s(out, &[rows as u64, hits as u64]);
    16 + 4 * hits.min(GREP_MAX_HITS)
}

fn bitmap(input: &[u8], out: &mut [u8]) -> usize {
    let mut pos = 0usize;
    for (i, c) in input.chunks_exact(2).enumerate() {
        let len = usize::from(u16::from_le_bytes([c[0], c[1]]));
        let one = i % 2 == 1;
        for b in pos..pos + len {
            if b % 8 == 0 {
                out[b / 8] = 0;
            }
            if one {
                out[b / 8] |= 1 << (b % 8);
            }
        }
        pos += len;
    }
    pos.div_ceil(8)
}

fn tpch_q6(input: &[u8], out: &mut [u8]) -> usize {
    let (mut revenue, mut matches) = (0u64, 0u64);
    let groups = input.len() / Q6_GROUP_BYTES;
    for g in input.chunks_exact(Q6_GROUP_BYTES) {
        let col = |k: usize, r: usize| le_u32(&g[k * 4 * Q6_GROUP_ROWS + 4 * r..]) as i32;
        for r in 0..Q6_GROUP_ROWS {
            let (ship, disc, qty) = (col(0, r), col(1, r), col(2, r));
            if (Q6_DATE_LO..Q6_DATE_HI).contains(&ship)
                && (Q6_DISC_LO..=Q6_DISC_HI).contains(&disc)
                && qty < Q6_QTY_LT
            {
                let price = le_u64(&g[12 * Q6_GROUP_ROWS + 8 * r..]) as i64;
                revenue = revenue.wrapping_add(price.wrapping_mul(i64::from(disc)) as u64);
                matches += 1;
            }
        }
    }
    put_u64s(out, &[revenue, matches, (groups * Q6_GROUP_ROWS) as u64]);
    Q6_OUT_BYTES
}

fn gen_grep_row(rng: &mut SmallRng, buf: &mut Vec<u8>) {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz      ";
    let start = buf.len();
    buf.extend((0..GREP_ROW_BYTES).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())]));
    if rng.gen_range(0..GREP_HIT_EVERY) == 0 {
        let at = start + rng.gen_range(0..=GREP_ROW_BYTES - GREP_NEEDLE_BYTES);
        buf[at..at + GREP_NEEDLE_BYTES].copy_from_slice(GREP_NEEDLE);
    }
}

fn gen_q6_group(rng: &mut SmallRng, buf: &mut Vec<u8>) {
    for _ in 0..Q6_GROUP_ROWS {
        buf.extend_from_slice(&rng.gen_range(0..Q6_DAYS).to_le_bytes());
    }
    for _ in 0..Q6_GROUP_ROWS {
        buf.extend_from_slice(&rng.gen_range(0i32..=10).to_le_bytes());
    }
    for _ in 0..Q6_GROUP_ROWS {
        buf.extend_from_slice(&rng.gen_range(1i32..=50).to_le_bytes());
    }
    for _ in 0..Q6_GROUP_ROWS {
        buf.extend_from_slice(&rng.gen_range(90_000i64..=10_494_950).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every numeric `#define` of progs/include/storefn_lambda.h equals the constant here.
    #[test]
    fn constants_match_the_c_header() {
        let h = include_str!("../../../progs/include/storefn_lambda.h");
        let rust: &[(&str, i64)] = &[
            ("STATS_OUT_BYTES", STATS_OUT_BYTES as i64),
            ("KNN_ROW_BYTES", KNN_ROW_BYTES as i64),
            ("KNN_FEATURES", KNN_FEATURES as i64),
            ("KNN_K", KNN_K as i64),
            ("KNN_FEATURE_MAX", i64::from(KNN_FEATURE_MAX)),
            ("KNN_QUERY_MUL", i64::from(KNN_QUERY_MUL)),
            ("GREP_ROW_BYTES", GREP_ROW_BYTES as i64),
            ("GREP_NEEDLE_BYTES", GREP_NEEDLE_BYTES as i64),
            ("GREP_MAX_HITS", GREP_MAX_HITS as i64),
            ("BITMAP_MEAN_RUN", i64::from(BITMAP_MEAN_RUN)),
            ("Q6_GROUP_ROWS", Q6_GROUP_ROWS as i64),
            ("Q6_DATE_LO", i64::from(Q6_DATE_LO)),
            ("Q6_DATE_HI", i64::from(Q6_DATE_HI)),
            ("Q6_DISC_LO", i64::from(Q6_DISC_LO)),
            ("Q6_DISC_HI", i64::from(Q6_DISC_HI)),
            ("Q6_QTY_LT", i64::from(Q6_QTY_LT)),
            ("Q6_OUT_BYTES", Q6_OUT_BYTES as i64),
        ];
        let mut numeric = 0;
        for line in h.lines() {
            let mut it = line.split_whitespace();
            if it.next() != Some("#define") {
                continue;
            }
            let (Some(name), Some(val)) = (it.next(), it.next()) else { continue };
            if name == "GREP_NEEDLE" {
                assert_eq!(val.trim_matches('"').as_bytes(), GREP_NEEDLE);
                continue;
            }
            let Ok(v) = val.trim_end_matches('u').parse::<i64>() else { continue };
            numeric += 1;
            let (_, r) = rust
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap_or_else(|| panic!("#define {name} has no Rust constant in the table"));
            assert_eq!(*r, v, "{name}");
        }
        assert_eq!(numeric, rust.len());
        assert_eq!(h.matches("#define GREP_OUT_MAX_BYTES (16 + 4 * GREP_MAX_HITS)").count(), 1);
        assert_eq!(h.matches("#define KNN_OUT_BYTES (8 + 16 * KNN_K)").count(), 1);
        assert_eq!(h.matches("#define Q6_GROUP_BYTES (Q6_GROUP_ROWS * 20)").count(), 1);
    }

    #[test]
    fn bitmap_native_decodes_runs() {
        // 3 zeros, 10 ones, 4 zeros, 1 one = 18 bits.
        let runs: Vec<u8> = [3u16, 10, 4, 1].iter().flat_map(|r| r.to_le_bytes()).collect();
        let mut out = [0xAAu8; 8];
        let n = Workload::Bitmap.native(&runs, &mut out);
        assert_eq!(n, 3);
        assert_eq!(&out[..3], &[0b1111_1000, 0b0001_1111, 0b0000_0010]);
    }

    #[test]
    fn generators_are_deterministic_and_sized() {
        for w in Workload::ALL {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let n = w.generate(&mut a, 200_000, 7).unwrap();
            w.generate(&mut b, 200_000, 7).unwrap();
            assert_eq!(a, b, "{w}");
            assert_eq!(n, a.len() as u64);
            assert_eq!(n, 200_000 / w.unit_bytes() * w.unit_bytes(), "{w}");
        }
    }
}
