//! The bench's workload set: each a program under `progs/` (the ABI of `progs/bench/bench.h`:
//! a 4 KiB block through `ctx->data`, an argument in `scratch[0]`, the answer in `scratch[1]`),
//! how its block is filled, how its argument is drawn, and its native Rust twin (the same
//! algorithm, the answer every engine must reproduce).

/// Bytes of every workload's input block (the XRP data view the programs read).
pub const BLOCK_BYTES: usize = 4096;
/// The block as u64 words (kept aligned so the twins read it as `u64`/`u32` slices).
pub type Block = [u64; BLOCK_BYTES / 8];

/// `scratch[1]` before a checked call: `empty` leaves it, every other program overwrites it.
pub(super) const UNTOUCHED: u64 = 0x5eed_5eed_5eed_5eed;

/// Keys in a BPF-KV node (fan-out 31).
const NODE512_KEYS: usize = 31;
/// Keys in the 4 KiB node: one u64 count, then 511 keys.
const NODE4K_KEYS: usize = 511;
/// Gap between consecutive keys stored in the nodes and sorted arrays (searches hit and miss).
const KEY_STRIDE: u64 = 10;

/// One workload.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Row name in the bench output.
    pub name: &'static str,
    /// The program under `progs/` (without `.bpf.c`) whose ELF the bench runs.
    pub prog: &'static str,
    /// What it stands for.
    pub shape: &'static str,
    pub(super) fill: fn(&mut Block),
    /// The call's argument from a uniform random word.
    pub(super) arg: fn(u64) -> u64,
    /// The native twin: the answer for (block, argument).
    pub(super) native: fn(&Block, u64) -> u64,
}

macro_rules! spec {
    ($name:literal, $prog:literal, $shape:literal, $fill:expr, $arg:expr, $native:expr) => {
        Spec { name: $name, prog: $prog, shape: $shape, fill: $fill, arg: $arg, native: $native }
    };
}

/// Every workload, in output order. `empty` is the fixed cost of a call (kept out of the
/// geometric means).
pub const WORKLOADS: &[Spec] = &[
    spec!(
        "node512",
        "bench_node512",
        "BPF-KV node search, 31 keys",
        fill_node512,
        |r| r % 320,
        node512
    ),
    spec!(
        "node4k",
        "bench_node4k",
        "binary search, 511 u64 keys",
        fill_node4k,
        |r| r % 5130,
        node4k
    ),
    spec!("empty", "bench_empty", "fixed cost of a call", |b| b.fill(0), |r| r, |_, _| UNTOUCHED),
    spec!("sum64", "bench/sum64", "loop, u64 loads", fill_random, |r| r, sum64),
    spec!("sum32", "bench/sum32", "loop, u32 loads", fill_random, |r| r, sum32),
    spec!("stats64", "bench/stats64", "min/max/sum (λ-IO Stats64)", fill_random, |r| r, stats64),
    spec!(
        "bsearch32",
        "bench/bsearch32",
        "binary search, 1024 u32 keys",
        fill_sorted32,
        |r| r % 10_260,
        bsearch32
    ),
    spec!("crc32", "bench/crc32", "checksum, bit loop, byte loads", fill_random, |r| r, crc32),
    spec!("fnv1a", "bench/fnv1a", "hash, byte loads", fill_random, |r| r, fnv1a),
    spec!("adler32", "bench/adler32", "checksum, modulo", fill_random, |r| r, adler32),
    spec!("popcount", "bench/popcount", "bit tricks, 64-bit", fill_random, |r| r, popcount),
    spec!("bitrev32", "bench/bitrev32", "bit tricks, 32-bit ALU", fill_random, |r| r, bitrev32),
    spec!("prime", "bench/prime", "trial division", |b| b.fill(0), |r| r % 60_000, prime),
    spec!(
        "collatz",
        "bench/collatz",
        "branchy data-dependent loop",
        |b| b.fill(0),
        |r| r % 100_000 + 1,
        collatz
    ),
    spec!("classify", "bench/classify", "branchy code over bytes", fill_text, |r| r, classify),
    spec!("calls", "bench/calls", "BPF-to-BPF calls in a loop", fill_random, |r| r, calls),
    spec!("straight", "bench/straight", "large straight-line code", fill_random, |r| r, straight),
    spec!(
        "mismatch",
        "bench/mismatch",
        "memcmp, byte loads, early exit",
        fill_halves,
        |r| r,
        mismatch
    ),
    spec!("knn", "bench/knn", "λ-IO KNN row distance", fill_random, |r| r, knn),
    spec!("grep", "bench/grep", "λ-IO Grep, pattern search", fill_text, |r| r, grep),
    spec!(
        "histogram",
        "bench/histogram",
        "stack array indexed by data",
        fill_random,
        |r| r,
        histogram
    ),
    spec!("matmul", "bench/matmul", "nested loops, multiplies", fill_random, |r| r, matmul),
    spec!("lcg", "bench/lcg", "pure 64-bit ALU", |b| b.fill(0), |r| r, lcg),
    spec!("xorshift32", "bench/xorshift32", "pure 32-bit ALU", |b| b.fill(0), |r| r, xorshift32),
    spec!("be32", "bench/be32", "byte loads, big-endian recompose", fill_random, |r| r, be32),
    spec!(
        "alternate",
        "bench/alternate",
        "unproved loads alternating data/scratch",
        fill_random,
        |r| r,
        alternate
    ),
    spec!(
        "strided",
        "bench/strided",
        "pointer + scaled data-dependent index",
        fill_random,
        |r| r,
        strided
    ),
];

