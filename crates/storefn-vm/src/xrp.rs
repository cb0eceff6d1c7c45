//! The XRP program type's context, `struct bpf_xrp`, with the layout compiled XRP programs
//! bake in (docs/FORMAT.md, "XRP context"; `progs/include/linux/bpf.h`).

/// Fan-out limit: `next_addr[]` / `size[]` slots per invocation (XRP's 16).
pub const XRP_MAX_FANOUT: usize = 16;
/// Bytes of the block XRP's programs may read through `data` (XRP's verifier window). A hop
/// may hold more (an engine built for larger hops); `data_len` says how many, and every access
/// past them is refused at run time.
pub const XRP_DATA_VIEW_BYTES: usize = 4096;
/// Bytes of the scratch buffer the application lends each chain.
pub const XRP_SCRATCH_BYTES: usize = 4096;

/// Byte offsets of `struct bpf_xrp` fields, named so the verifier, JIT and docs agree.
pub const XRP_OFF_DATA: usize = 0;
pub const XRP_OFF_DONE: usize = 8;
pub const XRP_OFF_SLOT: usize = 12;
pub const XRP_OFF_NEXT_ADDR: usize = 16;
pub const XRP_OFF_SIZE: usize = 144;
pub const XRP_OFF_SCRATCH: usize = 272;
/// storefn extension after XRP's 280 bytes: bytes the hop holds (`data`'s length).
pub const XRP_OFF_DATA_LEN: usize = 280;
pub const XRP_CTX_BYTES: usize = 288;

/// `struct bpf_xrp` as the program sees it.
///
/// The function may write `done`, `next_addr[]` and `size[]`; `data` and `scratch` are
/// read-only to it (the runtime owns those pointers).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct XrpCtx {
    pub data: u64,
    pub done: i32,
    /// storefn extension in XRP's padding: the fan-out slot (0..16) whose read just completed.
    /// Set by the runtime; read-only to the program; unmodified XRP programs never look.
    pub slot: u32,
    pub next_addr: [u64; XRP_MAX_FANOUT],
    pub size: [u64; XRP_MAX_FANOUT],
    pub scratch: u64,
    /// storefn extension after XRP's layout: bytes `data` holds (the hop's view, set by the
    /// runtime on every call; read-only to the program). XRP's programs never look past 280.
    pub data_len: u64,
}

impl Default for XrpCtx {
    fn default() -> Self {
        Self {
            data: 0,
            done: 0,
            slot: 0,
            next_addr: [0; XRP_MAX_FANOUT],
            size: [0; XRP_MAX_FANOUT],
            scratch: 0,
            data_len: 0,
        }
    }
}

impl XrpCtx {
    /// Clears what the function sets, before an invocation.
    pub fn reset_outputs(&mut self) {
        self.done = 0;
        self.next_addr = [0; XRP_MAX_FANOUT];
        self.size = [0; XRP_MAX_FANOUT];
    }

    /// The `(slot, addr, size)` requests with a non-zero size.
    pub fn requests(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        (0..XRP_MAX_FANOUT)
            .filter(|&i| self.size[i] != 0)
            .map(|i| (i, self.next_addr[i], self.size[i]))
    }
}

const _: () = {
    assert!(std::mem::size_of::<XrpCtx>() == XRP_CTX_BYTES);
    assert!(std::mem::offset_of!(XrpCtx, data) == XRP_OFF_DATA);
    assert!(std::mem::offset_of!(XrpCtx, done) == XRP_OFF_DONE);
    assert!(std::mem::offset_of!(XrpCtx, slot) == XRP_OFF_SLOT);
    assert!(std::mem::offset_of!(XrpCtx, next_addr) == XRP_OFF_NEXT_ADDR);
    assert!(std::mem::offset_of!(XrpCtx, size) == XRP_OFF_SIZE);
    assert!(std::mem::offset_of!(XrpCtx, scratch) == XRP_OFF_SCRATCH);
    assert!(std::mem::offset_of!(XrpCtx, data_len) == XRP_OFF_DATA_LEN);
};

/// The λ program type's context: `struct context { void *buf_o; void *buf_i; size_t size_i; }`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LambdaCtx {
    pub buf_o: u64,
    pub buf_i: u64,
    pub size_i: u64,
}

/// `struct context` is 24 bytes; all three fields are read-only to the program.
pub const LAMBDA_CTX_BYTES: usize = 24;
const _: () = assert!(std::mem::size_of::<LambdaCtx>() == LAMBDA_CTX_BYTES);
