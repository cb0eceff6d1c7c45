/* RocksDB point lookup in one block-based table (SST file) as a storage-function chain: index
 * block -> data block -> the newest entry of the key, or "not in this file" (docs/FORMAT.md,
 * "RocksDB" and its "RocksDB Get scratch ABI").
 *
 * The host fills the scratch and submits the first block: the index block (phase 0) or, when
 * its client-side cache holds the index, the data block the index names (phase 1). A hop shows
 * the function `data_len` bytes; a block longer than the first hop's read (a remote XRP request
 * starts with at most 4 KiB) is asked again whole. Each block's trailer (compression byte and
 * checksum) is checked: a compressed block ends the chain with FALLBACK (the host decompresses
 * it in Rust), and with flag VERIFY the function checks the masked CRC-32C RocksDB stores
 * (files with other checksum types are checked by the host before the answer is used).
 * Keys are compared as user keys: the lookup seeks (key, newest), so an entry is at or past the
 * target exactly when its user key is.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define KEY_MAX 512
#define CUR_MAX 528 /* a rebuilt key: user key and its 8-byte trailer */
#define VALUE_MAX 2928
#define MAX_HOPS 4
#define MAX_BLOCK 65536
#define TRAILER 5
#define HASH_INDEX_BIT 0x80000000u

enum { RUNNING = 0, ENTRY = 1, ABSENT = 2, FALLBACK = 3, CORRUPT = 4 };
enum { VERIFY = 1, INDEX_USER_KEYS = 2, INDEX_DELTA = 4 };

struct rk_scratch {
	__u32 key_len;   /*    0 in */
	__u32 flags;     /*    4 in: VERIFY | INDEX_USER_KEYS | INDEX_DELTA */
	__u64 file_size; /*    8 in */
	__u64 cur_off;   /*   16 in/state: the block asked for */
	__u32 cur_size;  /*   24 in/state: its size without the trailer */
	__u32 phase;     /*   28 in/state: 0 index block, 1 data block */
	__u32 status;    /*   32 out */
	__u32 hops;      /*   36 out: invocations */
	__u32 value_len; /*   40 out */
	__u32 reason;    /*   44 out: the line of this file that ended the chain */
	__u64 trailer;   /*   48 out: the entry's (sequence << 8 | type) */
	__u32 hop_max;   /*   56 in: longest hop the host allows */
	__u32 cur_len;   /*   60 state: bytes of cur */
	__u32 e_after;   /*   64 state: the decoded entry's value offset */
	__u32 e_vlen;    /*   68 state: its value length (plain values) */
	__u32 e_shared;  /*   72 state: its shared key bytes */
	__u32 e_mode;    /*   76 state: 1 plain values, 2 internal keys */
	__u32 e_match;   /*   80 state: leading bytes of cur equal to the key's */
	__u8 pad[44];    /*   84 */
	__u8 key[KEY_MAX];     /*  128 in */
	__u8 cur[CUR_MAX];     /*  640 state: the entry key being rebuilt */
	__u8 value[VALUE_MAX]; /* 1168 out */
};

#include "storefn.h"

#define STOP(st) do { s->status = (st); s->reason = __LINE__; ctx->done = 1; return 0; } while (0)

static __always_inline __u32 rd32(const __u8 *d, __u32 at)
{
	return (__u32)d[at] | (__u32)d[at + 1] << 8 | (__u32)d[at + 2] << 16 | (__u32)d[at + 3] << 24;
}

/* A varint of at most `max` bytes at *pos (< end); -1 on damage. */
static __always_inline int varint(const __u8 *d, __u32 *pos, __u32 end, __u64 *out, __u32 max)
{
	__u64 v = 0;
	__u32 p = *pos;
	for (__u32 i = 0; i < 10; i++) {
		if (i >= max || p >= end)
			return -1;
		__u8 b = d[p];
		p++;
		v |= (__u64)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*out = v;
			*pos = p;
			return 0;
		}
	}
	return -1;
}

/* RocksDB's stored checksum of block contents d[0..n) and the compression byte d[n]: the
 * CRC-32C, masked. The runtime's storefn_crc32c helper does the bytes (a slicing-by-8 table step
 * here cost ~6.5 instructions a byte: a 20 KiB index block took ~130 k of them per hop). */
