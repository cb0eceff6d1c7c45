/* Reject at run time (offload): writes past the end of `out`; the invocation must fault with
 * a bad write, never touch the host's memory. */
#include <storefn_offload.h>
#include <bpf/bpf_helpers.h>

SEC("offload/pred")
__s64 pred(struct storefn_offload_ctx *c)
{
	__u8 *out = (__u8 *)(unsigned long)c->out;
	out[c->out_len + 64] = 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
