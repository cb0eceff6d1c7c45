/* Loop over u64 words: the sum of the block's 512 words plus the argument. */
#include "bench.h"

BENCH(sum64)
{
	const __u64 *d = (const __u64 *)ctx->data;
	__u64 s = bench_arg(ctx);

	for (int i = 0; i < BENCH_DATA_BYTES / 8; i++)
		s += d[i];
	return bench_ret(ctx, s);
}