static __always_inline __u32 masked_crc(const __u8 *d, __u32 n)
{
	__u32 c = storefn_crc32c(0, d, (__u64)n + 1);
	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* The block's restart array: returns its offset and count, or -1 on damage. */
static __always_inline int restarts(const __u8 *d, __u32 n, __u32 *at, __u32 *count)
{
	if (n < 4)
		return -1;
	__u32 f = rd32(d, n - 4), end = n - 4;
	if (f & HASH_INDEX_BIT) {
		if (end < 2)
			return -1;
		__u32 buckets = (__u32)d[end - 2] | (__u32)d[end - 1] << 8;
		if (end - 2 < buckets)
			return -1;
		end = end - 2 - buckets;
	}
	__u32 r = f & ~HASH_INDEX_BIT;
	if (r == 0 || r > end / 4)
		return -1;
	*at = end - r * 4;
	*count = r;
	return 0;
}

/* The entry at pos: its key rebuilt into s->cur (shared bytes kept); where its value (or
 * handle) starts, its value length and shared bytes in s->e_*. -1 damage, -2 a key longer
 * than CUR_MAX. Not inlined (nor the other loops' functions): the VM charges a loop header
 * the longest path to the next charge point, and inlined, a loop's way out would run through
 * the rest of the lookup on every iteration. */
static __attribute__((noinline)) int entry_key(struct rk_scratch *s, const __u8 *d, __u32 pos,
					       __u32 end)
{
	__u64 shared, non_shared, vl = 0;
	__u32 p = pos;
	if (varint(d, &p, end, &shared, 5) || varint(d, &p, end, &non_shared, 5))
		return -1;
	if ((s->e_mode & 1) && varint(d, &p, end, &vl, 5))
		return -1;
	if (shared > s->cur_len || non_shared > end - p)
		return -1;
	if (shared + non_shared > CUR_MAX)
		return -2;
	/* Eight bytes a load and a store: a byte at a time, each load from the block and store
	 * to the scratch switched the runtime's memory region twice. A word may read up to 7
	 * bytes past the key (still inside the block: its restart array and count follow, at
	 * least 8 bytes) and write them past cur_len (inside the scratch: value follows cur); no
	 * byte past cur_len is ever read as key. */
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < CUR_MAX; i += 8) {
		if (i >= non_shared)
			break;
		*(__u64 *)&s->cur[(shared + i) & 1023] = *(const __u64 *)(d + p + i);
	}
	if (shared < s->e_match)
		s->e_match = shared;
	s->cur_len = shared + non_shared;
	s->e_after = p + non_shared;
	s->e_vlen = vl;
	s->e_shared = shared;
	return 0;
}

/* s->cur's user key (minus the 8-byte trailer when `internal`) against the search key, from
 * byte e_match on: the bytes before it are the previous entry's, kept by the shared prefix,
 * which equalled the key's (entry_key lowers e_match to the shared length). Eight bytes a
 * step; the first differing byte is the lowest nonzero byte of the words' xor. */
static __attribute__((noinline)) int compare(struct rk_scratch *s)
{
	__u32 n = s->cur_len, k = s->key_len;
	if (s->e_mode & 2) {
		if (n < 8)
			return -2;
		n -= 8;
	}
	__u32 m = n < k ? n : k;
	__u32 i = s->e_match & ~7u;
#pragma clang loop unroll(disable)
	for (__u32 it = 0; it < KEY_MAX / 8 + 1; it++) {
		if (i >= m)
			break;
		__u64 a = *(const __u64 *)&s->cur[i & 511];
		__u64 b = *(const __u64 *)&s->key[i & 511];
		__u64 x = a ^ b;
		if (m - i < 8)
			x &= (1ULL << ((m - i) * 8)) - 1;
		if (x) {
			__u32 j = storefn_low_byte(x);
			s->e_match = i + j;
			return (__u8)(a >> (j * 8)) < (__u8)(b >> (j * 8)) ? -1 : 1;
		}
		i += 8;
	}
	s->e_match = m;
	return n == k ? 0 : (n < k ? -1 : 1);
}

/* Binary search over restart points: the last whose key is below the target (or 0), or -1
 * damage, -2 a key too long. */
