/* Benchmark: binary search in a 4 KiB node: u64 nkeys, then up to 511 sorted u64 keys.
 * data = the node; scratch[0] = the key; the function writes to scratch[1] the number of keys
 * <= key (the upper bound), i.e. the slot to descend into. `storefn prog bench` runs it.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define NODE4K_MAX_KEYS 511

struct node4k {
	__u64 nkeys;
	__u64 key[NODE4K_MAX_KEYS];
};

SEC("xrp")
__u32 bench_node4k(struct bpf_xrp *ctx)
{
	const struct node4k *node = (const struct node4k *)ctx->data;
	__u64 *scratch = (__u64 *)ctx->scratch;
	__u64 key = scratch[0];
	__u64 lo = 0, hi = node->nkeys;

	if (hi > NODE4K_MAX_KEYS)
		hi = NODE4K_MAX_KEYS;
	while (lo < hi) {
		__u64 mid = (lo + hi) / 2;

		if (node->key[mid] <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	scratch[1] = lo;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
