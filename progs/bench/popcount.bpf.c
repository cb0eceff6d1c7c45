/* Bit tricks: SWAR population count of 512 u64 words plus the argument's. */
#include "bench.h"

static __always_inline __u64 pop(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

BENCH(popcount)
{
	const __u64 *d = (const __u64 *)ctx->data;
	__u64 n = pop(bench_arg(ctx));

	for (int i = 0; i < BENCH_DATA_BYTES / 8; i++)
		n += pop(d[i]);
	return bench_ret(ctx, n);
}
