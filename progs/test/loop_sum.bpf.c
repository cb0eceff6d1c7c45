/* Accept: a bounded loop (backward jumps) over the data block. scratch[0] = number of u64 words
 * to add (clamped to the 4 KiB view), result in scratch[1]. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define WORDS (4096 / 8)

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 *blk = (__u64 *)ctx->data;
	__u64 *s = (__u64 *)ctx->scratch;
	__u64 n = s[0];
	__u64 sum = 0;
	if (n > WORDS)
		n = WORDS;
	for (__u64 i = 0; i < n; i++)
		sum += blk[i];
	s[1] = sum;
	ctx->done = 1;
	return (__u32)n;
}

char LICENSE[] SEC("license") = "GPL";
