/* Accept (lambda): sum of the input's u64 words into the output, then copy the first 16 input
 * bytes after it with the storefn_memcpy helper. Returns the output bytes written. */
#include <storefn.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 prog(struct context *c)
{
	__u64 *in = c->buf_i;
	__u64 *out = c->buf_o;
	__u64 n = c->size_i / 8;
	__u64 sum = 0;
	for (__u64 i = 0; i < n && i < 4096; i++)
		sum += in[i];
	out[0] = sum;
	if (storefn_memcpy(&out[1], in, 16) != 0)
		return 0;
	return 24;
}

char LICENSE[] SEC("license") = "GPL";
