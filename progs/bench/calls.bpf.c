/* BPF-to-BPF calls: a non-inlined mixing function called for each of 256 u64 words. */
#include "bench.h"

static __attribute__((noinline)) __u64 mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0x9E3779B97F4A7C15ULL;
	return h ^ (h >> 29);
}

BENCH(calls)
{
	const __u64 *d = (const __u64 *)ctx->data;
	__u64 h = bench_arg(ctx);

	for (int i = 0; i < 256; i++)
		h = mix(h, d[i]);
	return bench_ret(ctx, h);
}
