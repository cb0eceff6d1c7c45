/* memcmp-like: the first index from (argument mod 1024) on where the block's two 2 KiB halves
 * differ (2048 if none). */
#include "bench.h"

BENCH(mismatch)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u32 i = bench_arg(ctx) & 1023;

	for (; i < 2048; i++)
		if (d[i] != d[2048 + i])
			break;
	return bench_ret(ctx, i);
}
