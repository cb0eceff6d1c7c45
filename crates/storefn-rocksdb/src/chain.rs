//! The scratch ABI of the Get function (`progs/engines/rocksdb/get.bpf.c`; docs/FORMAT.md,
//! "RocksDB Get scratch ABI"): what the host writes before a chain and reads after it, the same
//! for a local chain and a pushed-down one.

use crate::format::table::{ChecksumType, BLOCK_TRAILER_BYTES};
use crate::format::{BlockHandle, InternalKey, ValueType};
use crate::sst::Table;

/// The compiled function's name in storefn-progs.
pub const PROGRAM: &str = "engines/rocksdb/get";

/// Scratch offsets and codes (docs/FORMAT.md, "RocksDB Get scratch ABI").
pub mod abi {
    pub const KEY_LEN: usize = 0;
    pub const FLAGS: usize = 4;
    pub const FILE_SIZE: usize = 8;
    pub const CUR_OFF: usize = 16;
    pub const CUR_SIZE: usize = 24;
    pub const PHASE: usize = 28;
    pub const STATUS: usize = 32;
    pub const HOPS: usize = 36;
    pub const VALUE_LEN: usize = 40;
    pub const REASON: usize = 44;
    pub const TRAILER: usize = 48;
    pub const HOP_MAX: usize = 56;
    pub const CUR_LEN: usize = 60;
    pub const KEY: usize = 128;
    pub const KEY_MAX: usize = 512;
    pub const CUR: usize = 640;
    pub const VALUE: usize = 1168;
    pub const VALUE_MAX: usize = 2928;
    /// Bytes of scratch a reply must carry back (through the value).
    pub const OUT_BYTES: usize = VALUE + VALUE_MAX;

    pub const FLAG_VERIFY: u32 = 1;
    pub const FLAG_INDEX_USER_KEYS: u32 = 2;
    pub const FLAG_INDEX_DELTA: u32 = 4;

    pub const PHASE_INDEX: u32 = 0;
    pub const PHASE_DATA: u32 = 1;

    pub const ENTRY: u32 = 1;
    pub const ABSENT: u32 = 2;
    pub const FALLBACK: u32 = 3;
    pub const CORRUPT: u32 = 4;
}

const _: () = assert!(abi::OUT_BYTES <= storefn_io::limits::SCRATCH_BYTES);

/// Where a chain starts: the index block (phase 0) or, the index being cached, the data block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainStart {
    pub block: BlockHandle,
    pub phase: u32,
}

impl ChainStart {
    /// Bytes of the first hop: the block and its trailer.
    pub fn hop_len(&self) -> u64 {
        self.block.size + BLOCK_TRAILER_BYTES as u64
    }
}

/// What a chain answered for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainAnswer {
    Entry {
        kind: ValueType,
        sequence: u64,
        value: Vec<u8>,
    },
    Absent,
    /// The function does not read this (a compressed block, a block past the hop, a key or
    /// value larger than the scratch): plain reads answer it. `line` is the function's.
    Fallback {
        line: u32,
    },
    /// The function found the block damaged: the block it was reading and its line.
    Corrupt {
        offset: u64,
        line: u32,
    },
}

/// Whether the function can check this table's checksums itself (CRC-32C only).
pub fn function_verifies(t: &Table) -> bool {
    matches!(t.footer().checksum, ChecksumType::Crc32c | ChecksumType::None)
}

