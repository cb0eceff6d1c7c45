/* λ workload tpch_q6: TPC-H Q6's filter and sum over whole groups of a columnar lineitem file
 * (storefn_lambda.h). */
#include <storefn_lambda.h>
#include <bpf/bpf_helpers.h>

SEC("lambda")
__u64 tpch_q6(struct context *c)
{
	const __u8 *in = c->buf_i;
	__u64 *out = c->buf_o;
	__u64 groups = c->size_i / Q6_GROUP_BYTES;
	__u64 revenue = 0, matches = 0;

	for (__u64 g = 0; g < groups; g++) {
		const __s32 *ship = (const __s32 *)(in + g * Q6_GROUP_BYTES);
		const __s32 *disc = ship + Q6_GROUP_ROWS;
		const __s32 *qty = disc + Q6_GROUP_ROWS;
		const __s64 *price = (const __s64 *)(qty + Q6_GROUP_ROWS);
		for (__u32 r = 0; r < Q6_GROUP_ROWS; r++) {
			__s32 d = disc[r];
			if (ship[r] >= Q6_DATE_LO && ship[r] < Q6_DATE_HI && d >= Q6_DISC_LO &&
			    d <= Q6_DISC_HI && qty[r] < Q6_QTY_LT) {
				revenue += (__u64)(price[r] * d);
				matches++;
			}
		}
	}
	out[0] = revenue;
	out[1] = matches;
	out[2] = groups * Q6_GROUP_ROWS;
	return Q6_OUT_BYTES;
}

char LICENSE[] SEC("license") = "GPL";
