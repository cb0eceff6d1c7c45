/* Byte loads and recompose: parse 512 big-endian u32 fields byte by byte (as λ functions read
 * unaligned words) and sum them with the argument. */
#include "bench.h"

BENCH(be32)
{
	const __u8 *d = (const __u8 *)ctx->data;
	__u64 s = bench_arg(ctx);

	for (int i = 0; i < 512; i++) {
		const __u8 *p = d + 4 * i;
		s += ((__u32)p[0] << 24) | ((__u32)p[1] << 16) | ((__u32)p[2] << 8) | p[3];
	}
	return bench_ret(ctx, s);
}
