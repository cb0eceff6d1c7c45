/* Accept: bpf_printk (bpf_trace_printk, helper 6) with a format string in .rodata. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 v = *(__u64 *)ctx->data;
	bpf_printk("v=%llu neg=%d hex=%x", v, -3, 255);
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
