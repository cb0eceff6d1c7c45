/* Run-time fault (lambda): a loop that only ends when the input's first word says so; with any
 * other input it spins until the instruction budget is exhausted. Each iteration bumps the
 * output's first word, so a test can see how far it got. */
#include <storefn.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 prog(struct context *c)
{
	volatile __u64 *in = c->buf_i;
	volatile __u64 *out = c->buf_o;
	while (in[0] != 0x5350494e) /* "SPIN" */
		out[0] = out[0] + 1;
	return 8;
}

char LICENSE[] SEC("license") = "GPL";
