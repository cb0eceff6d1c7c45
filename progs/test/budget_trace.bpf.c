/* Accept, then stop on the budget: an endless loop of bpf_trace_printk calls, the most
 * expensive helper per call (charged TRACE_PRINTK_INSNS). Used for the budget's stop-time
 * figures (docs/DESIGN.md). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	char fmt[] = "spam %d %d %d ................................................";
	__u64 s = 0;

	for (;;) {
		bpf_trace_printk(fmt, sizeof(fmt), s, s + 1, s + 2);
		s++;
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
