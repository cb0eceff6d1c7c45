/* The body of the stats64 / stats32 λ workloads (storefn_lambda.h, struct stats_out): define
 * STATS_T (the column's type) and STATS_FN (the function's name), then include this. */
#include <storefn_lambda.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 STATS_FN(struct context *c)
{
	const STATS_T *in = c->buf_i;
	struct stats_out *o = c->buf_o;
	__u64 n = c->size_i / sizeof(STATS_T);
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
