/* λ workload knn: the KNN_K rows nearest (squared Euclidean) to a fixed query point among
 * 2048-byte rows of 255 features (layout in storefn_lambda.h). */
#include <storefn_lambda.h>
#include <bpf/bpf_helpers.h>

struct pair {
	__u64 dist;
	__u64 id;
};

static __always_inline int before(__u64 d1, __u64 i1, __u64 d2, __u64 i2)
{
	return d1 < d2 || (d1 == d2 && i1 < i2);
}

SEC("lambda")
__u64 knn(struct context *c)
{
	const __u8 *in = c->buf_i;
	__u64 *out = c->buf_o;
	__u64 rows = c->size_i / KNN_ROW_BYTES;
	struct pair best[KNN_K];
	__u64 count = 0;

	for (__u64 r = 0; r < rows; r++) {
		const __u64 *row = (const __u64 *)(in + r * KNN_ROW_BYTES);
		const __s64 *f = (const __s64 *)(row + 1);
		__u64 id = row[0];
		__u64 dist = 0;
		for (__u32 j = 0; j < KNN_FEATURES; j++) {
			__s64 q = (__s64)((__u32)(j * KNN_QUERY_MUL) % KNN_FEATURE_MAX);
			__s64 d = f[j] - q;
			dist += (__u64)(d * d);
		}
		if (count == KNN_K && !before(dist, id, best[KNN_K - 1].dist, best[KNN_K - 1].id))
			continue;
		__u64 k = count < KNN_K ? count : KNN_K - 1;
		while (k > 0 && before(dist, id, best[k - 1].dist, best[k - 1].id)) {
			best[k] = best[k - 1];
			k--;
		}
		best[k].dist = dist;
		best[k].id = id;
		if (count < KNN_K)
			count++;
	}
	out[0] = count;
	for (__u64 k = 0; k < KNN_K; k++) {
		out[1 + 2 * k] = k < count ? best[k].dist : 0;
		out[2 + 2 * k] = k < count ? best[k].id : 0;
	}
	return KNN_OUT_BYTES;
}

char LICENSE[] SEC("license") = "GPL";
