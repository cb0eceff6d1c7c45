/* Run-time fault: a loop that only ends when the data says so; with any other data it spins
 * until the back-jump budget is exhausted. Each iteration bumps scratch[0]. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	volatile __u64 *blk = (volatile __u64 *)ctx->data;
	volatile __u64 *s = (volatile __u64 *)ctx->scratch;
	while (blk[0] != 0x5350494e) /* "SPIN" */
		s[0] = s[0] + 1;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
