/* λ-IO's Grep: the first offset in the block where the 4-byte pattern taken at offset
 * (argument mod 4000) occurs (byte loads, early exit). */
#include "bench.h"

BENCH(grep)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u32 at = bench_arg(ctx) % 4000;
	__u8 p0 = d[at], p1 = d[at + 1], p2 = d[at + 2], p3 = d[at + 3];
	__u32 i;

	for (i = 0; i < at; i++)
		if (d[i] == p0 && d[i + 1] == p1 && d[i + 2] == p2 && d[i + 3] == p3)
			break;
	return bench_ret(ctx, i);
}
