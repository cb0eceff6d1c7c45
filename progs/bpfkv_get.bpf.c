/* Point lookups in BPF-KV's ScatterGatherQuery layout (docs/FORMAT.md, "BPF-KV scatter-gather
 * scratch ABI"), 512 B nodes: the keys are looked up one after another in one chain. Each key
 * descends from `root_pointer`; a leaf hit reads the value's block and copies the value into
 * values[i] (found = 1), a miss leaves found = 0; then the next key starts at `root_pointer`.
 * The chain ends (done) after key n_keys - 1. An inconsistent node sets BPFKV_SG_FAILED in
 * state_flags and ends the chain (storefn's application then redoes the lookups with reads).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "bpfkv_abi.h"

#define NODE_BYTES 512

/* Moves on to the next key, or ends the chain after the last one. */
static __always_inline __u32 next_key(struct bpf_xrp *ctx, struct bpfkv_sg_query *q)
{
	q->current_index++;
	q->state_flags = 0;
	if (q->current_index >= q->n_keys || q->current_index >= BPFKV_SG_KEYS) {
		ctx->done = 1;
		return 0;
	}
	return bpfkv_read_node(ctx, q->root_pointer);
}

static __always_inline __u32 failed(struct bpf_xrp *ctx, struct bpfkv_sg_query *q)
{
	q->state_flags = BPFKV_SG_FAILED;
	ctx->done = 1;
	return 0;
}

SEC("xrp")
__u32 bpfkv_get(struct bpf_xrp *ctx)
{
	struct bpfkv_sg_query *q = (struct bpfkv_sg_query *)ctx->scratch;
	struct bpfkv_node512 *n = (struct bpfkv_node512 *)ctx->data;
	__u32 i = (__u32)q->current_index;

	if (i >= BPFKV_SG_KEYS || q->current_index >= q->n_keys)
		return failed(ctx, q);
	struct bpfkv_maybe_value *mv = &q->values[i];
	__u64 key = q->keys[i];

	if (q->state_flags & BPFKV_SG_AT_VALUE) {
		/* Values are 64 B aligned inside their 512 B block. */
		__u8 *src = (__u8 *)ctx->data + (q->value_ptr & (NODE_BYTES - BPFKV_VALUE_BYTES));
		for (int b = 0; b < BPFKV_VALUE_BYTES; b++)
			mv->value[b] = src[b];
		mv->found = 1;
		return next_key(ctx, q);
	}
	if (n->type == BPFKV_NODE_INTERNAL) {
		__u64 child = bpfkv_child(n, key);
		return child ? bpfkv_read_node(ctx, child) : failed(ctx, q);
	}
	if (n->type != BPFKV_NODE_LEAF)
		return failed(ctx, q);
	for (int s = 0; s < 31; s++) {
		if (n->key[s] != key)
			continue;
		__u64 p = n->ptr[s];
		if (!(p & BPFKV_FILE_MASK))
			break; /* an unused slot: a miss */
		q->value_ptr = p & ~BPFKV_FILE_MASK;
		q->state_flags = BPFKV_SG_AT_VALUE;
		return bpfkv_read_node(ctx, q->value_ptr & ~(__u64)(NODE_BYTES - 1));
	}
	mv->found = 0;
	return next_key(ctx, q);
}

char LICENSE[] SEC("license") = "GPL";