/// Fills a chain's scratch for `key` in table `t`. `None` when the key does not fit the ABI
/// (the caller answers it with plain reads).
pub fn fill(
    s: &mut [u8],
    t: &Table,
    key: &[u8],
    start: ChainStart,
    verify: bool,
    hop_max: u32,
) -> Option<()> {
    if key.len() > abi::KEY_MAX || s.len() < abi::OUT_BYTES {
        return None;
    }
    let size = u32::try_from(start.block.size).ok()?;
    let mut flags = 0;
    if verify && t.footer().checksum == ChecksumType::Crc32c {
        flags |= abi::FLAG_VERIFY;
    }
    if t.index_key_is_user_key() {
        flags |= abi::FLAG_INDEX_USER_KEYS;
    }
    if t.index_value_is_delta() {
        flags |= abi::FLAG_INDEX_DELTA;
    }
    s[..abi::KEY].fill(0);
    put32(s, abi::KEY_LEN, key.len() as u32);
    put32(s, abi::FLAGS, flags);
    s[abi::FILE_SIZE..abi::FILE_SIZE + 8].copy_from_slice(&t.size().to_le_bytes());
    s[abi::CUR_OFF..abi::CUR_OFF + 8].copy_from_slice(&start.block.offset.to_le_bytes());
    put32(s, abi::CUR_SIZE, size);
    put32(s, abi::PHASE, start.phase);
    put32(s, abi::HOP_MAX, hop_max);
    s[abi::KEY..abi::KEY + key.len()].copy_from_slice(key);
    Some(())
}

fn put32(s: &mut [u8], at: usize, v: u32) {
    s[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get32(s: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]])
}

/// Reads a finished chain's answer from its scratch (at least [`abi::OUT_BYTES`] of it).
///
/// # Errors
/// A status the ABI does not name, or a value length past the scratch.
pub fn answer(s: &[u8]) -> Result<ChainAnswer, String> {
    if s.len() < abi::OUT_BYTES {
        return Err(format!("scratch of {} bytes, shorter than the ABI's", s.len()));
    }
    let line = get32(s, abi::REASON);
    match get32(s, abi::STATUS) {
        abi::ENTRY => {
            let n = get32(s, abi::VALUE_LEN) as usize;
            if n > abi::VALUE_MAX {
                return Err(format!("value length {n} past the scratch"));
            }
            let mut t = [0u8; 8];
            t.copy_from_slice(&s[abi::TRAILER..abi::TRAILER + 8]);
            let mut ik = vec![0u8; 8];
            ik.copy_from_slice(&t);
            let k = InternalKey::parse(&ik).expect("8 bytes");
            Ok(ChainAnswer::Entry {
                kind: k.kind,
                sequence: k.sequence,
                value: s[abi::VALUE..abi::VALUE + n].to_vec(),
            })
        }
        abi::ABSENT => Ok(ChainAnswer::Absent),
        abi::FALLBACK => Ok(ChainAnswer::Fallback { line }),
        abi::CORRUPT => {
            let mut o = [0u8; 8];
            o.copy_from_slice(&s[abi::CUR_OFF..abi::CUR_OFF + 8]);
            Ok(ChainAnswer::Corrupt { offset: u64::from_le_bytes(o), line })
        }
        st => Err(format!("status {st} is not in the scratch ABI (line {line})")),
    }
}

/// The function's walk of a data block, JIT and interpreter, against a plain walk of the
/// entries the block was built from: keys of many lengths sharing prefixes of every length
/// (the function compares a word at a time from the bytes the previous entry matched), several
/// versions of a key, and search keys present, absent, between, before and past every entry.
#[cfg(test)]
mod tests {
    use super::{abi, answer, ChainAnswer};
    use crate::format::table::mask_crc;
    use std::sync::Arc;
    use storefn_vm::{Engine, Instance, ProgType, XrpCtx};

