/* Loop over u32 words (32-bit loads): the sum of the block's 1024 words plus the argument. */
#include "bench.h"

BENCH(sum32)
{
	const __u32 *d = (const __u32 *)ctx->data;
	__u64 s = bench_arg(ctx);

	for (int i = 0; i < BENCH_DATA_BYTES / 4; i++)
		s += d[i];
	return bench_ret(ctx, s);
}