/// The workload named `name`.
#[must_use]
pub fn workload(name: &str) -> Option<&'static Spec> {
    WORKLOADS.iter().find(|w| w.name == name)
}

fn u32s(b: &Block) -> &[u32] {
    // SAFETY: a [u64; N] is 2N initialised u32s at an alignment u32 accepts; the slice
    // borrows `b`, so it cannot outlive it or alias a write.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u32>(), BLOCK_BYTES / 4) }
}

/// The block's bytes.
#[must_use]
pub fn bytes(b: &Block) -> &[u8] {
    // SAFETY: as in `u32s`; u8 has alignment 1 and no invalid values.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), BLOCK_BYTES) }
}

fn bytes_mut(b: &mut Block) -> &mut [u8] {
    // SAFETY: as in `bytes`; every byte pattern is a valid u64, so writes through the byte
    // view leave the words valid, and the exclusive borrow is carried over.
    unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr().cast::<u8>(), BLOCK_BYTES) }
}

/// xorshift64*: the deterministic stream behind the fills and the argument ring.
pub(super) fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn fill_random(b: &mut Block) {
    let mut x = 0x9e37_79b9_7f4a_7c15;
    b.iter_mut().for_each(|w| *w = xorshift(&mut x));
}

fn fill_text(b: &mut Block) {
    const ALPHABET: &[u8] = b"abcdefghij klmnopq\nrstuvwxyz ABCDEFG0123456789.,;-\t";
    let mut x = 7;
    for c in bytes_mut(b) {
        *c = ALPHABET[(xorshift(&mut x) % ALPHABET.len() as u64) as usize];
    }
}

fn fill_halves(b: &mut Block) {
    fill_random(b);
    let d = bytes_mut(b);
    let (lo, hi) = d.split_at_mut(BLOCK_BYTES / 2);
    hi.copy_from_slice(lo);
    // A difference every 300 bytes: searches from a random start run up to 300 bytes.
    for i in (150..BLOCK_BYTES / 2).step_by(300) {
        hi[i] ^= 0x5a;
    }
}

fn fill_sorted32(b: &mut Block) {
    let d = bytes_mut(b);
    for (i, w) in d.chunks_exact_mut(4).enumerate() {
        w.copy_from_slice(&(i as u32 * KEY_STRIDE as u32).to_le_bytes());
    }
}

fn fill_node512(b: &mut Block) {
    // next = 0, type = 0 (internal), key[k] = k * stride, ptr[k] = k.
    b.fill(0);
    for k in 0..NODE512_KEYS {
        b[2 + k] = k as u64 * KEY_STRIDE;
        b[2 + NODE512_KEYS + k] = k as u64;
    }
}

fn fill_node4k(b: &mut Block) {
    b.fill(0);
    b[0] = NODE4K_KEYS as u64;
    for k in 0..NODE4K_KEYS {
        b[1 + k] = k as u64 * KEY_STRIDE;
    }
}

fn node512(b: &Block, key: u64) -> u64 {
    let keys = &b[2..2 + NODE512_KEYS];
    let mut i = 1;
    while i < NODE512_KEYS && key >= keys[i] {
        i += 1;
    }
    i as u64 - 1
}

