/* Stack array indexed by data: a 16-bucket histogram of the high nibbles of 2048 bytes,
 * weighed by bucket. */
#include "bench.h"

BENCH(histogram)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u32 h[16] = {};
	__u64 s = bench_arg(ctx);

	for (int i = 0; i < 2048; i++)
		h[d[i] >> 4]++;
	for (int b = 0; b < 16; b++)
		s += (__u64)h[b] * (b + 1);
	return bench_ret(ctx, s);
}
