/* Reject (verify): bpf_ktime_get_ns (helper 5) is not in the xrp helper table. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	*(__u64 *)ctx->scratch = bpf_ktime_get_ns();
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
