/* The `storefn io bench` chain: scratch[0] holds the hops left; each block's first u64 is the
 * offset of the next node. Reads 16 B per hop (the engine widens to the device block). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 hop_chain(struct bpf_xrp *ctx)
{
	__u64 *s = (__u64 *)ctx->scratch;
	__u64 *blk = (__u64 *)ctx->data;
	__u64 left = s[0];

	if (left > 0)
		left--;
	s[0] = left;
	if (left == 0) {
		ctx->done = 1;
		return 0;
	}
	ctx->next_addr[0] = blk[0];
	ctx->size[0] = 16;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
