/* WiredTiger point lookup as a storage-function chain: one hop per page, from a checkpoint's
 * root through row-store internal pages to the leaf (docs/FORMAT.md, "WiredTiger", and its
 * "WiredTiger lookup scratch ABI"). Pages at WiredTiger's default sizes (internal 4 KiB, leaf up
 * to 32 KiB) are one hop each. The host submits the root's block and fills the scratch. Each
 * block's CRC-32C is checked by whoever sees the block: the local host as it arrives (on_block),
 * or this function itself when the scratch asks (FLAG_VERIFY: a remote server runs the chain and
 * no host sees the blocks). The function also checks each block is the one its parent's address
 * named (size and checksum in the block header). Anything it does not read (overflow items,
 * compressed pages, blocks longer than a hop, keys or values larger than the scratch holds,
 * pages with more cells than it scans) ends the chain with status FALLBACK.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Loops run to data-dependent bounds (each bounded before it starts): the runtime charges a
 * loop with a constant trip count in full before it runs, early exits or not.
 *
 * The data view the function reads: WiredTiger's default leaf_page_max (32 KiB). The runtime
 * gives a hop at least the block requested (data_len says how much); every access is masked
 * into the view and bounded by the block's size before it is made. */
#define VIEW 32768
#define VMASK (VIEW - 1)
#define KEY_MAX 512
#define VALUE_MAX 3008
#define MAX_HOPS 32
/* Cells one page may hold that the function scans (a 32 KiB leaf of tiny items holds more:
 * those pages are a fallback, not damage). */
#define MAX_CELLS 16384
/* Scratch flags. */
#define FLAG_VERIFY 1
/* Block header (after the 28-byte page header): disk_size@28, checksum@32, flags@36. */
#define BLOCK_DATA_CKSUM 0x01
#define CHECKSUM_SKIP 64

#include "storefn.h"

enum { RUNNING = 0, FOUND = 1, NOT_FOUND = 2, FALLBACK = 3, CORRUPT = 4 };

struct wt_scratch {
	__u32 key_len;      /*   0 in: the stored key's length */
	__u32 hop_bytes;    /*   4 in: longest block one hop reads */
	__u64 alloc;        /*   8 in: allocation size */
	__u64 file_size;    /*  16 in: the checkpoint's file size */
	__u32 status;       /*  24 out */
	__u32 hops;         /*  28 out */
	__u64 cur_offset;   /*  32 in (root) / state: the block requested */
	__u32 cur_size;     /*  40 in (root) / state */
	__u32 cur_checksum; /*  44 in (root) / state */
	__u32 value_len;    /*  48 out */
	__u32 reason;       /*  52 out: where it stopped (a line of this file) */
	__u32 flags;        /*  56 in: FLAG_VERIFY */
	__u8 pad[4];        /*  60 */
	__u8 key[KEY_MAX];  /*  64 in */
	__u8 reserved[KEY_MAX]; /* 576 */
	__u8 value[VALUE_MAX]; /* 1088 out */
};

#define STOP(st) do { s->status = (st); s->reason = __LINE__; ctx->done = 1; return 0; } while (0)

static __always_inline __u32 rd32(const __u8 *d, __u32 at)
{
	return (__u32)d[at & VMASK] | (__u32)d[(at + 1) & VMASK] << 8 |
	       (__u32)d[(at + 2) & VMASK] << 16 | (__u32)d[(at + 3) & VMASK] << 24;
}

/* A packed unsigned integer at *pos (< end); returns -1 on damage. Not inlined: its five
 * callers would copy it five times, and past 1,024 instruction slots the runtime compiles a
 * program in its quick tier, whose code runs this function's leaf scan about 2x slower. */
