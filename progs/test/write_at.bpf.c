/* Stores the u64 1 at scratch + the byte offset in scratch[0]: a wild write whose target the
 * test chooses (e.g. a buffer granted to an earlier invocation, which must fault). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 off = *(__u64 *)ctx->scratch;
	*(__u64 *)(ctx->scratch + off) = 1;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
