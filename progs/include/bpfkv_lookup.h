/* The XRP-style BPF-KV point lookup, for a node type chosen by the including file:
 * define BPFKV_NODE (struct type), BPFKV_NODE_BYTES and BPFKV_FANOUT first.
 *
 * Each invocation sees one block: an internal node (resubmit the child for the key), a leaf
 * (resubmit the read of the block holding the value, or finish with found = 0), or the value
 * block (copy the value to scratch, found = 1, done).
 */
#include "bpfkv.h"

static __always_inline __u32 bpfkv_fail(struct bpf_xrp *ctx, struct bpfkv_lookup_scratch *s)
{
	s->err = 1;
	s->found = 0;
	ctx->done = 1;
	return 0;
}

static __always_inline __u32 bpfkv_lookup(struct bpf_xrp *ctx)
{
	struct bpfkv_lookup_scratch *s = (struct bpfkv_lookup_scratch *)ctx->scratch;
	BPFKV_NODE *n = (BPFKV_NODE *)ctx->data;
	__u64 key = s->key;

	if (++s->hops > BPFKV_MAX_HOPS)
		return bpfkv_fail(ctx, s);
	if (s->phase == BPFKV_PHASE_VALUE) {
		__u8 *src = (__u8 *)ctx->data + (s->value_off & (BPFKV_NODE_BYTES - 64));
#pragma unroll
		for (int i = 0; i < BPFKV_VALUE_BYTES; i++)
			s->value[i] = src[i];
		s->found = 1;
		ctx->done = 1;
		return 0;
	}
	if (n->type == BPFKV_NODE_INTERNAL) {
		__u64 p = n->ptr[BPFKV_FANOUT - 1];
		for (int i = 1; i < BPFKV_FANOUT; i++) {
			if (key < n->key[i]) {
				p = n->ptr[i - 1];
				break;
			}
		}
		if (!(p & BPFKV_FILE_MASK))
			return bpfkv_fail(ctx, s);
		ctx->next_addr[0] = p & ~BPFKV_FILE_MASK;
		ctx->size[0] = BPFKV_NODE_BYTES;
		return 0;
	}
	if (n->type != BPFKV_NODE_LEAF)
		return bpfkv_fail(ctx, s);
	for (int i = 0; i < BPFKV_FANOUT; i++) {
		if (n->key[i] == key) {
			__u64 p = n->ptr[i];
			if (!(p & BPFKV_FILE_MASK))
				break; /* unused slot: a miss */
			s->value_off = p & ~BPFKV_FILE_MASK;
			s->phase = BPFKV_PHASE_VALUE;
			ctx->next_addr[0] = s->value_off & ~(__u64)(BPFKV_NODE_BYTES - 1);
			ctx->size[0] = BPFKV_NODE_BYTES;
			return 0;
		}
	}
	s->found = 0;
	ctx->done = 1;
	return 0;
}
