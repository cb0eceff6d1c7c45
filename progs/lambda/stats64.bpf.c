/* λ workload stats64: min / max / sum / count over a column of u64 values (storefn_lambda.h). */
#include <storefn_lambda.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 stats64(struct context *c)
{
	const __u64 *in = c->buf_i;
	struct stats_out *o = c->buf_o;
	__u64 n = c->size_i / sizeof(__u64);
	__u64 mn = ~0ULL, mx = 0, sum = 0;

	for (__u64 i = 0; i < n; i++) {
		__u64 v = in[i];
		if (v < mn)
			mn = v;
		if (v > mx)
			mx = v;
		sum += v;
	}
	o->min = mn;
	o->max = mx;
	o->sum = sum;
	o->count = n;
	return sizeof(*o);
}

char LICENSE[] SEC("license") = "GPL";
