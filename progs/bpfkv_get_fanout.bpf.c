/* Point lookups in BPF-KV's ScatterGatherQuery layout (docs/FORMAT.md), descending up to 16 keys
 * at once with XRP fan-out: key base + p travels on next_addr/size pair p (the engine hands its
 * blocks back with ctx->slot == p). Keys go in waves of 16 from `root_pointer`; a wave ends when
 * all its branches have ended, and the next wave starts with a read of `root_pointer` again.
 *
 * Program state in the layout's own state fields: current_index = first key of the wave,
 * value_ptr = branches still open, state_flags bit 1 = the next block is a wave's root. While a
 * key's value read is pending, values[k].found = 2 and values[k].value[0..8] holds the value's
 * offset; it ends as 1 (value copied) or 0 (miss), as BPF-KV's application expects.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpfkv_abi.h"

#define NODE_BYTES 512
#define WAVE 16
#define WAVE_ROOT 2
#define PENDING 2
#define STARTED 1

static __always_inline __u32 failed(struct bpf_xrp *ctx, struct bpfkv_sg_query *q)
{
	q->state_flags = BPFKV_SG_FAILED;
	ctx->done = 1;
	return 0;
}

static __always_inline __u64 get_off(struct bpfkv_maybe_value *mv)
{
	__u64 off = 0;
	for (int b = 7; b >= 0; b--)
		off = (off << 8) | mv->value[b];
	return off;
}

static __always_inline void put_off(struct bpfkv_maybe_value *mv, __u64 off)
{
	for (int b = 0; b < 8; b++)
		mv->value[b] = (__u8)(off >> (8 * b));
}

/* One step of key `k` on pair `p` over `block`: 1 when the branch goes on (a request was
 * made), 0 when it ended, -1 on an inconsistent node. */
static __always_inline int step(struct bpf_xrp *ctx, struct bpfkv_sg_query *q, __u32 k, __u32 p,
				__u8 *block)
{
	struct bpfkv_maybe_value *mv = &q->values[k & (BPFKV_SG_KEYS - 1)];
	struct bpfkv_node512 *n = (struct bpfkv_node512 *)block;
	__u64 key = q->keys[k & (BPFKV_SG_KEYS - 1)];

	if (mv->found == PENDING) {
		__u8 *src = block + (get_off(mv) & (NODE_BYTES - BPFKV_VALUE_BYTES));
		for (int b = 0; b < BPFKV_VALUE_BYTES; b++)
			mv->value[b] = src[b];
		mv->found = 1;
		return 0;
	}
	if (n->type == BPFKV_NODE_INTERNAL) {
		__u64 child = bpfkv_child(n, key);
		if (!child)
			return -1;
		ctx->next_addr[p & (WAVE - 1)] = child;
		ctx->size[p & (WAVE - 1)] = NODE_BYTES;
		return 1;
	}
	if (n->type != BPFKV_NODE_LEAF)
		return -1;
	for (int s = 0; s < 31; s++) {
		if (n->key[s] != key)
			continue;
		__u64 ptr = n->ptr[s];
		if (!(ptr & BPFKV_FILE_MASK))
			break;
		put_off(mv, ptr & ~BPFKV_FILE_MASK);
		mv->found = PENDING;
		ctx->next_addr[p & (WAVE - 1)] = (ptr & ~BPFKV_FILE_MASK) & ~(__u64)(NODE_BYTES - 1);
		ctx->size[p & (WAVE - 1)] = NODE_BYTES;
		return 1;
	}
	mv->found = 0;
	return 0;
}

/* After the last branch of a wave: the next wave's root, or the end of the chain. */
static __always_inline __u32 next_wave(struct bpf_xrp *ctx, struct bpfkv_sg_query *q)
{
	q->current_index += WAVE;
	if (q->current_index >= q->n_keys || q->current_index >= BPFKV_SG_KEYS) {
		ctx->done = 1;
		return 0;
	}
	q->state_flags = WAVE_ROOT;
	ctx->next_addr[0] = q->root_pointer;
	ctx->size[0] = NODE_BYTES;
	return 0;
}

SEC("xrp")
__u32 bpfkv_get_fanout(struct bpf_xrp *ctx)
{
	struct bpfkv_sg_query *q = (struct bpfkv_sg_query *)ctx->scratch;
	__u8 *block = (__u8 *)ctx->data;

	if (q->n_keys <= 0 || q->current_index < 0 || q->current_index >= BPFKV_SG_KEYS)
		return failed(ctx, q);
	__u32 base = (__u32)q->current_index;
	if (base == 0 && q->value_ptr == 0 && !(q->state_flags & (WAVE_ROOT | STARTED)))
		q->state_flags = WAVE_ROOT | STARTED; /* the chain's first block is the first wave's root */
	if (q->state_flags & WAVE_ROOT) {
		q->state_flags &= ~WAVE_ROOT;
		__u64 open = 0;
		for (__u32 p = 0; p < WAVE; p++) {
			if (base + p >= (__u32)q->n_keys || base + p >= BPFKV_SG_KEYS)
				break;
			int r = step(ctx, q, base + p, p, block);
			if (r < 0)
				return failed(ctx, q);
			open += r;
		}
		q->value_ptr = open;
		return open ? 0 : next_wave(ctx, q);
	}
	__u32 p = ctx->slot;
	if (p >= WAVE || q->value_ptr == 0)
		return failed(ctx, q);
	int r = step(ctx, q, base + p, p, block);
	if (r < 0)
		return failed(ctx, q);
	if (r == 0 && --q->value_ptr == 0)
		return next_wave(ctx, q);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
