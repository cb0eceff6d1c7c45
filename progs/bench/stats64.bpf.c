/* λ-IO's Stats64: min, max and sum over 512 u64 words, folded with the argument. */
#include "bench.h"

BENCH(stats64)
{
	const __u64 *d = (const __u64 *)ctx->data;
	__u64 mn = ~0ULL, mx = 0, s = 0;

	for (int i = 0; i < BENCH_DATA_BYTES / 8; i++) {
		__u64 v = d[i];
		if (v < mn)
			mn = v;
		if (v > mx)
			mx = v;
		s += v;
	}
	return bench_ret(ctx, (mx - mn) ^ s ^ bench_arg(ctx));
}