    /// (user key, sequence, value), sorted as RocksDB sorts internal keys.
    type Entries = Vec<(Vec<u8>, u64, Vec<u8>)>;

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A data block of `entries` with a restart every `interval`, and its trailer.
    fn block(entries: &Entries, interval: usize) -> Vec<u8> {
        let (mut b, mut restarts, mut prev) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (k, seq, v)) in entries.iter().enumerate() {
            let mut ik = k.clone();
            ik.extend_from_slice(&(seq << 8 | 1).to_le_bytes());
            let shared = if i.is_multiple_of(interval) {
                restarts.push(b.len() as u32);
                0
            } else {
                prev.iter().zip(&ik).take_while(|(a, b)| a == b).count()
            };
            varint(&mut b, shared as u64);
            varint(&mut b, (ik.len() - shared) as u64);
            varint(&mut b, v.len() as u64);
            b.extend_from_slice(&ik[shared..]);
            b.extend_from_slice(v);
            prev = ik;
        }
        for r in &restarts {
            b.extend_from_slice(&r.to_le_bytes());
        }
        b.extend_from_slice(&(restarts.len() as u32).to_le_bytes());
        let mut covered = b.clone();
        covered.push(0);
        b.push(0);
        b.extend_from_slice(&mask_crc(crc32c::crc32c(&covered)).to_le_bytes());
        b
    }

    fn entries(rng: &mut impl FnMut() -> u64) -> Entries {
        let mut e: Entries = (0..300)
            .map(|_| {
                let len = (rng() % 40) as usize;
                // Few distinct bytes, so neighbours share long prefixes.
                let k = (0..len).map(|_| b"abc"[(rng() % 3) as usize]).collect();
                // Mostly short values, some past a KiB (copied a word at a time).
                let vl = if rng().is_multiple_of(16) { rng() % 1100 } else { rng() % 20 };
                let v = (0..vl).map(|_| rng() as u8).collect();
                (k, rng() % 1000, v)
            })
            .collect();
        e.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        e.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        e
    }

    /// The plain walk: the newest entry of the key, or absent.
    fn expect(e: &Entries, key: &[u8]) -> ChainAnswer {
        match e.iter().find(|x| x.0.as_slice() >= key) {
            Some((k, seq, v)) if k == key => ChainAnswer::Entry {
                kind: crate::format::ValueType::Value,
                sequence: *seq,
                value: v.clone(),
            },
            _ => ChainAnswer::Absent,
        }
    }

    fn run(inst: &mut Instance, data: &[u8], key: &[u8]) -> ChainAnswer {
        let mut s = vec![0u8; abi::OUT_BYTES];
        let n = (data.len() - 5) as u32;
        s[abi::KEY_LEN..abi::KEY_LEN + 4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        s[abi::FLAGS..abi::FLAGS + 4].copy_from_slice(&abi::FLAG_VERIFY.to_le_bytes());
        s[abi::FILE_SIZE..abi::FILE_SIZE + 8].copy_from_slice(&(1u64 << 20).to_le_bytes());
        s[abi::CUR_SIZE..abi::CUR_SIZE + 4].copy_from_slice(&n.to_le_bytes());
        s[abi::PHASE..abi::PHASE + 4].copy_from_slice(&abi::PHASE_DATA.to_le_bytes());
        s[abi::HOP_MAX..abi::HOP_MAX + 4].copy_from_slice(&65536u32.to_le_bytes());
        s[abi::KEY..abi::KEY + key.len()].copy_from_slice(key);
        let mut ctx = XrpCtx::default();
        inst.run_xrp(&mut ctx, data, &mut s).expect("the function runs");
        assert_eq!(ctx.done, 1, "one hop answers a data block");
        answer(&s).expect("a status of the ABI")
    }

    #[test]
    fn the_functions_block_walk_equals_a_plain_walk_under_jit_and_interpreter() {
        let prog =
            storefn_vm::load_verified(storefn_progs::must(super::PROGRAM), None, ProgType::Xrp)
                .unwrap();
        let mut jit = Instance::new(Arc::clone(&prog), Engine::Jit).unwrap();
        let mut interp = Instance::new(prog, Engine::Interp).unwrap();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rng = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..6 {
            let e = entries(&mut rng);
            let data = block(&e, [1, 2, 16, 16, 3, 64][round]);
            let mut keys: Vec<Vec<u8>> = vec![Vec::new(), vec![0xff; 41]];
            for (k, _, _) in &e {
                keys.push(k.clone());
                let mut more = k.clone();
                more.push(b'b');
                keys.push(more);
                if let Some(l) = k.last().copied() {
                    let mut less = k.clone();
                    *less.last_mut().unwrap() = l - 1;
                    keys.push(less);
                    keys.push(k[..k.len() - 1].to_vec());
                }
            }
            for k in &keys {
                let want = expect(&e, k);
                assert_eq!(run(&mut jit, &data, k), want, "jit, key {k:?}");
                assert_eq!(run(&mut interp, &data, k), want, "interpreter, key {k:?}");
            }
        }
    }
}