static __noinline int unpack(const __u8 *d, __u32 *pos, __u32 end, __u64 *out)
{
	__u32 p = *pos;
	if (p >= end)
		return -1;
	__u8 b = d[p & VMASK];
	if ((b & 0xc0) == 0x80) {
		*out = b & 0x3f;
		*pos = p + 1;
		return 0;
	}
	if ((b & 0xe0) == 0xc0) {
		if (p + 1 >= end)
			return -1;
		*out = ((((__u64)(b & 0x1f)) << 8) | d[(p + 1) & VMASK]) + 64;
		*pos = p + 2;
		return 0;
	}
	if ((b & 0xf0) != 0xe0)
		return -1;
	__u32 len = b & 0x0f;
	if (len > 8 || p + 1 + len > end)
		return -1;
	__u64 v = 0;
	for (__u32 i = 0; i < len; i++)
		v = (v << 8) | d[(p + 1 + i) & VMASK];
	*out = v + 8256;
	*pos = p + 1 + len;
	return 0;
}

/* One parsed cell. kind: 1 key, 2 value, 3 value copy, 4 addr internal, 5 addr leaf,
 * 6 fallback (overflow, deleted child, run length, second descriptor); -1 damage. */
struct cell {
	__u32 data, len, end, prefix;
	__u64 copy;
};

static __noinline int parse_cell(const __u8 *d, __u32 at, __u32 end, struct cell *c)
{
	if (at >= end)
		return -1;
	__u8 b = d[at & VMASK];
	__u32 p = at + 1;
	__u64 len = 0;
	c->prefix = 0;
	if (b & 3) {
		if ((b & 3) == 2) {
			if (p >= end)
				return -1;
			c->prefix = d[p & VMASK];
			p++;
		}
		c->data = p;
		c->len = b >> 2;
		c->end = p + c->len;
		if (c->end > end)
			return -1;
		return (b & 3) == 3 ? 2 : 1;
	}
	if (b & 0x0c)
		return 6;
	__u8 t = b & 0xf0;
	if (t == 0x70) {
		if (p >= end)
			return -1;
		c->prefix = d[p & VMASK];
		p++;
	}
	if (t == 0x90) {
		if (unpack(d, &p, end, &c->copy))
			return -1;
		c->end = p;
		return 3;
	}
	if (t == 0x40)
		return 6;
	if (unpack(d, &p, end, &len))
		return -1;
	if (t == 0x50 || t == 0x70 || t == 0x80)
		len += 64;
	if (len > VIEW || p + len > end)
		return -1;
	c->data = p;
	c->len = len;
	c->end = p + len;
	if (t == 0x50 || t == 0x70)
		return 1;
	if (t == 0x80)
		return 2;
	if (t == 0x10)
		return 4;
	if (t == 0x20 || t == 0x30)
		return 5;
	if (t == 0x00 || t == 0x60 || t == 0xa0 || t == 0xb0 || t == 0xc0)
		return 6;
	return -1;
}

/* The cells a row-store leaf is mostly made of, decoded inline: short keys (with or without a
 * prefix byte), short values and long values whose length packs into one byte (64 to 127
 * bytes). Returns what parse_cell would for those (1 key, 2 value) and 0 for anything else, which
 * the caller then hands to parse_cell (so damage is judged in one place). Every byte it reads is
 * before `end`. A leaf's scan is a loop over these: a call and parse_cell's branches per cell
 * cost several times more than the cell itself. */
static __always_inline int quick_cell(const __u8 *d, __u32 at, __u32 end, struct cell *c)
{
	if (at + 2 > end)
		return 0;
	__u8 b = d[at & VMASK], kind = b & 3;
	__u32 p = at + 1, len = b >> 2;
	c->prefix = 0;
	if (kind == 2) {
		c->prefix = d[p & VMASK];
		p++;
	} else if (b == 0x80) {
		__u8 l = d[p & VMASK];
		if ((l & 0xc0) != 0x80)
			return 0;
		len = (l & 0x3f) + 64;
		p++;
		kind = 3;
	} else if (kind == 0) {
		return 0;
	}
	if (p + len > end)
		return 0;
	c->data = p;
	c->len = len;
	c->end = p + len;
	return kind == 3 ? 2 : 1;
}

