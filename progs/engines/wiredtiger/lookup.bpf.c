/* WiredTiger point lookup as a storage-function chain: one hop per page, from a checkpoint's
 * root through row-store internal pages to the leaf (docs/FORMAT.md, "WiredTiger", and its
 * "WiredTiger lookup scratch ABI"). The host submits the root's block and fills the scratch; the
 * host also checks each block's CRC-32C as it arrives (on_block); this function checks that the
 * block is the one its parent's address named (size and checksum in the block header).
 * Anything it does not read (overflow items, compressed pages, blocks longer than a hop, keys
 * or values larger than the scratch holds) ends the chain with status FALLBACK.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The data view the function may read (the XRP ABI's window); hop_bytes must not exceed it. */
#define VIEW 4096
#define VMASK (VIEW - 1)
#define KEY_MAX 512
#define VALUE_MAX 3008
#define MAX_HOPS 32
#define MAX_CELLS 2048

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
	__u8 pad[8];        /*  56 */
	__u8 key[KEY_MAX];  /*  64 in */
	__u8 prev[KEY_MAX]; /* 576 state: the page's previous key, rebuilt */
	__u8 value[VALUE_MAX]; /* 1088 out */
};

#define STOP(st) do { s->status = (st); s->reason = __LINE__; ctx->done = 1; return 0; } while (0)

static __always_inline __u32 rd32(const __u8 *d, __u32 at)
{
	return (__u32)d[at & VMASK] | (__u32)d[(at + 1) & VMASK] << 8 |
	       (__u32)d[(at + 2) & VMASK] << 16 | (__u32)d[(at + 3) & VMASK] << 24;
}

/* A packed unsigned integer at *pos (< end); returns -1 on damage. */
static __always_inline int unpack(const __u8 *d, __u32 *pos, __u32 end, __u64 *out)
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
	for (__u32 i = 0; i < 8; i++) {
		if (i >= len)
			break;
		v = (v << 8) | d[(p + 1 + i) & VMASK];
	}
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

static __always_inline int parse_cell(const __u8 *d, __u32 at, __u32 end, struct cell *c)
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

/* Rebuilds the key of cell c into s->prev (prev_len in/out); -1 damage, -2 too long. */
static __always_inline int rebuild(struct wt_scratch *s, const __u8 *d, struct cell *c, __u32 *prev_len)
{
	if (c->prefix > *prev_len)
		return -1;
	__u32 n = c->prefix + c->len;
	if (n > KEY_MAX)
		return -2;
	for (__u32 i = 0; i < KEY_MAX; i++) {
		if (i >= c->len)
			break;
		s->prev[(c->prefix + i) & (KEY_MAX - 1)] = d[(c->data + i) & VMASK];
	}
	*prev_len = n;
	return 0;
}

/* memcmp-then-length order of s->prev[0..n) against the search key: <0, 0, >0. */
static __always_inline int compare(struct wt_scratch *s, __u32 n)
{
	__u32 k = s->key_len;
	for (__u32 i = 0; i < KEY_MAX; i++) {
		if (i >= n || i >= k)
			break;
		__u8 a = s->prev[i & (KEY_MAX - 1)], b = s->key[i & (KEY_MAX - 1)];
		if (a != b)
			return a < b ? -1 : 1;
	}
	return n == k ? 0 : (n < k ? -1 : 1);
}

SEC("xrp")
__u32 wt_lookup(struct bpf_xrp *ctx)
{
	struct wt_scratch *s = (struct wt_scratch *)ctx->scratch;
	const __u8 *d = (const __u8 *)ctx->data;
	struct cell c = {}, a = {};
	__u32 prev_len = 0, at = 40, child = 0;
	int kind;

	if (++s->hops > MAX_HOPS)
		STOP(CORRUPT);
	if (s->key_len > KEY_MAX || s->hop_bytes > VIEW || s->cur_size > s->hop_bytes || s->cur_size < 64)
		STOP(FALLBACK);
	if (rd32(d, 28) != s->cur_size || rd32(d, 32) != s->cur_checksum)
		STOP(CORRUPT);
	if (d[25] & 0x09)
		STOP(FALLBACK);
	__u32 mem = rd32(d, 16), entries = rd32(d, 20);
	if (mem < 40 || mem > s->cur_size || entries > MAX_CELLS)
		STOP(CORRUPT);

	if (d[24] == 6) {
		/* (key, address) pairs: the last whose key is at most the search key. */
		for (__u32 i = 0; i < MAX_CELLS / 2; i++) {
			if (i * 2 >= entries)
				break;
			kind = parse_cell(d, at, mem, &c);
			if (kind == 6 && i == 0)
				prev_len = 0;
			else if (kind == 6)
				STOP(FALLBACK);
			else if (kind != 1 || rebuild(s, d, &c, &prev_len))
				STOP(CORRUPT);
			if (i > 0 && compare(s, prev_len) > 0)
				break;
			child = c.end;
			kind = parse_cell(d, child, mem, &a);
			if (kind < 0)
				STOP(CORRUPT);
			at = a.end;
		}
		if (child == 0)
			STOP(CORRUPT);
		kind = parse_cell(d, child, mem, &a);
		if (kind == 6)
			STOP(FALLBACK);
		if (kind != 4 && kind != 5)
			STOP(CORRUPT);
		__u64 o, sz, ck;
		__u32 p = a.data, e = a.data + a.len;
		if (unpack(d, &p, e, &o) || unpack(d, &p, e, &sz) || unpack(d, &p, e, &ck) || p != e)
			STOP(CORRUPT);
		if (sz == 0) /* an empty child */
			STOP(NOT_FOUND);
		o = (o + 1) * s->alloc;
		sz = sz * s->alloc;
		if (sz > s->hop_bytes)
			STOP(FALLBACK);
		if (o + sz > s->file_size || ck > 0xffffffffULL)
			STOP(CORRUPT);
		s->cur_offset = o;
		s->cur_size = sz;
		s->cur_checksum = ck;
		ctx->next_addr[0] = o;
		ctx->size[0] = sz;
		return 0;
	}
	if (d[24] != 7)
		STOP(CORRUPT);

	/* Leaf: key cells, each followed by its value cell unless the next cell is a key. */
	__u32 left = entries;
	for (__u32 i = 0; i < MAX_CELLS; i++) {
		if (left == 0)
			break;
		kind = parse_cell(d, at, mem, &c);
		left--;
		if (kind == 6)
			STOP(FALLBACK);
		if (kind != 1)
			STOP(CORRUPT);
		int r = rebuild(s, d, &c, &prev_len);
		if (r == -2)
			STOP(FALLBACK);
		if (r)
			STOP(CORRUPT);
		at = c.end;
		int vk = 0;
		__u32 vat = at;
		if (left > 0) {
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
		int cmp = compare(s, prev_len);
		if (cmp < 0)
			continue;
		if (cmp > 0)
			break;
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
		for (__u32 j = 0; j < VALUE_MAX; j++) {
			if (j >= n)
				break;
			s->value[j] = d[(a.data + j) & VMASK];
		}
		s->value_len = n;
		STOP(FOUND);
	}
	STOP(NOT_FOUND);
}

char LICENSE[] SEC("license") = "GPL";
