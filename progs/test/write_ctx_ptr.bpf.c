/* Run-time fault: the context's data and scratch pointers are read-only to the function. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	ctx->scratch = ctx->data;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