/* Where a page's keys stand against the search key while a page is scanned in order. Every key
 * before the current one was smaller than the search key (the scan stops at the first that is not)
 * and the last one shared `match` leading bytes with it; `len` is that key's length. A key that
 * shares more than `match` bytes with a smaller key is itself smaller, so prefix-compressed keys
 * are compared without rebuilding them: only the suffix past the shared prefix is read. */
struct order {
	__u32 match, len;
};

/* The key of cell c against the search key: <0, 0, >0; -2 damage (a prefix longer than the
 * previous key). */
static __always_inline int cmp_key(struct wt_scratch *s, __u32 k, const __u8 *d, struct cell *c,
				   struct order *o)
{
	__u32 p = c->prefix;
	if (p > o->len)
		return -2;
	o->len = p + c->len;
	if (p > o->match)
		return -1;
	__u32 rest = k - p, n = c->len < rest ? c->len : rest;
	for (__u32 i = 0; i < n; i++) {
		__u8 a = d[(c->data + i) & VMASK], b = s->key[(p + i) & (KEY_MAX - 1)];
		if (a != b) {
			o->match = p + i;
			return a < b ? -1 : 1;
		}
	}
	o->match = p + n;
	if (c->len == rest)
		return 0;
	return c->len < rest ? -1 : 1;
}

/* Search keys up to this long are compared a word at a time (YCSB's keys are 23 bytes). */
#define KEY_WORDS_BYTES 32

/* The key of cell c (no prefix: WiredTiger's default, prefix_compression=false) against the
 * search key, k bytes whose first words w0..w3 (little-endian, as loaded) the caller holds in
 * registers: as cmp_key, but 8 bytes per load and no scratch read. A leaf without prefix
 * compression compares every key from its first byte; byte loads taking turns between the page
 * and the scratch each missed the runtime's window of the region last matched (a call each:
 * most of the function's time). The caller checked k <= KEY_WORDS_BYTES and that the words
 * read lie before the page's end. */
static __always_inline int cmp_words(const __u8 *d, struct cell *c, struct order *o, __u32 k,
				     __u64 w0, __u64 w1, __u64 w2, __u64 w3)
{
	__u32 n = c->len < k ? c->len : k;
	o->len = c->len;
#pragma clang loop unroll(disable)
	for (__u32 j = 0; j < KEY_WORDS_BYTES / 8 && j * 8 < n; j++) {
		__u64 a = *(const __u64 *)(d + ((c->data + j * 8) & VMASK));
		__u64 b = j == 0 ? w0 : j == 1 ? w1 : j == 2 ? w2 : w3;
		__u32 m = n - j * 8;
		if (m < 8) {
			__u64 keep = (1ULL << (m * 8)) - 1;
			a &= keep;
			b &= keep;
		}
		if (a == b)
			continue;
		/* The first differing byte is the lowest nonzero byte of a ^ b (a binary search:
		 * unrolled byte loops pushed the program past the JIT's optimising tier). */
		__u32 i = storefn_low_byte(a ^ b);
		o->match = j * 8 + i;
		return (__u8)(a >> (i * 8)) < (__u8)(b >> (i * 8)) ? -1 : 1;
	}
	o->match = n;
	if (c->len == k)
		return 0;
	return c->len < k ? -1 : 1;
}

/* Key cell c against the search key (k bytes, its first words w0..w3): a word at a time where
 * cmp_words can, else a byte at a time. */
static __always_inline int cmp_cell(struct wt_scratch *s, __u32 k, const __u8 *d, struct cell *c,
				    struct order *o, __u32 mem, __u64 w0, __u64 w1, __u64 w2, __u64 w3)
{
	__u32 n = c->len < k ? c->len : k;
	if (c->prefix == 0 && k <= KEY_WORDS_BYTES && c->data + ((n + 7) & ~7u) <= mem)
		return cmp_words(d, c, o, k, w0, w1, w2, w3);
	return cmp_key(s, k, d, c, o);
}

/* The block's checksum as WiredTiger computes it: the checksum field read as zeros, the whole
 * block when BLOCK_DATA_CKSUM is set, else its first 64 bytes. The runtime's storefn_crc32c
 * helper does the bytes (a table step per byte here cost ~100 k instructions for a 32 KiB leaf). */
