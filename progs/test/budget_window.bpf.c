/* Accept, then stop on the budget: an endless loop whose one load alternates between the data
 * block and scratch, so the JIT's region window misses on every access (the slowest access
 * path per charged instruction). Used for the budget's stop-time figures (docs/DESIGN.md). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	volatile __u64 *a = (volatile __u64 *)ctx->data;
	volatile __u64 *b = (volatile __u64 *)ctx->scratch;
	__u64 s = 0;

	for (;;) {
		volatile __u64 *p = (s & 1) ? a : b;
		s += *p + 1;
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