static __attribute__((noinline)) int last_restart_below(struct rk_scratch *s, const __u8 *d,
							__u32 ra, __u32 rn)
{
	__u32 lo = 0, hi = rn - 1;
	for (__u32 it = 0; it < 32; it++) {
		if (lo >= hi)
			break;
		__u32 mid = lo + (hi - lo + 1) / 2;
		__u32 at = rd32(d, ra + mid * 4);
		if (at >= ra)
			return -1;
		s->cur_len = 0;
		s->e_match = 0;
		int r = entry_key(s, d, at, ra);
		if (r)
			return r;
		int c = compare(s);
		if (c == -2)
			return -1;
		if (c < 0)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

SEC("xrp")
__u32 rocksdb_get(struct bpf_xrp *ctx)
{
	struct rk_scratch *s = (struct rk_scratch *)ctx->scratch;
	const __u8 *d = (const __u8 *)ctx->data;
	__u64 len = ctx->data_len;
	__u32 n = s->cur_size, ra, rn, after, vlen, pos;
	int r;

	if (++s->hops > MAX_HOPS)
		STOP(CORRUPT);
	if (s->key_len > KEY_MAX || s->hop_max > MAX_BLOCK || s->phase > 1)
		STOP(FALLBACK);
	if ((__u64)n + TRAILER > s->hop_max)
		STOP(FALLBACK);
	if (len < (__u64)n + TRAILER) {
		/* A first hop shorter than the block: ask for the whole block once. */
		if (s->hops > 1 || s->cur_off + n + TRAILER > s->file_size)
			STOP(CORRUPT);
		ctx->next_addr[0] = s->cur_off;
		ctx->size[0] = n + TRAILER;
		return 0;
	}
	if (d[n] != 0)
		STOP(FALLBACK);
	if ((s->flags & VERIFY) && masked_crc(d, n) != rd32(d, n + 1))
		STOP(CORRUPT);
	if (restarts(d, n, &ra, &rn))
		STOP(CORRUPT);
	int index = s->phase == 0;
	int plain = !index || !(s->flags & INDEX_DELTA);
	int internal = !index || !(s->flags & INDEX_USER_KEYS);
	s->e_mode = (plain ? 1 : 0) | (internal ? 2 : 0);
	r = last_restart_below(s, d, ra, rn);
	if (r == -2)
		STOP(FALLBACK);
	if (r < 0)
		STOP(CORRUPT);
	pos = rd32(d, ra + (__u32)r * 4);
	s->cur_len = 0;
	s->e_match = 0;
	__u64 prev_off = 0, prev_size = 0, ho = 0, hs = 0;
	int have_prev = 0;
	for (__u32 i = 0; i < MAX_BLOCK / 3; i++) {
		if (pos >= ra)
			break;
		r = entry_key(s, d, pos, ra);
		if (r == -2)
			STOP(FALLBACK);
		if (r)
			STOP(CORRUPT);
		after = s->e_after;
		vlen = s->e_vlen;
		__u32 shared = s->e_shared;
		__u32 vend = after + vlen;
		if (plain) {
			if (vlen > ra - after)
				STOP(CORRUPT);
		}
		if (index) {
			__u32 p = after;
			if (plain || shared == 0) {
				/* A whole handle (plain index values, or the first of a restart). */
				if (varint(d, &p, plain ? vend : ra, &ho, 10) ||
				    varint(d, &p, plain ? vend : ra, &hs, 10))
					STOP(CORRUPT);
			} else {
				__u64 zz;
				if (!have_prev || varint(d, &p, ra, &zz, 10))
					STOP(CORRUPT);
				__s64 delta = (__s64)(zz >> 1) ^ -(__s64)(zz & 1);
				ho = prev_off + prev_size + TRAILER;
				hs = prev_size + delta;
			}
			prev_off = ho;
			prev_size = hs;
			have_prev = 1;
			if (!plain)
				vend = p;
		}
		int c = compare(s);
		if (c == -2)
			STOP(CORRUPT);
		if (c >= 0 && index) {
			if (hs + TRAILER > s->hop_max)
				STOP(FALLBACK);
			if (ho + hs + TRAILER > s->file_size || hs < 4)
				STOP(CORRUPT);
			s->phase = 1;
			s->cur_off = ho;
			s->cur_size = hs;
			ctx->next_addr[0] = ho;
			ctx->size[0] = hs + TRAILER;
			return 0;
		}
		if (c > 0)
			STOP(ABSENT);
		if (c == 0) {
			__u32 t = s->cur_len - 8;
			__u64 tr = 0;
			for (__u32 j = 0; j < 8; j++)
				tr |= (__u64)s->cur[(t + j) & 1023] << (8 * j);
			s->trailer = tr;
			if (vlen > VALUE_MAX)
				STOP(FALLBACK);
			/* Eight bytes a step, as entry_key's copy (a byte a step switched memory
			 * regions twice per byte of a 1 KiB value). Reads stay inside the block
			 * (vlen <= ra - after); j stays a multiple of 8 below VALUE_MAX (itself one),
			 * so the last store ends inside the scratch. */
#pragma clang loop unroll(disable)
			for (__u32 j = 0; j < VALUE_MAX; j += 8) {
				if (j >= vlen)
					break;
				*(__u64 *)&s->value[j] = *(const __u64 *)(d + after + j);
			}
			s->value_len = vlen;
			STOP(ENTRY);
		}
		pos = vend;
	}
	STOP(ABSENT);
}

char LICENSE[] SEC("license") = "GPL";
