/* Run-time fault: the data block is read-only to the function. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	ctx->data[0] = 1;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
