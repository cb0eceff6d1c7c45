/* Accept: read-only tables (.rodata), initialised (.data) and zeroed (.bss) globals; the counter
 * in .bss persists across invocations of one instance. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static const __u64 table[8] = { 11, 22, 33, 44, 55, 66, 77, 88 };
__u64 bias = 100;
__u64 calls;

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 *s = (__u64 *)ctx->scratch;
	__u64 i = *(__u64 *)ctx->data & 7;
	calls++;
	s[0] = table[i] + bias;
	s[1] = calls;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