static __always_inline __u32 block_crc(const __u8 *d, __u32 size)
{
	__u32 covered = (d[36] & BLOCK_DATA_CKSUM) ? size : (size < CHECKSUM_SKIP ? size : CHECKSUM_SKIP);
	__u32 zero = 0;
	/* The caller checked 64 <= size <= VIEW; the helper checks its range like a load. */
	__u32 c = storefn_crc32c(0, d, 32);
	c = storefn_crc32c(c, &zero, 4);
	return storefn_crc32c(c, d + 36, covered - 36);
}

/* The address cell at `child` of an internal page: requests the child's block, or stops. Not
 * inlined: the runtime charges each loop iteration the longest path to the next charge point,
 * and a function start is one, so the scan's iterations are not charged for this tail. */
static __noinline int internal_child(struct bpf_xrp *ctx, __u32 child, __u32 mem)
{
	struct wt_scratch *s = (struct wt_scratch *)ctx->scratch;
	const __u8 *d = (const __u8 *)ctx->data;
	struct cell a = {};
	int kind = parse_cell(d, child, mem, &a);
	if (kind == 6)
		STOP(FALLBACK);
	if (kind != 4 && kind != 5)
		STOP(CORRUPT);
	__u64 off, sz, ck;
	__u32 p = a.data, e = a.data + a.len;
	if (unpack(d, &p, e, &off) || unpack(d, &p, e, &sz) || unpack(d, &p, e, &ck) || p != e)
		STOP(CORRUPT);
	if (sz == 0) /* an empty child */
		STOP(NOT_FOUND);
	off = (off + 1) * s->alloc;
	sz = sz * s->alloc;
	if (sz > s->hop_bytes)
		STOP(FALLBACK);
	if (off + sz > s->file_size || ck > 0xffffffffULL)
		STOP(CORRUPT);
	s->cur_offset = off;
	s->cur_size = sz;
	s->cur_checksum = ck;
	ctx->next_addr[0] = off;
	/* A leaf is read with the whole view where the file allows (the block and what follows
	 * it): the runtime runs a hop lent less than the view on its interpreter, and every access
	 * here is bounded by the block's size anyway. */
	if (kind == 5 && s->file_size - off >= VIEW)
		sz = VIEW;
	ctx->size[0] = sz;
	return 0;
}


/* The value of the key found: cell a of kind vk (0 = none: an empty value), the key cell ending
 * at vat. Not inlined, as internal_child. */
static __noinline int leaf_value(struct bpf_xrp *ctx, struct cell *ap, int vk, __u32 vat, __u32 mem)
{
	struct wt_scratch *s = (struct wt_scratch *)ctx->scratch;
	const __u8 *d = (const __u8 *)ctx->data;
	struct cell a = *ap;
	if (vk == 6)
		STOP(FALLBACK);
	if (vk == 3) {
		if (a.copy >= vat || vat - a.copy < 40)
			STOP(CORRUPT);
		vk = parse_cell(d, vat - a.copy, mem, &a);
		if (vk == 6)
			STOP(FALLBACK);
		if (vk != 2)
			STOP(CORRUPT);
	}
	__u32 n = vk == 0 ? 0 : a.len;
	if (vk != 0 && vk != 2)
		STOP(CORRUPT);
	if (n > VALUE_MAX)
		STOP(FALLBACK);
	for (__u32 j = 0; j < n; j++)
		s->value[j] = d[(a.data + j) & VMASK];
	s->value_len = n;
	STOP(FOUND);
}

/* A page's scan. Internal page (`internal`): (key, address) pairs; the child is the last whose
 * key is at most the search key (the first key stands for everything below the second):
 * requests it, or stops. Leaf page: key cells, each followed by its value cell unless the next
 * cell is a key.
 *
 * One function for both, of its own, with the search key's length and first words read once:
 * the runtime checks each load against a window of the region it last matched, a few per
 * function, and a scan whose loads took turns between the page and the scratch (the key's
 * bytes, its length per cell) missed it at nearly every load, each miss a call (most of the
 * function's time on a leaf of ~240 cells). Here a cell reads only the page; the scratch is read
 * only while a key over 32 bytes, or a prefix-compressed one, is compared. One loop for both
 * kinds of page keeps the program under the JIT's optimising-tier threshold. */
