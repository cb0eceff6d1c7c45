/* Benchmark: the least an XRP function does (end the chain), so `storefn prog bench` can split
 * a call's cost into the fixed part of Instance::run_xrp and the per-iteration part of the
 * node searches.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 bench_empty(struct bpf_xrp *ctx)
{
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
