/* Run-time fault: reads data at a byte offset taken from scratch[0]. Far past the 4 KiB view
 * (tests use 1 TiB) the read is outside every region and aborts the invocation; a small overrun
 * may land in another granted region (scratch, stack), which region-level checking allows. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xrp")
__u32 prog(struct bpf_xrp *ctx)
{
	__u64 off = *(__u64 *)ctx->scratch;
	__u64 v = *(__u64 *)(ctx->data + off);
	((__u64 *)ctx->scratch)[1] = v;
	ctx->done = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
