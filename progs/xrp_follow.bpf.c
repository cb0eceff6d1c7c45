/* A minimal XRP storage function: follow a linked list of blocks.
 * Each block starts with a u64 "next offset" (0 = end) and a u64 payload; the function adds the
 * payload into scratch[0..8] and resubmits until next == 0.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 follow(struct bpf_xrp *ctx)
{
	__u64 *blk = (__u64 *)ctx->data;
	__u64 *acc = (__u64 *)ctx->scratch;
	acc[0] += blk[1];
	acc[1] += 1;
	if (blk[0] == 0) {
		ctx->done = 1;
		return 0;
	}
	ctx->next_addr[0] = blk[0];
	ctx->size[0] = 512;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
