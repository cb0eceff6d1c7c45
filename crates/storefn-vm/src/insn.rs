//! eBPF instruction encoding (RFC 9669): one 8-byte slot per instruction, `lddw` takes two.

/// Bytes per instruction slot.
pub const INSN_BYTES: usize = 8;

// Instruction classes (low 3 bits of the opcode).
pub const BPF_LD: u8 = 0x00;
pub const BPF_LDX: u8 = 0x01;
pub const BPF_ST: u8 = 0x02;
pub const BPF_STX: u8 = 0x03;
pub const BPF_ALU: u8 = 0x04;
pub const BPF_JMP: u8 = 0x05;
pub const BPF_JMP32: u8 = 0x06;
pub const BPF_ALU64: u8 = 0x07;

// Source modifier for ALU/JMP.
pub const BPF_K: u8 = 0x00;
pub const BPF_X: u8 = 0x08;

// Sizes for loads/stores.
pub const BPF_W: u8 = 0x00;
pub const BPF_H: u8 = 0x08;
pub const BPF_B: u8 = 0x10;
pub const BPF_DW: u8 = 0x18;

// Modes for loads/stores.
pub const BPF_IMM: u8 = 0x00;
pub const BPF_MEM: u8 = 0x60;
pub const BPF_MEMSX: u8 = 0x80;
pub const BPF_ATOMIC: u8 = 0xc0;

// ALU operations (high 4 bits).
pub const BPF_ADD: u8 = 0x00;
pub const BPF_SUB: u8 = 0x10;
pub const BPF_MUL: u8 = 0x20;
pub const BPF_DIV: u8 = 0x30;
pub const BPF_OR: u8 = 0x40;
pub const BPF_AND: u8 = 0x50;
pub const BPF_LSH: u8 = 0x60;
pub const BPF_RSH: u8 = 0x70;
pub const BPF_NEG: u8 = 0x80;
pub const BPF_MOD: u8 = 0x90;
pub const BPF_XOR: u8 = 0xa0;
pub const BPF_MOV: u8 = 0xb0;
pub const BPF_ARSH: u8 = 0xc0;
pub const BPF_END: u8 = 0xd0;

// Jump operations (high 4 bits).
pub const BPF_JA: u8 = 0x00;
pub const BPF_JEQ: u8 = 0x10;
pub const BPF_JGT: u8 = 0x20;
pub const BPF_JGE: u8 = 0x30;
pub const BPF_JSET: u8 = 0x40;
pub const BPF_JNE: u8 = 0x50;
pub const BPF_JSGT: u8 = 0x60;
pub const BPF_JSGE: u8 = 0x70;
pub const BPF_CALL: u8 = 0x80;
pub const BPF_EXIT: u8 = 0x90;
pub const BPF_JLT: u8 = 0xa0;
pub const BPF_JLE: u8 = 0xb0;
pub const BPF_JSLT: u8 = 0xc0;
pub const BPF_JSLE: u8 = 0xd0;

/// `call` with src = 1: a BPF-to-BPF call, `imm` = pc-relative target.
pub const BPF_PSEUDO_CALL: u8 = 1;

/// One decoded instruction slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Insn {
    pub op: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    /// Decodes one little-endian slot.
    #[must_use]
    pub fn decode(b: &[u8; INSN_BYTES]) -> Self {
        Self {
            op: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    #[must_use]
    pub fn encode(&self) -> [u8; INSN_BYTES] {
        let mut b = [0u8; INSN_BYTES];
        b[0] = self.op;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    #[must_use]
    pub fn class(&self) -> u8 {
        self.op & 0x07
    }

    /// Is this the first slot of a 16-byte `lddw`?
    #[must_use]
    pub fn is_lddw(&self) -> bool {
        self.op == BPF_LD | BPF_IMM | BPF_DW
    }

    /// Is this a call (a helper's or a BPF-to-BPF one), which writes r0-r5?
    #[must_use]
    pub(crate) fn is_call(&self) -> bool {
        self.class() == BPF_JMP && self.op & 0xf0 == BPF_CALL
    }
}

/// Decodes a byte stream of whole slots; `None` when the length is not a multiple of 8.
#[must_use]
pub fn decode_all(bytes: &[u8]) -> Option<Vec<Insn>> {
    if !bytes.len().is_multiple_of(INSN_BYTES) {
        return None;
    }
    Some(bytes.chunks_exact(INSN_BYTES).map(|c| Insn::decode(c.try_into().unwrap())).collect())
}
