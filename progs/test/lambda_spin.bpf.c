/* Run-time fault (lambda): loops until the output word it keeps bumping reaches a value no
 * budget allows, so any range ends in BudgetExhausted however long its budget is. */
#include <storefn.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 prog(struct context *c)
{
	volatile __u64 *out = c->buf_o;
	while (out[0] != 0xffffffffffffffffULL)
		out[0] = out[0] + 1;
	return 8;
}

char LICENSE[] SEC("license") = "GPL";
