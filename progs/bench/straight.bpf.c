/* Large straight-line code: 128 unrolled mixing steps over the first 128 u64 words. */
#include "bench.h"

BENCH(straight)
{
	const __u64 *d = (const __u64 *)ctx->data;
	__u64 x = bench_arg(ctx);

#pragma clang loop unroll(full)
	for (int i = 0; i < 128; i++) {
		x ^= d[i];
		x = (x << 13) | (x >> 51);
		x *= 0xff51afd7ed558ccdULL;
	}
	return bench_ret(ctx, x);
}
