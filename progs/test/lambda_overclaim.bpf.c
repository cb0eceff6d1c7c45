/* Accept (lambda), then rejected by the runtime: claims 1 MiB of output without writing any, so
 * the caller's check of r0 against the output buffer is what stops it. */
#include <storefn.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 prog(struct context *c)
{
	return 1 << 20;
}

char LICENSE[] SEC("license") = "GPL";
