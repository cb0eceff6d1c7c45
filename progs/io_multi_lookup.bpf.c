/* Multi-key lookup that descends several subtrees at once (storefn-io fan-out semantics).
 *
 * Tree node (512 B): { u64 leaf; u64 n; u64 key[30]; u64 ptr_or_val[30]; } — an internal
 * node's key[e] is the smallest key under ptr[e]. Scratch: struct args below. The first
 * invocation (the root) descends every key on its own pair i = key index; a block read for pair i
 * comes back with ctx->slot == i. Each branch ends at a leaf; done when no branch is open.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define NODE_BYTES 512
#define NODE_MAX 30
#define MAX_KEYS 16

struct node {
	__u64 leaf;
	__u64 n;
	__u64 key[NODE_MAX];
	__u64 val[NODE_MAX];
};

struct args {
	__u64 started;
	__u64 nkeys;
	__u64 outstanding;
	__u64 _pad0[5];
	__u64 keys[MAX_KEYS];   /* @64 */
	__u64 _pad1[8];
	__u64 found[MAX_KEYS];  /* @256 */
	__u64 vals[MAX_KEYS];   /* @384 */
};

static __always_inline void step(struct bpf_xrp *ctx, const struct node *nd, struct args *a,
				 __u32 i)
{
	__u64 key = a->keys[i];
	__u64 n = nd->n;

	if (n > NODE_MAX)
		n = NODE_MAX;
	if (nd->leaf == 1) {
		a->found[i] = 0;
		a->vals[i] = 0;
		for (__u32 e = 0; e < NODE_MAX; e++) {
			if (e >= n)
				break;
			if (nd->key[e] == key) {
				a->found[i] = 1;
				a->vals[i] = nd->val[e];
				break;
			}
		}
		a->outstanding -= 1;
		return;
	}
	__u32 child = 0;
	for (__u32 e = 1; e < NODE_MAX; e++) {
		if (e >= n)
			break;
		if (key >= nd->key[e])
			child = e;
	}
	ctx->next_addr[i] = nd->val[child];
	ctx->size[i] = NODE_BYTES;
}

SEC("xrp")
__u32 multi_lookup(struct bpf_xrp *ctx)
{
	const struct node *nd = (const struct node *)ctx->data;
	struct args *a = (struct args *)ctx->scratch;

	if (!a->started) {
		__u64 nkeys = a->nkeys;

		if (nkeys > MAX_KEYS)
			nkeys = MAX_KEYS;
		a->started = 1;
		a->outstanding = nkeys;
		for (__u32 i = 0; i < MAX_KEYS; i++) {
			if (i >= nkeys)
				break;
			step(ctx, nd, a, i);
		}
	} else {
		step(ctx, nd, a, ctx->slot & (MAX_KEYS - 1));
	}
	if (a->outstanding == 0)
		ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
