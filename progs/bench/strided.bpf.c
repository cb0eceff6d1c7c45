/* Pointer + scaled index: sum of the u64 words at data-dependent indices, 256 hops. */
#include "bench.h"

BENCH(strided)
{
	const __u64 *d = (const __u64 *)ctx->data;
	__u64 i = bench_arg(ctx) & 511, s = 0;

	for (int n = 0; n < 256; n++) {
		__u64 v = d[i];
		s += v;
		i = (i + v) & 511;
	}
	return bench_ret(ctx, s);
}
