/* Resumable range scan in BPF-KV's RangeQuery layout (docs/FORMAT.md, "BPF-KV range scratch
 * ABI"), 512 B nodes. The application sets range_begin/range_end/flags/agg_op, state = TRAVERSE
 * and starts the chain at resume_from_leaf = 0 (the root); the program descends to the leaf of
 * range_begin, then reads each value in range (agg_op NONE: into kv[len++]; SUM: added to
 * agg_value) and returns (done) when kv[] holds 32 entries or the range is exhausted. Before
 * returning it leaves resume_from_leaf/node_key_ix at the next entry; the application calls
 * again with state = RESUME and len = 0 from resume_from_leaf until the range is empty
 * (range_begin moves past every key taken, with BEGIN_EXCLUSIVE; an exhausted range is marked
 * by range_begin = range_end, BEGIN_EXCLUSIVE set and END_INCLUSIVE clear).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpfkv_abi.h"

#define NODE_BYTES 512
#define FANOUT 31

static __always_inline __u32 complete(struct bpf_xrp *ctx, struct bpfkv_range_query *q)
{
	q->range_begin = q->range_end;
	q->flags |= BPFKV_RQ_BEGIN_EXCLUSIVE;
	q->flags &= ~BPFKV_RQ_END_INCLUSIVE;
	ctx->done = 1;
	return 0;
}

/* An inconsistent node: the state names the failure (no RangeQuery field says so). */
static __always_inline __u32 failed(struct bpf_xrp *ctx, struct bpfkv_range_query *q)
{
	q->state = BPFKV_RQ_FAILED;
	ctx->done = 1;
	return 0;
}

static __always_inline void keep_node(struct bpfkv_range_query *q, struct bpfkv_node512 *n)
{
	__u64 *src = (__u64 *)n;
	__u64 *dst = (__u64 *)&q->current_node;
	for (int w = 0; w < NODE_BYTES / 8; w++)
		dst[w] = src[w];
}

/* Scans the kept leaf from node_key_ix: requests the next value in range, the next leaf, or
 * returns to the application. */
static __always_inline __u32 scan(struct bpf_xrp *ctx, struct bpfkv_range_query *q)
{
	struct bpfkv_node512 *leaf = &q->current_node;
	int begin_excl = q->flags & BPFKV_RQ_BEGIN_EXCLUSIVE;
	int end_incl = q->flags & BPFKV_RQ_END_INCLUSIVE;

	for (int iter = 0; iter < FANOUT; iter++) {
		__u32 i = q->node_key_ix;
		if (i >= FANOUT)
			break;
		if (q->len >= BPFKV_RQ_KEYS) {
			ctx->done = 1; /* kv[] is full: resume here next call */
			return 0;
		}
		__u64 key = leaf->key[i];
		__u64 ptr = leaf->ptr[i];
		if (!(ptr & BPFKV_FILE_MASK))
			return complete(ctx, q); /* unused slot: the tree's last key was passed */
		if (key > q->range_end || (key == q->range_end && !end_incl))
			return complete(ctx, q);
		if (key > q->range_begin || (key == q->range_begin && !begin_excl)) {
			q->state = BPFKV_RQ_READ_VALUE;
			return bpfkv_read_node(ctx, (ptr & ~BPFKV_FILE_MASK) & ~(__u64)(NODE_BYTES - 1));
		}
		q->node_key_ix = i + 1;
	}
	if (leaf->next == 0)
		return complete(ctx, q);
	q->resume_from_leaf = leaf->next;
	q->node_key_ix = 0;
	if (q->len >= BPFKV_RQ_KEYS) {
		q->state = BPFKV_RQ_RESUME;
		ctx->done = 1;
		return 0;
	}
	q->state = BPFKV_RQ_READ_NODE;
	return bpfkv_read_node(ctx, leaf->next);
}

static __always_inline void take_value(struct bpf_xrp *ctx, struct bpfkv_range_query *q)
{
	__u32 i = q->node_key_ix;
	if (i >= FANOUT)
		return;
	__u64 key = q->current_node.key[i];
	__u64 off = q->current_node.ptr[i] & (NODE_BYTES - BPFKV_VALUE_BYTES);
	__u64 *src = (__u64 *)(ctx->data + off);

	if (q->agg_op == BPFKV_RQ_AGG_SUM) {
		q->agg_value += (__s64)src[0];
	} else {
		struct bpfkv_key_value *kv = &q->kv[q->len & (BPFKV_RQ_KEYS - 1)];
		__u64 *dst = (__u64 *)kv->value;
		kv->key = key;
		for (int w = 0; w < BPFKV_VALUE_BYTES / 8; w++)
			dst[w] = src[w];
		q->len++;
	}
	q->range_begin = key;
	q->flags |= BPFKV_RQ_BEGIN_EXCLUSIVE;
	q->node_key_ix = i + 1;
	q->state = BPFKV_RQ_RESUME;
}

SEC("xrp")
__u32 bpfkv_range(struct bpf_xrp *ctx)
{
	struct bpfkv_range_query *q = (struct bpfkv_range_query *)ctx->scratch;
	struct bpfkv_node512 *n = (struct bpfkv_node512 *)ctx->data;

	switch (q->state) {
	case BPFKV_RQ_TRAVERSE:
		if (n->type == BPFKV_NODE_LEAF) {
			keep_node(q, n);
			q->node_key_ix = 0;
			q->state = BPFKV_RQ_RESUME;
			return scan(ctx, q);
		}
		if (n->type != BPFKV_NODE_INTERNAL)
			return failed(ctx, q);
		__u64 child = bpfkv_child(n, q->range_begin);
		if (!child)
			return failed(ctx, q);
		/* The leaf this descent reaches is where a later call resumes. */
		q->resume_from_leaf = child;
		return bpfkv_read_node(ctx, child);
	case BPFKV_RQ_READ_NODE:
	case BPFKV_RQ_RESUME:
		/* A leaf: the next one (READ_NODE) or resume_from_leaf at a call's start. */
		if (n->type != BPFKV_NODE_LEAF)
			return failed(ctx, q);
		keep_node(q, n);
		q->state = BPFKV_RQ_RESUME;
		return scan(ctx, q);
	case BPFKV_RQ_READ_VALUE:
		take_value(ctx, q);
		return scan(ctx, q);
	default:
		return failed(ctx, q);
	}
}

char LICENSE[] SEC("license") = "GPL";