fn node4k(b: &Block, key: u64) -> u64 {
    let keys = &b[1..=NODE4K_KEYS];
    let (mut lo, mut hi) = (0usize, usize::try_from(b[0]).unwrap_or(usize::MAX).min(NODE4K_KEYS));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if keys[mid] <= key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo as u64
}

fn sum64(b: &Block, a: u64) -> u64 {
    b.iter().fold(a, |s, &w| s.wrapping_add(w))
}

fn sum32(b: &Block, a: u64) -> u64 {
    u32s(b).iter().fold(a, |s, &w| s.wrapping_add(u64::from(w)))
}

fn stats64(b: &Block, a: u64) -> u64 {
    let (mut mn, mut mx, mut s) = (u64::MAX, 0, 0u64);
    for &v in b {
        mn = mn.min(v);
        mx = mx.max(v);
        s = s.wrapping_add(v);
    }
    (mx.wrapping_sub(mn)) ^ s ^ a
}

/// The program's own search (lo/hi halves), as node4k's twin is: std's `partition_point`
/// is another algorithm (base and shrinking size, no `lo + hi`), which rustc unrolls whole for
/// this fixed length, so it measured a different search, not the same one compiled natively.
fn bsearch32(b: &Block, key: u64) -> u64 {
    let keys = u32s(b);
    let (mut lo, mut hi) = (0usize, keys.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if u64::from(keys[mid]) < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo as u64
}

fn crc32(b: &Block, a: u64) -> u64 {
    let mut crc = !(a as u32);
    for &c in &bytes(b)[..256] {
        crc ^= u32::from(c);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    u64::from(!crc)
}

fn fnv1a(b: &Block, a: u64) -> u64 {
    bytes(b)[..1024]
        .iter()
        .fold(0xcbf2_9ce4_8422_2325 ^ a, |h, &c| (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3))
}

fn adler32(b: &Block, arg: u64) -> u64 {
    let (mut a, mut s) = ((arg & 0xffff) as u32 % 65521, 0u32);
    for &c in &bytes(b)[..2048] {
        a = (a + u32::from(c)) % 65521;
        s = (s + a) % 65521;
    }
    (u64::from(s) << 16) | u64::from(a)
}

fn popcount(b: &Block, a: u64) -> u64 {
    b.iter().fold(u64::from(a.count_ones()), |n, w| n + u64::from(w.count_ones()))
}

fn bitrev32(b: &Block, a: u64) -> u64 {
    let x = u32s(b)[..512]
        .iter()
        .enumerate()
        .fold(a as u32, |x, (i, &w)| x ^ w.reverse_bits().wrapping_add(i as u32));
    u64::from(x)
}

fn prime(_: &Block, base: u64) -> u64 {
    (base..base + 16)
        .filter(|&n| {
            if n < 2 || (n > 3 && n % 2 == 0) {
                return false;
            }
            let mut f = 3;
            while f * f <= n && f < 4096 {
                if n % f == 0 {
                    return false;
                }
                f += 2;
            }
            true
        })
        .count() as u64
}

fn collatz(_: &Block, mut n: u64) -> u64 {
    let mut steps = 0;
    while n > 1 && steps < 1000 {
        n = if n & 1 == 1 { n.wrapping_mul(3).wrapping_add(1) } else { n >> 1 };
        steps += 1;
    }
    steps
}

fn classify(b: &Block, a: u64) -> u64 {
    let mut n = [0u64; 5];
    for &c in &bytes(b)[..1024] {
        let k = match c {
            b'0'..=b'9' => 0,
            b'A'..=b'Z' => 1,
            b'a'..=b'z' => 2,
            b' ' | b'\n' | b'\t' => 3,
            _ => 4,
        };
        n[k] += 1;
    }
    n[0] + 3 * n[1] + 5 * n[2] + 7 * n[3] + 11 * n[4] + a
}

fn calls(b: &Block, a: u64) -> u64 {
    b[..256].iter().fold(a, |h, &v| {
        let h = (h ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^ (h >> 29)
    })
}

fn straight(b: &Block, a: u64) -> u64 {
    b[..128].iter().fold(a, |x, &w| (x ^ w).rotate_left(13).wrapping_mul(0xff51_afd7_ed55_8ccd))
}

fn mismatch(b: &Block, a: u64) -> u64 {
    let d = bytes(b);
    let start = (a & 1023) as usize;
    let (lo, hi) = d.split_at(BLOCK_BYTES / 2);
    (start + lo[start..].iter().zip(&hi[start..]).take_while(|(x, y)| x == y).count()) as u64
}

fn knn(b: &Block, a: u64) -> u64 {
    let row = &bytes(b)[(a & 1) as usize * 2048..];
    row[..255].iter().enumerate().map(|(j, &v)| (j as i64 - i64::from(v)).unsigned_abs()).sum()
}

fn grep(b: &Block, a: u64) -> u64 {
    let d = bytes(b);
    let at = (a % 4000) as usize;
    let p = &d[at..at + 4];
    d[..at + 3].windows(4).position(|w| w == p).unwrap_or(at) as u64
}

fn histogram(b: &Block, a: u64) -> u64 {
    let mut h = [0u32; 16];
    for &c in &bytes(b)[..2048] {
        h[usize::from(c >> 4)] += 1;
    }
    h.iter().enumerate().fold(a, |s, (k, &n)| s.wrapping_add(u64::from(n) * (k as u64 + 1)))
}

fn matmul(b: &Block, a: u64) -> u64 {
    let (m, n) = u32s(b).split_at(64);
    let mut t = a;
    for i in 0..8 {
        for j in 0..8 {
            let c = (0..8).fold(0u64, |c, k| {
                c.wrapping_add(u64::from(m[i * 8 + k]) * u64::from(n[k * 8 + j]))
            });
            t = t.wrapping_add(c * u64::from(i == j)).wrapping_add(c >> 32);
        }
    }
    t
}

fn lcg(_: &Block, mut x: u64) -> u64 {
    let mut acc = 0;
    for _ in 0..1024 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        acc ^= x >> 33;
    }
    acc
}

fn xorshift32(_: &Block, a: u64) -> u64 {
    let (mut x, mut s) = (a as u32 | 1, 0u32);
    for _ in 0..2048 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s = s.wrapping_add(x);
    }
    u64::from(s)
}

fn be32(b: &Block, a: u64) -> u64 {
    bytes(b)[..2048].chunks_exact(4).fold(a, |s, w| {
        s.wrapping_add(u64::from(u32::from_be_bytes(w.try_into().expect("4 bytes"))))
    })
}

/// The bench leaves the scratch zero past its first two words, so the key bytes are 0.
fn alternate(b: &Block, a: u64) -> u64 {
    let at = (a % (BLOCK_BYTES as u64 - 256)) as usize;
    let key = [0u8; 512];
    (0..256).map(|i| u64::from(bytes(b)[(at + i) & 32767].wrapping_sub(key[i & 511]))).sum()
}

fn strided(b: &Block, a: u64) -> u64 {
    let (mut i, mut s) = (a & 511, 0u64);
    for _ in 0..256 {
        let v = b[i as usize];
        s = s.wrapping_add(v);
        i = i.wrapping_add(v) & 511;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twins_answer_known_values() {
        let mut b: Block = [0; BLOCK_BYTES / 8];
        fill_node512(&mut b);
        assert_eq!(node512(&b, 0), 0);
        assert_eq!(node512(&b, 15), 1);
        assert_eq!(node512(&b, 10_000), 30);
        fill_node4k(&mut b);
        assert_eq!(node4k(&b, 0), 1);
        assert_eq!(node4k(&b, 25), 3);
        assert_eq!(node4k(&b, u64::MAX), 511);
        fill_sorted32(&mut b);
        assert_eq!(bsearch32(&b, 0), 0);
        assert_eq!(bsearch32(&b, 11), 2);
        assert_eq!(prime(&b, 0), 6, "2 3 5 7 11 13");
        assert_eq!(collatz(&b, 27), 111);
        // CRC-32 of 256 zero bytes with the standard initial value.
        b.fill(0);
        assert_eq!(crc32(&b, 0), 0x0d96_8558);
        assert_eq!(adler32(&b, 1), (2048 << 16) | 1);
    }

    #[test]
    fn names_are_unique() {
        for (i, w) in WORKLOADS.iter().enumerate() {
            assert!(WORKLOADS[..i].iter().all(|o| o.name != w.name), "{}", w.name);
        }
        // At least 20 besides `empty`.
        assert!(WORKLOADS.len() > 20);
    }
}
