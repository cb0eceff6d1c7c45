/* λ-IO's KNN distance: over one 2048-byte row (chosen by the argument's low bit), the sum of
 * |j - v_j| for its first 255 byte features. */
#include "bench.h"

BENCH(knn)
{
	const __u8 *row = (const __u8 *)ctx->data + (bench_arg(ctx) & 1) * 2048;
	__u64 s = 0;

	for (int j = 0; j < 255; j++) {
		__s64 diff = (__s64)j - (__s64)row[j];
		s += diff < 0 ? -diff : diff;
	}
	return bench_ret(ctx, s);
}
