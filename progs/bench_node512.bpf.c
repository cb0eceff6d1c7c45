/* Benchmark: one BPF-KV index-node search (512 B node, 31 keys), as XRP's lookup runs it per
 * level. data = the node; scratch[0] = the key (u64); the function writes the child index
 * (0..30) to scratch[1]: the child for `key` is ptr[i-1] for the first i >= 1 with
 * key < key[i], else ptr[30] (docs/FORMAT.md, BPF-KV). `storefn prog bench` runs it.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define NODE_KEYS 31

struct kv_node {
	__u64 next;
	__u64 type;
	__u64 key[NODE_KEYS];
	__u64 ptr[NODE_KEYS];
};

SEC("xrp")
__u32 bench_node512(struct bpf_xrp *ctx)
{
	const struct kv_node *node = (const struct kv_node *)ctx->data;
	__u64 *scratch = (__u64 *)ctx->scratch;
	__u64 key = scratch[0];
	__u32 i;

	for (i = 1; i < NODE_KEYS; i++) {
		if (key < node->key[i])
			break;
	}
	scratch[1] = i - 1;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