static __noinline int scan(struct bpf_xrp *ctx, __u32 mem, __u32 entries, __u32 internal)
{
	struct wt_scratch *s = (struct wt_scratch *)ctx->scratch;
	const __u8 *d = (const __u8 *)ctx->data;
	struct cell c = {}, a = {};
	struct order o = {};
	__u32 at = 40, left = entries, k = s->key_len, child = 0, first = 1;
	__u64 w0 = 0, w1 = 0, w2 = 0, w3 = 0;
	int kind;

	if (k <= KEY_WORDS_BYTES) {
		w0 = *(const __u64 *)&s->key[0];
		w1 = *(const __u64 *)&s->key[8];
		w2 = *(const __u64 *)&s->key[16];
		w3 = *(const __u64 *)&s->key[24];
	}

	while (left > 0) {
		kind = quick_cell(d, at, mem, &c);
		if (kind == 0)
			kind = parse_cell(d, at, mem, &c);
		left--;
		int cmp = -1;
		if (kind == 6 && internal && first)
			o.len = 0; /* an overflow first key: never compared */
		else if (kind == 6)
			STOP(FALLBACK);
		else if (kind != 1)
			STOP(CORRUPT);
		else
			cmp = cmp_cell(s, k, d, &c, &o, mem, w0, w1, w2, w3);
		if (cmp == -2)
			STOP(CORRUPT);
		if (internal) {
			if (!first && cmp > 0)
				break;
			child = c.end;
			if (parse_cell(d, child, mem, &a) < 0)
				STOP(CORRUPT);
			at = a.end;
			if (left > 0)
				left--;
			if (first && cmp >= 0)
				break; /* every later key is larger still */
			first = 0;
			continue;
		}
		at = c.end;
		int vk = 0;
		__u32 vat = at;
		if (left > 0) {
			vk = quick_cell(d, at, mem, &a);
			if (vk == 0)
				vk = parse_cell(d, at, mem, &a);
			if (vk < 0)
				STOP(CORRUPT);
			if (vk == 1) {
				vk = 0;
			} else {
				left--;
				at = a.end;
			}
		}
		if (cmp < 0)
			continue;
		if (cmp > 0)
			break;
		return leaf_value(ctx, &a, vk, vat, mem);
	}
	if (!internal)
		STOP(NOT_FOUND);
	if (child == 0)
		STOP(CORRUPT);
	return internal_child(ctx, child, mem);
}

SEC("xrp")
__u32 wt_lookup(struct bpf_xrp *ctx)
{
	struct wt_scratch *s = (struct wt_scratch *)ctx->scratch;
	const __u8 *d = (const __u8 *)ctx->data;

	if (++s->hops > MAX_HOPS)
		STOP(CORRUPT);
	if (s->key_len > KEY_MAX || s->hop_bytes > VIEW || s->cur_size > s->hop_bytes ||
	    s->cur_size < 64 || s->cur_size > ctx->data_len)
		STOP(FALLBACK);
	if (rd32(d, 28) != s->cur_size || rd32(d, 32) != s->cur_checksum)
		STOP(CORRUPT);
	if ((s->flags & FLAG_VERIFY) && block_crc(d, s->cur_size) != s->cur_checksum)
		STOP(CORRUPT);
	if (d[25] & 0x09)
		STOP(FALLBACK);
	__u32 mem = rd32(d, 16), entries = rd32(d, 20);
	if (mem < 40 || mem > s->cur_size)
		STOP(CORRUPT);
	if (entries > MAX_CELLS)
		STOP(FALLBACK);
	if (d[24] != 6 && d[24] != 7)
		STOP(CORRUPT);
	return scan(ctx, mem, entries, d[24] == 6);
}

char LICENSE[] SEC("license") = "GPL";
