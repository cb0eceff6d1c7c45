/* BPF-KV resumable range scan and aggregates, 512 B nodes.
 * Scratch ABI: docs/FORMAT.md, "Range scratch ABI". The application starts the chain at the
 * root (offset 0) with `leaf` = 0 on the first call, and at `leaf` with FLAG_RESUME afterwards.
 * Each call returns after 32 entries or at the end of [begin, end]; sum/min/max fold the first
 * 8 bytes of each value read as a u64, little-endian, as BPF-KV does.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpfkv.h"

#define NODE_BYTES 512
#define FANOUT 31

static __always_inline __u32 finish(struct bpf_xrp *ctx, struct bpfkv_range_scratch *s, __u32 flags)
{
	s->flags |= flags;
	ctx->done = 1;
	return 0;
}

static __always_inline __u32 fail(struct bpf_xrp *ctx, struct bpfkv_range_scratch *s)
{
	s->err = 1;
	return finish(ctx, s, BPFKV_RANGE_FLAG_DONE);
}

static __always_inline void read_block(struct bpf_xrp *ctx, __u64 off)
{
	ctx->next_addr[0] = off;
	ctx->size[0] = NODE_BYTES;
}

/* Continues through the saved leaf from `index`: resubmits a value read, moves to the next
 * leaf, or finishes the call. */
static __always_inline __u32 scan(struct bpf_xrp *ctx, struct bpfkv_range_scratch *s)
{
	struct bpfkv_node512 *leaf = &s->leaf_copy;

	for (int iter = 0; iter < FANOUT; iter++) {
		__u32 i = s->index;
		if (i >= FANOUT)
			break;
		__u64 key = leaf->key[i];
		__u64 ptr = leaf->ptr[i];
		if (!(ptr & BPFKV_FILE_MASK) || key > s->end)
			return finish(ctx, s, BPFKV_RANGE_FLAG_DONE);
		if (s->count >= BPFKV_RANGE_BATCH)
			return finish(ctx, s, 0);
		s->index = i + 1;
		if (key < s->begin)
			continue;
		if (s->agg == BPFKV_AGG_COUNT) {
			s->agg_value++;
			s->agg_n++;
			s->count++;
			continue;
		}
		s->pending_key = key;
		s->pending_off = ptr & ~BPFKV_FILE_MASK;
		s->phase = BPFKV_PHASE_VALUE;
		read_block(ctx, s->pending_off & ~(__u64)(NODE_BYTES - 1));
		return 0;
	}
	if (leaf->next == 0)
		return finish(ctx, s, BPFKV_RANGE_FLAG_DONE);
	s->leaf = leaf->next;
	s->index = 0;
	s->phase = BPFKV_PHASE_NODE;
	read_block(ctx, leaf->next);
	return 0;
}

static __always_inline void take_value(struct bpf_xrp *ctx, struct bpfkv_range_scratch *s)
{
	__u64 *src = (__u64 *)(ctx->data + (s->pending_off & (NODE_BYTES - 64)));
	__u64 word = src[0];

	s->phase = BPFKV_PHASE_NODE;
	if (s->agg == BPFKV_AGG_NONE) {
		struct bpfkv_range_result *r = &s->results[s->count & (BPFKV_RANGE_BATCH - 1)];
		__u64 *dst = (__u64 *)r->value;
		r->key = s->pending_key;
#pragma unroll
		for (int w = 0; w < BPFKV_VALUE_BYTES / 8; w++)
			dst[w] = src[w];
	} else if (s->agg == BPFKV_AGG_SUM) {
		s->agg_value += word;
	} else if (s->agg == BPFKV_AGG_MIN) {
		if (s->agg_n == 0 || word < s->agg_value)
			s->agg_value = word;
	} else if (s->agg == BPFKV_AGG_MAX) {
		if (s->agg_n == 0 || word > s->agg_value)
			s->agg_value = word;
	}
	s->agg_n++;
	s->count++;
}

SEC("xrp")
__u32 kv_range(struct bpf_xrp *ctx)
{
	struct bpfkv_range_scratch *s = (struct bpfkv_range_scratch *)ctx->scratch;
	struct bpfkv_node512 *n = (struct bpfkv_node512 *)ctx->data;

	if (s->phase == BPFKV_PHASE_VALUE) {
		take_value(ctx, s);
		return scan(ctx, s);
	}
	if (n->type == BPFKV_NODE_INTERNAL) {
		if (s->flags & BPFKV_RANGE_FLAG_RESUME)
			return fail(ctx, s); /* a leaf link led off the leaf level */
		__u64 p = n->ptr[FANOUT - 1];
		for (int i = 1; i < FANOUT; i++) {
			if (s->begin < n->key[i]) {
				p = n->ptr[i - 1];
				break;
			}
		}
		if (!(p & BPFKV_FILE_MASK))
			return fail(ctx, s);
		s->leaf = p & ~BPFKV_FILE_MASK;
		read_block(ctx, s->leaf);
		return 0;
	}
	if (n->type != BPFKV_NODE_LEAF)
		return fail(ctx, s);
	/* At a leaf: keep a copy (the next reads replace `data`), then scan it. */
	__u64 *src = (__u64 *)n;
	__u64 *dst = (__u64 *)&s->leaf_copy;
	for (int w = 0; w < NODE_BYTES / 8; w++)
		dst[w] = src[w];
	s->flags |= BPFKV_RANGE_FLAG_RESUME;
	return scan(ctx, s);
}

char LICENSE[] SEC("license") = "GPL";
