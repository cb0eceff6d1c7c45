/* Binary search: the index of the first of 1024 sorted u32 keys that is >= the argument. */
#include "bench.h"

BENCH(bsearch32)
{
	const __u32 *k = (const __u32 *)ctx->data;
	__u64 key = bench_arg(ctx);
	__u32 lo = 0, hi = BENCH_DATA_BYTES / 4;

	while (lo < hi) {
		__u32 mid = (lo + hi) / 2;
		if (k[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return bench_ret(ctx, lo);
}
